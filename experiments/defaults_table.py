"""Issue 35's defaults table from the runs of experiments/defaults_weighting_rho.sh.

For each dataset and (weighting, rho_init): the lowest validation error with the posterior
means over the 20 epochs, the test error of that epoch's network and of the epoch-20
network (means), each as mean ± sd over the seeds found, and the paired difference of
each setting to the package's default (uniform, rho_init -3), seed by seed.

    python experiments/defaults_table.py RUNS_DIR [--out FILE.md]
"""

import argparse
import csv
import json
from pathlib import Path

from estimators_table import mean_sd as fmt  # this folder, as the script runs

DEFAULT = ("uniform", "-3")


def read(run):
    rows = list(csv.DictReader((run / "history.csv").open()))
    metrics = json.loads((run / "metrics.json").read_text())
    return {"valid": min(float(r["valid_error"]) for r in rows),
            "test_best": metrics["test_error_means"],
            "test_end": metrics["end_of_training"]["test_error_means"]}




def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    runs = {}
    for run in sorted(Path(a.runs).iterdir()):
        if (run / "metrics.json").exists():
            head, seed = run.name.rsplit("-s", 1)
            head, rho = head.rsplit("-rho", 1)
            dataset, weighting = head.rsplit("-", 1)
            runs[(dataset, weighting, rho, int(seed))] = read(run)
    settings = sorted({k[:3] for k in runs})
    lines = ["| dataset | weighting | ρ₀ | seeds | best validation error (%) | test error at "
             "it (%) | test error at epoch 20 (%) | paired to the default, test at best "
             "(points) |", "|---|---|---|---|---|---|---|---|"]
    for dataset, weighting, rho in settings:
        found = {k[3]: v for k, v in runs.items() if k[:3] == (dataset, weighting, rho)}
        base = {k[3]: v for k, v in runs.items() if k[:3] == (dataset, *DEFAULT)}
        diffs = [found[s]["test_best"] - base[s]["test_best"] for s in found if s in base]
        paired = "" if (weighting, rho) == DEFAULT or not diffs else fmt(diffs)
        lines.append(f"| {dataset} | {weighting} | {rho} | {len(found)} | "
                     f"{fmt([v['valid'] for v in found.values()])} | "
                     f"{fmt([v['test_best'] for v in found.values()])} | "
                     f"{fmt([v['test_end'] for v in found.values()])} | {paired} |")
    text = "\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
