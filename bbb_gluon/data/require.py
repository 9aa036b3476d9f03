"""Check, before any work starts, that the datasets a script or notebook needs are on disk.

A notebook calls ``require_datasets('mnist', 'fashion-mnist')`` in its first code cell, so
that missing data stop it there, with one message saying where to put them, rather than
minutes later in a loader (or in a download that cannot succeed offline).
"""

from __future__ import annotations

import os
from pathlib import Path

from .folder import ENV_VAR, DatasetNotFoundError, find_data_root
from .idx import DATASETS, DEBIAN_FASHION, all_file_names, mxnet_cache_dir
from .mushroom import MUSHROOM_FILE, MUSHROOM_HINT
from .uci import UCI_DATASETS, UCI_HINT

__all__ = ["require_datasets"]


# the datasets read from the data folder alone: their files there, and where they come from
_NEVER_DOWNLOADED = {
    "mushroom": ((MUSHROOM_FILE,), MUSHROOM_HINT),
    "uci": (tuple(f"{folder}/data.txt" for folder, *_ in UCI_DATASETS.values()), UCI_HINT),
}


def require_datasets(*names: str, root: str | os.PathLike | None = None) -> Path | None:
    """Raise one clear error unless every named dataset is on disk.

    Parameters
    ----------
    *names : str
        Any of ``"mnist"``, ``"fashion-mnist"`` (the four IDX files of ``FILE_NAMES``),
        ``"mushroom"`` (``agaricus-lepiota.data``) and ``"uci"`` (each regression
        dataset's ``uci/<folder>/data.txt``).
    root : str or os.PathLike, optional
        The data folder, holding one subfolder per dataset; default ``$BBB_GLUON_DATA``.
        When neither is set, MNIST and Fashion-MNIST count as present if MXNet's download
        cache (``$MXNET_HOME/datasets/<name>``) already holds their files; Mushroom and
        the UCI data are never downloaded, so they then count as missing.

    Returns
    -------
    pathlib.Path or None
        The data folder that was checked, or None when the MXNet cache served.

    Raises
    ------
    TypeError
        If no name is given.
    ValueError
        If a name is not one of these.
    DatasetNotFoundError
        If the data folder is not a folder; else naming each missing dataset (once), the
        folder looked in, the files expected there, how to set ``BBB_GLUON_DATA``
        (``make data`` and ``make lab`` in this repository) and docs/data.md.
    """
    if not names:
        raise TypeError("require_datasets needs at least one dataset name")
    known = (*DATASETS, *_NEVER_DOWNLOADED)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown dataset(s) {unknown}; valid names are {', '.join(known)}")
    data_root = find_data_root(root)
    if data_root is not None and not data_root.is_dir():
        raise DatasetNotFoundError(f"the data folder {data_root} does not exist or is not a "
                                   f"folder; point {ENV_VAR} at the folder that holds "
                                   f"mnist/, fashion-mnist/, mushroom/ and uci/ (docs/data.md)")
    problems = []
    for name in dict.fromkeys(names):
        if name in _NEVER_DOWNLOADED:
            files, _ = _NEVER_DOWNLOADED[name]
            if data_root is None:
                problems.append(f"{name!r}: no data folder is configured ({ENV_VAR} is "
                                f"unset), and it is never downloaded")
            elif any(not (data_root / name / f).is_file() for f in files):
                lacking = [f for f in files if not (data_root / name / f).is_file()]
                problems.append(f"{name!r}: {data_root / name} lacks {', '.join(lacking)}")
            continue
        folder = mxnet_cache_dir(name) if data_root is None else data_root / name
        missing = [f for f in all_file_names() if not (folder / f).is_file()]
        if missing:
            problems.append(f"{name!r}: {folder} lacks {', '.join(missing)}")
    if not problems:
        return data_root
    where = (f"{ENV_VAR} is unset, so MNIST and Fashion-MNIST were looked for in MXNet's "
             f"download cache" if data_root is None else f"the data folder is {data_root}")
    hints = []
    if "fashion-mnist" in names:
        hints.append(f"On Debian, `apt-get install dataset-fashion-mnist` puts Fashion-MNIST "
                     f"in {DEBIAN_FASHION}.")
    hints += [hint for name, (_, hint) in _NEVER_DOWNLOADED.items() if name in names]
    raise DatasetNotFoundError(
        f"Missing data ({where}): " + "; ".join(problems) + ". "
        f"Put each dataset in a subfolder of one data folder (mnist/, fashion-mnist/, "
        f"mushroom/, uci/) and set {ENV_VAR} to that folder before starting Python or Jupyter. "
        + " ".join(hints) + (" " if hints else "")
        + f"In this repository `make data` links the offline copies into .data/, and "
        f"`make lab` opens Jupyter with {ENV_VAR} set to it. See docs/data.md.")
