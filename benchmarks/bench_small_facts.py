"""Two small costs the package's code is shaped by, each as a ratio measured in this run.

- ``ops.total`` (a matrix product with a cached ones vector) against ``nd.sum`` for the sum
  of a 2x400 network's first weight matrix (313,600 floats);
- reading the installed MXNet builds from folder names (``_mxnet_build.installed_builds``)
  against ``importlib.metadata.distributions()``.

Usage: python benchmarks/bench_small_facts.py [--repeats N]
"""

import argparse
import importlib.metadata
import os
import sys
import time

import mxnet as mx

import bbb_gluon.threads
from bbb_gluon._mxnet_build import installed_builds
from bbb_gluon.core import ops

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu import print_cpu  # noqa: E402


def best_of(fn, repeats):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None):
    print_cpu()
    bbb_gluon.threads.claim()  # every core, as the earlier rounds measured (docs/speed.md)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    x = mx.nd.random.normal(shape=(400, 784))
    ops.total(x).wait_to_read()

    def with_sum():
        for _ in range(50):
            mx.nd.sum(x).reshape((1,)).wait_to_read()

    def with_total():
        for _ in range(50):
            ops.total(x).wait_to_read()

    t_sum, t_total = best_of(with_sum, args.repeats), best_of(with_total, args.repeats)
    print(f"sum of 313,600 floats: nd.sum {1e6 * t_sum / 50:.0f} us, ops.total "
          f"{1e6 * t_total / 50:.0f} us: nd.sum / ops.total = {t_sum / t_total:.1f}")
    t_meta = best_of(lambda: [d.metadata["Name"] for d in importlib.metadata.distributions()], 3)
    t_names = best_of(installed_builds, 3)
    print(f"installed MXNet builds: metadata {1e3 * t_meta:.0f} ms, folder names "
          f"{1e3 * t_names:.1f} ms: ratio {t_meta / t_names:.0f}")


if __name__ == "__main__":
    main()
