"""Speed of Bayes by Backprop against the plain-network floor, in one process.

Measures, on the same data path (one MNIST-shaped array in memory, batched by slicing):

- seconds per training epoch (60,000 examples, batch 128, Adam, one weight sample per
  step) of the plain hybridized Gluon MLP (the floor), of bbb_gluon (README's call
  ``step(X, y, i)``, and once with ``want_complexity=False``) with the Monte-Carlo
  complexity cost and the scale-mixture prior (the default recipe), with Blundell's
  weighting, and with the closed-form Gaussian KL; median of several epochs after a
  warm-up, and each one's ratio to the floor; for 784-400-400-10 and 784-1200-1200-10;
- seconds of a 100-sample Monte-Carlo predictive on 10,000 test images against 100
  deterministic forward passes of the plain network;
- peak resident memory.

Real MNIST when BBB_GLUON_DATA points at it, else synthetic arrays of the same shape.

    python benchmarks/bench_epoch.py                  # full (about 10 minutes on 2 cores)
    python benchmarks/bench_epoch.py --tiny           # a few batches: proves it still runs
"""

import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import bbb_gluon.threads
from bbb_gluon._kernels import fused
from bbb_gluon.core.loss import BBBLoss
from bbb_gluon.core.posterior import Posterior
from bbb_gluon.core.priors import GaussianPrior, ScaleMixturePrior
from bbb_gluon.core.step import BBBStep, trainable_params
from bbb_gluon.data import ArrayLoader, load_dataset
from bbb_gluon.prediction import predict_proba
from bbb_gluon.training import build_mlp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu import describe  # noqa: E402


def get_data(num_train):
    try:
        splits = load_dataset("mnist", num_valid=0)
        X, y = splits.train
        Xt, _ = splits.test
        source = "real MNIST (BBB_GLUON_DATA)"
    except Exception:
        rng = np.random.default_rng(0)
        X = rng.uniform(0, 255 / 126, (60000, 784)).astype(np.float32)
        y = rng.integers(0, 10, 60000).astype(np.int32)
        Xt = rng.uniform(0, 255 / 126, (10000, 784)).astype(np.float32)
        source = "synthetic arrays of MNIST's shape"
    return X[:num_train], y[:num_train], Xt, source


def make_net(hidden):
    net = build_mlp(hidden, 10)
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True, static_shape=True)
    return net


def time_epochs(run_epoch, epochs, warmup):
    for _ in range(warmup):
        run_epoch()
    mx.nd.waitall()
    times = []
    for _ in range(epochs):
        t0 = time.perf_counter()
        run_epoch()
        mx.nd.waitall()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def plain_epoch_fn(hidden, loader, max_batches):
    net = make_net(hidden)
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 1e-3})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def run():
        for i, (X, y) in enumerate(loader):
            if i == max_batches:
                break
            with autograd.record():
                loss = loss_fn(net(X), y)
            loss.backward()
            trainer.step(X.shape[0])
    return run


def bbb_epoch_fn(hidden, loader, max_batches, prior, complexity, weighting, engine,
                 want_complexity=True):
    net = make_net(hidden)
    posterior = Posterior(net, seed=0)
    loss = BBBLoss(prior, gluon.loss.SoftmaxCrossEntropyLoss(), complexity=complexity,
                   weighting=weighting, num_batches=len(loader))
    trainer = gluon.Trainer(trainable_params(net, posterior, loss), "adam",
                            {"learning_rate": 1e-3})
    # The public step a user's own loop calls; fit runs the same one. By default README's
    # call, which returns the complexity cost's value too (want_complexity=False: fit
    # between its progress reports).
    step = BBBStep(net, posterior, loss, trainer, engine=engine)

    def run():
        for i, (X, y) in enumerate(loader):
            if i == max_batches:
                break
            step(X, y, i, want_complexity=want_complexity)
    return run


