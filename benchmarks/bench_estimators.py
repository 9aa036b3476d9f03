"""The gradient estimators side by side: how much variance each removes, and what it costs.

Two measurements, each against its baseline in this one run:

- **variance**: on the 784-400-400-10 MLP after ``--train-epochs`` epochs of training
  (default 1; shared sample, Adam 1e-3, so the posterior is not the initial one), the
  variance over ``--draws``
  noise draws of the gradient of the minibatch's mean negative log-likelihood (the term
  the estimators change) w.r.t. mu and rho, per layer, on one fixed
  batch of 16 and one of 128 examples; printed as the shared sample's variance divided by
  each estimator's ("x less variance");
- **speed**: seconds per epoch (median of ``--epochs`` after a warm-up) of a user's loop
  calling BBBStep with each estimator, against the plain hybridized network trained by
  Gluon with the same optimiser (the floor): on the peers' workload (the MLP on
  Fashion-MNIST) and on a LeNet-5-style CNN on MNIST.

Real data when BBB_GLUON_DATA points at it, else synthetic arrays of the same shapes.

    python benchmarks/bench_estimators.py [--draws 200] [--epochs 3] [--out FILE.json]
    python benchmarks/bench_estimators.py --part variance --train-epochs 20
    python benchmarks/bench_estimators.py --tiny      # a few batches: proves it still runs
"""

import argparse
import json
import math
import sys
from pathlib import Path

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import bbb_gluon.threads
from bbb_gluon import (
    BBBLoss,
    BBBStep,
    GaussianPrior,
    Posterior,
    ScaleMixturePrior,
    build_mlp,
    trainable_params,
)
from bbb_gluon.core.estimator_forward import perturbed, sample_noise
from bbb_gluon.core.estimators import ESTIMATORS, plan
from bbb_gluon.data import ArrayLoader, load_dataset

sys.path.insert(0, str(Path(__file__).parent))
from bench_cnn import lenet, median_epoch, plain_epoch  # noqa: E402
from cpu import describe  # noqa: E402

PRIOR = ScaleMixturePrior(0.5, 1.0, math.exp(-6))


def data(name, num_train):
    try:
        X, y = load_dataset(name, num_valid=0).train
        return X[:num_train], y[:num_train], f"real {name}"
    except Exception:
        rng = np.random.default_rng(0)
        return (rng.uniform(size=(num_train, 784)).astype(np.float32),
                rng.integers(0, 10, num_train).astype(np.int32), f"synthetic {name}-shaped")


def mlp():
    net = build_mlp((400, 400))
    mx.random.seed(0)
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True, static_shape=True)
    return net


def make_step(net, loader, estimator, prior=PRIOR):
    posterior = Posterior(net, seed=0)
    loss = BBBLoss(prior, gluon.loss.SoftmaxCrossEntropyLoss(), num_batches=len(loader))
    trainer = gluon.Trainer(trainable_params(net, posterior, loss), "adam",
                            {"learning_rate": 1e-3})
    return BBBStep(net, posterior, loss, trainer, estimator=estimator), posterior, loss


def step_epoch(step, loader, max_batches=None):
    def run():
        for i, (X, y) in enumerate(loader.epoch(0)):
            if i == max_batches:
                break
            step(X, y, i)  # README's call: the cost's value too
    return run


def gradient_variance(net, posterior, loss, X, y, estimator, draws):
    """Per posterior key: the mean over its elements of the variance over ``draws`` of
    the gradient of the minibatch's mean negative log-likelihood w.r.t. mu and rho (the
    term the estimators change; the complexity cost's gradient, at the shared sample for
    each, is the same for all three)."""
    rules = plan(net, posterior, estimator)
    ctx = posterior.contexts[0]
    params = posterior.mu_parameters + posterior.rho_parameters
    grads_of = [[] for _ in params]
    for _ in range(draws):
        with autograd.record():
            sample = posterior.sample(ctx)
            with perturbed(net, posterior, rules, sample, sample_noise(posterior, ctx, 0)):
                out = net(X)
            cost = loss.nll(out, y).mean()
        cost.backward()
        for store, p in zip(grads_of, params, strict=True):
            store.append(p.grad(ctx).asnumpy().astype(np.float64))
    return [float(np.var(np.array(g), axis=0, ddof=1).mean()) for g in grads_of]


