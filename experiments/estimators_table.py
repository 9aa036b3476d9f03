"""Issue 36's accuracy table from the runs of experiments/estimators_mnist.sh.

For each (estimator, prior): the test error with the posterior means after epoch 5 and
epoch 20 (history.csv's test_error, recorded every epoch with --monitor-test), the test
error of the epoch-20 network with a 10-sample predictive (metrics.json's
end_of_training), and the median seconds per training epoch, as mean ± sd over the seeds
found; then each estimator's paired difference to the shared sample, seed by seed.

    python experiments/estimators_table.py RUNS_DIR [--out results/estimators/table.md]
"""

import argparse
import csv
import json
import statistics
from pathlib import Path

ESTIMATORS = ("reparam", "local", "flipout")
PRIORS = ("mixture", "gaussian")


def read(run):
    rows = list(csv.DictReader((run / "history.csv").open()))
    metrics = json.loads((run / "metrics.json").read_text())
    return {"e5": float(rows[4]["test_error"]), "e20": float(rows[19]["test_error"]),
            "mc20": metrics["end_of_training"]["test_error_mc"],
            "seconds": statistics.median(float(r["seconds"]) for r in rows)}


def mean_sd(values, scale=100, digits=2):
    if len(values) == 1:
        return f"{values[0] * scale:.{digits}f}"
    return (f"{statistics.mean(values) * scale:.{digits}f} ± "
            f"{statistics.stdev(values) * scale:.{digits}f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    runs = {}
    for run in sorted(Path(a.runs).iterdir()):
        if (run / "metrics.json").exists():
            est, prior, seed = run.name.split("-")
            runs[(est, prior, int(seed[1:]))] = read(run)
    lines = ["| estimator | prior | seeds | test error after 5 epochs (%) | after 20 (%) | "
             "after 20, 10 samples (%) | s/epoch (one thread, shared machine) |",
             "|---|---|---|---|---|---|---|"]
    for prior in PRIORS:
        for est in ESTIMATORS:
            found = [v for (e, pr, _), v in sorted(runs.items()) if (e, pr) == (est, prior)]
            if not found:
                continue
            lines.append(f"| {est} | {prior} | {len(found)} | "
                         f"{mean_sd([f['e5'] for f in found])} | "
                         f"{mean_sd([f['e20'] for f in found])} | "
                         f"{mean_sd([f['mc20'] for f in found])} | "
                         f"{mean_sd([f['seconds'] for f in found], 1, 1)} |")
    lines += ["", "Paired differences to the shared sample (same prior and seed), in points "
              "of test error (negative: the estimator is better):", ""]
    for prior in PRIORS:
        for est in ESTIMATORS[1:]:
            pairs = [(runs[(est, prior, s)], runs[("reparam", prior, s)])
                     for (e, pr, s) in sorted(runs) if (e, pr) == (est, prior)
                     and ("reparam", prior, s) in runs]
            if pairs:
                diffs = {k: [x[k] - y[k] for x, y in pairs] for k in ("e5", "e20", "mc20")}
                lines.append(f"- {est}, {prior}, {len(pairs)} seeds: after 5 epochs "
                             f"{mean_sd(diffs['e5'])}, after 20 {mean_sd(diffs['e20'])}, "
                             f"after 20 with 10 samples {mean_sd(diffs['mc20'])}")
    text = "\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
