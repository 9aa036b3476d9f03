"""Where a run's numbers replay bit for bit: the CPU, the kernels' build flags and the
thread counts (docs/reliability.md, "Same seed, same numbers").

``fit`` and ``bbb-gluon train`` record it in the run folder (``config.json``,
``"machines"``) and the bandit in its ``metrics.json``; :func:`describe` gives it for a
loop of your own, and :func:`differences` says what differs between two records.
"""

from ._kernels.machine import (
    build_flags,
    cpu,
    cpu_text,
    describe,
    differences,
    portable,
    recorded_threads,
)

__all__ = ["build_flags", "cpu", "cpu_text", "describe", "differences", "portable",
           "recorded_threads"]
