"""What the bandit's round-3 probes and full run are judged by (issue 34), read from run
folders' steps.csv.gz: per agent, cumulative regret at the last step (mean ± sd over seeds),
regret in the last 1,000 steps, poisonous meals in the last tenth of the steps and how many
of those had an odour that only poisonous mushrooms have (found in the data, not listed
here), and, for a paired comparison by seed, each agent's difference from a chosen one.

    python experiments/bandit_round3_table.py table runs/probes3/*          # markdown rows
    python experiments/bandit_round3_table.py odours RUN [--after 25000]    # meals by odour
    python experiments/bandit_round3_table.py paired RUN [RUN ...] [--base NAME] [--at STEP]
    python experiments/bandit_round3_table.py snapshot RUN OUT   # an unfinished run so far
    python experiments/bandit_round3_table.py figure RUN [RUN ...] --out FILE.png

``paired`` pairs agents by seed across the folders given (the same seed shows every agent
the same mushrooms and the same luck, whatever folder it ran in).
"""

import argparse
import gzip
import json
from pathlib import Path

import numpy as np

from bbb_gluon.data import load_mushroom

ODOUR_NAMES = {"a": "almond", "l": "anise", "c": "creosote", "y": "fishy", "f": "foul",
               "m": "musty", "n": "none", "p": "pungent", "s": "spicy"}  # agaricus-lepiota.names


def odours(mushrooms):
    """Each mushroom's odour (its full name, from the .names file's letters), ``(rows,)``,
    and the set of odours that only poisonous mushrooms have in the data."""
    cols = np.array(mushrooms.columns)[mushrooms.features]  # (rows, 22) "attribute=value"
    j = [k for k in range(cols.shape[1]) if cols[0, k].startswith("odor=")]
    if len(j) != 1:
        raise ValueError("the data has no single odour attribute")
    odour = np.array([ODOUR_NAMES.get(c.split("=")[1], c) for c in cols[:, j[0]]])
    poisonous_only = {o for o in set(odour) if not mushrooms.edible[odour == o].any()}
    return odour, poisonous_only


def read_steps(run):
    """A run folder's steps.csv.gz as arrays: ``seeds (S,)``, ``rows (S, T)`` and per agent
    ``{name: (actions (S, T), regret (S, T))}``."""
    with gzip.open(Path(run) / "steps.csv.gz", "rt") as f:
        header = f.readline().strip().split(",")
        table = np.loadtxt(f, delimiter=",", dtype=np.int64, ndmin=2)
    seeds = np.unique(table[:, 0])
    T = len(table) // len(seeds)
    by = table.reshape(len(seeds), T, -1)
    seeds = by[:, 0, 0]
    agents = {}
    for k, col in enumerate(header):
        if col.endswith(":action"):
            agents[col[:-len(":action")]] = (by[:, :, k], by[:, :, k + 2])
    return seeds, by[:, :, 2], agents


