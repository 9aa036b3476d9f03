"""Datasets for the Bayes by Backprop experiments: MNIST, Fashion-MNIST and two toy problems.

The image datasets are read from local IDX files whenever a data folder is configured,
so that the package works offline and reproducibly:

* ``load_raw(name, train, root)`` returns the untouched ``uint8`` images and their labels;
* ``load_dataset(name, ...)`` returns a deterministic train / validation / test ``Splits``
  with the pixels transformed by a ``PixelTransform`` fitted on the training split only;
* ``ArrayLoader`` yields mini-batches as MXNet NDArrays straight from in-memory arrays.

The data folder is the ``root`` argument, else the environment variable ``BBB_GLUON_DATA``.
It must hold one subfolder per dataset (``mnist/``, ``fashion-mnist/``) with the four
standard gzip files listed in ``FILE_NAMES``. Only when neither is set does the loader fall
back to MXNet's own download into ``$MXNET_HOME/datasets/<name>``.

``load_mushroom`` reads the UCI Mushroom data set (``mushroom/agaricus-lepiota.data`` in
the same folder) for the contextual bandit of ``bbb_gluon.bandit``.

``two_moons`` and ``regression_curve`` generate the small synthetic problems used in the
tutorials (a 2-D classification task and the 1-D regression curve of Blundell et al., 2015).
"""

from __future__ import annotations

import gzip
import math
import numbers
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import mxnet as mx
import numpy as np

from ._checks import check_int

__all__ = [
    "DATASETS",
    "ENV_VAR",
    "FILE_NAMES",
    "MUSHROOM_FILE",
    "ArrayLoader",
    "DataFileError",
    "DatasetNotFoundError",
    "PixelTransform",
    "Splits",
    "find_data_root",
    "Mushrooms",
    "load_dataset",
    "load_mushroom",
    "load_raw",
    "read_idx",
    "regression_curve",
    "two_moons",
]

DATASETS = ("mnist", "fashion-mnist")
"""Names accepted by ``load_raw`` and ``load_dataset``; also the subfolder names on disk."""

FILE_NAMES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
"""The four standard file names, as ``{split: (images file, labels file)}``."""

ENV_VAR = "BBB_GLUON_DATA"
"""Environment variable naming the offline data folder."""

NUM_CLASSES = 10
IMAGE_SHAPE = (28, 28)
NUM_TRAIN = 60000
NUM_TEST = 10000

_IDX_LABELS = 0x00000801  # unsigned byte, 1 dimension
_IDX_IMAGES = 0x00000803  # unsigned byte, 3 dimensions
_IDX_NDIM = {_IDX_LABELS: 1, _IDX_IMAGES: 3}

_DEBIAN_FASHION = "/usr/share/datasets/fashion-mnist/"


class DatasetNotFoundError(FileNotFoundError):
    """A dataset is neither in the configured data folder nor downloadable.

    Raised by ``load_raw`` / ``load_dataset``. The message names the folder(s) searched, the
    environment variable ``BBB_GLUON_DATA``, the four expected file names and the ways to fix
    it. It is a ``FileNotFoundError`` so that generic "missing file" handlers also catch it.
    """


class DataFileError(ValueError):
    """A dataset file exists but its content is unusable.

    Raised for files that are not gzip, are truncated, have a wrong IDX magic number or
    dimensions, hold the wrong number of examples, or labels outside 0..9. The message
    starts with the offending file's path.
    """


def _all_file_names() -> tuple[str, ...]:
    return FILE_NAMES["train"] + FILE_NAMES["test"]


def _mxnet_cache_dir(name: str) -> Path:
    # Resolved at call time: MXNet's own default ``root`` is frozen when mxnet is imported,
    # so a later change of MXNET_HOME (e.g. in tests) would otherwise be ignored.
    return Path(mx.base.data_dir()).expanduser() / "datasets" / name


