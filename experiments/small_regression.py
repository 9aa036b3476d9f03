"""A user's own small regression set, trained with fit: does Bayes by Backprop fit it?

The set (issue 58): 200 points of y = sin(3x) + 0.1 noise, |x| uniform on [0.5, XMAX]
(a gap at |x| < 0.5); a 1-50-50-1 tanh network of the user's, ``GaussianNLLLoss(None)``
(one learned noise scale), ``fit`` with TrainConfig's defaults but the settings a line
names ("defaults": ``TrainConfig(likelihood="gaussian")``, the regression's). Three
measures: the predictive mean's RMSE against sin(3x) on the data region
(within 1.5x the true noise, 0.15, passes), the learned noise (within 50% of 0.1), and the
weights' predictive spread (the standard deviation of the mean over 100 weight samples)
in the gap over that on the data region (at least 2).

    python experiments/small_regression.py --settings defaults copy copy-ramp
"""

import argparse
import json
import sys
import time

import mxnet as mx
import numpy as np
from mxnet.gluon import nn

import bbb_gluon as bbb

NOISE = 0.1

# Each setting: the TrainConfig fields it changes (prior given as config.json has it).
SETTINGS = {
    # TrainConfig(likelihood="gaussian", epochs=..., batch_size=32): the regression defaults
    "defaults": {"likelihood": "gaussian"},
    # ... and the classification defaults, as before there were regression ones
    "classification-defaults": {},
    "copy": {"mu_init": "copy"},
    "copy-ramp": {"mu_init": "copy", "complexity_warmup": 300, "complexity_ramp": 300},
    "copy-ramp-gauss": {"mu_init": "copy", "complexity_warmup": 300, "complexity_ramp": 300,
                        "prior": {"kind": "gaussian", "sigma": 1.0}},
    "copy-temper": {"mu_init": "copy", "weighting": 0.1 / 7},
    "copy-ramp-temper": {"mu_init": "copy", "complexity_warmup": 300,
                         "complexity_ramp": 300, "weighting": 0.1 / 7},
    "copy-rho5-ramp": {"mu_init": "copy", "rho_init": -5.0, "complexity_warmup": 300,
                       "complexity_ramp": 300},
    "a": {"mu_init": "copy", "rho_init": -5.0, "complexity_warmup": 300,
          "complexity_ramp": 300, "weighting": 0.1 / 7, "lr": 3e-3},
    "a-gauss": {"mu_init": "copy", "rho_init": -5.0, "complexity_warmup": 300,
                "complexity_ramp": 300, "weighting": 0.1 / 7, "lr": 3e-3,
                "prior": {"kind": "gaussian", "sigma": 1.0}},
    "a-lr1e-2": {"mu_init": "copy", "rho_init": -5.0, "complexity_warmup": 300,
                 "complexity_ramp": 300, "weighting": 0.1 / 7, "lr": 1e-2},
    "a-t01": {"mu_init": "copy", "rho_init": -5.0, "complexity_warmup": 300,
              "complexity_ramp": 300, "weighting": 0.01 / 7, "lr": 3e-3},
    "a-t1": {"mu_init": "copy", "rho_init": -5.0, "complexity_warmup": 300,
             "complexity_ramp": 300, "weighting": 0.1 / 7, "lr": 3e-3},
    "a-t01-noramp": {"mu_init": "copy", "rho_init": -5.0, "weighting": 0.01 / 7, "lr": 3e-3},
    # the priors whose scale is set per array, with the regression defaults and with the
    # complexity cost at full weight (the plain ELBO after the ramp)
    "defaults-fan-in": {"likelihood": "gaussian",
                        "prior": {"kind": "fan_in_gaussian", "gain": 1.0}},
    "defaults-eb": {"likelihood": "gaussian", "prior": {"kind": "empirical_bayes"}},
    "untempered-fan-in": {"likelihood": "gaussian", "complexity_scale": 1.0,
                          "prior": {"kind": "fan_in_gaussian", "gain": 1.0}},
    "untempered-eb": {"likelihood": "gaussian", "complexity_scale": 1.0,
                      "prior": {"kind": "empirical_bayes"}},
    "untempered": {"likelihood": "gaussian", "complexity_scale": 1.0},
    "a-t01-rho3": {"mu_init": "copy", "complexity_warmup": 300, "complexity_ramp": 300,
                   "weighting": 0.01 / 7, "lr": 3e-3},
}


XMAX = 1.5  # the data lie on 0.5 <= |x| <= XMAX (--xmax)


def data(n=200, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.5, XMAX, size=n) * rng.choice([-1.0, 1.0], size=n)
    x = x.astype(np.float32)[:, None]
    y = (np.sin(3 * x) + NOISE * rng.normal(size=x.shape)).astype(np.float32)
    return x, y


def network(seed):
    mx.random.seed(seed)
    net = nn.HybridSequential()
    net.add(nn.Dense(50, activation="tanh", in_units=1),
            nn.Dense(50, activation="tanh", in_units=50), nn.Dense(1, in_units=50))
    net.initialize(mx.init.Xavier())
    return net


def measure(net, posterior, loss):
    grid = np.linspace(-XMAX, XMAX, 301, dtype=np.float32)[:, None]
    r = bbb.predict_intervals(net, posterior, grid, loss, samples=100, levels=0.9)
    in_data = np.abs(grid[:, 0]) >= 0.5
    in_gap = np.abs(grid[:, 0]) < 0.4
    rmse = float(np.sqrt(np.mean((r.mean[in_data] - np.sin(3 * grid[in_data])) ** 2)))
    ratio = float(r.weights_std[in_gap].mean() / r.weights_std[in_data].mean())
    return {"rmse": rmse, "noise": loss.sigma(), "spread_ratio": ratio,
            "spread_data": float(r.weights_std[in_data].mean()),
            "spread_gap": float(r.weights_std[in_gap].mean()),
            "fits": rmse <= 1.5 * NOISE and abs(loss.sigma() - NOISE) <= 0.5 * NOISE
            and ratio >= 2}


def run(name, epochs, seed):
    x, y = data(seed=seed)
    net = network(seed)
    settings = SETTINGS[name]
    if "likelihood" in settings:  # fit builds the loss the likelihood names
        given = net
    else:
        loss = bbb.GaussianNLLLoss(None)
        loss.initialize()
        given = bbb.Network(net, loss=loss)
    config = bbb.TrainConfig(epochs=epochs, batch_size=32, seed=seed, eval_samples=0,
                             **settings)
    start = time.perf_counter()
    result = bbb.fit(config, (x, y), net=given, progress=False)
    return {"setting": name, "seed": seed, "xmax": XMAX,
            **measure(result.net, result.posterior, result.loss),
            "seconds": round(time.perf_counter() - start, 1)}


def main():
    global XMAX
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    p.add_argument("--epochs", type=int, default=1500)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--xmax", type=float, default=XMAX,
                   help=f"the data lie on 0.5 <= |x| <= XMAX (default {XMAX})")
    args = p.parse_args()
    XMAX = args.xmax
    for name in args.settings:
        for seed in args.seeds:
            row = run(name, args.epochs, seed)
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
