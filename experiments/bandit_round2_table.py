"""The round-2 probe table (docs/RESULTS.md): every probe's agents, mean cumulative regret at
its last step ± sd over seeds, the regret of its last tenth, and how often each agent still
ate poisonous mushrooms then; the committed round-1 run (results/bandit, learning rate
10⁻³) read at the same step as the baseline.

    python experiments/bandit_round2_table.py results/bandit-round2/probes
"""
import csv
import gzip
import json
import sys
from pathlib import Path

import numpy as np


def probe_rows(folder):
    for metrics in sorted(Path(folder).glob("*/metrics.json")):
        d = json.loads(metrics.read_text())
        options = json.loads((metrics.parent / "config.json").read_text())["config"]
        for name, a in d["agents"].items():
            lr = next(s["lr"] for s in options["agents"] if s["name"] == name) or options["lr"]
            yield (metrics.parent.name, name, d["steps"], lr, a["cumulative_regret"],
                   a["cumulative_regret_std"], a["regret_last_10pct"],
                   a["eats_poisonous_last_10pct"])


def round1_rows(run, steps):
    """The committed run's agents at ``steps``: per seed, from steps.csv.gz."""
    per = {}
    last = {}
    with gzip.open(Path(run) / "steps.csv.gz", "rt") as f:
        for r in csv.DictReader(f):
            t = int(r["step"])
            if t > steps:
                continue
            for key in r:
                if key.endswith(":regret"):
                    name = key[:-len(":regret")]
                    per.setdefault((name, r["seed"]), 0.0)
                    per[(name, r["seed"])] += float(r[key])
                    if t > steps - steps // 10:
                        last.setdefault((name, r["seed"]), 0.0)
                        last[(name, r["seed"])] += float(r[key])
    lr = json.loads((Path(run) / "config.json").read_text())["config"]["lr"]
    for name in dict.fromkeys(n for n, _ in per):
        total = np.array([v for (n, _), v in per.items() if n == name])
        tail = np.array([v for (n, _), v in last.items() if n == name])
        yield ("round 1 (results/bandit)", name, steps, lr, total.mean(), total.std(ddof=1),
               tail.mean(), float("nan"))


def main(folder, run="results/bandit"):
    rows = list(probe_rows(folder))
    steps = rows[0][2] if rows else 10000
    rows = list(round1_rows(run, steps)) + rows
    print(f"| probe | agent | lr | regret at {steps:,} (mean ± sd, 5 seeds) | last {steps // 10:,}"
          " steps | eats poisonous, last tenth |")
    print("|---|---|---|---|---|---|")
    for probe, name, _, lr, mean, sd, tail, poison in rows:
        p = "" if np.isnan(poison) else f"{100 * poison:.1f}%"
        print(f"| {probe} | {name} | {lr:g} | {mean:,.0f} ± {sd:,.0f} | {tail:,.0f} | {p} |")


if __name__ == "__main__":
    main(*sys.argv[1:])
