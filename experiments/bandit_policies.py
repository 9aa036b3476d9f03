"""What each agent of a bandit run would do now, on every mushroom of the data set.

Reads a run folder's checkpoint (``bbb-gluon bandit`` writes ``checkpoint.npz``) and, for
each agent and seed, evaluates its network on all 8,124 mushrooms:

- greedy agents: the action under their weights (ε aside);
- Bayes-by-Backprop agents: the action under the posterior means, and the probability
  that a Thompson decision (``act_samples`` draws averaged, as the agent acts) eats, from
  ``--draws`` draws; also the spread of σ.

It prints and writes (``--out``, JSON) the share of edible mushrooms left and of poisonous
ones eaten, and the regret per step those policies would cost on the uniform stream of
mushrooms (5 per edible left, 15 on average per poisonous eaten).

    python experiments/bandit_policies.py runs/bandit --out results/bandit/policies.json
"""

import argparse
import json
from pathlib import Path

import numpy as np

from bbb_gluon import bandit
from bbb_gluon.data import load_mushroom


def values(flat, X, width, hidden):
    """Predicted rewards of the rows of X (dense inputs) under flat weights (float64)."""
    (W1, b1), (W2, b2), (w3, b3) = bandit.engine.split_params(flat.astype(np.float64), width,
                                                              hidden)
    h = np.maximum(X @ W1.T + b1, 0)
    h = np.maximum(h @ W2.T + b2, 0)
    return (h @ w3.T + b3)[:, 0]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run")
    p.add_argument("--out", default=None)
    p.add_argument("--draws", type=int, default=100)
    p.add_argument("--data-dir", default=None)
    args = p.parse_args()
    run = Path(args.run)
    config = bandit.BanditConfig.from_json(json.loads((run / "config.json").read_text())
                                           ["config"])
    env = bandit.MushroomBandit(load_mushroom(args.data_dir))
    with np.load(run / "checkpoint.npz") as z:
        mu, rho, t = z["mu"], z["rho"], int(z["t"])
    n = env.num_rows
    rows = np.arange(n)
    X_pass = env.one_hot(rows, np.zeros(n, np.int64))
    X_eat = env.one_hot(rows, np.ones(n, np.int64))
    edible = env.edible == 1
    rng = np.random.default_rng(0)
    report = {"step": t, "agents": {}}

    def cost(eat_prob):
        left = float((1 - eat_prob[edible]).mean())
        eaten = float(eat_prob[~edible].mean())
        per_step = 5 * left * edible.mean() + 15 * eaten * (~edible).mean()
        return {"edible_left": left, "poisonous_eaten": eaten, "regret_per_step": per_step}

    for i, spec in enumerate(a for _ in config.seeds for a in config.agents):
        w = mu[i]
        gap = values(w, X_eat, env.context_width, config.hidden) - \
            values(w, X_pass, env.context_width, config.hidden)
        entry = {"means": cost((gap > 0).astype(float))}
        if spec.kind == "thompson":
            sigma = np.logaddexp(0.0, rho[i].astype(np.float64))
            eat = np.zeros(n)
            for _ in range(args.draws):
                total = np.zeros(n)
                for _ in range(config.act_samples):
                    draw = w + sigma * rng.standard_normal(w.shape)
                    total += values(draw, X_eat, env.context_width, config.hidden) - \
                        values(draw, X_pass, env.context_width, config.hidden)
                eat += total > 0
            entry["thompson"] = cost(eat / args.draws)
            entry["sigma_quantiles_10_50_90"] = [float(q) for q in
                                                 np.quantile(sigma, [0.1, 0.5, 0.9])]
        report["agents"].setdefault(spec.name, []).append(entry)

    for name, entries in report["agents"].items():
        for policy in ("means", "thompson"):
            if policy not in entries[0]:
                continue
            left = np.mean([e[policy]["edible_left"] for e in entries])
            eaten = np.mean([e[policy]["poisonous_eaten"] for e in entries])
            per = np.mean([e[policy]["regret_per_step"] for e in entries])
            print(f"{name:18s} {policy:9s} edible left {100 * left:5.2f}%  poisonous eaten "
                  f"{100 * eaten:5.2f}%  regret per step {per:.3f}  (mean of "
                  f"{len(entries)} seeds, step {t})")
        if "sigma_quantiles_10_50_90" in entries[0]:
            q = np.mean([e["sigma_quantiles_10_50_90"] for e in entries], axis=0)
            print(f"{name:18s} sigma 10/50/90%: {q[0]:.4f} / {q[1]:.4f} / {q[2]:.4f}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
