"""MNIST and Fashion-MNIST read from their four IDX files, offline.

The data folder holds one subfolder per dataset (``mnist/``, ``fashion-mnist/``) with the
four standard gzip files listed in ``FILE_NAMES``. Only when no folder is configured does
``load_raw`` fall back to MXNet's own download into ``$MXNET_HOME/datasets/<name>``.
"""

from __future__ import annotations

import gzip
import math
import os
import struct
import zlib
from pathlib import Path

import mxnet as mx
import numpy as np

from .._kernels import private as _private
from .folder import ENV_VAR, DataFileError, DatasetNotFoundError, find_data_root

__all__ = ["DATASETS", "FILE_NAMES", "load_raw", "read_idx"]


DATASETS = ("mnist", "fashion-mnist")
"""Names accepted by ``load_raw`` and ``load_dataset``; also the subfolder names on disk."""

FILE_NAMES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
"""The four standard file names, as ``{split: (images file, labels file)}``."""

NUM_CLASSES = 10
IMAGE_SHAPE = (28, 28)
NUM_TRAIN = 60000
NUM_TEST = 10000

_IDX_LABELS = 0x00000801  # unsigned byte, 1 dimension
_IDX_IMAGES = 0x00000803  # unsigned byte, 3 dimensions
_IDX_NDIM = {_IDX_LABELS: 1, _IDX_IMAGES: 3}

DEBIAN_FASHION = "/usr/share/datasets/fashion-mnist/"


def all_file_names() -> tuple[str, ...]:
    return FILE_NAMES["train"] + FILE_NAMES["test"]


def mxnet_cache_dir(name: str) -> Path:
    # Resolved at call time: MXNet's own default ``root`` is frozen when mxnet is imported,
    # so a later change of MXNET_HOME (e.g. in tests) would otherwise be ignored.
    return Path(mx.base.data_dir()).expanduser() / "datasets" / name


def _not_found_message(name: str, problem: str, searched: list[Path],
                       given: bool = False) -> str:
    """``given``: the folder was passed (not read from the environment), so the fix is
    another folder there; the environment variable would not be read."""
    files = ", ".join(all_file_names())
    folders = ", ".join(str(p) for p in searched)
    debian = (f"; on Debian/Ubuntu, 'apt-get install -y dataset-fashion-mnist' puts them in "
              f"{DEBIAN_FASHION} (link it as fashion-mnist/)" if name == "fashion-mnist"
              else "")
    head = (f"Dataset {name!r} not found: {problem} Searched: {folders}. "
            f"Expected the four files {files} in a subfolder named {name!r}. ")
    if given:
        return head + (f"To fix this, give a data folder (the root argument; --data-dir on "
                       f"the command line) with a {name + '/'!r} subfolder holding these "
                       f"four files{debian}.")
    return head + (
        f"To fix this, set the environment variable {ENV_VAR} to a data folder with a "
        f"{name + '/'!r} subfolder holding these four files{debian}; or connect to the "
        f"internet and leave {ENV_VAR} unset so that MXNet can download them into "
        f"{mxnet_cache_dir(name)}."
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


def check_dataset_name(name: str) -> None:
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
    cache = mxnet_cache_dir(name)
    cls = mx.gluon.data.vision.MNIST if name == "mnist" else mx.gluon.data.vision.FashionMNIST
    before, created_dirs = _snapshot(cache)
    try:
        ds = cls(root=str(cache), train=train)
        # The whole split as arrays at once: the dataset's public interface gives one
        # (image, label) pair per __getitem__, 70,000 Python calls.
        data, label = _private.dataset_arrays(ds)
        images = data.asnumpy().reshape(-1, *IMAGE_SHAPE)
        labels = np.asarray(label, dtype=np.int32)
    except Exception as exc:
        _remove_new_entries(cache, before, created_dirs)
        reason = " ".join(str(exc).split())
        if len(reason) > 300:
            reason = reason[:297] + "..."
        problem = (
            f"no data folder is configured ({ENV_VAR} is unset, none was given) and MXNet's "
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
    check_dataset_name(name)
    data_root = find_data_root(root)
    if data_root is None:
        return _download_raw(name, bool(train))

    folder = data_root / name
    images_file, labels_file = FILE_NAMES["train" if train else "test"]
    given = root is not None and str(root) != ""
    source = "given" if given else f"from {ENV_VAR}"
    if not data_root.is_dir():
        problem = (f"the data folder {data_root} ({source}) "
                   + ("is not a folder." if data_root.exists() else "does not exist."))
        raise DatasetNotFoundError(_not_found_message(name, problem, [data_root], given))
    if not folder.is_dir():
        problem = f"the data folder {data_root} ({source}) has no {name!r} subfolder."
        raise DatasetNotFoundError(_not_found_message(name, problem, [folder], given))
    missing = [f for f in (images_file, labels_file) if not (folder / f).is_file()]
    if missing:
        problem = f"{folder} ({source}) lacks {', '.join(missing)}."
        raise DatasetNotFoundError(_not_found_message(name, problem, [folder], given))

    images = read_idx(folder / images_file)
    labels = read_idx(folder / labels_file)
    _validate_arrays(
        images, labels, bool(train), str(folder / images_file), str(folder / labels_file)
    )
    return images, labels.astype(np.int32)
