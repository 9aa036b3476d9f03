"""The screening grid's table, and how well the screening schedule ranks the committed
600-epoch runs (experiments/screen.sh; docs/RESULTS.md, "Screening the prior grid").

    python experiments/screen_table.py ../exp-grid/runs/screen results/screen-grid

Writes OUT/grid.csv (every scored screening run: validation and test error at the end of
its 50 epochs, unpruned and with 95% of the weights removed by |mu|/sigma and by |mu|) and
OUT/agreement.txt (for the settings that also ran 600 epochs: both rankings, Spearman's rank
correlation for the unpruned and the 95%-removed error, and the worst swapped pair).
"""
import csv
import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent.parent / "results"
# screening run -> the committed 600-epoch run of the same setting
COMMITTED = {
    "pi0.75-s1e0-s2e8": "mnist-bbb-recipe-400",
    "recipe-seed1": "mnist-bbb-recipe-400-seed1",
    "pi0.75-s1e1-s2e8": "mnist-bbb-lever-sigma1-e1-400",
    "pi0.75-s1e0-s2e6": "mnist-bbb-lever-sigma2-e6-400",
    "pi0.75-s1e1-s2e6": "mnist-bbb-lever-s1e1-s2e6-400",
    "lr1e-4": "mnist-bbb-lever-lr1e-4-400",
    "rho-lr10": "mnist-bbb-lever-rho-lr10-400",
    "rho-wide": "mnist-bbb-lever-rho-wide-400",
    "gaussian": "mnist-bbb-gaussian-recipe-400",
}
COLUMNS = ["valid_error", "valid_error_95_snr", "valid_error_95_abs_mu", "test_error",
           "test_error_95_snr", "test_error_95_abs_mu"]


def ranks(values):
    """Ranks from 1, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    va = sum((x - ma) ** 2 for x in ra) ** 0.5
    vb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return cov / (va * vb)


def worst_swap(names, short, full):
    """The pair the short run orders against the 600-epoch runs, by the largest gap in the
    600-epoch error."""
    worst = None
    for i in range(len(names)):
        for j in range(len(names)):
            if short[i] < short[j] and full[i] > full[j]:
                gap = full[i] - full[j]
                if worst is None or gap > worst[0]:
                    worst = (gap, names[i], names[j])
    return worst


def committed(run):
    folder = RESULTS / run
    end = json.loads((folder / "metrics.json").read_text())["end_of_training"]
    pruned = None
    for row in csv.DictReader(open(folder / "pruning.csv")):
        if abs(float(row["fraction"]) - 0.95) < 1e-9:
            pruned = float(row["error_by_snr"])
    return end["test_error_means"], pruned


def main(screen_dir, out):
    screen_dir, out = Path(screen_dir), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for path in sorted(screen_dir.glob("*/screen.json")):
        rows.append({"setting": path.parent.name, **json.loads(path.read_text())})
    with open(out / "grid.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["setting", "epochs", *COLUMNS])
        for r in sorted(rows, key=lambda r: r["valid_error"]):
            w.writerow([r["setting"], r["epoch"], *(f"{r[c]:.4f}" for c in COLUMNS)])
    pairs = [(r["setting"], r, committed(COMMITTED[r["setting"]]))
             for r in rows if r["setting"] in COMMITTED]
    lines = [f"{len(rows)} screening runs scored; {len(pairs)} of them have a committed "
             "600-epoch run of the same setting.", "",
             f"{'setting':20s} {'screen valid':>12s} {'screen valid 95%':>16s} "
             f"{'600-ep test':>11s} {'600-ep test 95%':>15s}"]
    for name, r, (full, pruned) in sorted(pairs, key=lambda p: p[2][0]):
        lines.append(f"{name:20s} {100 * r['valid_error']:11.2f}% "
                     f"{100 * r['valid_error_95_snr']:15.2f}% {100 * full:10.2f}% "
                     f"{100 * pruned:14.2f}%")
    if len(pairs) >= 3:
        names = [p[0] for p in pairs]
        for label, short_key, idx in (("unpruned", "valid_error", 0),
                                      ("95% removed by |mu|/sigma", "valid_error_95_snr", 1)):
            short = [p[1][short_key] for p in pairs]
            full = [p[2][idx] for p in pairs]
            lines += ["", f"{label}: Spearman rank correlation {spearman(short, full):+.2f} "
                          f"over {len(pairs)} settings"]
            swap = worst_swap(names, short, full)
            if swap:
                lines.append(f"  worst swap: the screen puts {swap[1]} ahead of {swap[2]}, "
                             f"which is {100 * swap[0]:.2f} points worse at 600 epochs")
            else:
                lines.append("  no pair is swapped")
    (out / "agreement.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(*sys.argv[1:3])
