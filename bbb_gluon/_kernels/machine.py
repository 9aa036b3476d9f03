"""Where a run replays bit for bit: the CPU, the kernels' build and the thread counts.

The same seed gives the same numbers only where three things are the same:

- the **CPU family**: MXNet's matrix products (oneDNN) choose their code by the
  instruction sets the CPU has, and the kernels are built for this CPU
  (``-march=native``) unless built portably (:func:`build_flags`);
- the **kernels' build**: the compiler and its flags (``-ffast-math`` lets it reorder
  sums);
- the **thread counts**: oneDNN splits a product's sums by thread, so 1 and 2 threads
  give results a few units in the last place apart (docs/reliability.md measures it).

:func:`describe` records all three; run folders, bandit runs and the UCI results keep it,
and :func:`differences` says what differs between two records. Reading it runs no MXNet
operator.
"""

import functools
import json
import os
import platform
import subprocess

from . import cores

__all__ = ["cpu", "cpu_text", "build_flags", "portable", "describe", "differences",
           "recorded_threads"]

# The instruction-set flags that change what the kernels compile to (-march=native) and
# which code oneDNN runs.
SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl",
              "avx512_vnni", "avx512_bf16", "amx_tile")


def cpu():
    """``{"model", "flags", "cores"}``: /proc/cpuinfo's model name and the SIMD flags of
    :data:`SIMD_FLAGS` it lists ("unknown" where it cannot be read), and the cores this
    process may use."""
    model, flags = None, set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model is None:
                    model = value.strip()
                elif key.strip() in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return {"model": model or platform.processor() or "unknown",
            "flags": [f for f in SIMD_FLAGS if f in flags], "cores": cores()}


def cpu_text():
    """``'AMD EPYC (avx2 fma avx512f ...), 2 cores'``: :func:`cpu` in one line."""
    c = cpu()
    shown = " ".join(f for f in c["flags"] if f in ("avx2", "fma", "avx512f", "avx512bw",
                                                    "avx512vl")) or "no AVX2"
    return f"{c['model']} ({shown}), {c['cores']} cores"


def portable():
    """Whether the kernels are built portably: ``BBB_GLUON_PORTABLE_KERNELS=1``."""
    value = os.environ.get("BBB_GLUON_PORTABLE_KERNELS", "0")
    if value not in ("0", "1"):
        raise ValueError(f"BBB_GLUON_PORTABLE_KERNELS must be 0 or 1, got {value!r}")
    return value == "1"


def build_flags():
    """The optimisation flags the kernels are compiled with.

    By default for this CPU: ``-O3 -march=native -ffast-math``, the fastest, and the
    same numbers only on the same CPU family. With ``BBB_GLUON_PORTABLE_KERNELS=1``: the
    x86-64 baseline (SSE2) without ``-ffast-math`` and without fused multiply-adds, the
    same machine code on every x86-64 CPU (docs/reliability.md gives its cost)."""
    if not portable():
        return ["-O3", "-march=native", "-ffast-math"]
    arch = ["-march=x86-64", "-mtune=generic"] if platform.machine() in ("x86_64", "AMD64") \
        else []
    return ["-O3", *arch, "-fno-fast-math", "-ffp-contract=off"]


@functools.cache  # a subprocess: once per process, not once per fit
def _compiler_version():
    from .build import compiler  # build imports MXNet: only when a record is asked for

    cxx = compiler()
    if cxx is None:
        return None
    try:
        done = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.splitlines()[0] if done.stdout else None


def describe(threads=None, engine=None):
    """The record of where numbers replay: the CPU (:func:`cpu`), the kernels' compiler
    and flags, MXNet's, NumPy's and Python's versions, and ``threads`` (the OpenMP thread
    counts of the run's phases, e.g. ``{"train": 2, "predict": 2}``) and ``engine``
    where given."""
    import mxnet as mx
    import numpy as np

    record = {"cpu": cpu(),
              "kernels": {"compiler": _compiler_version(), "flags": build_flags(),
                          "portable": portable()},
              "mxnet": mx.__version__, "numpy": np.__version__,
              "python": platform.python_version()}
    if threads is not None:
        record["threads"] = threads
    if engine is not None:
        record["engine"] = engine
    return record


# What two records must share for the same numbers: the CPU's model and SIMD flags
# (oneDNN's code), the kernels' build, the versions, the thread counts.
_KEYS = (("cpu", "model"), ("cpu", "flags"), ("kernels", "compiler"), ("kernels", "flags"),
         ("mxnet",), ("numpy",), ("threads",), ("engine",))


def differences(recorded, here):
    """What differs between two :func:`describe` records, as ``["cpu.model: 'A' here
    'B'", ...]`` (empty: bit-for-bit replay is expected). A part only one of them holds
    is not compared; a core count alone changes nothing where the threads are recorded."""
    out = []
    for path in _KEYS:
        a, b = recorded, here
        for key in path:
            a = a.get(key) if isinstance(a, dict) else None
            b = b.get(key) if isinstance(b, dict) else None
        if a is not None and b is not None and a != b:
            out.append(f"{'.'.join(path)}: recorded {a!r}, here {b!r}")
    return out


def recorded_threads(run_dir):
    """The most OpenMP threads per device that a run folder's ``config.json`` records for
    any stretch of its training (``"machines"``), or None (none recorded, or no readable
    file: the command that reads it reports that). Read before MXNet runs anything, so
    that a resumed run can claim them (:func:`bbb_gluon.threads.claim`)."""
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            machines = json.load(f).get("machines")
        counts = [n for m in machines for n in (m.get("threads") or {}).values()]
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    counts = [n for n in counts if isinstance(n, int) and not isinstance(n, bool) and n > 0]
    return max(counts) if counts else None
