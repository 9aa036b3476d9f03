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

``--optimizer adam`` simulates the package's Adam runs instead (results/mnist-bbb-mixture-400
and -sigma2e-8): Adam at 1e-3 on the batch-mean loss, so the complexity gradient is
pi_i / B times the one above, with Blundell's weighting pi_i = 2^(M-i) / (2^M - 1) over
M = 391 batches (50,000 training images) and B = 128, mu ~ N(0, 0.1^2), rho = -5, no decay.
MXNet's update: m, v moving averages (0.9, 0.999) of the gradient and its square, step
lr * sqrt(1 - 0.999^t) / (1 - 0.9^t) * m / (sqrt(v) + 1e-8); minibatches whose pi_i is at or
below 2^-60 contribute a zero gradient (BBBLoss's skip_below), which Adam still steps on.

    python experiments/spike_kick.py [--weights 20000] [--epochs 600] [--priors recipe,...]
                                     [--optimizer sgd|adam] [--report 1,10,100,600]
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


def complexity_grads(mu, rho, eps, prior, scale):
    """Gradients of ``scale * (log q(w) - log P(w))`` at ``w = mu + softplus(rho) * eps``."""
    sigma = softplus(rho)
    w = mu + sigma * eps
    h = neg_log_prior_grad(w, prior) * scale
    return h, (1 / (1 + np.exp(-rho))) * (eps * h - scale / sigma)


def adam_step(param, grad, m, v, t, lr, beta1=0.9, beta2=0.999, epsilon=1e-8):
    """MXNet's Adam update, in place, with the bias correction folded into the rate."""
    rate = lr * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
    m *= beta1
    m += (1 - beta1) * grad
    v *= beta2
    v += (1 - beta2) * np.square(grad)
    param -= rate * m / (np.sqrt(v) + epsilon)


def summary(epoch, mu, rho):
    sigma = softplus(rho)
    q10, q90 = np.quantile(sigma, [0.1, 0.9])
    return (epoch, np.median(np.abs(mu)), np.median(sigma), q10, q90,
            np.median(np.abs(mu) / sigma), np.corrcoef(sigma, np.abs(mu))[0, 1])


def simulate(prior, weights, epochs, batches=469, lr=1e-3, decay_at=300, seed=0,
             report=(1, 10, 100, 300, 600)):
    """The recipe: plain SGD on the summed cost, uniform weighting."""
    rng = np.random.default_rng(seed)
    mu = rng.uniform(-0.03, 0.03, weights)
    rho = rng.uniform(-3.5, -3.0, weights)
    pi_i = 1.0 / batches
    rows = []
    for epoch in range(1, epochs + 1):
        rate = lr * (0.1 if epoch > decay_at else 1.0)
        for _ in range(batches):
            g_mu, g_rho = complexity_grads(mu, rho, rng.standard_normal(weights), prior, pi_i)
            mu -= rate * g_mu
            rho -= rate * g_rho
        if epoch in report:
            rows.append(summary(epoch, mu, rho))
    return rows


def simulate_adam(prior, weights, epochs, batches=391, batch_size=128, lr=1e-3, seed=0,
                  report=(1, 10, 100, 600)):
    """The package's Adam runs: mean loss, Blundell's weighting, rho = -5."""
    rng = np.random.default_rng(seed)
    mu = rng.normal(0.0, 0.1, weights)
    rho = np.full(weights, -5.0)
    states = [(np.zeros(weights), np.zeros(weights)) for _ in range(2)]
    # pi_i = 2^(M-i) / (2^M - 1) = 2^-i / (1 - 2^-M), i = 1..M, without overflowing 2^M
    pis = [math.ldexp(1.0, -(i + 1)) / (1.0 - math.ldexp(1.0, -batches))
           for i in range(batches)]
    t = 0
    rows = []
    for epoch in range(1, epochs + 1):
        for i in range(batches):
            t += 1
            pi_i = pis[i]
            if pi_i > 2.0 ** -60:
                grads = complexity_grads(mu, rho, rng.standard_normal(weights), prior,
                                         pi_i / batch_size)
            else:
                grads = (0.0, 0.0)
            for param, grad, (m, v) in zip((mu, rho), grads, states, strict=True):
                adam_step(param, grad, m, v, t, lr)
        if epoch in report:
            rows.append(summary(epoch, mu, rho))
    return rows


PRIORS = {
    "recipe": ("scale mixture, pi=3/4, sigma1=1, sigma2=e^-8 (the recipe)",
               ("mixture", 0.75, 1.0, math.exp(-8))),
    "sigma2-e6": ("scale mixture, sigma2=e^-6", ("mixture", 0.75, 1.0, math.exp(-6))),
    "gaussian": ("Gaussian N(0, 1)", ("gaussian", 1.0)),
    "sigma1-e1": ("scale mixture, sigma1=e^-1", ("mixture", 0.75, math.exp(-1), math.exp(-8))),
    "sigma1-e1-sigma2-e6": ("scale mixture, sigma1=e^-1, sigma2=e^-6",
                            ("mixture", 0.75, math.exp(-1), math.exp(-6))),
    # the priors of the Adam runs in docs/RESULTS.md
    "half-e6": ("scale mixture, pi=1/2, sigma1=1, sigma2=e^-6",
                ("mixture", 0.5, 1.0, math.exp(-6))),
    "half-e8": ("scale mixture, pi=1/2, sigma1=1, sigma2=e^-8",
                ("mixture", 0.5, 1.0, math.exp(-8))),
}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--weights", type=int, default=20000)
    p.add_argument("--epochs", type=int, default=600)
    p.add_argument("--priors", default="recipe,sigma2-e6,gaussian",
                   help=f"comma-separated, from {', '.join(PRIORS)}")
    p.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd",
                   help="sgd: the paper's recipe; adam: the package's Adam runs")
    p.add_argument("--report", default="1,10,100,300,600",
                   help="comma-separated epochs to print (those up to --epochs)")
    args = p.parse_args()
    if args.weights < 2 or args.epochs < 1:
        p.error("--weights must be >= 2 (a correlation needs two) and --epochs >= 1")
    chosen = args.priors.split(",")
    unknown = [c for c in chosen if c not in PRIORS]
    if unknown:
        p.error(f"unknown prior(s) {', '.join(unknown)}; choose from {', '.join(PRIORS)}")
    try:
        report = tuple(e for e in (int(x) for x in args.report.split(",")) if e <= args.epochs)
    except ValueError:
        p.error(f"--report must be comma-separated epochs, got {args.report!r}")
    run = simulate_adam if args.optimizer == "adam" else simulate
    for name, prior in (PRIORS[c] for c in chosen):
        under = ", under Adam" if args.optimizer == "adam" else ""
        print(f"{name}{under}: {args.weights} weights with no likelihood gradient")
        print(f"{'epoch':>7} {'median |mu|':>12} {'median sigma':>13} {'sigma 10-90%':>16}"
              f" {'median |mu|/sigma':>18} {'corr(sigma, |mu|)':>18}")
        for epoch, m, s, q10, q90, snr, corr in run(prior, args.weights, args.epochs,
                                                     report=report):
            print(f"{epoch:>7} {m:>12.4f} {s:>13.4f} {q10:>7.4f}-{q90:<8.4f}"
                  f" {snr:>18.2f} {corr:>18.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
