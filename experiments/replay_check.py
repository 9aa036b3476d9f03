"""Does a committed result replay here? Bit for bit where this machine matches the one it
ran on (CPU family, kernels' build, thread counts: docs/reliability.md), and otherwise
within the spread that chance alone gives.

    python experiments/replay_check.py bandit results/bandit            # first 1,500 steps
    python experiments/replay_check.py train results/mnist-bbb-recipe-400 --epochs 1

``bandit``: reruns the folder's configuration for its first ``--steps`` steps on every
seed; prints how many actions equal the committed ones, and for each agent the mean
cumulative regret at the last step against the committed one. The check passes when each
agent's difference is within three combined standard errors of the two means over seeds
(actions that differ in one bit become another run of the same agent: the seeds' spread
is the scale).

``train``: reruns the run folder's ``config.json`` for its first ``--epochs`` epochs and
compares each epoch's row of ``history.json``: the costs within ``--rtol`` (default 1%)
relative, the validation errors within ``--error-points`` (default 0.5) percentage points.

Either says first what differs between the committed run's machine record and this
machine (or that the run was committed before records were kept), and whether the
replay was bit-identical. Exit status 0: within the tolerance; 1: not; 2: bad input.
"""

import argparse
import dataclasses
import gzip
import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np

from bbb_gluon import machine


def _say_machine(recorded, here):
    if recorded is None:
        print("machine: the committed run records none (committed before runs recorded "
              "their CPU, kernels' build and threads): bits may differ")
        return
    changed = machine.differences(recorded, here)
    print("machine: " + ("as recorded: a bit-for-bit replay is expected" if not changed
                         else "differs from the record (" + "; ".join(changed)
                         + "): a statistical replay is expected"))


def check_bandit(folder, steps):
    from bbb_gluon import bandit
    from bbb_gluon.data import load_mushroom

    config = bandit.BanditConfig.from_json(json.loads((folder / "config.json").read_text())
                                           ["config"])
    metrics = json.loads((folder / "metrics.json").read_text())
    if not 1 <= steps <= config.steps:
        raise ValueError(f"--steps must be 1 to the run's {config.steps}, got {steps}")
    _say_machine(metrics.get("machine"), machine.describe())
    names = [a.name for a in config.agents]
    seeds = list(config.seeds)
    committed_actions = np.zeros((len(seeds), len(names), steps), np.int64)
    committed_regret = np.zeros((len(seeds), len(names)))
    with gzip.open(folder / "steps.csv.gz", "rt") as f:
        header = f.readline().strip().split(",")
        at = {name: (header.index(f"{name}:action"), header.index(f"{name}:regret"))
              for name in names}
        for line in f:
            cells = line.split(",")
            s, t = seeds.index(int(cells[0])), int(cells[1])
            if t > steps:
                continue
            for j, name in enumerate(names):
                committed_actions[s, j, t - 1] = int(cells[at[name][0]])
                committed_regret[s, j] += int(cells[at[name][1]])
    env = bandit.MushroomBandit(load_mushroom())
    result = bandit.run_bandit(dataclasses.replace(config, steps=steps), env, progress=False,
                               plot=False)
    same = int((result.actions == committed_actions).sum())
    print(f"actions: {same} of {committed_actions.size} equal to the committed run's "
          f"({'bit for bit' if same == committed_actions.size else 'not bit for bit'})")
    replay = result.cumulative_regret[:, :, -1]
    ok = True
    for j, name in enumerate(names):
        a, b = committed_regret[:, j], replay[:, j]
        se = math.sqrt((a.var(ddof=1) + b.var(ddof=1)) / len(seeds)) if len(seeds) > 1 \
            else 0.0
        within = abs(b.mean() - a.mean()) <= 3 * se
        ok &= within
        print(f"{name}: cumulative regret after {steps} steps {b.mean():.1f} here, "
              f"{a.mean():.1f} committed (mean of {len(seeds)} seeds; 3 combined standard "
              f"errors {3 * se:.1f}): {'within' if within else 'OUTSIDE'}")
    return ok


def check_train(folder, epochs, rtol, error_points):
    from bbb_gluon import data
    from bbb_gluon.training import MLP, TrainConfig, fit

    stored = json.loads((folder / "config.json").read_text())
    history = json.loads((folder / "history.json").read_text())
    if not 1 <= epochs <= len(history):
        raise ValueError(f"--epochs must be 1 to the run's {len(history)}, got {epochs}")
    config = dataclasses.replace(TrainConfig.from_dict(stored["train"]), epochs=epochs)
    mlp = MLP.from_dict(stored["mlp"])
    d = stored["data"]
    splits = data.load_dataset(d["dataset"], transform=d["transform"],
                               num_valid=d["num_valid"], seed=config.seed,
                               subset=d.get("subset"))
    with tempfile.TemporaryDirectory() as tmp:
        result = fit(config, splits.train, splits.valid, net=mlp, run_dir=Path(tmp) / "run",
                     progress=False)
        here = json.loads((Path(tmp) / "run" / "config.json").read_text())["machines"][0]
    machines = stored.get("machines")
    _say_machine(machines[0] if machines else None, here)
    ok, identical = True, True
    for here, there in zip(result.history, history[:epochs], strict=True):
        for key in ("cost", "likelihood_cost", "complexity_cost"):
            if key not in there:
                continue
            identical &= here[key] == there[key]
            rel = abs(here[key] - there[key]) / max(abs(there[key]), 1e-12)
            within = rel <= rtol
            ok &= within
            print(f"epoch {here['epoch']} {key}: {here[key]:.6g} here, {there[key]:.6g} "
                  f"committed (relative difference {rel:.1e}): "
                  f"{'within' if within else 'OUTSIDE'} {rtol:g}")
        for key in ("valid_error", "valid_error_mc"):
            if there.get(key) is None:
                continue
            identical &= here[key] == there[key]
            points = 100 * abs(here[key] - there[key])
            within = points <= error_points
            ok &= within
            print(f"epoch {here['epoch']} {key}: {100 * here[key]:.2f}% here, "
                  f"{100 * there[key]:.2f}% committed: {'within' if within else 'OUTSIDE'} "
                  f"{error_points:g} points")
    print("bit for bit" if identical else "not bit for bit")
    return ok


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("kind", choices=("bandit", "train"))
    p.add_argument("folder", type=Path, help="a committed results/ folder")
    p.add_argument("--steps", type=int, default=1500, help="bandit steps (default 1500)")
    p.add_argument("--epochs", type=int, default=1, help="training epochs (default 1)")
    p.add_argument("--rtol", type=float, default=0.01,
                   help="relative tolerance of the costs (default 0.01)")
    p.add_argument("--error-points", type=float, default=0.5,
                   help="tolerance of the validation errors, in points (default 0.5)")
    args = p.parse_args(argv)
    if not (args.folder / "config.json").is_file():
        print(f"replay_check: error: {args.folder} holds no config.json", file=sys.stderr)
        return 2
    # The run's own threads, claimed before MXNet runs anything (as a resume does): the
    # same count is one condition of a bit-for-bit replay.
    from bbb_gluon import threads

    threads.claim(warn=False, threads=machine.recorded_threads(args.folder))
    try:
        ok = (check_bandit(args.folder, args.steps) if args.kind == "bandit"
              else check_train(args.folder, args.epochs, args.rtol, args.error_points))
    except (ValueError, KeyError, OSError) as e:
        print(f"replay_check: error: {e}", file=sys.stderr)
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
