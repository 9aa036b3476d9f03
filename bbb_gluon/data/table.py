"""A regression table of your own: a CSV file with a header, one column the target, read
and split as the UCI benchmark's splits are (:class:`~bbb_gluon.data.UCISplit`)."""

import csv
import os

import numpy as np

from .folder import DataFileError
from .uci import UCISplit, standardised_split

__all__ = ["load_table"]


def load_table(path, target, test_fraction=0.1, seed=0, hidden=50) -> UCISplit:
    """Read a CSV file (a header row, then one row per example, numbers only) and split it
    at random into training and test rows, standardised with the training rows'
    statistics.

    Parameters
    ----------
    path : str or os.PathLike
    target : str
        The header name of the column to predict; every other column is an input.
    test_fraction : float, default 0.1
        The share of rows held out for testing (the UCI benchmark's), drawn with ``seed``.
    hidden : int, default 50
        The hidden units a one-layer network would take (``UCISplit.hidden``).

    Raises
    ------
    DataFileError
        The file cannot be read, lacks the column, holds a cell that is not a number, or
        has fewer than 10 rows; the message names the file, row and column.
    """
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction!r}")
    path = os.fspath(path)
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError) as e:
        raise DataFileError(f"{path}: cannot read it ({e})") from None
    if not rows or target not in rows[0]:
        columns = ", ".join(rows[0]) if rows else "none"
        raise DataFileError(f"{path}: no column named {target!r} (its columns: {columns})")
    header, body = rows[0], [r for r in rows[1:] if r]
    if len(body) < 10:
        raise DataFileError(f"{path}: {len(body)} rows; a regression needs at least 10")
    values = np.empty((len(body), len(header)), dtype=np.float64)
    for i, row in enumerate(body):
        if len(row) != len(header):
            raise DataFileError(f"{path}: row {i + 2} has {len(row)} cells, the header "
                                f"{len(header)}")
        for j, cell in enumerate(row):
            try:
                values[i, j] = float(cell)
            except ValueError:
                raise DataFileError(f"{path}: row {i + 2}, column {header[j]!r}: "
                                    f"{cell!r} is not a number") from None
    if not np.isfinite(values).all():
        i, j = np.argwhere(~np.isfinite(values))[0]
        raise DataFileError(f"{path}: row {i + 2}, column {header[j]!r} is not finite")
    column = header.index(target)
    X, y = np.delete(values, column, axis=1), values[:, [column]]
    if X.shape[1] == 0:
        raise DataFileError(f"{path}: no input column besides {target!r}")
    order = np.random.default_rng(seed).permutation(len(values))
    held = max(1, int(round(test_fraction * len(values))))
    name = os.path.splitext(os.path.basename(path))[0]
    return standardised_split(name, 0, X, y, np.sort(order[held:]), np.sort(order[:held]),
                              hidden, None)
