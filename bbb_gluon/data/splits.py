"""The experiments' image data: a deterministic train / validation / test ``Splits`` with
the pixels transformed by a ``PixelTransform`` fitted on the training split only.
"""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass

import numpy as np

from .._checks import check_int
from .idx import IMAGE_SHAPE, NUM_TRAIN, check_dataset_name, load_raw

__all__ = ["PixelTransform", "Splits", "load_dataset"]


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
    check_dataset_name(name)
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
