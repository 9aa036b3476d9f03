"""Milliseconds per training step of each gradient estimator, contenders interleaved.

``bench_estimators.py --part speed`` times whole epochs, one contender after the other;
on a machine whose speed drifts that ordering moves the ratios by more than the
estimators differ. Here every contender (a plain hybridized Gluon step, then
``BBBStep`` with ``estimator="reparam"``, ``"local"`` and ``"flipout"``, README's call
``step(X, y, i)``) runs ``--steps`` steps in turn, ``--rounds`` times, on one fixed
batch of 128 (synthetic: the data do not change the time), and each figure is the median
over rounds. The ratios are those of the medians, in this one process.

Networks: ``mlp`` (784-400-400-10, the peers' network), ``lenet`` (LeNet-5 as
``bench_cnn.py`` builds it: padding 2, hybridized with static_alloc) and ``lenet-plain``
(no padding, a plain ``hybridize()``). Adam 1e-3, N(0, 1) prior, rho_init -5.

    python benchmarks/bench_estimator_steps.py --net mlp      # about a minute
    python benchmarks/bench_estimator_steps.py --tiny         # a few steps: proves it runs
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from mxnet.gluon import nn

import bbb_gluon.threads
from bbb_gluon import BBBLoss, BBBStep, GaussianPrior, Posterior, trainable_params

sys.path.insert(0, str(Path(__file__).parent))
from bench_cnn import lenet  # noqa: E402
from cpu import describe  # noqa: E402

BATCH = 128


def mlp():
    net = nn.HybridSequential()
    net.add(nn.Dense(400, activation="relu"), nn.Dense(400, activation="relu"), nn.Dense(10))
    mx.random.seed(0)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    return net


def lenet_plain():
    net = nn.HybridSequential()
    net.add(nn.Conv2D(6, 5, activation="relu"), nn.MaxPool2D(2),
            nn.Conv2D(16, 5, activation="relu"), nn.MaxPool2D(2),
            nn.Dense(120, activation="relu"), nn.Dense(84, activation="relu"), nn.Dense(10))
    mx.random.seed(0)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    return net


NETS = {"mlp": (mlp, (784,)), "lenet": (lenet, (1, 28, 28)),
        "lenet-plain": (lenet_plain, (1, 28, 28))}


def plain_step(build, X, y):
    net = build()
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 1e-3})
    loss = gluon.loss.SoftmaxCrossEntropyLoss()

    def step(i):
        with autograd.record():
            cost = loss(net(X), y)
        cost.backward()
        trainer.step(BATCH)
    return step


def bbb_step(build, X, y, estimator):
    net = build()
    net(X)
    posterior = Posterior(net, rho_init=-5.0)
    loss = BBBLoss(GaussianPrior(1.0), num_batches=469)
    trainer = gluon.Trainer(trainable_params(net, posterior, loss), "adam",
                            {"learning_rate": 1e-3})
    step = BBBStep(net, posterior, loss, trainer, estimator=estimator)
    return lambda i: step(X, y, i % 469)  # README's call


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--net", choices=sorted(NETS), default="mlp")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args()
    rounds, steps = (1, 2) if args.tiny else (args.rounds, args.steps)
    bbb_gluon.threads.claim()
    build, shape = NETS[args.net]
    rng = np.random.default_rng(0)
    X = mx.nd.array(rng.uniform(size=(BATCH, *shape)))
    y = mx.nd.array(rng.integers(0, 10, BATCH))
    contenders = {"plain": plain_step(build, X, y)}
    for estimator in ("reparam", "local", "flipout"):
        contenders[estimator] = bbb_step(build, X, y, estimator)
    for run in contenders.values():  # warm-up: compile, trace, allocate
        for i in range(2 if args.tiny else 10):
            run(i)
    mx.nd.waitall()
    times = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, run in contenders.items():
            start = time.perf_counter()
            for i in range(steps):
                run(i)
            mx.nd.waitall()
            times[name].append((time.perf_counter() - start) / steps * 1000)
    ms = {name: statistics.median(t) for name, t in times.items()}
    print(f"cpu: {describe()}; net {args.net}, batch {BATCH}, {rounds} rounds of {steps} "
          f"steps, README's call")
    print("  ".join(f"{name} {v:.2f} ms" for name, v in ms.items()))
    for name in ("local", "flipout"):
        print(f"{name}: {ms[name] / ms['reparam']:.2f}x the shared sample, "
              f"{ms[name] / ms['plain']:.2f}x the plain step")


if __name__ == "__main__":
    main()