def _not_found_message(name: str, problem: str, searched: list[Path]) -> str:
    files = ", ".join(_all_file_names())
    folders = ", ".join(str(p) for p in searched)
    return (
        f"Dataset {name!r} not found: {problem} Searched: {folders}. "
        f"Expected the four files {files} in a subfolder named {name!r}. "
        f"To fix this, set the environment variable {ENV_VAR} (or pass root=...) to a folder "
        f"with 'mnist/' and 'fashion-mnist/' subfolders, each holding these four files; on "
        f"Debian/Ubuntu, 'apt-get install -y dataset-fashion-mnist' puts the Fashion-MNIST "
        f"files in {_DEBIAN_FASHION}; or connect to the internet and leave {ENV_VAR} unset "
        f"so that MXNet can download them into {_mxnet_cache_dir(name)}."
    )


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read a gzip-compressed IDX file (the MNIST file format) into a NumPy array.

    Parameters
    ----------
    path : str or os.PathLike
        A ``*-idx1-ubyte.gz`` (labels) or ``*-idx3-ubyte.gz`` (images) file.

    Returns
    -------
    numpy.ndarray
        ``uint8`` array: shape ``(N,)`` for magic number ``0x00000801`` (labels) or
        ``(N, rows, cols)`` for ``0x00000803`` (images). The array owns its (writable) memory.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    DataFileError
        If the file is not gzip, is truncated or corrupt, has another magic number, or its
        payload is not exactly the size announced by its header.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        with gzip.open(path, "rb") as fh:
            header = fh.read(4)
            if len(header) < 4:
                raise DataFileError(
                    f"{path}: truncated IDX file: only {len(header)} of the 4 magic-number bytes."
                )
            magic = int.from_bytes(header, "big")
            if magic not in _IDX_NDIM:
                raise DataFileError(
                    f"{path}: wrong IDX magic number 0x{magic:08X}; expected 0x{_IDX_LABELS:08X} "
                    f"(uint8 labels, 1-D) or 0x{_IDX_IMAGES:08X} (uint8 images, 3-D)."
                )
            ndim = _IDX_NDIM[magic]
            raw_dims = fh.read(4 * ndim)
            if len(raw_dims) < 4 * ndim:
                raise DataFileError(
                    f"{path}: truncated IDX header: {len(raw_dims)} of the {4 * ndim} bytes "
                    f"giving the {ndim} dimension(s)."
                )
            dims = struct.unpack(f">{ndim}I", raw_dims)
            expected = math.prod(dims)
            payload = fh.read(expected)
            if len(payload) < expected:
                raise DataFileError(
                    f"{path}: truncated IDX file: the header announces shape {dims} "
                    f"({expected} bytes) but the data holds only {len(payload)} bytes."
                )
            if fh.read(1):
                raise DataFileError(
                    f"{path}: the data is longer than the {expected} bytes announced by the "
                    f"header (shape {dims})."
                )
    except (OSError, EOFError, zlib.error) as exc:
        # gzip reports truncation as EOFError and a non-gzip file as BadGzipFile (an OSError).
        raise DataFileError(
            f"{path}: not a readable gzip-compressed IDX file ({type(exc).__name__}: {exc})."
        ) from None
    return np.frombuffer(payload, dtype=np.uint8).reshape(dims).copy()


def find_data_root(root: str | os.PathLike | None = None) -> Path | None:
    """Return the offline data folder: ``root`` if given, else ``$BBB_GLUON_DATA``, else None.

    Parameters
    ----------
    root : str or os.PathLike, optional
        An explicit folder; wins over the environment variable. Its existence is not checked
        here (``load_raw`` reports a missing folder with a helpful message).

    Returns
    -------
    pathlib.Path or None
        The folder (``~`` expanded), or None when neither is set (an empty variable counts
        as unset).
    """
    if root is not None and str(root) != "":
        return Path(root).expanduser()
    env = os.environ.get(ENV_VAR, "")
    if env:
        return Path(env).expanduser()
    return None


def _check_name(name: str) -> None:
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; valid names are {', '.join(DATASETS)}")


def _validate_arrays(
    images: np.ndarray,
    labels: np.ndarray,
    train: bool,
    images_src: str,
    labels_src: str,
) -> None:
    split = "train" if train else "test"
    expected = NUM_TRAIN if train else NUM_TEST
    if images.ndim != 3 or images.shape[1:] != IMAGE_SHAPE:
        raise DataFileError(
            f"{images_src}: images of shape {images.shape}; expected (N, 28, 28) "
            f"(is it a labels file?)."
        )
    if labels.ndim != 1:
        raise DataFileError(
            f"{labels_src}: labels of shape {labels.shape}; expected (N,) (is it an images file?)."
        )
    if len(images) != expected:
        raise DataFileError(
            f"{images_src}: {len(images)} images; the {split} split has {expected}."
        )
    if len(labels) != expected:
        raise DataFileError(
            f"{labels_src}: {len(labels)} labels; the {split} split has {expected}."
        )
    if labels.size and int(labels.max()) >= NUM_CLASSES:
        bad = int(np.count_nonzero(labels >= NUM_CLASSES))
        raise DataFileError(
            f"{labels_src}: {bad} label(s) outside 0..{NUM_CLASSES - 1} "
            f"(largest {int(labels.max())})."
        )


def _snapshot(folder: Path) -> tuple[set[Path], list[Path]]:
    """Entries of ``folder`` now, and the folders that would have to be created for it."""
    missing = []
    p = folder
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    existing = set(folder.iterdir()) if folder.is_dir() else set()
    return existing, missing


