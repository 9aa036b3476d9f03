"""What the complexity cost alone does to weights under the paper's SGD recipe.

Simulates weights that the data does not need (no likelihood gradient), each with its own
mu and rho, under exactly the recipe's update of the Monte-Carlo complexity cost: plain
SGD at 1e-3 on the summed cost with the uniform weighting pi_i = 1/M (M = 469 batches), one
weight sample per step, 600 epochs with the rate x0.1 after epoch 300, mu ~ U(-0.03, 0.03),
rho ~ U(-3.5, -3). The gradients are the ones bbb_gluon computes (loss.py, fused.cc):

    h = d(-log P(w))/dw * pi_i,   d/dmu = h,   d/drho = sigmoid(rho) * (eps * h - pi_i / sigma)

Prints the median |mu|, median sigma and median |mu|/sigma at a few epochs for the
scale-mixture prior of the recipe (pi = 3/4, sigma1 = 1, sigma2 = e^-8), a wider spike
(sigma2 = e^-6) and the N(0, 1) prior.

    python experiments/spike_kick.py [--weights 20000] [--epochs 600] [--priors recipe,...]
"""

import argparse
import math

import numpy as np


def neg_log_prior_grad(w, prior):
    if prior[0] == "gaussian":
        return w / prior[1] ** 2
    _, pi, s1, s2 = prior
    # d/dw of -log(pi N(w; 0, s1^2) + (1 - pi) N(w; 0, s2^2)), in log space
    la = math.log(pi) - math.log(s1) - 0.5 * (w / s1) ** 2
    lb = math.log(1 - pi) - math.log(s2) - 0.5 * (w / s2) ** 2
    m = np.maximum(la, lb)
    a, b = np.exp(la - m), np.exp(lb - m)
    return (a * w / s1 ** 2 + b * w / s2 ** 2) / (a + b)


def softplus(x):
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)


def simulate(prior, weights, epochs, batches=469, lr=1e-3, decay_at=300, seed=0,
             report=(1, 10, 100, 300, 600)):
    rng = np.random.default_rng(seed)
    mu = rng.uniform(-0.03, 0.03, weights)
    rho = rng.uniform(-3.5, -3.0, weights)
    pi_i = 1.0 / batches
    rows = []
    for epoch in range(1, epochs + 1):
        rate = lr * (0.1 if epoch > decay_at else 1.0)
        for _ in range(batches):
            sigma = softplus(rho)
            eps = rng.standard_normal(weights)
            w = mu + sigma * eps
            h = neg_log_prior_grad(w, prior) * pi_i
            g_rho = (1 / (1 + np.exp(-rho))) * (eps * h - pi_i / sigma)
            mu -= rate * h
            rho -= rate * g_rho
        if epoch in report:
            sigma = softplus(rho)
            rows.append((epoch, np.median(np.abs(mu)), np.median(sigma),
                         np.median(np.abs(mu) / sigma)))
    return rows


PRIORS = {
    "recipe": ("scale mixture, pi=3/4, sigma1=1, sigma2=e^-8 (the recipe)",
               ("mixture", 0.75, 1.0, math.exp(-8))),
    "sigma2-e6": ("scale mixture, sigma2=e^-6", ("mixture", 0.75, 1.0, math.exp(-6))),
    "gaussian": ("Gaussian N(0, 1)", ("gaussian", 1.0)),
    "sigma1-e1": ("scale mixture, sigma1=e^-1", ("mixture", 0.75, math.exp(-1), math.exp(-8))),
    "sigma1-e1-sigma2-e6": ("scale mixture, sigma1=e^-1, sigma2=e^-6",
                            ("mixture", 0.75, math.exp(-1), math.exp(-6))),
}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--weights", type=int, default=20000)
    p.add_argument("--epochs", type=int, default=600)
    p.add_argument("--priors", default="recipe,sigma2-e6,gaussian",
                   help=f"comma-separated, from {', '.join(PRIORS)}")
    args = p.parse_args()
    chosen = args.priors.split(",")
    unknown = [c for c in chosen if c not in PRIORS]
    if unknown:
        p.error(f"unknown prior(s) {', '.join(unknown)}; choose from {', '.join(PRIORS)}")
    report = tuple(e for e in (1, 10, 100, 300, 600) if e <= args.epochs)
    for name, prior in (PRIORS[c] for c in chosen):
        print(f"{name}: {args.weights} weights with no likelihood gradient")
        print(f"{'epoch':>7} {'median |mu|':>12} {'median sigma':>13} {'median |mu|/sigma':>18}")
        for epoch, m, s, snr in simulate(prior, args.weights, args.epochs, report=report):
            print(f"{epoch:>7} {m:>12.4f} {s:>13.4f} {snr:>18.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
