"""Milliseconds per ``BBBStep`` call on the 784-400-400-10 MLP (batch 128, Adam 1e-3,
synthetic data), for one estimator and prior: a small process to run twice, before and
after a change, with ``farm-bench --vs`` (which alternates the two and pairs them).

``--call readme`` (the default) times README's call ``step(X, y, i)``, which also returns
the complexity cost's value; ``--call fit`` asks for it every 50th step, as ``fit`` does;
``--call no-cost`` never asks (``want_complexity=False``).

    python benchmarks/bench_step.py [--estimator local] [--prior gaussian] [--steps 300]
"""

import argparse
import time


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--estimator", default="reparam",
                        choices=("reparam", "local", "flipout"))
    parser.add_argument("--prior", default="mixture", choices=("mixture", "gaussian"))
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--call", default="readme", choices=("readme", "fit", "no-cost"))
    args = parser.parse_args(argv)

    import bbb_gluon.threads
    bbb_gluon.threads.claim()
    from cpu import print_cpu
    print_cpu()
    import mxnet as mx
    import numpy as np
    from mxnet import gluon

    from bbb_gluon import (
        BBBLoss,
        BBBStep,
        GaussianPrior,
        Posterior,
        ScaleMixturePrior,
        build_mlp,
        trainable_params,
    )
    net = build_mlp((400, 400))
    mx.random.seed(0)
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True, static_shape=True)
    posterior = Posterior(net, seed=0)
    prior = (GaussianPrior(1.0) if args.prior == "gaussian"
             else ScaleMixturePrior(0.5, 1.0, float(np.exp(-6))))
    loss = BBBLoss(prior, gluon.loss.SoftmaxCrossEntropyLoss(), num_batches=469)
    trainer = gluon.Trainer(trainable_params(net, posterior, loss), "adam",
                            {"learning_rate": 1e-3})
    step = BBBStep(net, posterior, loss, trainer, estimator=args.estimator)
    rng = np.random.default_rng(0)
    X = mx.nd.array(rng.random((128, 784)))
    y = mx.nd.array(rng.integers(0, 10, 128))
    for i in range(20):  # warm-up: kernels loaded, memory pools filled
        step(X, y, i)
    mx.nd.waitall()
    start = time.perf_counter()
    every = {"readme": 1, "fit": 50, "no-cost": 0}[args.call]
    for i in range(args.steps):
        step(X, y, i, want_complexity=every > 0 and i % every == 0)
    mx.nd.waitall()
    took = (time.perf_counter() - start) / args.steps
    print(f"{args.estimator} {args.prior} {args.call} {took * 1e3:.2f} ms/step "
          f"(threads {bbb_gluon.threads.current()})")


if __name__ == "__main__":
    main()