def _remove_new_entries(folder: Path, before: set[Path], created_dirs: list[Path]) -> None:
    if folder.is_dir():
        for entry in folder.iterdir():
            if entry in before:
                continue
            try:
                if entry.is_dir() and not entry.is_symlink():
                    # MXNet only writes files here; a new folder is left alone unless empty.
                    entry.rmdir()
                else:
                    entry.unlink()
            except OSError:
                pass
    for d in created_dirs:  # deepest first, as recorded by _snapshot
        try:
            d.rmdir()
        except OSError:
            break


def _download_raw(name: str, train: bool) -> tuple[np.ndarray, np.ndarray]:
    cache = _mxnet_cache_dir(name)
    cls = mx.gluon.data.vision.MNIST if name == "mnist" else mx.gluon.data.vision.FashionMNIST
    before, created_dirs = _snapshot(cache)
    try:
        ds = cls(root=str(cache), train=train)
        # The whole split as arrays at once: the dataset's public interface gives one
        # (image, label) pair per __getitem__, 70,000 Python calls.
        images = ds._data.asnumpy().reshape(-1, *IMAGE_SHAPE)
        labels = np.asarray(ds._label, dtype=np.int32)
    except Exception as exc:
        _remove_new_entries(cache, before, created_dirs)
        reason = " ".join(str(exc).split())
        if len(reason) > 300:
            reason = reason[:297] + "..."
        problem = (
            f"no data folder is configured (neither root= nor {ENV_VAR} is set) and MXNet's "
            f"download into {cache} failed ({type(exc).__name__}: {reason})."
        )
        raise DatasetNotFoundError(_not_found_message(name, problem, [cache])) from None
    except BaseException:
        # An interrupted download must not leave a half-written file for the next run either.
        _remove_new_entries(cache, before, created_dirs)
        raise
    images_file, labels_file = FILE_NAMES["train" if train else "test"]
    _validate_arrays(images, labels, train, str(cache / images_file), str(cache / labels_file))
    return images, labels


