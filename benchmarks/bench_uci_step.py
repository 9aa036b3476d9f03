"""The UCI regression benchmark's training step against a plain Gluon step of the same
network, on one thread.

``experiments/uci_benchmark.py`` trains a 13-50-1 network (Boston's shape; 8-50-1 for
Concrete, ...) with batch 32 and ``GaussianNLLLoss(None)`` (one noise scale, learned), and
calls ``step(X, y, i, want_complexity=False)``. Four contenders, alternating in rounds in
one process, the Bayes-by-Backprop ones built by that script's ``build``:

- ``plain``: the same hybridized layers and initialisation, the same loss, Adam, a plain
  Gluon step;
- ``bbb``: the benchmark's call, the loss as ``GaussianNLLLoss`` comes (hybridized);
- ``bbb, README's call``: ``step(X, y, i)``, which also returns the complexity cost;
- ``bbb, loss imperative``: the benchmark's call with ``loss.hybridize(False)``: every
  operator of the loss a call of its own, as the loss ran before it came hybridized.

Milliseconds per step (median of the rounds) and the ratio to the plain step (median of
the rounds' own ratios).

    python benchmarks/bench_uci_step.py            # about a minute
    python benchmarks/bench_uci_step.py --tiny     # a few steps: proves it still runs
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one thread, before MXNet starts

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402
from mxnet.gluon import nn  # noqa: E402

from bbb_gluon import GaussianNLLLoss  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "experiments"))
from cpu import describe  # noqa: E402
from timing import alternate, median_ratio  # noqa: E402
from uci_benchmark import BATCH, GRID, build  # noqa: E402

INPUTS, HIDDEN, ROWS = 13, 50, 364  # Boston: 13 inputs, 50 units, 80% of 455 rows


def contenders():
    rng = np.random.default_rng(0)
    data = SimpleNamespace(hidden=HIDDEN, X_train=rng.normal(size=(ROWS, INPUTS)))
    X = mx.nd.array(rng.normal(size=(BATCH, INPUTS)).astype(np.float32))
    y = mx.nd.array(rng.normal(size=(BATCH, 1)).astype(np.float32))
    batches = -(-ROWS // BATCH)
    steps = {}

    # The plain side: the same layers, initialisation and loss, no posterior.
    mx.random.seed(0)
    net = nn.HybridSequential()
    net.add(nn.Dense(HIDDEN, activation="relu", in_units=INPUTS), nn.Dense(1, in_units=HIDDEN))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    lik = GaussianNLLLoss(None)
    lik.initialize()
    params = gluon.ParameterDict()
    params.update(net.collect_params())
    params.update(lik.collect_params())
    trainer = gluon.Trainer(params, "adam", {"learning_rate": GRID[0]["lr"]})

    def plain(i):
        with autograd.record():
            loss = lik(net(X), y)
        loss.backward()
        trainer.step(BATCH)
    steps["plain"] = plain

    for name, hybrid, want_complexity in (("bbb", True, False),
                                          ("bbb, README's call", True, True),
                                          ("bbb, loss imperative", False, False)):
        _, _, bbb_lik, step = build(data, GRID[0], 0, batches)
        bbb_lik.hybridize(hybrid)
        steps[name] = lambda i, step=step, want=want_complexity: step(
            X, y, i % batches, want_complexity=want)
    return steps


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="steps per round")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args(argv)
    steps, rounds = (5, 1) if args.tiny else (args.steps, args.rounds)
    print(f"cpu: {describe()}; OMP_NUM_THREADS {os.environ['OMP_NUM_THREADS']}")
    times = alternate(contenders(), steps, rounds)
    print(f"{INPUTS}-{HIDDEN}-1, batch {BATCH}, GaussianNLLLoss(None), Adam")
    print(f"{'step':<24}{'ms':>8}{'x plain':>9}")
    for k, v in times.items():
        print(f"{k:<24}{statistics.median(v):>8.3f}{median_ratio(v, times['plain']):>8.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
