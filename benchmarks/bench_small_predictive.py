"""Time a 500-sample predictive of a small network: the package against a hand-written
all-samples-at-once version (notebook 06's `batch_dot` functions) and against the
per-sample loop the package used before.

The network is notebook 06's half-moons classifier: 2 inputs, two tanh layers of 5 units,
one logit; 500 weight samples over 500 test points. Prints milliseconds (best of
--repeats) and each one's ratio to the hand-written version, all measured in this run.

    python benchmarks/bench_small_predictive.py [--samples 500] [--points 500]
"""

import argparse
import os
import sys
import time

import mxnet as mx
import numpy as np
from mxnet import nd
from mxnet.gluon import nn

import bbb_gluon.threads
from bbb_gluon import Posterior, predict_samples, predictive_paths

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu import print_cpu  # noqa: E402


def make_net():
    net = nn.HybridSequential()
    net.add(nn.Dense(5, activation="tanh", in_units=2), nn.Dense(5, activation="tanh"),
            nn.Dense(1))
    net.initialize(mx.init.Normal(0.5))
    net.hybridize()
    net(mx.nd.ones((1, 2)))
    return net


def hand_written(posterior, X, samples):
    """Notebook 06's version: draw every array's S samples at once, three batch_dots."""
    weights = [mu + sigma * nd.random.normal(shape=(samples,) + mu.shape)
               for mu, sigma in zip(posterior.mu(), posterior.sigma(), strict=True)]
    h = nd.broadcast_to(X.expand_dims(0), (samples,) + X.shape)
    for k in range(3):
        h = nd.batch_dot(h, weights[2 * k], transpose_b=True) + weights[2 * k + 1].expand_dims(1)
        if k < 2:
            h = nd.tanh(h)
    return nd.sigmoid(h).asnumpy()


def best_of(fn, repeats):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    print_cpu()
    bbb_gluon.threads.claim()  # every core, as the earlier rounds measured (docs/speed.md)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--points", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    net = make_net()
    posterior = Posterior(net, seed=0, rho_init=-3.0)
    X = np.random.default_rng(0).normal(size=(args.points, 2)).astype(np.float32)
    X_nd = nd.array(X)

    def package():
        return predict_samples(net, posterior, X, args.samples, likelihood="bernoulli")

    def per_sample_loop():
        limit = predictive_paths._BATCHED_MAX_WEIGHTS
        predictive_paths._BATCHED_MAX_WEIGHTS = 0  # the path every network took before
        try:
            return predict_samples(net, posterior, X, args.samples, likelihood="bernoulli")
        finally:
            predictive_paths._BATCHED_MAX_WEIGHTS = limit

    results = {"hand-written batch_dot (notebook 06)": best_of(
                   lambda: hand_written(posterior, X_nd, args.samples), args.repeats),
               "predict_samples": best_of(package, args.repeats),
               "predict_samples, per-sample loop": best_of(per_sample_loop, args.repeats)}
    base = results["hand-written batch_dot (notebook 06)"]
    print(f"{args.samples} weight samples, {args.points} points, 2-5-5-1 tanh network, "
          f"best of {args.repeats}")
    for name, seconds in results.items():
        print(f"  {name:38s} {1000 * seconds:8.2f} ms   {seconds / base:6.2f}x the hand-written")


if __name__ == "__main__":
    main()