def load_raw(
    name: str = "mnist", train: bool = True, root: str | os.PathLike | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Load one split of MNIST or Fashion-MNIST, unprocessed.

    Parameters
    ----------
    name : {"mnist", "fashion-mnist"}, default "mnist"
        Which dataset.
    train : bool, default True
        The 60,000-image training split if True, else the 10,000-image test split.
    root : str or os.PathLike, optional
        Data folder holding ``<name>/`` with the files of ``FILE_NAMES``. Defaults to
        ``$BBB_GLUON_DATA``. When neither is set, MXNet downloads the files into
        ``$MXNET_HOME/datasets/<name>`` (default ``~/.mxnet/datasets/<name>``).

    Returns
    -------
    images : numpy.ndarray
        ``uint8``, shape ``(N, 28, 28)``, N = 60000 (train) or 10000 (test).
    labels : numpy.ndarray
        ``int32``, shape ``(N,)``, values in 0..9.

    Raises
    ------
    ValueError
        If ``name`` is not one of ``DATASETS``.
    DatasetNotFoundError
        If a data folder is configured but lacks the files (no download is attempted then:
        an explicit configuration should not silently fall back to the network), or if no
        folder is configured and the download fails. Partial downloads are removed.
    DataFileError
        If a file is corrupt or holds the wrong number of examples or invalid labels.
    """
    _check_name(name)
    data_root = find_data_root(root)
    if data_root is None:
        return _download_raw(name, bool(train))

    folder = data_root / name
    images_file, labels_file = FILE_NAMES["train" if train else "test"]
    source = f"root={str(root)!r}" if root is not None and str(root) != "" else ENV_VAR
    if not folder.is_dir():
        problem = f"the data folder {data_root} (from {source}) has no {name!r} subfolder."
        raise DatasetNotFoundError(_not_found_message(name, problem, [folder]))
    missing = [f for f in (images_file, labels_file) if not (folder / f).is_file()]
    if missing:
        problem = f"{folder} (from {source}) lacks {', '.join(missing)}."
        raise DatasetNotFoundError(_not_found_message(name, problem, [folder]))

    images = read_idx(folder / images_file)
    labels = read_idx(folder / labels_file)
    _validate_arrays(
        images, labels, bool(train), str(folder / images_file), str(folder / labels_file)
    )
    return images, labels.astype(np.int32)


MUSHROOM_FILE = "agaricus-lepiota.data"
"""The UCI Mushroom data file, read from ``<data folder>/mushroom/``."""

# The attribute values the .names file lists (126 with stalk-root's '?'), in its order.
_MUSHROOM_ATTRIBUTES = (
    ("cap-shape", "bcxfks"), ("cap-surface", "fgys"), ("cap-color", "nbcgrpuewy"),
    ("bruises", "tf"), ("odor", "alcyfmnps"), ("gill-attachment", "adfn"),
    ("gill-spacing", "cwd"), ("gill-size", "bn"), ("gill-color", "knbhgropuewy"),
    ("stalk-shape", "et"), ("stalk-root", "bcuezr?"), ("stalk-surface-above-ring", "fyks"),
    ("stalk-surface-below-ring", "fyks"), ("stalk-color-above-ring", "nbcgopewy"),
    ("stalk-color-below-ring", "nbcgopewy"), ("veil-type", "pu"), ("veil-color", "nowy"),
    ("ring-number", "not"), ("ring-type", "ceflnpsz"), ("spore-print-color", "knbhrouwy"),
    ("population", "acnsvy"), ("habitat", "glmpuwd"),
)
_MUSHROOM_ROWS, _MUSHROOM_EDIBLE = 8124, 4208


@dataclass(frozen=True)
class Mushrooms:
    """The UCI Mushroom data set, one-hot encoded.

    Attributes
    ----------
    features : numpy.ndarray
        ``int32 (8124, 22)``: for each mushroom and attribute, the column of its one in
        the one-hot context (the context is ``width`` wide, 22 ones per row).
    edible : numpy.ndarray
        ``bool (8124,)``.
    columns : tuple of str
        ``"attribute=value"`` for each one-hot column.
    """

    features: np.ndarray
    edible: np.ndarray
    columns: tuple

    @property
    def width(self) -> int:
        return len(self.columns)

    def one_hot(self, rows=None) -> np.ndarray:
        """The ``float32`` one-hot contexts of ``rows`` (default: all), ``(n, width)``."""
        feats = self.features if rows is None else self.features[np.asarray(rows)]
        out = np.zeros((len(feats), self.width), np.float32)
        np.put_along_axis(out, feats.astype(np.int64), 1.0, axis=1)
        return out

    def __repr__(self) -> str:
        return (f"Mushrooms({len(self.edible)} rows, {int(self.edible.sum())} edible, "
                f"{self.width} one-hot columns)")


def load_mushroom(root: str | os.PathLike | None = None) -> Mushrooms:
    """Read and check ``<root>/mushroom/agaricus-lepiota.data`` (UCI Mushroom).

    The context is one-hot over the 117 attribute values that occur in the file (the
    .names file lists 126; the nine never seen, such as the universal veil, would be
    columns of zeros). Nothing is downloaded.

    Parameters
    ----------
    root : str or os.PathLike, optional
        The data folder; default ``$BBB_GLUON_DATA``.

    Raises
    ------
    DatasetNotFoundError
        No data folder is configured, or it lacks ``mushroom/agaricus-lepiota.data``.
    DataFileError
        The file is not the UCI data: wrong row count, fields, values or class counts.
    """
    data_root = find_data_root(root)
    fix = (f"Put the UCI file {MUSHROOM_FILE} (archive.ics.uci.edu, data set 73) in a "
           f"'mushroom/' subfolder of the data folder and point {ENV_VAR} (or root=...) at "
           f"that folder; in this project, `make data` links ../shared/data/mushroom.")
    if data_root is None:
        raise DatasetNotFoundError(f"Dataset 'mushroom' not found: no data folder is "
                                   f"configured ({ENV_VAR} is unset). {fix}")
    path = data_root / "mushroom" / MUSHROOM_FILE
    if not path.is_file():
        raise DatasetNotFoundError(f"Dataset 'mushroom' not found: {path} does not exist. "
                                   f"{fix}")
    try:
        text = path.read_bytes().decode("ascii")
    except UnicodeDecodeError as e:
        raise DataFileError(f"{path}: not ASCII text ({e}); expected the UCI file.") from e
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) != _MUSHROOM_ROWS:
        raise DataFileError(f"{path}: {len(lines)} rows; the UCI Mushroom file has "
                            f"{_MUSHROOM_ROWS}.")
    codes = np.empty((len(lines), 23), dtype="U1")
    for i, line in enumerate(lines):
        fields = line.split(",")
        if len(fields) != 23 or any(len(f) != 1 for f in fields):
            raise DataFileError(f"{path}, line {i + 1}: expected 23 one-letter fields "
                                f"(class, then 22 attributes), got {line[:60]!r}.")
        codes[i] = fields
    if not np.isin(codes[:, 0], ["e", "p"]).all():
        raise DataFileError(f"{path}: the first column (class) must be 'e' or 'p'.")
    edible = codes[:, 0] == "e"
    if int(edible.sum()) != _MUSHROOM_EDIBLE:
        raise DataFileError(f"{path}: {int(edible.sum())} edible rows; the UCI file has "
                            f"{_MUSHROOM_EDIBLE} of {_MUSHROOM_ROWS}.")
    features = np.empty((len(lines), len(_MUSHROOM_ATTRIBUTES)), np.int32)
    columns = []
    for j, (name, values) in enumerate(_MUSHROOM_ATTRIBUTES):
        col = codes[:, j + 1]
        unknown = sorted(set(col) - set(values))
        if unknown:
            raise DataFileError(f"{path}: attribute {name} (column {j + 2}) has values "
                                f"{unknown} that the UCI .names file does not list.")
        present = [v for v in values if v in set(col)]
        lookup = {v: len(columns) + k for k, v in enumerate(present)}
        features[:, j] = [lookup[v] for v in col]
        columns += [f"{name}={v}" for v in present]
    return Mushrooms(features, edible, tuple(columns))


class PixelTransform:
    """Maps ``uint8`` images to flattened ``float32`` network inputs.

    Parameters
    ----------
    kind : {"126", "255", "standardize"}, default "126"
        ``"126"`` divides the intensities by 126, the preprocessing of Blundell et al. (2015)
        (inputs in [0, 255/126]); ``"255"`` divides by 255 (inputs in [0, 1]);
        ``"standardize"`` maps intensities to [0, 1] and then subtracts the per-pixel mean and
        divides by the per-pixel standard deviation, both estimated by ``fit`` (call it on
        the training split only, so no validation or test information leaks in).
    min_std : float, default 0.05
        Floor on the per-pixel standard deviation for ``"standardize"``, in [0, 1] intensity
        units (0.05 is about 13 grey levels). MNIST has 67 border pixels that are 0 in every
        training image and ~200 more lit in a handful of images; without a floor a single
        lit pixel in a test image would become a value in the thousands (or inf). With it,
        every standardized value lies within ``1 / min_std = 20`` of zero; pixels whose
        standard deviation is below the floor end up with standard deviation below 1.

    Attributes
    ----------
    kind : str
    min_std : float
    mean_, std_ : numpy.ndarray or None
        ``float32`` ``(784,)`` per-pixel mean and floored standard deviation in [0, 1] units,
        set by ``fit`` for ``"standardize"``; None otherwise.
    """

    KINDS = ("126", "255", "standardize")

    def __init__(self, kind: str = "126", min_std: float = 0.05):
        kind = str(kind)
        if kind not in self.KINDS:
            raise ValueError(
                f"unknown pixel transform {kind!r}; valid kinds are {', '.join(self.KINDS)}"
            )
        if not (isinstance(min_std, numbers.Real) and 0 < min_std < math.inf):
            raise ValueError(f"min_std must be a positive finite number, got {min_std!r}")
        self.kind = kind
        self.min_std = float(min_std)
        self.mean_: np.ndarray | None = None
        self.std_: np.ndarray | None = None

    @property
    def fitted(self) -> bool:
        """True when the transform can be applied (always, except unfitted standardize)."""
        return self.kind != "standardize" or self.mean_ is not None

    def fit(self, images: np.ndarray) -> PixelTransform:
        """Estimate the per-pixel statistics (needed only for ``"standardize"``).

        Parameters
        ----------
        images : numpy.ndarray
            Training images, ``uint8`` (or real) intensities in 0..255, shape
            ``(N, 28, 28)`` or ``(N, 784)``, N >= 1.

        Returns
        -------
        PixelTransform
            ``self``, for chaining.
        """
        if self.kind != "standardize":
            return self
        x = self._flatten(images)
        if len(x) == 0:
            raise ValueError("cannot fit 'standardize' on zero images")
        # Two passes over row chunks in float64: exact enough, without a float64 copy of
        # the whole (N, 784) array (300 MB for MNIST).
        chunk = 8192
        total = np.zeros(x.shape[1], dtype=np.float64)
        for i in range(0, len(x), chunk):
            total += x[i : i + chunk].sum(axis=0, dtype=np.float64)
        mean = total / len(x) / 255.0
        sq = np.zeros(x.shape[1], dtype=np.float64)
        for i in range(0, len(x), chunk):
            sq += ((x[i : i + chunk] / 255.0 - mean) ** 2).sum(axis=0)
        std = np.sqrt(sq / len(x))
        self.mean_ = mean.astype(np.float32)
        self.std_ = np.maximum(std, self.min_std).astype(np.float32)
        return self

    @staticmethod
    def _flatten(images: np.ndarray) -> np.ndarray:
        images = np.asarray(images)
        if images.ndim < 2:
            raise ValueError(
                f"expected images of shape (N, 28, 28) or (N, 784), got {images.shape}"
            )
        if math.prod(images.shape[1:]) != IMAGE_SHAPE[0] * IMAGE_SHAPE[1]:
            raise ValueError(f"expected 784 pixels per image (28x28), got shape {images.shape}")
        # explicit width: reshape(0, -1) is ambiguous for an empty validation split
        return images.reshape(len(images), IMAGE_SHAPE[0] * IMAGE_SHAPE[1])

    def __call__(self, images: np.ndarray) -> np.ndarray:
        """Transform images.

        Parameters
        ----------
        images : numpy.ndarray
            Intensities in 0..255, shape ``(N, 28, 28)`` or ``(N, 784)``.

        Returns
        -------
        numpy.ndarray
            ``float32``, shape ``(N, 784)``, a new array.
        """
        if not self.fitted:
            raise RuntimeError("PixelTransform('standardize') must be fit() before use")
        out = self._flatten(images).astype(np.float32)  # always a copy: safe to edit in place
        if self.kind == "126":
            out /= np.float32(126.0)
        elif self.kind == "255":
            out /= np.float32(255.0)
        else:
            out /= np.float32(255.0)
            out -= self.mean_
            out /= self.std_
        return out

    def __repr__(self) -> str:
        extra = f", min_std={self.min_std}" if self.kind == "standardize" else ""
        state = "" if self.fitted else " (unfitted)"
        return f"PixelTransform(kind={self.kind!r}{extra}){state}"


@dataclass(frozen=True, eq=False, repr=False)
class Splits:
    """A dataset split into train / validation / test arrays.

    Attributes
    ----------
    train, valid, test : tuple of numpy.ndarray
        ``(X, y)`` with ``X`` ``float32`` ``(N, 784)`` and ``y`` ``int32`` ``(N,)``;
        ``valid`` may have N = 0.
    name : str
        The dataset name, one of ``DATASETS``.
    transform : PixelTransform
        The transform applied to all three, fitted on the training split.
    """

    train: tuple[np.ndarray, np.ndarray]
    valid: tuple[np.ndarray, np.ndarray]
    test: tuple[np.ndarray, np.ndarray]
    name: str
    transform: PixelTransform

    def __repr__(self) -> str:
        sizes = ", ".join(f"{k}={len(getattr(self, k)[1])}" for k in ("train", "valid", "test"))
        return f"Splits(name={self.name!r}, {sizes}, transform={self.transform!r})"


def load_dataset(
    name: str = "mnist",
    root: str | os.PathLike | None = None,
    transform: str | PixelTransform = "126",
    num_valid: int = 10000,
    seed: int = 0,
    subset: int | None = None,
) -> Splits:
    """Load a dataset as transformed train / validation / test arrays.

    The 60,000 training images are split at random into ``60000 - num_valid`` training and
    ``num_valid`` validation examples (50,000 / 10,000 by default, as in the paper) with
    ``np.random.default_rng(seed).permutation(60000)``: the first ``num_valid`` indices form
    the validation split and the rest the training split, both in permuted order. The same
    ``seed`` always gives the same split. The test split is the official 10,000 images.

    Parameters
    ----------
    name : {"mnist", "fashion-mnist"}, default "mnist"
    root : str or os.PathLike, optional
        Data folder; see ``load_raw``.
    transform : {"126", "255", "standardize"} or PixelTransform, default "126"
        Pixel transform; fitted on the training split only (all of it, even with ``subset``,
        so that a quick run sees the same inputs as a full one).
    num_valid : int, default 10000
        Validation examples taken from the training images, ``0 <= num_valid < 60000``.
    seed : int, default 0
        Seed of the train / validation split (non-negative).
    subset : int, optional
        If given (positive), keep at most the first ``subset`` examples of each of the
        train, valid and test splits, for quick runs.

    Returns
    -------
    Splits
        ``train``, ``valid``, ``test`` as ``(X float32 (N, 784), y int32 (N,))``.

    Raises
    ------
    ValueError
        For an unknown name or transform, or an out-of-range ``num_valid``, ``seed`` or
        ``subset`` (checked before any data is read).
    DatasetNotFoundError, DataFileError
        See ``load_raw``.
    """
    _check_name(name)
    if not isinstance(transform, PixelTransform):
        transform = PixelTransform(transform)
    num_valid = check_int(num_valid, "num_valid", 0)
    if num_valid >= NUM_TRAIN:
        raise ValueError(
            f"num_valid must be < {NUM_TRAIN} (the number of training images) so that some "
            f"remain for training, got {num_valid}"
        )
    seed = check_int(seed, "seed", 0)
    if subset is not None:
        subset = check_int(subset, "subset", 1)

    images, labels = load_raw(name, train=True, root=root)
    test_images, test_labels = load_raw(name, train=False, root=root)

    perm = np.random.default_rng(seed).permutation(len(images))
    valid_idx, train_idx = perm[:num_valid], perm[num_valid:]
    transform.fit(images[train_idx])
    if subset is not None:
        train_idx, valid_idx = train_idx[:subset], valid_idx[:subset]
        test_images, test_labels = test_images[:subset], test_labels[:subset]

    return Splits(
        train=(transform(images[train_idx]), labels[train_idx]),
        valid=(transform(images[valid_idx]), labels[valid_idx]),
        test=(transform(test_images), test_labels.copy()),
        name=name,
        transform=transform,
    )


class ArrayLoader:
    """Mini-batches of in-memory arrays as MXNet NDArrays, with no per-example Python work.

    The arrays are copied to ``ctx`` once. Each epoch applies one permutation to the whole
    arrays with ``mx.nd.take`` and then yields contiguous slices (views) of the result.

    Parameters
    ----------
    X : numpy.ndarray
        Floating-point inputs, shape ``(N, D)`` or ``(N, ...)`` (images ``(N, 1, 28, 28)``);
        stored as ``float32``.
    y : numpy.ndarray
        Integer labels ``(N,)``, or real-valued targets ``(N,)`` / ``(N, ...)``; stored as
        ``float32`` (Gluon losses take float labels).
    batch_size : int
        Positive number of examples per batch.
    shuffle : bool, default False
        Whether to permute the examples each epoch. The order of epoch ``e`` is
        ``np.random.default_rng([seed, e]).permutation(N)``: a function of ``(seed, e)``
        only, whatever was iterated before.
    seed : int, default 0
        Non-negative shuffling seed.
    ctx : mxnet.Context, optional
        Where the batches live; default ``mx.current_context()`` at construction.
    last_batch : {"keep", "discard"}, default "keep"
        Whether a final batch smaller than ``batch_size`` is yielded or dropped.

    Attributes
    ----------
    num_examples, batch_size : int
    ctx : mxnet.Context
    shuffle : bool
    seed : int
    last_batch : str
    """

    def __init__(
        self,
        X: np.ndarray,
        y: np.ndarray,
        batch_size: int,
        shuffle: bool = False,
        seed: int = 0,
        ctx: mx.Context | None = None,
        last_batch: str = "keep",
    ):
        if not isinstance(X, np.ndarray) or X.ndim < 2 or \
                not np.issubdtype(X.dtype, np.floating):
            desc = f"{type(X).__name__} {getattr(X, 'dtype', '')} {getattr(X, 'shape', '')}"
            raise ValueError(f"X must be a floating-point NumPy array of at least 2 axes "
                             f"(N, D) or (N, ...), got {desc}")
        if not isinstance(y, np.ndarray) or y.ndim < 1 or not (
                np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.floating)):
            desc = f"{type(y).__name__} {getattr(y, 'dtype', '')} {getattr(y, 'shape', '')}"
            raise ValueError(f"y must be a NumPy array of integer labels (N,) or real targets "
                             f"(N, ...), got {desc}")
        if len(X) != len(y):
            raise ValueError(f"X and y differ in length: {len(X)} inputs but {len(y)} labels")
        self.batch_size = check_int(batch_size, "batch_size", 1)
        self.seed = check_int(seed, "seed", 0)
        if last_batch not in ("keep", "discard"):
            raise ValueError(f"last_batch must be 'keep' or 'discard', got {last_batch!r}")
        self.last_batch = last_batch
        self.shuffle = bool(shuffle)
        self.ctx = ctx or mx.current_context()
        self.num_examples = len(X)
        self._X = mx.nd.array(X, ctx=self.ctx, dtype=np.float32)
        self._y = mx.nd.array(y, ctx=self.ctx, dtype=np.float32)
        self._next_epoch = 0

    def __len__(self) -> int:
        """Number of batches per epoch."""
        if self.last_batch == "discard":
            return self.num_examples // self.batch_size
        return -(-self.num_examples // self.batch_size)

    def order(self, epoch: int) -> np.ndarray:
        """Example indices in the order epoch ``epoch`` visits them, ``int64`` ``(N,)``."""
        epoch = check_int(epoch, "epoch", 0)
        if not self.shuffle:
            return np.arange(self.num_examples)
        return np.random.default_rng([self.seed, epoch]).permutation(self.num_examples)

    def epoch(self, epoch: int) -> Iterator[tuple[mx.nd.NDArray, mx.nd.NDArray]]:
        """Batches of one epoch.

        Parameters
        ----------
        epoch : int
            Non-negative epoch number; selects the shuffle order.

        Returns
        -------
        iterator of (mxnet.nd.NDArray, mxnet.nd.NDArray)
            ``(X_batch float32 (B, ...), y_batch float32 (B, ...))`` on ``ctx``; B = ``batch_size``
            except possibly for the last batch.
        """
        order = self.order(epoch)
        X, y = self._X, self._y
        if self.shuffle and self.num_examples > 0:
            idx = mx.nd.array(order, ctx=self.ctx, dtype=np.int64)
            X, y = mx.nd.take(X, idx), mx.nd.take(y, idx)
        return self._batches(X, y)

    def _batches(self, X, y):
        bs = self.batch_size
        for b in range(len(self)):
            yield X[b * bs : (b + 1) * bs], y[b * bs : (b + 1) * bs]

    def __iter__(self) -> Iterator[tuple[mx.nd.NDArray, mx.nd.NDArray]]:
        """Batches of the next epoch: epoch 0 the first time, then 1, 2, ..."""
        it = self.epoch(self._next_epoch)
        self._next_epoch += 1
        return it

    def __repr__(self) -> str:
        return (
            f"ArrayLoader(num_examples={self.num_examples}, batch_size={self.batch_size}, "
            f"shuffle={self.shuffle}, seed={self.seed}, ctx={self.ctx}, "
            f"last_batch={self.last_batch!r})"
        )


def two_moons(n: int = 1000, noise: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two interleaved half-moons, a 2-D binary classification problem.

    Same geometry as ``sklearn.datasets.make_moons``: class 0 on the upper half of the unit
    circle ``(cos t, sin t)``, class 1 on ``(1 - cos t, 0.5 - sin t)``, ``t`` evenly spaced
    in ``[0, pi]`` (``n // 2`` points for class 0, the rest for class 1), shuffled, plus
    isotropic Gaussian noise.

    Parameters
    ----------
    n : int, default 1000
        Number of points (>= 2).
    noise : float, default 0.2
        Standard deviation of the Gaussian noise added to each coordinate (>= 0).
    seed : int, default 0
        Seed of ``np.random.default_rng``; the same seed gives the same data.

    Returns
    -------
    X : numpy.ndarray
        ``float32``, shape ``(n, 2)``.
    y : numpy.ndarray
        ``int32``, shape ``(n,)``, values 0 and 1.
    """
    n = check_int(n, "n", 2)
    seed = check_int(seed, "seed", 0)
    if not (noise >= 0 and math.isfinite(noise)):
        raise ValueError(f"noise must be a finite number >= 0, got {noise!r}")
    n_out = n // 2
    n_in = n - n_out
    t_out = np.linspace(0.0, np.pi, n_out)
    t_in = np.linspace(0.0, np.pi, n_in)
    X = np.concatenate(
        [
            np.stack([np.cos(t_out), np.sin(t_out)], axis=1),
            np.stack([1.0 - np.cos(t_in), 0.5 - np.sin(t_in)], axis=1),
        ]
    )
    y = np.concatenate([np.zeros(n_out, np.int32), np.ones(n_in, np.int32)])
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    X, y = X[perm], y[perm]
    X = X + rng.normal(0.0, noise, size=X.shape)
    return X.astype(np.float32), y


def regression_curve(
    n: int = 200, low: float = 0.0, high: float = 0.5, seed: int = 0,
    noise_std: float = math.sqrt(0.02),
) -> tuple[np.ndarray, np.ndarray]:
    """Noisy samples of the 1-D regression curve of Blundell et al. (2015), section 5.2.

    ``y = x + 0.3 sin(2 pi (x + eps)) + 0.3 sin(4 pi (x + eps)) + eps`` with
    ``eps ~ N(0, 0.02)``. The paper writes ``N(0, 0.02)`` without saying whether 0.02 is
    the variance or the standard deviation; we follow the usual ``N(mean, variance)``
    convention, i.e. ``eps`` has standard deviation ``sqrt(0.02) ~= 0.141`` by default.
    Because ``eps`` also shifts the phase of the sines, that makes a wide band; the
    paper's figure looks more like ``noise_std=0.02``.

    Parameters
    ----------
    n : int, default 200
        Number of points (>= 1).
    low, high : float, default 0.0 and 0.5
        ``x`` is drawn uniformly from ``[low, high)``; requires ``low < high``.
    seed : int, default 0
        Seed of ``np.random.default_rng``.
    noise_std : float, default sqrt(0.02)
        Standard deviation of ``eps`` (>= 0).

    Returns
    -------
    x : numpy.ndarray
        ``float32``, shape ``(n, 1)``.
    y : numpy.ndarray
        ``float32``, shape ``(n, 1)``.
    """
    n = check_int(n, "n", 1)
    seed = check_int(seed, "seed", 0)
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"need finite low < high, got low={low!r}, high={high!r}")
    if not (math.isfinite(noise_std) and noise_std >= 0):
        raise ValueError(f"noise_std must be a finite number >= 0, got {noise_std!r}")
    rng = np.random.default_rng(seed)
    x = rng.uniform(low, high, size=n)
    eps = rng.normal(0.0, noise_std, size=n)
    y = x + 0.3 * np.sin(2 * np.pi * (x + eps)) + 0.3 * np.sin(4 * np.pi * (x + eps)) + eps
    return x.astype(np.float32)[:, None], y.astype(np.float32)[:, None]
