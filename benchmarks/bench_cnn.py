"""Speed of Bayes by Backprop on a user's own network and in a user's own loop.

Two comparisons, each measured in this one process against its own baseline:

- a LeNet-5-style CNN (two 5x5 convolutions with max pooling, 120-84-10 Dense layers) on
  MNIST-shaped images (N, 1, 28, 28): an epoch of BBBStep (fused engine where it builds)
  against an epoch of the plain hybridized CNN with the same optimiser (Adam, batch 128);
- the 784-400-400-10 MLP: an epoch of a user's own loop calling BBBStep against an epoch
  of ``fit`` (which runs the same step, plus its history and checks).

Real MNIST when BBB_GLUON_DATA points at it, else synthetic arrays of the same shape.
Prints seconds per epoch (median of --epochs after one warm-up) and the ratios.

    python benchmarks/bench_cnn.py [--num-train 60000] [--epochs 3]
    python benchmarks/bench_cnn.py --tiny      # a few batches: proves it still runs
"""

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from mxnet.gluon import nn

import bbb_gluon.threads
from bbb_gluon import (
    BBBLoss,
    BBBStep,
    Posterior,
    ScaleMixturePrior,
    TrainConfig,
    build_mlp,
    fit,
    trainable_params,
)
from bbb_gluon.data import ArrayLoader, load_dataset

sys.path.insert(0, str(Path(__file__).parent))
from cpu import describe  # noqa: E402


def lenet():
    net = nn.HybridSequential()
    net.add(nn.Conv2D(6, 5, padding=2, in_channels=1, activation="relu"), nn.MaxPool2D(),
            nn.Conv2D(16, 5, in_channels=6, activation="relu"), nn.MaxPool2D(), nn.Flatten(),
            nn.Dense(120, activation="relu", in_units=16 * 5 * 5),
            nn.Dense(84, activation="relu", in_units=120), nn.Dense(10, in_units=84))
    mx.random.seed(0)
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True, static_shape=True)
    return net


def get_data(num_train):
    try:
        splits = load_dataset("mnist", num_valid=0)
        X, y = splits.train
        return X[:num_train], y[:num_train], "real MNIST"
    except Exception:
        rng = np.random.default_rng(0)
        return (rng.uniform(size=(num_train, 784)).astype(np.float32),
                rng.integers(0, 10, num_train).astype(np.int32), "synthetic MNIST-shaped")


def median_epoch(run, epochs):
    run()  # warm-up: kernels, caches, cached graphs
    times = []
    for _ in range(epochs):
        t0 = time.perf_counter()
        run()
        mx.nd.waitall()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def plain_epoch(net, loader, max_batches):
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 1e-3})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def run():
        for i, (X, y) in enumerate(loader.epoch(0)):
            if i == max_batches:
                break
            with autograd.record():
                loss = loss_fn(net(X), y)
            loss.backward()
            trainer.step(X.shape[0])
    return run


def bbb_epoch(net, loader, max_batches):
    posterior = Posterior(net, seed=0)
    loss = BBBLoss(ScaleMixturePrior(0.5, 1.0, math.exp(-6)),
                   gluon.loss.SoftmaxCrossEntropyLoss(), num_batches=len(loader))
    trainer = gluon.Trainer(trainable_params(net, posterior, loss), "adam",
                            {"learning_rate": 1e-3})
    step = BBBStep(net, posterior, loss, trainer)

    def run():
        # README's call, the cost's value too (fit asks for it every 50th batch)
        for i, (X, y) in enumerate(loader.epoch(0)):
            if i == max_batches:
                break
            step(X, y, i)
    return run, step.engine


def main(argv=None):
    bbb_gluon.threads.claim()  # every core, as the earlier rounds measured (docs/speed.md)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-train", type=int, default=60000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args(argv)
    num_train = 384 if args.tiny else args.num_train
    epochs = 1 if args.tiny else args.epochs
    X, y, source = get_data(num_train)
    print(f"cpu: {describe()}")
    print(f"data: {source}, {len(y)} training images, batch 128, Adam 1e-3, one sample/step; "
          "README's call step(X, y, i)")

    images = ArrayLoader(X.reshape(-1, 1, 28, 28), y, 128, shuffle=True, seed=0)
    plain = median_epoch(plain_epoch(lenet(), images, None), epochs)
    run, engine = bbb_epoch(lenet(), images, None)
    bbb = median_epoch(run, epochs)
    print(f"LeNet-5-style CNN: plain {plain:.2f} s/epoch, Bayes by Backprop ({engine}) "
          f"{bbb:.2f} s/epoch: {bbb / plain:.2f}x the plain CNN")

    # fit builds the same network (Xavier, hybridized with static_alloc) and records the
    # seconds of each epoch's training, without its setup or evaluation.
    mlp = build_mlp((400, 400))
    mx.random.seed(0)
    mlp.initialize(mx.init.Xavier())
    mlp.hybridize(static_alloc=True, static_shape=True)
    run, engine = bbb_epoch(mlp, ArrayLoader(X, y, 128, shuffle=True, seed=0), None)
    own = median_epoch(run, epochs)
    config = TrainConfig(model="bbb", epochs=epochs + 1, eval_samples=0,  # the 2x400 MLP
                         batch_size=128, prior={"kind": "scale_mixture", "pi": 0.5,
                                                "sigma1": 1.0, "sigma2": math.exp(-6)})
    history = fit(config, (X, y), progress=False).history
    in_fit = statistics.median(row["seconds"] for row in history[1:])
    print(f"784-400-400-10 MLP: own loop with BBBStep ({engine}) {own:.2f} s/epoch, fit "
          f"{in_fit:.2f} s/epoch: the own loop takes {own / in_fit:.2f}x fit's time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
