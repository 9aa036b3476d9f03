"""How the OpenMP thread count of MXNet's engine thread changes each phase of the work.

For each thread count (``bbb_gluon.threads.using_threads``), in one process:

- seconds per training epoch (60,000 images, batch 128, Adam) of the plain hybridized
  MLP (784-400-400-10, and the other --hidden widths) and of the same network with
  ``BBBStep`` on the fused engine (scale mixture, Monte-Carlo cost, uniform weighting);
  median of --epochs after a warm-up;
- for 2x400, seconds of a 100-sample Monte-Carlo predictive on the 10,000 test images,
  and of 100 plain forward passes over them.

Its output chose the defaults of ``bbb_gluon.threads`` (docs/benchmarks.md).

    python benchmarks/bench_threads.py                 # about 3 minutes on 2 cores
    python benchmarks/bench_threads.py --tiny          # a few batches: proves it still runs
"""

import argparse
import math
import os
import sys

import mxnet as mx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_epoch import (  # noqa: E402
    bbb_epoch_fn,
    bench_predictive,
    get_data,
    plain_epoch_fn,
    time_epochs,
)

from bbb_gluon import fused  # noqa: E402
from bbb_gluon.data import ArrayLoader  # noqa: E402
from bbb_gluon.priors import ScaleMixturePrior  # noqa: E402
from bbb_gluon.threads import configure, cores, using_threads  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", default=None, help="thread counts (default 1..cores)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--hidden", default="400", help="widths of the two hidden layers, e.g. "
                   "400,1200 (the predictive is timed at 400)")
    p.add_argument("--tiny", action="store_true")
    args = p.parse_args()
    if not fused.available():
        print(f"the fused kernels are unavailable ({fused.unavailable_reason()}): the thread "
              "count cannot be changed at run time here")
        return 1
    counts = [int(t) for t in args.threads.split(",")] if args.threads else \
        list(range(1, cores() + 1))
    num_train = 2048 if args.tiny else 60000
    max_batches = 4 if args.tiny else None
    epochs = 1 if args.tiny else args.epochs
    samples = 5 if args.tiny else 100
    X, y, Xt, source = get_data(num_train)
    if args.tiny:
        Xt = Xt[:500]
    loader = ArrayLoader(X, y, 128, shuffle=True, seed=0, ctx=mx.cpu())
    mixture = ScaleMixturePrior(0.5, 1.0, math.exp(-6))
    widths = [int(h) for h in args.hidden.split(",")]
    print(f"data: {source}; {cores()} cores; OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS', '(unset)')}; median of {epochs} epochs")
    epochs_at, predictive = {}, {}
    for n in counts:
        configure(train=n, predict=n)  # predict_proba follows the count under test
        with using_threads(n):
            for units in widths:
                hidden = (units, units)
                plain, _ = time_epochs(plain_epoch_fn(hidden, loader, max_batches), epochs, 1)
                bbb, _ = time_epochs(bbb_epoch_fn(hidden, loader, max_batches, mixture, "mc",
                                                  "uniform", "fused"), epochs, 1)
                epochs_at[(units, n)] = (plain, bbb)
            predictive[n] = bench_predictive(Xt, samples, (400, 400))
    configure()
    print(f"{'network':<16}{'threads':>8}{'plain s/epoch':>15}{'bbb s/epoch':>13}"
          f"{'bbb/plain':>11}{'bbb/fastest plain':>19}")
    for units in widths:
        floor = min(epochs_at[(units, n)][0] for n in counts)
        for n in counts:
            plain, bbb = epochs_at[(units, n)]
            print(f"{f'784-{units}-{units}-10':<16}{n:>8}{plain:>15.2f}{bbb:>13.2f}"
                  f"{bbb / plain:>11.2f}{bbb / floor:>19.2f}")
    floor = min(det for _, det in predictive.values())
    print(f"{'threads':>7} {samples}-sample predictive s  {samples} plain passes s  "
          f"predictive/plain  predictive/fastest plain")
    for n, (mc, det) in predictive.items():
        print(f"{n:>7} {mc:>23.2f} {det:>16.2f} {mc / det:>17.2f} {mc / floor:>25.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
