"""Where the data live (an argument, else ``$BBB_GLUON_DATA``) and the two errors every
reader raises: the data are missing, or a file is unusable.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ENV_VAR", "DataFileError", "DatasetNotFoundError", "find_data_root"]


ENV_VAR = "BBB_GLUON_DATA"
"""Environment variable naming the offline data folder."""


class DatasetNotFoundError(FileNotFoundError):
    """A dataset is neither in the configured data folder nor downloadable.

    Raised by the loaders (``load_raw``, ``load_dataset``, ``load_mushroom``) and, before any
    work, by ``require_datasets``. The message names the folder(s) searched, the environment
    variable ``BBB_GLUON_DATA``, the expected file names and the ways to fix it. It is a
    ``FileNotFoundError`` so that generic "missing file" handlers also catch it.
    """


class DataFileError(ValueError):
    """A dataset file exists but its content is unusable.

    Raised for files that are not gzip, are truncated, have a wrong IDX magic number or
    dimensions, hold the wrong number of examples, or labels outside 0..9. The message
    starts with the offending file's path.
    """


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
