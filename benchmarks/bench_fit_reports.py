"""What ``fit``'s reports cost: its epoch at several ``log_every`` settings.

At every report ``fit`` reads its running costs on the host (the divergence check, the
progress bar) and computes the complexity cost's value; each read waits for MXNet's queue.
This times a 784-400-400-10 Bayes-by-Backprop epoch on MNIST (fused engine, Adam, batch 128,
469 batches) with reports every 10 and 50 (the default) batches, against one report per
epoch (``log_every`` past the epoch's length) measured in the same process.

    BBB_GLUON_DATA=$PWD/.data .venv/bin/python benchmarks/bench_fit_reports.py
"""

import argparse
import math
import os
import statistics
import sys

import bbb_gluon.threads
from bbb_gluon import TrainConfig, fit
from bbb_gluon.data import load_dataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu import print_cpu  # noqa: E402


def epoch_seconds(X, y, log_every, epochs):
    config = TrainConfig(model="bbb", epochs=epochs + 1, eval_samples=0,  # the 2x400 MLP
                         batch_size=128, log_every=log_every,
                         prior={"kind": "scale_mixture", "pi": 0.5, "sigma1": 1.0,
                                "sigma2": math.exp(-6)})
    history = fit(config, (X, y), progress=False).history
    return statistics.median(row["seconds"] for row in history[1:])  # after a warm-up


def main(argv=None):
    print_cpu()
    bbb_gluon.threads.claim()  # every core, as the earlier rounds measured (docs/speed.md)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="a few hundred images (CI)")
    args = parser.parse_args(argv)
    X, y = load_dataset("mnist", num_valid=0).train
    if args.tiny:
        X, y = X[:640], y[:640]
    batches = math.ceil(len(y) / 128)
    once = epoch_seconds(X, y, 10**9, args.epochs)
    print(f"{len(y)} images, {batches} batches per epoch, median of {args.epochs} epochs")
    print(f"log_every past the epoch (one report): {once:.2f} s/epoch, 1.00x")
    for log_every in (50, 10):
        t = epoch_seconds(X, y, log_every, args.epochs)
        print(f"log_every={log_every}: {t:.2f} s/epoch, {t / once:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
