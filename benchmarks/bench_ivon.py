"""IVONStep against a plain hybridized Gluon Adam step, and against BBBStep.

Two workloads: the peers' (784-400-400-10, batch 128, on arrays of MNIST's shape; the time
does not depend on the values) and a UCI-sized regression (13-50-1, batch 32). Contenders,
each one call per step, alternating in rounds within one process (``timing.alternate``),
the ratios the medians of the rounds' own ratios to the plain step:

- plain: the hybridized network, ``autograd`` and ``gluon.Trainer`` with Adam;
- IVONStep: ``step(X, y)``, the fused engine (the draw and the update one kernel call each);
- BBBStep: README's call ``step(X, y, i)`` with Adam, the fused engine.

    python benchmarks/bench_ivon.py            # about a minute on 2 cores
    python benchmarks/bench_ivon.py --tiny     # a few steps: proves it still runs
"""

import argparse
import os
import statistics
import sys

import bbb_gluon.threads

bbb_gluon.threads.claim()  # every core, before MXNet runs an operator (docs/speed.md)

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402

from bbb_gluon import (  # noqa: E402
    BBBLoss,
    BBBStep,
    GaussianPrior,
    IVONStep,
    Posterior,
    build_mlp,
    trainable_params,
)
from bbb_gluon._kernels import fused  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu import describe  # noqa: E402
from timing import alternate, median_ratio  # noqa: E402

WORKLOADS = {  # name: (hidden layers, inputs, outputs, batch)
    "784-400-400-10, batch 128": ((400, 400), 784, 10, 128),
    "13-50-1, batch 32": ((50,), 13, 1, 32),
}


def setup(hidden, inputs, outputs, batch):
    net = build_mlp(hidden, num_inputs=inputs, num_outputs=outputs)
    mx.random.seed(0)
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True, static_shape=True)
    net(mx.nd.zeros((1, inputs)))  # the shapes
    rng = np.random.default_rng(0)
    X = mx.nd.array(rng.random((batch, inputs)).astype(np.float32))
    if outputs == 1:
        y = mx.nd.array(rng.normal(size=(batch, 1)).astype(np.float32))
        loss = gluon.loss.L2Loss()
    else:
        y = mx.nd.array(rng.integers(0, outputs, batch))
        loss = gluon.loss.SoftmaxCrossEntropyLoss()
    return net, X, y, loss


def contenders(hidden, inputs, outputs, batch):
    net, X, y, loss = setup(hidden, inputs, outputs, batch)
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 1e-3})

    def plain(i):
        with autograd.record():
            cost = loss(net(X), y)
        cost.backward()
        trainer.step(batch)

    net2, X2, y2, loss2 = setup(hidden, inputs, outputs, batch)
    ivon = IVONStep(net2, Posterior(net2, seed=0), loss2, ess=60000.0, lr=0.1)
    assert ivon.engine == "fused", ivon.engine

    net3, X3, y3, loss3 = setup(hidden, inputs, outputs, batch)
    posterior3 = Posterior(net3, seed=0)
    bbb_loss = BBBLoss(GaussianPrior(1.0), loss3, num_batches=469)
    bbb = BBBStep(net3, posterior3, bbb_loss,
                  gluon.Trainer(trainable_params(net3, posterior3, bbb_loss), "adam",
                                {"learning_rate": 1e-3}))
    return {"plain": plain, "IVONStep": lambda i: ivon(X2, y2),
            "BBBStep": lambda i: bbb(X3, y3, i % 469)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="steps per round")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args(argv)
    if not fused.available():
        print(f"the fused kernels are unavailable ({fused.unavailable_reason()})")
        return 1
    steps, rounds = (3, 1) if args.tiny else (args.steps, args.rounds)
    print(f"cpu: {describe()}; threads {bbb_gluon.threads.current()}")
    for name, shape in WORKLOADS.items():
        times = alternate(contenders(*shape), steps, rounds, warmup=3 if args.tiny else 20)
        plain = statistics.median(times["plain"])
        print(f"{name}: plain Gluon Adam step {plain:.2f} ms (median of {rounds} rounds of "
              f"{steps} steps)")
        for k in ("IVONStep", "BBBStep"):
            print(f"  {k:<9} {statistics.median(times[k]):7.2f} ms  "
                  f"{median_ratio(times[k], times['plain']):5.2f}x the plain step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
