"""IVON (IVONStep) on MNIST, the package's MLP, the paper's split: an early side-by-side
with Bayes by Backprop (issue 60, item 3).

Trains 784-H-H-10 (ReLU) with IVONStep on the 50,000 training images (pixels / 126, batch
128), lambda = 50,000, and after every epoch scores the 10,000 validation images with the
posterior means and with a 10-sample Monte-Carlo predictive (error, NLL, ECE). The test
images are scored once, at the end, for the record; no setting is chosen on them.

    python experiments/ivon_mnist.py --hidden 400 --epochs 20 --lr 0.2 --hess-init 0.1 \
        --out results/ivon-mnist/h400-lr0.2-h0.1.jsonl
"""

import argparse
import json
import sys
import time

import mxnet as mx
from mxnet import gluon

import bbb_gluon as bbb
from bbb_gluon import metrics
from bbb_gluon.data import ArrayLoader, load_dataset
from bbb_gluon.machine import describe


def scores(net, posterior, X, y, samples):
    means = bbb.predict_proba(net, posterior, X, 0)
    mc = bbb.predict_proba(net, posterior, X, samples)
    return {"error_means": float((means.argmax(axis=1) != y).mean()),
            "error_mc": float((mc.argmax(axis=1) != y).mean()),
            "nll_mc": float(metrics.nll(mc, y)),
            "ece_mc": float(metrics.expected_calibration_error(mc, y))}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hidden", type=int, default=400)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--lr", type=float, default=0.2)
    p.add_argument("--hess-init", type=float, default=0.1)
    p.add_argument("--beta2", type=float, default=0.99999)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--samples", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    splits = load_dataset("mnist")
    (X, y), (Xv, yv), (Xt, yt) = splits.train, splits.valid, splits.test
    mx.random.seed(args.seed)
    net = bbb.build_mlp((args.hidden, args.hidden))
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True, static_shape=True)
    posterior = bbb.Posterior(net, mu_init="copy", seed=args.seed)
    step = bbb.IVONStep(net, posterior, gluon.loss.SoftmaxCrossEntropyLoss(), ess=len(X),
                        lr=args.lr, hess_init=args.hess_init, beta2=args.beta2,
                        weight_decay=args.weight_decay)
    loader = ArrayLoader(X, y, 128, shuffle=True, seed=args.seed)
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    with open(args.out, "w") as f:
        f.write(json.dumps({"settings": settings, "engine": step.engine,
                            "machine": describe()}) + "\n")
        for epoch in range(1, args.epochs + 1):
            start, nll = time.perf_counter(), 0.0
            for Xb, yb in loader.epoch(epoch - 1):
                nll = nll + step(Xb, yb)
            mx.nd.waitall()
            seconds = time.perf_counter() - start
            row = {"epoch": epoch, "train_nll": float(nll.asscalar()) / len(X),
                   "seconds": round(seconds, 1), "skipped": step.skipped,
                   **{f"valid_{k}": v for k, v in scores(net, posterior, Xv, yv,
                                                         args.samples).items()}}
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(json.dumps(row), flush=True)
        test = {f"test_{k}": v for k, v in scores(net, posterior, Xt, yt, args.samples).items()}
        f.write(json.dumps({"end": test}) + "\n")
        print(json.dumps(test), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
