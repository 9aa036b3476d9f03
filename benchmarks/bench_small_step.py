"""Per-call cost of ``BBBStep`` on small networks against a plain Gluon step of the same
network, loss and optimiser, on one thread.

On a network of a few thousand weights a step's arithmetic takes microseconds; its time
goes to Python and to launching MXNet operators. Three workloads, the sizes of the UCI
regression benchmark and of the paper's toy curve:

- ``13-50-1``: 13 inputs, 50 ReLU units, one output, batch 32, Gaussian likelihood with
  a fixed noise scale (``bbb_gluon.GaussianNLLLoss(1.0)``);
- ``1-50-50-1``: batch 50, the same likelihood;
- ``13-50-1 learned noise``: ``GaussianNLLLoss(None)``, the noise scale a parameter of
  the loss, trained by the same Trainer (what a regression user trains).

Both sides: a hybridized network, Adam 1e-3, the loss hybridized too; the Bayes-by-Backprop
side runs README's call ``step(X, y, i)`` (and ``want_complexity=False`` as a second
column), N(0, 1) prior. Milliseconds per step, the median of alternating rounds, and the
ratio to the plain step: the median of each round's ratio (the contenders of a round run
back to back, so a busy spell on the machine slows them alike).

    python benchmarks/bench_small_step.py            # about a minute
    python benchmarks/bench_small_step.py --tiny     # a few steps: proves it still runs
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one thread, before MXNet starts

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402
from mxnet.gluon import nn  # noqa: E402

import bbb_gluon.threads  # noqa: E402
from bbb_gluon import (  # noqa: E402
    BBBLoss,
    BBBStep,
    GaussianNLLLoss,
    GaussianPrior,
    Posterior,
    trainable_params,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu import describe  # noqa: E402
from timing import alternate, median_ratio  # noqa: E402

WORKLOADS = {  # name: (inputs, hidden widths, batch, noise scale of the likelihood)
    "13-50-1": (13, (50,), 32, 1.0),
    "1-50-50-1": (1, (50, 50), 50, 1.0),
    "13-50-1 learned noise": (13, (50,), 32, None),
}


def setup(inputs, hidden, batch, noise):
    mx.random.seed(0)
    net = nn.HybridSequential()
    for units in hidden:
        net.add(nn.Dense(units, activation="relu"))
    net.add(nn.Dense(1))
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True, static_shape=True)
    lik = GaussianNLLLoss(noise)
    lik.initialize()
    lik.hybridize(static_alloc=True, static_shape=True)
    rng = np.random.default_rng(0)
    X = mx.nd.array(rng.normal(size=(batch, inputs)).astype(np.float32))
    y = mx.nd.array(rng.normal(size=(batch, 1)).astype(np.float32))
    net(X)  # the shapes, before the posterior reads them
    return net, lik, X, y


def plain_step(workload):
    net, lik, X, y = setup(*workload)
    params = gluon.ParameterDict()
    params.update(net.collect_params())
    params.update(lik.collect_params())
    trainer = gluon.Trainer(params, "adam", {"learning_rate": 1e-3})

    def step(i):
        with autograd.record():
            loss = lik(net(X), y)
        loss.backward()
        trainer.step(X.shape[0])
    return step


def bbb_step(workload, want_complexity):
    net, lik, X, y = setup(*workload)
    posterior = Posterior(net, seed=0)
    loss = BBBLoss(GaussianPrior(1.0), lik, num_batches=16)
    trainer = gluon.Trainer(trainable_params(net, posterior, loss), "adam",
                            {"learning_rate": 1e-3})
    step = BBBStep(net, posterior, loss, trainer)
    if want_complexity:
        return lambda i: step(X, y, i % 16)  # README's call
    return lambda i: step(X, y, i % 16, want_complexity=False)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="steps per round")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args(argv)
    steps, rounds = (5, 1) if args.tiny else (args.steps, args.rounds)
    print(f"cpu: {describe()}; threads {bbb_gluon.threads.current()}")
    print(f"{'network':<24}{'plain ms':>10}{'bbb ms':>9}{'bbb/plain':>11}"
          f"{'no cost ms':>12}{'no cost/plain':>15}")
    for name, workload in WORKLOADS.items():
        contenders = {"plain": plain_step(workload), "readme": bbb_step(workload, True),
                      "no cost": bbb_step(workload, False)}
        times = alternate(contenders, steps, rounds)
        med = {k: statistics.median(v) for k, v in times.items()}
        ratio = {k: median_ratio(v, times["plain"]) for k, v in times.items()}
        print(f"{name:<24}{med['plain']:>10.3f}{med['readme']:>9.3f}"
              f"{ratio['readme']:>10.2f}x{med['no cost']:>12.3f}{ratio['no cost']:>14.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
