"""A first probe of the UCI regression benchmark (issue 45) with the public API, untuned.

One hidden layer (the protocol's units), ``GaussianNLLLoss(None)`` (the noise scale
learned), N(0, 1) prior on every weight, ``BBBStep`` in a plain loop (Adam, batch 32),
then the Monte-Carlo predictive on the test rows: RMSE of the predictive mean and the
average log-likelihood per point (log of the mean over samples of the Gaussian densities),
both on the original scale. Hyperparameters are fixed, not chosen per split on validation
data as the protocol asks (the benchmark proper does that): a probe, not a result.

    python experiments/uci_probe.py --dataset boston --splits 0 1 --epochs 400
"""

import argparse
import json
import math
import time
from pathlib import Path

import mxnet as mx
import numpy as np
from mxnet import gluon
from mxnet.gluon import nn

from bbb_gluon import (
    BBBLoss,
    BBBStep,
    GaussianNLLLoss,
    GaussianPrior,
    Posterior,
    predict_samples,
    trainable_params,
)
from bbb_gluon.data import ArrayLoader, load_uci


def train_split(data, args, seed):
    mx.random.seed(seed)
    net = nn.HybridSequential()
    net.add(nn.Dense(data.hidden, activation="relu", in_units=data.X_train.shape[1]),
            nn.Dense(1, in_units=data.hidden))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    loader = ArrayLoader(data.X_train, data.y_train, args.batch, shuffle=True, seed=seed)
    likelihood = GaussianNLLLoss(None)
    likelihood.initialize()
    posterior = Posterior(net, rho_init=args.rho_init, seed=seed)
    loss = BBBLoss(GaussianPrior(args.prior_sigma), likelihood, num_batches=len(loader))
    trainer = gluon.Trainer(trainable_params(net, posterior, loss), "adam",
                            {"learning_rate": args.lr})
    step = BBBStep(net, posterior, loss, trainer)
    for epoch in range(args.epochs):
        for i, (X, y) in enumerate(loader.epoch(epoch)):
            step(X, y, i, want_complexity=False)
    step.check_finite()
    return net, posterior, likelihood


def evaluate(data, net, posterior, likelihood, samples):
    outs = predict_samples(net, posterior, data.X_test, samples, likelihood="gaussian")
    f = outs[:, :, 0].astype(np.float64)  # (S, N), standardised
    y = data.y_test[:, 0].astype(np.float64)
    s = likelihood.sigma()
    log_dens = -0.5 * ((y - f) / s) ** 2 - math.log(s) - 0.5 * math.log(2 * math.pi)
    top = log_dens.max(axis=0)
    ll = top + np.log(np.exp(log_dens - top).mean(axis=0))  # log of the mean density
    rmse = float(np.sqrt(np.mean((data.to_original(f.mean(axis=0))
                                  - data.to_original(y)) ** 2)))
    return {"rmse": rmse, "log_likelihood": float(data.log_likelihood_to_original(ll).mean()),
            "noise_sigma": s * data.y_std}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="boston")
    parser.add_argument("--splits", type=int, nargs="+", default=[0])
    parser.add_argument("--epochs", type=int, default=400)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--rho-init", type=float, default=-5.0)
    parser.add_argument("--prior-sigma", type=float, default=1.0)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    rows = []
    for split in args.splits:
        data = load_uci(args.dataset, split)
        start = time.perf_counter()
        net, posterior, likelihood = train_split(data, args, seed=split)
        row = {"split": split, **evaluate(data, net, posterior, likelihood, args.samples),
               "seconds": round(time.perf_counter() - start, 1)}
        rows.append(row)
        print(f"{args.dataset} split {split}: RMSE {row['rmse']:.3f}, test log-likelihood "
              f"{row['log_likelihood']:.3f}, noise sigma {row['noise_sigma']:.3f} "
              f"({row['seconds']} s)", flush=True)
    for key in ("rmse", "log_likelihood"):
        values = np.array([r[key] for r in rows])
        se = values.std(ddof=1) / math.sqrt(len(values)) if len(values) > 1 else float("nan")
        print(f"{key}: {values.mean():.3f} ± {se:.3f} (standard error over {len(values)} "
              "splits)")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"settings": vars(args), "splits": rows},
                                             indent=1) + "\n")


if __name__ == "__main__":
    main()