def judge(run, mushrooms):
    """Per agent of a run folder: the numbers issue 34 judges probes by (see the module)."""
    odour, bad = odours(mushrooms)
    seeds, rows, agents = read_steps(run)
    T = rows.shape[1]
    tenth = slice(T - T // 10, T)
    config = json.loads((Path(run) / "config.json").read_text())["config"]
    out = {}
    for name, (actions, regret) in agents.items():
        spec = next(s for s in config["agents"] if s["name"] == name)
        final = regret.sum(1)
        poisoned = (actions[:, tenth] == 1) & ~mushrooms.edible[rows[:, tenth]]
        obvious = poisoned & np.isin(odour[rows[:, tenth]], sorted(bad))
        out[name] = {
            "steps": T, "seeds": [int(s) for s in seeds],
            "lr": spec["lr"] if spec["lr"] is not None else config["lr"],
            "optimizer": config["optimizer"],
            "final_mean": float(final.mean()),
            "final_sd": float(final.std(ddof=1)) if len(final) > 1 else 0.0,
            "final_per_seed": [int(x) for x in final],
            "last_1000": float(regret[:, -1000:].sum(1).mean()),
            "poisonous_meals_last_tenth": int(poisoned.sum()),
            "of_them_poisonous_only_odour": int(obvious.sum()),
            "poisonous_shown_last_tenth": int((~mushrooms.edible[rows[:, tenth]]).sum()),
        }
    return out


def table(runs, mushrooms):
    print("| probe | agent | optimiser, lr | regret at last step (mean ± sd) | last 1,000 steps"
          " | poisonous eaten, last tenth (share) | of them, poisonous-only odour |")
    print("|---|---|---|---|---|---|---|")
    for run in runs:
        for name, d in judge(run, mushrooms).items():
            share = d["poisonous_meals_last_tenth"] / max(1, d["poisonous_shown_last_tenth"])
            print(f"| {Path(run).name} | {name} | {d['optimizer']} {d['lr']:g} | "
                  f"{d['final_mean']:,.0f} ± {d['final_sd']:,.0f} | {d['last_1000']:,.0f} | "
                  f"{d['poisonous_meals_last_tenth']:,} ({100 * share:.1f}%) | "
                  f"{d['of_them_poisonous_only_odour']:,} |")


def odour_breakdown(run, mushrooms, after=None):
    """Per agent: the poisonous meals after step ``after`` (default: the last tenth), by
    odour, summed over seeds."""
    odour, bad = odours(mushrooms)
    seeds, rows, agents = read_steps(run)
    T = rows.shape[1]
    after = T - T // 10 if after is None else after
    out = {"after_step": after, "poisonous_only_odours": sorted(bad), "agents": {}}
    for name, (actions, _) in agents.items():
        eaten = (actions[:, after:] == 1) & ~mushrooms.edible[rows[:, after:]]
        kinds, counts = np.unique(odour[rows[:, after:]][eaten], return_counts=True)
        pairs = sorted(zip(kinds.tolist(), counts.tolist(), strict=True), key=lambda kc: -kc[1])
        out["agents"][name] = {
            "poisonous_meals": int(eaten.sum()),
            "poisonous_only_odour": sum(c for k, c in pairs if k in bad),
            "by_odour": dict(pairs),
            "per_seed": dict(zip(seeds.tolist(), eaten.sum(1).tolist(), strict=True))}
    return out


def paired(runs, base, at=None):
    """``base``'s cumulative regret minus every other agent's, at step ``at`` (default: the
    last step of the shortest run), paired by seed over the folders ``runs`` (the same seed
    shows every agent the same mushrooms and luck); a name met again in a later folder is
    suffixed with that folder's name."""
    tables = [(Path(run).name, *read_steps(run)) for run in runs]
    at = at or min(rows.shape[1] for _, _, rows, _ in tables)
    final = {}
    for folder, seeds, _, agents in tables:
        for name, (_, regret) in agents.items():
            key = name if name not in final else f"{name} ({folder})"
            final[key] = dict(zip(seeds.tolist(), regret[:, :at].sum(1).tolist(), strict=True))
    out = {}
    for name, per in final.items():
        if name == base:
            continue
        common = sorted(set(per) & set(final[base]))
        d = np.array([final[base][s] - per[s] for s in common], np.float64)
        se = d.std(ddof=1) / np.sqrt(len(d))
        out[name] = {"at_step": at, "seeds": common, "base_minus_agent_mean": float(d.mean()),
                     "standard_error": float(se), "in_standard_errors": float(d.mean() / se),
                     "base_lower_in": int((d < 0).sum()),
                     "base_minus_agent_per_seed": [int(x) for x in d]}
    return out


def snapshot(run, out, data_dir=None):
    """The files of a finished run (steps.csv.gz, regret.csv, metrics.json, regret.png)
    written into ``out`` from the checkpoint of an unfinished one, for its first ``t``
    steps; the run itself is left as it is (continue it with ``bbb-gluon bandit --out RUN
    --resume``)."""
    from bbb_gluon import bandit
    from bbb_gluon.bandit.runner import _write_outputs

    run, out = Path(run), Path(out)
    config = bandit.BanditConfig.from_json(json.loads((run / "config.json").read_text())
                                           ["config"])
    with np.load(run / "checkpoint.npz") as z:
        t, seconds = int(z["t"]), float(z["seconds"])
        rows, actions, rewards = (z[k][:, :t] for k in ("rows", "actions", "rewards"))
    env = bandit.MushroomBandit(load_mushroom(data_dir))
    S, A = len(config.seeds), len(config.agents)
    rows, actions, rewards = (x.reshape(S, A, t) for x in (rows, actions, rewards))
    regret = np.stack([env.regret(rows[s, j], actions[s, j], env.draw(config.seeds[s], 0, t)[1])
                       for s in range(S) for j in range(A)]).reshape(S, A, t)
    result = bandit.BanditResult(config, rows, actions, rewards, regret,
                                 env.edible.astype(bool), seconds, out)
    out.mkdir(parents=True, exist_ok=True)
    _write_outputs(result, env, out)
    (out / "config.json").write_text((run / "config.json").read_text())
    print(f"{run}: {t:,} of {config.steps:,} steps, {seconds:.0f} s of kernel time; wrote {out}")


def figure(runs, out):
    """Every agent's mean cumulative regret over its seeds, from the folders' regret.csv,
    on one set of axes (agents of different folders side by side)."""
    import csv

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for run in runs:
        seeds = len(json.loads((Path(run) / "config.json").read_text())["config"]["seeds"])
        with open(Path(run) / "regret.csv") as f:
            rows = list(csv.DictReader(f))
        steps = [int(r["step"]) for r in rows]
        for name in [c[:-5] for c in rows[0] if c.endswith(":mean")]:
            ax.plot(steps, [float(r[f"{name}:mean"]) for r in rows],
                    label=f"{name} ({seeds} seeds)")
    ax.set_xlabel("step")
    ax.set_ylabel("cumulative regret (mean over seeds)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("table", "odours", "paired", "snapshot", "figure"))
    p.add_argument("runs", nargs="+")
    p.add_argument("--after", type=int, default=None)
    p.add_argument("--base", default="bayes-by-backprop")
    p.add_argument("--at", type=int, default=None, help="paired: compare at this step")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", default="regret_all.png", help="figure: the PNG to write")
    a = p.parse_args()
    if a.what == "figure":
        figure(a.runs, a.out)
        return
    if a.what == "paired":
        print(json.dumps(paired(a.runs, a.base, a.at), indent=2))
        return
    if a.what == "snapshot":
        snapshot(*a.runs, data_dir=a.data_dir)
        return
    mushrooms = load_mushroom(a.data_dir)
    if a.what == "table":
        table(a.runs, mushrooms)
    else:
        for run in a.runs:
            print(json.dumps(odour_breakdown(run, mushrooms, a.after), indent=2))


if __name__ == "__main__":
    main()
