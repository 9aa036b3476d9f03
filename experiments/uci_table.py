"""The UCI benchmark's results beside every published column, as Markdown tables.

Reads ``results/uci/summary.json`` (experiments/uci_benchmark.py) and the published numbers
from the two tables of ``uci/SOURCE.md`` in the data folder (``$BBB_GLUON_DATA``; parsed,
not copied, so a number here is the one printed there). For each dataset: our mean ±
standard error over the splits done, then each published column, and how many of our
standard errors ours lies above (+) or below (−) it, combined with theirs where they give
one (z = (ours − theirs) / sqrt(se_ours² + se_theirs²)).

    python experiments/uci_table.py [--summary results/uci/summary.json]
"""

import argparse
import json
import math
import os
import re
import sys
from pathlib import Path

NAMES = {"boston": "Boston", "concrete": "Concrete", "energy": "Energy", "kin8nm": "Kin8nm",
         "naval": "Naval", "power": "Power", "protein": "Protein", "wine": "Wine",
         "yacht": "Yacht"}
NUMBER = re.compile(r"([−-]?\d+\.\d+) ± (\d+\.\d+)")


def published(source):
    """{"rmse"|"log_likelihood": {dataset: {column: (mean, se)}}} from SOURCE.md's tables."""
    tables, key = {}, None
    for line in Path(source).read_text(encoding="utf-8").splitlines():
        if line.startswith("Test RMSE"):
            key = "rmse"
        elif line.startswith("Test log-likelihood"):
            key = "log_likelihood"
        elif key and line.startswith("| dataset"):
            columns = [c.strip() for c in line.strip("|").split("|")][1:]
            tables[key] = {"columns": columns, "rows": {}}
        elif key and line.startswith("| ") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            values = [NUMBER.fullmatch(c) for c in cells[1:]]
            tables[key]["rows"][cells[0]] = {
                col: (float(m[1].replace("−", "-")), float(m[2]))
                for col, m in zip(tables[key]["columns"], values, strict=True) if m}
    return tables


def table(summary, tables, key, higher_is_better):
    columns = tables[key]["columns"]
    head = ("| dataset | splits | ours | " + " | ".join(columns) + " |\n"
            + "|---" * (3 + len(columns)) + "|\n")
    rows = []
    for short, entry in summary.items():
        name = NAMES.get(short, short)
        ours = entry[key]
        se = ours["se"] or 0.0
        cells = []
        for col in columns:
            theirs = tables[key]["rows"].get(name, {}).get(col)
            if theirs is None:
                cells.append("–")
                continue
            spread = math.sqrt(se ** 2 + theirs[1] ** 2)
            sign = 1 if higher_is_better else -1
            # No bracket for one split of ours against a printed ± 0.00 (no spread), nor
            # where ours equals a column printed ± 0.00 at its two decimals (Naval's RMSE:
            # 0.00 there holds anything below 0.005).
            level = theirs[1] == 0 and abs(ours["mean"] - theirs[0]) < 0.005
            bracket = f" ({sign * (ours['mean'] - theirs[0]) / spread:+.1f})" \
                if spread > 0 and not level else ""
            cells.append(f"{theirs[0]:.2f} ± {theirs[1]:.2f}{bracket}")
        ours_text = f"{ours['mean']:.3f} ± {se:.3f}" if ours["se"] is not None \
            else f"{ours['mean']:.3f}"
        rows.append(f"| {name} | {entry['splits']} | {ours_text} | " + " | ".join(cells)
                    + " |")
    return head + "\n".join(rows) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--summary", default="results/uci/summary.json",
                        help="the benchmark's summary.json (default results/uci/summary.json)")
    parser.add_argument("--source", default=None,
                        help="SOURCE.md (default $BBB_GLUON_DATA/uci/SOURCE.md, else "
                             ".data/uci/SOURCE.md, which make data links)")
    args = parser.parse_args()
    source = args.source or os.path.join(os.environ.get("BBB_GLUON_DATA", ".data"), "uci",
                                         "SOURCE.md")
    for path, what in ((source, "the published columns (--source; make data links them)"),
                       (args.summary, "the results (--summary)")):
        if not os.path.isfile(path):
            print(f"uci_table: error: {path} not found: it holds {what}", file=sys.stderr)
            return 2
    tables = published(source)
    summary = json.loads(Path(args.summary).read_text())
    print("Test log-likelihood (higher is better; in brackets: standard errors above (+) or "
          "below (−) each column)\n")
    print(table(summary, tables, "log_likelihood", higher_is_better=True))
    print("Test RMSE (lower is better; in brackets: standard errors better (+) or worse (−) "
          "than each column)\n")
    print(table(summary, tables, "rmse", higher_is_better=False))
    print("95% interval coverage: " + ", ".join(
        f"{NAMES.get(k, k)} {100 * v['coverage']['mean']:.1f}%" for k, v in summary.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
