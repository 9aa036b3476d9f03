"""The bandit's round-3 full run (issue 34; results/bandit-round3/): Bayes by Backprop and
every ε-greedy agent in one run folder, each at its own optimiser and learning rate, so that
the comparison is paired by seed.

    BBB_GLUON_DATA=... python experiments/bandit_round3_full.py OUT --seeds 10 --threads 1 \\
        --bbb "optimizer=adam lr=3e-4 adam_eps=1e-4" \\
        --greedy "greedy: optimizer=sgd lr=6.4e-3" --greedy "1%-greedy: ..." ...
        [--set "mu_init=0.1 rho_init=-5 ..."]

Interrupted (Ctrl-C, SIGTERM), it saves a checkpoint; continue it with
``bbb-gluon bandit --out OUT --resume [--threads N]``.
"""

import argparse
import ast
import dataclasses
import sys

from bbb_gluon import bandit
from bbb_gluon.data import load_mushroom


def settings(text):
    """``"a=1 b=x"`` as a dict, values read as Python literals where they are ones."""
    out = {}
    for item in text.split():
        key, _, value = item.partition("=")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def config_from(args):
    by_name = {a.name: a for a in bandit.PAPER_AGENTS}
    bbb = settings(args.bbb)
    agents = [by_name["bayes-by-backprop"]]  # at the configuration's optimizer and lr
    for g in args.greedy:
        name, _, rest = g.partition(":")
        agents.append(dataclasses.replace(by_name[name.strip()], **settings(rest)))
    return bandit.BanditConfig(steps=args.steps, seeds=tuple(range(args.seeds)),
                               agents=tuple(agents), **bbb, **settings(args.set))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=50000)
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--bbb", default="", help="Bayes by Backprop's settings (BanditConfig's "
                   "fields and its optimizer), e.g. 'optimizer=adam lr=3e-4 adam_eps=1e-4'")
    p.add_argument("--greedy", action="append", default=[],
                   help="'NAME: optimizer=... lr=...' for each epsilon-greedy agent to run")
    p.add_argument("--set", default="", help="other BanditConfig fields, shared by all")
    a = p.parse_args()
    config = config_from(a)
    print(config, flush=True)
    env = bandit.MushroomBandit(load_mushroom())
    try:
        result = bandit.run_bandit(config, env, out=a.out, progress=False, threads=a.threads)
    except bandit.BanditInterrupted as e:
        print(f"interrupted: {e}; continue with bbb-gluon bandit --out {a.out} --resume",
              file=sys.stderr)
        return e.exit_status
    for name, d in result.summary().items():
        print(f"{name:<20} {d['cumulative_regret']:>10,.0f} ± {d['cumulative_regret_std']:<8,.0f}"
              f" first 1000 steps {d['regret_first_1000']:,.0f}")
    print(f"{config.steps:,} steps × {len(config.seeds)} seeds in {result.seconds:.0f} s of "
          "kernel time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