def variance_table(X, y, draws, tiny, train_epochs=1):
    loader = ArrayLoader(X, y, 128, shuffle=True, seed=0)
    net = mlp()
    step, posterior, loss = make_step(net, loader, "reparam")
    for _ in range(train_epochs):  # away from the start
        step_epoch(step, loader, 3 if tiny else None)()
    sigmas = np.concatenate([s.asnumpy().ravel() for s in posterior.sigma()])
    print(f"posterior after {train_epochs} epoch(s): median sigma {np.median(sigmas):.4f}")
    rows = []
    for batch in (16, 128):
        Xb = mx.nd.array(X[:batch])
        yb = mx.nd.array(y[:batch])
        var = {e: gradient_variance(net, posterior, loss, Xb, yb, e, draws)
               for e in ESTIMATORS}
        for k, key in enumerate(posterior.keys):
            for which, idx in (("mu", k), ("rho", len(posterior.keys) + k)):
                base = var["reparam"][idx]
                rows.append({"batch": batch, "array": key, "of": which, "reparam": base,
                             **{f"{e}_ratio": base / var[e][idx] for e in ESTIMATORS[1:]}})
    print(f"variance of the likelihood's gradient, {draws} draws on one fixed batch; the "
          "shared sample's variance / the estimator's (x less variance)")
    print(f"{'batch':>5} {'array':>9} {'of':>3} {'reparam var':>12} {'local':>8} "
          f"{'flipout':>8}")
    for r in rows:
        print(f"{r['batch']:>5} {r['array']:>9} {r['of']:>3} {r['reparam']:12.3e} "
              f"{r['local_ratio']:7.2f}x {r['flipout_ratio']:7.2f}x")
    return rows


def speed_table(workloads, epochs, max_batches):
    rows = []
    for name, build, X, y in workloads:
        loader = ArrayLoader(X, y, 128, shuffle=True, seed=0)
        plain = median_epoch(plain_epoch(build(), loader, max_batches), epochs)
        for estimator in ESTIMATORS:
            step, _, _ = make_step(build(), loader, estimator, GaussianPrior(1.0))
            seconds = median_epoch(step_epoch(step, loader, max_batches), epochs)
            rows.append({"workload": name, "estimator": estimator, "engine": step.engine,
                         "plain_s": plain, "bbb_s": seconds, "ratio": seconds / plain,
                         "layers": step.estimators})
            print(f"{name}: {estimator:>7} ({step.engine}) {seconds:.2f} s/epoch against "
                  f"plain {plain:.2f}: {seconds / plain:.2f}x the plain network")
    return rows


def main(argv=None):
    bbb_gluon.threads.claim()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--train-epochs", type=int, default=1,
                        help="epochs of training before the variance is measured")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--num-train", type=int, default=60000)
    parser.add_argument("--part", choices=("all", "variance", "speed"), default="all")
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    num_train = 384 if args.tiny else args.num_train
    draws = 5 if args.tiny else args.draws
    epochs = 1 if args.tiny else args.epochs
    results = {"threads": bbb_gluon.threads.current(), "cpu": describe()}
    X, y, source = data("mnist", num_train)
    print(f"cpu: {results['cpu']}")
    print(f"data: {source}; threads {results['threads']}; README's call step(X, y, i)")
    if args.part in ("all", "variance"):
        results["variance"] = variance_table(X, y, draws, args.tiny, args.train_epochs)
        results["train_epochs"] = args.train_epochs
    if args.part in ("all", "speed"):
        Xf, yf, fashion = data("fashion-mnist", num_train)
        print(f"speed: peers' workload on {fashion}, LeNet on {source}; batch 128, Adam "
              "1e-3, N(0, 1) prior")
        results["speed"] = speed_table(
            [("784-400-400-10", mlp, Xf, yf),
             ("LeNet-5", lenet, X.reshape(-1, 1, 28, 28), y)], epochs,
            3 if args.tiny else None)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