def bench_predictive(Xt, samples, hidden):
    net = make_net(hidden)
    posterior = Posterior(net, seed=0)
    predict_proba(net, posterior, Xt[:1000], 2)  # warm-up
    mx.nd.waitall()
    t0 = time.perf_counter()
    predict_proba(net, posterior, Xt, samples)
    mc = time.perf_counter() - t0
    plain = make_net(hidden)
    predict_proba(plain, None, Xt[:1000])
    t0 = time.perf_counter()
    for _ in range(samples):
        predict_proba(plain, None, Xt)
    det = time.perf_counter() - t0
    return mc, det


def main(argv=None):
    bbb_gluon.threads.claim()  # every core, as the earlier rounds measured (docs/speed.md)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true",
                        help="a few batches per configuration: checks the script runs")
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs (median)")
    parser.add_argument("--hidden", default="400,1200", help="unit counts to run")
    parser.add_argument("--engines", default="fused,reference",
                        help="bbb engines to time (fused needs the compiled kernels)")
    parser.add_argument("--out", default="benchmarks/results/results.json")
    args = parser.parse_args(argv)

    num_train = 2048 if args.tiny else 60000
    max_batches = 4 if args.tiny else None
    epochs, warmup = (1, 1) if args.tiny else (args.epochs, 1)
    X, y, Xt, source = get_data(num_train)
    if args.tiny:
        Xt = Xt[:500]
    loader = ArrayLoader(X, y, 128, shuffle=True, seed=0, ctx=mx.cpu())
    engines = [e for e in args.engines.split(",") if e]
    if "fused" in engines and not fused.available():
        print(f"fused kernels unavailable ({fused.unavailable_reason()}); skipping them")
        engines.remove("fused")
    print(f"data: {source}; {num_train} training examples, batch 128, Adam, 1 sample/step")
    print(f"cpu: {describe()}; MXNet {mx.__version__}")
    results = {"data": source, "num_train": num_train, "batch_size": 128, "tiny": args.tiny,
               "cpu": describe(), "cores": os.cpu_count(), "mxnet": mx.__version__,
               "configs": []}
    mixture = ScaleMixturePrior(0.5, 1.0, math.exp(-6))
    header = f"{'network':<18}{'model':<44}{'s/epoch':>9}{'x floor':>9}"
    print(header)
    print("-" * len(header))
    for units in [int(u) for u in args.hidden.split(",")]:
        hidden = (units, units)
        floor, _ = time_epochs(plain_epoch_fn(hidden, loader, max_batches), epochs, warmup)
        rows = [("plain hybridized MLP (floor)", floor)]
        for engine in engines:
            # README's call step(X, y, i); the first case also without the cost's value
            cases = [
                (f"bbb {engine}: MC, scale mixture, uniform", mixture, "mc", "uniform", True),
                ("  ... want_complexity=False", mixture, "mc", "uniform", False),
                (f"bbb {engine}: MC, scale mixture, Blundell", mixture, "mc", "blundell", True),
                (f"bbb {engine}: closed-form KL, Gaussian", GaussianPrior(1.0), "kl",
                 "uniform", True),
            ]
            for name, prior, complexity, weighting, want in cases:
                fn = bbb_epoch_fn(hidden, loader, max_batches, prior, complexity, weighting,
                                  engine, want)
                seconds, _ = time_epochs(fn, epochs, warmup)
                rows.append((name, seconds))
        for name, seconds in rows:
            ratio = seconds / floor
            print(f"{f'784-{units}-{units}-10':<18}{name:<44}{seconds:>9.2f}{ratio:>9.2f}")
            results["configs"].append({"hidden": list(hidden), "model": name,
                                       "seconds_per_epoch": seconds, "ratio_to_floor": ratio})
    samples = 5 if args.tiny else 100
    mc, det = bench_predictive(Xt, samples, (400, 400))
    print(f"{samples}-sample MC predictive on {len(Xt)} images: {mc:.2f} s; {samples} plain "
          f"passes: {det:.2f} s; ratio {mc / det:.2f}")
    results["predictive"] = {"samples": samples, "images": len(Xt), "mc_seconds": mc,
                             "plain_seconds": det, "ratio": mc / det}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak resident memory: {peak:.0f} MiB")
    results["peak_rss_mib"] = peak
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
