"""The CPU a benchmark ran on, for the first line of its output: speed ratios differ
between CPU families (docs/benchmarks.md), so every printed figure names its CPU."""

from bbb_gluon.machine import cpu_text


def describe():
    """``'AMD EPYC (avx2 fma avx512f ...), 2 cores'``: the package's own record of the CPU
    (:func:`bbb_gluon.machine.cpu_text`), so a benchmark and a run folder name it alike."""
    return cpu_text()


def print_cpu():
    print(f"cpu: {describe()}")


if __name__ == "__main__":
    print_cpu()
