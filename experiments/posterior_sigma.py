"""The spread of a trained posterior: the median and mean of sigma = softplus(rho) over
every weight the posterior covers, and the share above 0.5, read from a run folder's
latest checkpoint (issue 36's sigma probes, docs/RESULTS.md "Gradient estimators").

    python experiments/posterior_sigma.py RUN [RUN ...]
"""

import sys

import numpy as np

import bbb_gluon as bbb


def main():
    for run in sys.argv[1:]:
        _, posterior, _, _ = bbb.load_run(run, which="latest")
        rho = np.concatenate([r.asnumpy().ravel() for r in posterior.rho()])
        sigma = np.logaddexp(0.0, rho)  # softplus
        print(f"{run}: sigma median {np.median(sigma):.4f}, mean {sigma.mean():.4f}, "
              f"share above 0.5 {(sigma > 0.5).mean():.3f}")


if __name__ == "__main__":
    main()
