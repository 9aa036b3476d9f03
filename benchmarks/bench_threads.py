"""How the OpenMP thread count of MXNet's engine thread changes each phase of the work.

For each thread count (``bbb_gluon._kernels.threads.using_threads``), in one process, the largest
first (an engine thread's count can only go down: ``bbb_gluon._kernels.threads``):

- seconds per training epoch (60,000 images, batch 128, Adam) of the plain hybridized
  MLP (784-400-400-10, and the other --hidden widths) and of the same network with
  ``BBBStep`` on the fused engine (scale mixture, Monte-Carlo cost, uniform weighting),
  README's call ``step(X, y, i)`` and, in a second column, ``want_complexity=False``;
  median of --epochs after a warm-up;
- for 2x400, seconds of a 100-sample Monte-Carlo predictive on the 10,000 test images,
  and of 100 plain forward passes over them.

``--workload peers`` runs the workload of the public PyTorch comparison in
docs/benchmarks.md instead: Fashion-MNIST, an N(0, 1) prior, Monte-Carlo complexity cost,
uniform (1/M) weighting. Its output chose the defaults of ``bbb_gluon._kernels.threads``.

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
from cpu import describe  # noqa: E402

import bbb_gluon.threads
from bbb_gluon._kernels import fused  # noqa: E402
from bbb_gluon._kernels.threads import configure, cores, current, using_threads  # noqa: E402
from bbb_gluon.core.priors import GaussianPrior, ScaleMixturePrior  # noqa: E402
from bbb_gluon.data import (
    ArrayLoader,  # noqa: E402
    load_dataset,  # noqa: E402
)


def fashion_data(num_train):
    """Fashion-MNIST from BBB_GLUON_DATA (the peers' workload); it must be there."""
    splits = load_dataset("fashion-mnist", num_valid=0)
    X, y = splits.train
    return X[:num_train], y[:num_train], splits.test[0], "Fashion-MNIST (BBB_GLUON_DATA)"


def main():
    bbb_gluon.threads.claim()  # every core, as the earlier rounds measured (docs/speed.md)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", default=None, help="thread counts (default 1..cores)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--hidden", default="400", help="widths of the two hidden layers, e.g. "
                   "400,1200 (the predictive is timed at 400)")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--workload", choices=("mnist", "peers"), default="mnist",
                   help="mnist: scale-mixture prior on MNIST; peers: N(0, 1) prior on "
                        "Fashion-MNIST")
    args = p.parse_args()
    if not fused.available():
        print(f"the fused kernels are unavailable ({fused.unavailable_reason()}): the thread "
              "count cannot be changed at run time here")
        return 1
    counts = [int(t) for t in args.threads.split(",")] if args.threads else \
        list(range(1, cores() + 1))
    counts = sorted(set(counts), reverse=True)
    if counts[0] > current()[0]:
        print(f"the engine thread is limited to {current()[0]} threads here (was an operator "
              "run before bbb_gluon was imported, or is OMP_NUM_THREADS set?)")
        return 1
    num_train = 2048 if args.tiny else 60000
    max_batches = 4 if args.tiny else None
    epochs = 1 if args.tiny else args.epochs
    samples = 5 if args.tiny else 100
    if args.workload == "peers":
        X, y, Xt, source = fashion_data(num_train)
        prior = GaussianPrior(1.0)
    else:
        X, y, Xt, source = get_data(num_train)
        prior = ScaleMixturePrior(0.5, 1.0, math.exp(-6))
    if args.tiny:
        Xt = Xt[:500]
    loader = ArrayLoader(X, y, 128, shuffle=True, seed=0, ctx=mx.cpu())
    widths = [int(h) for h in args.hidden.split(",")]
    print(f"cpu: {describe()}")
    print(f"data: {source}; prior {prior!r}; {cores()} cores; OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS', '(unset)')}; median of {epochs} epochs")
    epochs_at, predictive = {}, {}
    for n in counts:
        configure(train=n, predict=n)  # predict_proba follows the count under test
        with using_threads(n):
            for units in widths:
                hidden = (units, units)
                plain, _ = time_epochs(plain_epoch_fn(hidden, loader, max_batches), epochs, 1)
                bbb, _ = time_epochs(bbb_epoch_fn(hidden, loader, max_batches, prior, "mc",
                                                  "uniform", "fused"), epochs, 1)
                no_cost, _ = time_epochs(bbb_epoch_fn(hidden, loader, max_batches, prior,
                                                      "mc", "uniform", "fused", False),
                                         epochs, 1)
                epochs_at[(units, n)] = (plain, bbb, no_cost)
            predictive[n] = bench_predictive(Xt, samples, (400, 400))
    configure()
    # bbb: README's call step(X, y, i); no cost: want_complexity=False
    print(f"{'network':<16}{'threads':>8}{'plain s/epoch':>15}{'bbb s/epoch':>13}"
          f"{'bbb/plain':>11}{'bbb/fastest plain':>19}{'no cost s/epoch':>17}"
          f"{'no cost/plain':>15}")
    for units in widths:
        floor = min(epochs_at[(units, n)][0] for n in counts)
        for n in sorted(counts):
            plain, bbb, no_cost = epochs_at[(units, n)]
            print(f"{f'784-{units}-{units}-10':<16}{n:>8}{plain:>15.2f}{bbb:>13.2f}"
                  f"{bbb / plain:>11.2f}{bbb / floor:>19.2f}{no_cost:>17.2f}"
                  f"{no_cost / plain:>15.2f}")
    floor = min(det for _, det in predictive.values())
    print(f"{'threads':>7} {samples}-sample predictive s  {samples} plain passes s  "
          f"predictive/plain  predictive/fastest plain")
    for n, (mc, det) in sorted(predictive.items()):
        print(f"{n:>7} {mc:>23.2f} {det:>16.2f} {mc / det:>17.2f} {mc / floor:>25.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
