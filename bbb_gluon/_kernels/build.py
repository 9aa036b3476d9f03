"""Compiling and caching the package's C++ sources (the training kernels and the bandit's).

A library is built with the machine's C++ compiler (``$CXX`` or ``g++``) against the
headers that ship in the MXNet wheel, cached in ``$BBB_GLUON_CACHE`` (default
``~/.cache/bbb_gluon``) under a hash of the sources, compiler, its flags
(:func:`~.machine.build_flags`: for this CPU, or portable), MXNet version and CPU flags,
and rebuilt only when one of them changes.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import mxnet as mx

from .machine import build_flags, portable

__all__ = ["build", "compiler"]


def _mxnet_root():
    return Path(mx.__file__).parent


def _cpu_flags():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return ""


def _cache_dir():
    root = os.environ.get("BBB_GLUON_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "bbb_gluon")
    return Path(root)


def build(cxx, source, stem, mxnet_library=True, flags=()):
    """Compile ``source`` into a shared library cached under ``$BBB_GLUON_CACHE``; return
    its path. ``mxnet_library``: link MXNet's ``lib_api.cc`` so ``mx.library.load`` can
    load it (else a plain C ABI library, for ``ctypes``); ``flags``: more compiler flags
    for ``source``."""
    mx_root = _mxnet_root()
    lib_api = mx_root / "src" / "lib_api.cc"
    include = mx_root / "include"
    if mxnet_library and (not lib_api.is_file() or
                          not (include / "mxnet" / "lib_api.h").is_file()):
        raise RuntimeError("this MXNet wheel ships no lib_api.h/lib_api.cc")
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True,
                             check=True).stdout.splitlines()[0]
    key = hashlib.sha1()
    headers = sorted(Path(source).parent.glob("*.h"))  # included by the sources
    for part in (Path(source).read_bytes(), *(h.read_bytes() for h in headers),
                 lib_api.read_bytes() if mxnet_library else b"",
                 mx.__version__.encode(), version.encode(), _cpu_flags().encode(), b"v1",
                 " ".join(flags).encode(), " ".join(build_flags()).encode()):
        key.update(part)
    target = _cache_dir() / f"lib{stem}-{key.hexdigest()[:16]}.so"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Once per machine and source (make setup builds them): a pause of seconds to a minute
    # at a first import or first bandit run should not look like a hang.
    where = "portably (BBB_GLUON_PORTABLE_KERNELS=1)" if portable() else "for this machine"
    print(f"bbb_gluon: compiling {Path(source).name} {where}, once (cached in "
          f"{target.parent})", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        tmp = Path(tmp)
        # build_flags(): -ffast-math lets GCC call glibc's vectorised expf/logf/cosf; it is
        # given to the compile of our kernels only, never to the link, so crtfastmath.o
        # (which would switch the whole process to flush-to-zero) is not linked in.
        common = ["-std=c++17", "-fPIC", f"-I{include}"]
        objects = [str(tmp / "kernels.o")]
        steps = [[cxx, *common, *build_flags(), *flags, "-fopenmp",
                  "-c", str(source), "-o", objects[0]]]
        if mxnet_library:
            objects.append(str(tmp / "lib_api.o"))
            steps.append([cxx, *common, "-O2", "-c", str(lib_api), "-o", objects[1]])
        steps.append([cxx, "-shared", "-fopenmp", *objects, "-o", str(tmp / "lib.so")])
        for cmd in steps:
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"compiling {Path(source).name} failed: "
                                   f"{done.stderr[-500:]}")
        os.replace(tmp / "lib.so", target)
    return target


def compiler():
    """The C++ compiler to build kernels with (``$CXX``, g++ or c++), or None."""
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
