"""Which MXNet build is installed: exactly one, or a clear error at import.

MXNet 1.9.1 ships as several pip distributions (``mxnet`` for CPUs, ``mxnet-cu110`` ...
``mxnet-cu117`` for CUDA) that all install into the same ``mxnet/`` folder: with two of
them, the files of one overwrite the other's and the result is neither.
"""

import importlib.util
import os
import re
import sys

_BUILD = re.compile(r"mxnet(-(cu\d+(mkl)?|mkl|native))?")
INSTALL_HINT = ("install one build: pip install -e '.[cpu]' (CPU), or '.[cu112]' etc. for "
                "CUDA 11.0-11.7 on GPUs of compute capability 5.0-8.6 (docs/development.md, "
                "\"GPUs\")")


def installed_builds():
    """Names of the MXNet distributions pip has installed, sorted.

    Read from the ``*.dist-info`` (and ``*.egg-info``) folder names on ``sys.path``, not
    through ``importlib.metadata.distributions()``, which parses every installed package's
    metadata at each import (docs/benchmarks.md has its cost)."""
    names = set()
    for entry in sys.path:
        try:
            listing = os.listdir(entry or ".")
        except OSError:
            continue
        for folder in listing:
            if not folder.lower().startswith("mxnet"):
                continue
            stem, dot, kind = folder.rpartition(".")
            if not dot or kind not in ("dist-info", "egg-info"):
                continue
            name = stem.rsplit("-", 1)[0] if "-" in stem else stem
            name = name.lower().replace("_", "-")
            if _BUILD.fullmatch(name):
                names.add(name)
    return sorted(names)


def check(builds=None, import_mxnet=True):
    """Raise ``ImportError`` if two MXNet builds are installed, or MXNet cannot be imported
    (without ``import_mxnet``: is not installed); ``builds`` defaults to
    :func:`installed_builds`."""
    builds = installed_builds() if builds is None else list(builds)
    if len(builds) > 1:
        raise ImportError(
            f"bbb_gluon: {len(builds)} MXNet builds are installed ({', '.join(builds)}); they "
            f"share one mxnet/ folder and overwrite each other's files. Uninstall all "
            f"(pip uninstall -y {' '.join(builds)}), then {INSTALL_HINT}")
    if not import_mxnet:
        if importlib.util.find_spec("mxnet") is None:  # finds it without importing it
            raise ImportError(f"bbb_gluon needs MXNet 1.9.1, which is not installed; "
                              f"{INSTALL_HINT}")
        return
    try:
        import mxnet  # noqa: F401
    except (ImportError, OSError) as e:  # OSError: libmxnet.so or a library it needs
        raise ImportError(f"bbb_gluon needs MXNet 1.9.1, which could not be imported ({e}); "
                          f"{INSTALL_HINT}") from e
