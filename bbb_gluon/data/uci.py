"""The UCI regression benchmark (``uci/<dataset>/`` in the data folder): the nine datasets
with Hernández-Lobato & Adams's train/test splits, as Bayesian neural networks are
compared on them.

Each folder holds ``data.txt`` (whitespace-separated rows), the feature and target
column numbers, the rows of each split (``index_train_K.txt``, ``index_test_K.txt``) and
the protocol's hidden units and epochs; :func:`load_uci` reads one split with the files'
own indices and standardises inputs and targets with the training rows' statistics.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
from dataclasses import dataclass

import numpy as np

from .folder import ENV_VAR, DataFileError, DatasetNotFoundError, find_data_root

__all__ = ["UCI_DATASETS", "UCISplit", "load_uci"]

# short name: (folder, rows, splits, first 16 hex digits of data.txt's SHA-256), as
# ../shared/data/uci/SOURCE.md lists them
UCI_DATASETS = {
    "boston": ("bostonHousing", 506, 20, "baadf72995725d76"),
    "concrete": ("concrete", 1030, 20, "43d290fd2c2a399a"),
    "energy": ("energy", 768, 20, "7f8bf024cea43726"),
    "kin8nm": ("kin8nm", 8192, 20, "a694ce0c7a21390f"),
    "naval": ("naval-propulsion-plant", 11934, 20, "de0ea69da1efaab8"),
    "power": ("power-plant", 9568, 20, "daebd20c408dfc5c"),
    "protein": ("protein-tertiary-structure", 45730, 5, "d35f332707e8a73f"),
    "wine": ("wine-quality-red", 1599, 20, "3ba41eaf4ab56208"),
    "yacht": ("yacht", 308, 20, "00dfecc0fc01ddd4"),
}

UCI_HINT = (f"Put the benchmark's folders (data.txt and the index files of "
            f"Hernández-Lobato & Adams's splits) in a 'uci/' subfolder of the data folder and "
            f"point {ENV_VAR} at that folder; in this project, `make data` links "
            f"../shared/data/uci.")


@dataclass(frozen=True)
class UCISplit:
    """One train/test split of a UCI regression dataset, standardised.

    Attributes
    ----------
    name : str
        The short name ("boston", ...); ``split`` the split's number.
    X_train, X_test : numpy.ndarray
        ``float32 (n, features)``, standardised with the training rows' mean and standard
        deviation (a constant column, to rounding, is divided by 1).
    y_train, y_test : numpy.ndarray
        ``float32 (n, 1)``, standardised with the training targets' mean and deviation.
    x_mean, x_std : numpy.ndarray
        The training inputs' statistics, ``float64 (features,)``.
    y_mean, y_std : float
        The training targets' statistics: :meth:`to_original` and
        :meth:`log_likelihood_to_original` report on the data's own scale.
    hidden, epochs : int
        The protocol's hidden units and epochs (``n_hidden.txt``, ``n_epochs.txt``).
    validation : float or None
        Set when ``X_test``/``y_test`` are validation rows taken from the split's training
        rows (``load_uci(..., validation=0.2)``), not its test rows.
    """

    name: str
    split: int
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    x_mean: np.ndarray
    x_std: np.ndarray
    y_mean: float
    y_std: float
    hidden: int
    epochs: int
    validation: float | None = None

    def to_original(self, y):
        """Standardised targets (or predictions, or their means) on the original scale."""
        return np.asarray(y, dtype=np.float64) * self.y_std + self.y_mean

    def log_likelihood_to_original(self, log_likelihood):
        """A per-point log density of standardised targets as one of the original targets
        (the change of variables divides the density by ``y_std``)."""
        return np.asarray(log_likelihood, dtype=np.float64) - math.log(self.y_std)

    def __repr__(self):
        held = "test" if self.validation is None else "validation"
        return (f"UCISplit({self.name!r}, split {self.split}: {len(self.X_train)} train, "
                f"{len(self.X_test)} {held}, {self.X_train.shape[1]} features)")


def _dataset(name):
    if not isinstance(name, str):
        raise TypeError(f"name must be a str such as 'boston', got {type(name).__name__}")
    for short, (folder, *_) in UCI_DATASETS.items():
        if name.lower() in (short, folder.lower()):
            return short, UCI_DATASETS[short]
    raise ValueError(f"unknown UCI dataset {name!r}; choose one of {sorted(UCI_DATASETS)} "
                     "(or the folder names)")


def _read_ints(path, what):
    try:
        values = np.loadtxt(path, dtype=np.float64, ndmin=1)
    except ValueError as e:
        raise DataFileError(f"{path}: not a list of {what} ({e})") from None
    if values.size == 0 or not np.all(values == np.round(values)) or values.min() < 0:
        raise DataFileError(f"{path}: expected 0-based {what} (whole numbers >= 0)")
    return values.astype(np.int64)


def _folder(short, folder, root):
    data_root = find_data_root(root)
    if data_root is None:
        raise DatasetNotFoundError(f"Dataset 'uci/{folder}' not found: no data folder is "
                                   f"configured ({ENV_VAR} is unset). {UCI_HINT}")
    path = data_root / "uci" / folder
    if not (path / "data.txt").is_file():
        raise DatasetNotFoundError(f"Dataset 'uci/{folder}' ({short}) not found: "
                                   f"{path / 'data.txt'} does not exist. {UCI_HINT}")
    return path


def load_uci(name, split=0, root: str | os.PathLike | None = None, *,
             validation: float | None = None) -> UCISplit:
    """Read split ``split`` of a UCI regression dataset from ``<root>/uci/<folder>/``.

    Parameters
    ----------
    name : str
        A short name (``"boston"``, ``"concrete"``, ``"energy"``, ``"kin8nm"``,
        ``"naval"``, ``"power"``, ``"protein"``, ``"wine"``, ``"yacht"``) or the folder's
        name (``"bostonHousing"``).
    split : int, default 0
        0 to 19 (0 to 4 for protein): the rows of ``index_train_K.txt`` and
        ``index_test_K.txt``.
    root : str or os.PathLike, optional
        The data folder; default ``$BBB_GLUON_DATA``. Nothing is downloaded.
    validation : float, optional
        For choosing hyperparameters without the test rows: a fraction in (0, 1) of the
        split's *training* rows (drawn at random, the same for a given split) becomes
        ``X_test``/``y_test`` and the rest ``X_train``/``y_train``, standardised by that
        rest alone. ``validation=0.2`` is the 80/20 partition of the 2018 protocol. The
        split's test rows are not in it.

    Raises
    ------
    ValueError
        An unknown name, a split out of range or a ``validation`` outside (0, 1), before
        any file is read.
    DatasetNotFoundError
        No data folder, or it lacks the dataset's folder or one of its files.
    DataFileError
        ``data.txt`` is not the file the benchmark uses (its SHA-256 differs from the one
        ../shared/data/uci/SOURCE.md lists), or an index file is malformed or out of range.
    """
    short, (folder, rows, splits, digest) = _dataset(name)
    if isinstance(split, bool) or not isinstance(split, int | np.integer) or \
            not 0 <= split < splits:
        raise ValueError(f"split must be an int in 0..{splits - 1} for {short}, got {split!r}")
    if validation is not None and not (isinstance(validation, float | int) and
                                       not isinstance(validation, bool) and
                                       0 < validation < 1):
        raise ValueError(f"validation must be a fraction in (0, 1) such as 0.2, got "
                         f"{validation!r}")
    path = _folder(short, folder, root)
    needed = ["index_features.txt", "index_target.txt", f"index_train_{split}.txt",
              f"index_test_{split}.txt", "n_hidden.txt", "n_epochs.txt"]
    missing = [n for n in needed if not (path / n).is_file()]
    if missing:
        raise DatasetNotFoundError(f"Dataset 'uci/{folder}' is incomplete: {path} lacks "
                                   f"{', '.join(missing)}. {UCI_HINT}")
    raw = (path / "data.txt").read_bytes()
    found = hashlib.sha256(raw).hexdigest()[:16]
    if found != digest:
        raise DataFileError(f"{path / 'data.txt'}: not the benchmark's file (SHA-256 "
                            f"{found}..., expected {digest}...); results on it would not "
                            "compare with the published ones")
    data = np.loadtxt(io.BytesIO(raw), dtype=np.float64, ndmin=2)  # the bytes hashed
    features = _read_ints(path / "index_features.txt", "column numbers")
    target = _read_ints(path / "index_target.txt", "column numbers")
    train = _read_ints(path / f"index_train_{split}.txt", "row numbers")
    test = _read_ints(path / f"index_test_{split}.txt", "row numbers")
    hidden = int(_read_ints(path / "n_hidden.txt", "unit counts")[0])
    epochs = int(_read_ints(path / "n_epochs.txt", "epoch counts")[0])
    if data.shape[0] != rows or max(features.max(), target.max()) >= data.shape[1]:
        raise DataFileError(f"{path}: data.txt has shape {data.shape}; the index files need "
                            f"{rows} rows and column {max(features.max(), target.max())}")
    if max(train.max(), test.max()) >= rows or np.intersect1d(train, test).size:
        raise DataFileError(f"{path}: split {split}'s rows must be distinct and below {rows}")
    X, y = data[:, features], data[:, target[:1]]
    if validation is not None:
        # seeded by the split (and the dataset) so that every run tunes on the same rows
        rng = np.random.default_rng([split, rows])
        shuffled = rng.permutation(train)
        held = max(1, int(round(validation * len(train))))
        train, test = np.sort(shuffled[held:]), np.sort(shuffled[:held])
    return standardised_split(short, split, X, y, train, test, hidden, epochs,
                              None if validation is None else float(validation))


def standardised_split(name, split, X, y, train, test, hidden, epochs, validation=None):
    """A :class:`UCISplit` of the rows ``train`` and ``test`` of ``X`` (n, features) and
    ``y`` (n, 1), both standardised with the training rows' statistics."""
    x_mean, x_std = X[train].mean(axis=0), X[train].std(axis=0)
    # A constant column (naval has two) is divided by 1: its float64 deviation is 0 or
    # rounding (2e-13), which would blow rounding up into a feature.
    x_std = np.where(x_std <= 1e-9 * np.maximum(1.0, np.abs(x_mean)), 1.0, x_std)
    y_mean, y_std = float(y[train].mean()), float(y[train].std())
    if not y_std > 0:
        raise DataFileError(f"{name}: the training targets are all {y_mean:g}: nothing to "
                            "regress")

    def scaled(a, mean, std):
        return ((a - mean) / std).astype(np.float32)
    return UCISplit(name, int(split), scaled(X[train], x_mean, x_std),
                    scaled(y[train], y_mean, y_std), scaled(X[test], x_mean, x_std),
                    scaled(y[test], y_mean, y_std), x_mean, x_std, y_mean, y_std, hidden,
                    epochs, validation)
