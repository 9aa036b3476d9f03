"""Which test rows sink a UCI split's log-likelihood, and why (issue 60: Protein's split 0
under IVON scored -1,274,479).

Retrains the split's chosen network exactly as ``uci_benchmark.run_split`` does (the same
settings, epochs and seed: the same numbers on the same CPU), then prints the test rows
with the lowest log-likelihood under the Monte-Carlo predictive: their error, predicted
noise scale, the spread of the weight samples' means, and the input feature farthest from
the training mean (in training standard deviations).

    BBB_GLUON_DATA=<data> PYTHONPATH=. python experiments/uci_failure_probe.py \\
        results/uci-ivon/protein/split_0.json
"""

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import uci_benchmark as ub  # noqa: E402

from bbb_gluon import predict_samples  # noqa: E402
from bbb_gluon.data import load_uci  # noqa: E402

WORST = 6


def row_log_likelihoods(means, scales, y):
    """Each row's log-density under the mixture of the samples' Gaussians."""
    logs = -0.5 * ((y[None] - means) / scales) ** 2 - np.log(scales) - 0.5 * np.log(2 * np.pi)
    top = logs.max(axis=0)
    return top + np.log(np.exp(logs - top).mean(axis=0))


def main(path):
    split = json.loads(Path(path).read_text())
    chosen = split["chosen"]
    data = load_uci(split["dataset"], split["split"])
    trained, _ = ub.train(data, chosen, chosen["epochs"], seed=1000 * split["split"] + 999)
    print("scores as the benchmark computes them:", ub.scores(data, *trained, ub.TEST_SAMPLES))
    outs = predict_samples(trained[0], trained[1], data.X_test, ub.TEST_SAMPLES,
                           likelihood=trained[2])
    means, scales = outs[:, :, 0], outs[:, :, 1]
    y = np.asarray(data.y_test).reshape(-1)
    ll = row_log_likelihoods(means, scales, y) - np.log(data.y_std)  # the targets' units
    worst = np.argsort(ll)[:WORST]
    print(f"mean test log-likelihood {ll.mean():.3f}; without the {WORST} worst rows "
          f"{np.delete(ll, worst).mean():.3f}")
    for i in worst:
        far = int(np.abs(data.X_test[i]).argmax())
        print(f"row {i}: log-likelihood {ll[i]:.4g}, error "
              f"{(means[:, i].mean() - y[i]) * data.y_std:.1f}, predicted noise "
              f"{np.median(scales[:, i]) * data.y_std:.3f}, sd of the samples' means "
              f"{means[:, i].std() * data.y_std:.3f}, feature {far} at "
              f"{data.X_test[i, far]:.1f} training sd")
    print("largest |x| per feature in the training rows:",
          np.round(np.abs(data.X_train).max(axis=0), 1))


if __name__ == "__main__":
    main(sys.argv[1])
