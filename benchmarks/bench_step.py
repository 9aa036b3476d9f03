"""Milliseconds per ``BBBStep`` call on the 784-400-400-10 MLP (batch 128, Adam 1e-3,
synthetic data), for one estimator and prior: a small process to run twice, before and
after a change, with ``farm-bench --vs`` (which alternates the two and pairs them).

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
    args = parser.parse_args(argv)

    import bbb_gluon.threads
    bbb_gluon.threads.claim()
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
    for i in range(args.steps):
        step(X, y, i, want_complexity=i % 50 == 0)  # as fit does
    mx.nd.waitall()
    took = (time.perf_counter() - start) / args.steps
    print(f"{args.estimator} {args.prior} {took * 1e3:.2f} ms/step "
          f"(threads {bbb_gluon.threads.current()})")


if __name__ == "__main__":
    main()
