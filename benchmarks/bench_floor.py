"""The step against the floor this machine's memory allows, on the peers' workload.

A Bayes-by-Backprop step does the plain network's matrix products plus elementwise passes
over about twice as many numbers (mu, rho, their optimiser moments, the noise and the
sample), and a CPU runs such passes at its memory bandwidth. So the floor is

    plain step + (bytes the fused step moves beyond the plain step) / streaming bandwidth

measured here, in one process:

- **bandwidth**: ``bbb_flip(x, s)`` over 2^25-element float32 arrays on the threads the
  step uses (an OpenMP loop that reads two arrays and writes one, nothing else), counted
  as STREAM counts: 12 bytes per element, reads plus writes;
- **bytes**: per posterior weight, counted the same way from the kernels' inputs and
  outputs: ``bbb_draw_layers`` reads mu, rho and writes eps, w (16 B); ``bbb_update_layers``
  with Adam reads the likelihood's gradient, w, eps, mu, rho and four moments and writes
  mu, rho and the four moments (60 B); the guard ``bbb_finite`` reads the gradient (4 B);
  the plain step's Adam update reads w, its gradient and two moments and writes w and
  the moments (28 B): 52 B more per weight;
- **steps**: milliseconds per step of the plain hybridized Gluon MLP with Adam and of
  ``BBBStep`` (README's call ``step(X, y, i)``, and ``want_complexity=False``), in
  alternating rounds, median.

The workload is the public PyTorch comparison's (docs/benchmarks.md): 784-400-400-10,
batch 128, Adam 1e-3, N(0, 1) prior, Monte-Carlo cost, uniform weighting, on arrays of
Fashion-MNIST's shape (the time does not depend on the values).

    python benchmarks/bench_floor.py              # about a minute on 2 cores
    python benchmarks/bench_floor.py --tiny       # a few steps: proves it still runs
"""

import argparse
import os
import statistics
import sys
import time

import bbb_gluon.threads

bbb_gluon.threads.claim()  # every core, before MXNet runs an operator (docs/speed.md)

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402

from bbb_gluon import (  # noqa: E402
    BBBLoss,
    BBBStep,
    GaussianPrior,
    Posterior,
    build_mlp,
    trainable_params,
)
from bbb_gluon._kernels import fused  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu import describe  # noqa: E402
from timing import median_ratio, ms_per_step  # noqa: E402

# Bytes per posterior weight, reads plus writes (see the module's docstring).
DRAW_BYTES, UPDATE_BYTES, GUARD_BYTES, PLAIN_ADAM_BYTES = 16, 60, 4, 28
EXTRA_BYTES = DRAW_BYTES + UPDATE_BYTES + GUARD_BYTES - PLAIN_ADAM_BYTES


def bandwidth(n, repeats):
    """Bytes per second of bbb_flip over n floats (the best of ``repeats``)."""
    x = mx.nd.ones((n,))
    s = mx.nd.ones((n,))
    out = mx.nd.bbb_flip(x, s)
    mx.nd.waitall()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        mx.nd.bbb_flip(x, s, out=out)
        mx.nd.waitall()
        best = min(best, time.perf_counter() - t)
    return 12 * n / best


def net_and_data(batch):
    net = build_mlp((400, 400))
    mx.random.seed(0)
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True, static_shape=True)
    rng = np.random.default_rng(0)
    X = mx.nd.array(rng.random((batch, 784)).astype(np.float32))
    y = mx.nd.array(rng.integers(0, 10, batch))
    return net, X, y


def plain_step(batch):
    net, X, y = net_and_data(batch)
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 1e-3})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def step(i):
        with autograd.record():
            loss = loss_fn(net(X), y)
        loss.backward()
        trainer.step(batch)
    return step, None


def bbb_step(batch, want_complexity):
    net, X, y = net_and_data(batch)
    posterior = Posterior(net, seed=0)
    loss = BBBLoss(GaussianPrior(1.0), gluon.loss.SoftmaxCrossEntropyLoss(), num_batches=469)
    trainer = gluon.Trainer(trainable_params(net, posterior, loss), "adam",
                            {"learning_rate": 1e-3})
    step = BBBStep(net, posterior, loss, trainer)
    if want_complexity:
        return (lambda i: step(X, y, i % 469)), posterior  # README's call
    return (lambda i: step(X, y, i % 469, want_complexity=False)), posterior


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="steps per round")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args(argv)
    if not fused.available():
        print(f"the fused kernels are unavailable ({fused.unavailable_reason()})")
        return 1
    steps, rounds = (5, 1) if args.tiny else (args.steps, args.rounds)
    n = 1 << (16 if args.tiny else 25)
    bw = bandwidth(n, 3 if args.tiny else 10)  # the first operator: the claim takes effect
    print(f"cpu: {describe()}; threads {bbb_gluon.threads.current()}")
    print(f"streaming bandwidth: {bw / 1e9:.1f} GB/s (bbb_flip over {n:,} floats, "
          "12 B per element)")
    contenders = {"plain": plain_step(128), "readme": bbb_step(128, True),
                  "no cost": bbb_step(128, False)}
    weights = contenders["readme"][1].num_weights
    extra = EXTRA_BYTES * weights
    for step, _ in contenders.values():  # warm-up: kernels, memory pools
        ms_per_step(step, 10)
    times = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, (step, _) in contenders.items():
            times[name].append(ms_per_step(step, steps))
    med = {name: statistics.median(t) for name, t in times.items()}
    # README's call against want_complexity=False: the median of the rounds' own ratios
    paired = median_ratio(times["readme"], times["no cost"])
    floor = med["plain"] + extra / bw * 1e3
    print(f"posterior weights: {weights:,}; the fused step moves {EXTRA_BYTES} B more per "
          f"weight than the plain step: {extra / 1e6:.1f} MB, {extra / bw * 1e3:.2f} ms")
    print(f"plain step {med['plain']:.2f} ms; floor {floor:.2f} ms (median of {rounds} "
          f"rounds of {steps} steps)")
    for name, label in (("readme", "BBBStep, README's call step(X, y, i)"),
                        ("no cost", "BBBStep, want_complexity=False")):
        print(f"{label:<40}{med[name]:>7.2f} ms {med[name] / floor:>6.2f}x the floor "
              f"{med[name] / med['plain']:>6.2f}x the plain step")
    print(f"README's call / want_complexity=False: {paired:.3f} (median of the rounds' "
          "ratios)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
