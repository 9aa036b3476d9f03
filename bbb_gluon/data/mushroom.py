"""The UCI Mushroom data set (``mushroom/agaricus-lepiota.data`` in the data folder), for
the contextual bandit of ``bbb_gluon.bandit``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from .folder import ENV_VAR, DataFileError, DatasetNotFoundError, find_data_root

__all__ = ["MUSHROOM_FILE", "Mushrooms", "load_mushroom"]


MUSHROOM_FILE = "agaricus-lepiota.data"
"""The UCI Mushroom data file, read from ``<data folder>/mushroom/``."""

# Where the file comes from and where it goes: load_mushroom's and require_datasets' hint.
MUSHROOM_HINT = (f"Put the UCI file {MUSHROOM_FILE} (archive.ics.uci.edu, data set 73) in a "
                 f"'mushroom/' subfolder of the data folder and point {ENV_VAR} at that "
                 f"folder; in this project, `make data` links ../shared/data/mushroom.")

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
    # a folder given: the fix is another one there (the variable would not be read)
    hint = MUSHROOM_HINT if root is None or str(root) == "" else MUSHROOM_HINT.replace(
        f"point {ENV_VAR} at that folder", "give that folder (the root argument; --data-dir "
        "on the command line)")
    if data_root is None:
        raise DatasetNotFoundError(f"Dataset 'mushroom' not found: no data folder is "
                                   f"configured ({ENV_VAR} is unset). {MUSHROOM_HINT}")
    path = data_root / "mushroom" / MUSHROOM_FILE
    if not data_root.is_dir():
        raise DatasetNotFoundError(
            f"Dataset 'mushroom' not found: the data folder {data_root} "
            + ("is not a folder. " if data_root.exists() else "does not exist. ") + hint)
    if not path.is_file():
        raise DatasetNotFoundError(f"Dataset 'mushroom' not found: {path} does not exist. "
                                   f"{hint}")
    try:
        text = path.read_bytes().decode("ascii")
    except UnicodeDecodeError as e:
        raise DataFileError(f"{path}: not ASCII text ({e}); expected the UCI file.") from e
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) != _MUSHROOM_ROWS:
        raise DataFileError(f"{path}: {len(lines)} rows; the UCI Mushroom file has "
                            f"{_MUSHROOM_ROWS}.")
    # 23 one-letter fields are exactly 45 characters with the commas at the odd places:
    # checked and split as one byte array (a loop over the rows took 0.3 s).
    if all(len(line) == 45 for line in lines):
        raw = np.frombuffer("".join(lines).encode("ascii"), np.uint8).reshape(len(lines), 45)
        letters = raw[:, ::2]
        bad = (raw[:, 1::2] != ord(",")).any(axis=1) | (letters == ord(",")).any(axis=1)
        first_bad = int(np.argmax(bad)) if bad.any() else None
    else:  # some line is wrong: the first one, whichever way (raised below)
        first_bad = next(i for i, line in enumerate(lines) if len(line) != 45
                         or line[1::2] != "," * 22 or "," in line[::2])
    if first_bad is not None:
        raise DataFileError(f"{path}, line {first_bad + 1}: expected 23 one-letter fields "
                            f"(class, then 22 attributes), got {lines[first_bad][:60]!r}.")
    if not np.isin(letters[:, 0], [ord("e"), ord("p")]).all():
        raise DataFileError(f"{path}: the first column (class) must be 'e' or 'p'.")
    edible = letters[:, 0] == ord("e")
    if int(edible.sum()) != _MUSHROOM_EDIBLE:
        raise DataFileError(f"{path}: {int(edible.sum())} edible rows; the UCI file has "
                            f"{_MUSHROOM_EDIBLE} of {_MUSHROOM_ROWS}.")
    features = np.empty((len(lines), len(_MUSHROOM_ATTRIBUTES)), np.int32)
    columns = []
    for j, (name, values) in enumerate(_MUSHROOM_ATTRIBUTES):
        col = letters[:, j + 1]
        seen = set(np.unique(col).tobytes().decode("ascii"))
        unknown = sorted(seen - set(values))
        if unknown:
            raise DataFileError(f"{path}: attribute {name} (column {j + 2}) has values "
                                f"{unknown} that the UCI .names file does not list.")
        present = [v for v in values if v in seen]
        lookup = np.zeros(256, np.int32)
        lookup[[ord(v) for v in present]] = np.arange(len(columns), len(columns) + len(present))
        features[:, j] = lookup[col]
        columns += [f"{name}={v}" for v in present]
    return Mushrooms(features, edible, tuple(columns))
