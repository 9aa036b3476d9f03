"""The CPU a benchmark ran on, for the first line of its output: speed ratios differ
between CPU families (docs/benchmarks.md), so every printed figure names its CPU."""

import os

# The instruction-set flags that change what the kernels compile to (-march=native).
_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl")


def describe():
    """``'AMD EPYC (avx2 fma avx512f ...), 2 cores'`` from /proc/cpuinfo's model name and
    flags (``'unknown CPU'`` where there is none)."""
    model, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model == "unknown CPU":
                    model = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    shown = " ".join(f for f in _FLAGS if f in flags) or "no AVX2"
    return f"{model} ({shown}), {os.cpu_count()} cores"


def print_cpu():
    print(f"cpu: {describe()}")


if __name__ == "__main__":
    print_cpu()
