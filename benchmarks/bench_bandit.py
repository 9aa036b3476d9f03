"""Speed of the Mushroom bandit's agents: minibatch updates per second.

The paper's protocol costs 64 updates (minibatches of 64) per interaction, 3.2 million
per agent over 50,000 steps. Measured in this one process:

- the baseline: one agent in a Gluon loop (``bbb_gluon.bandit.ThompsonAgent``, a BBBStep
  on the fused engine where it builds, and ``GreedyAgent``, a hybridized network and a
  Trainer), ``--gluon-steps`` interactions each;
- the stacked engine (``StackedAgents``): the paper's 4 agents x ``--seeds`` seeds advanced
  together by the compiled kernels, ``--steps`` interactions, on 1 thread and on all
  threads (``--threads``).

Prints updates per second for each, the ratio to the Gluon loop, and the wall time the
full experiment (50,000 steps, 4 agents x 5 seeds) would take at the measured rate. The
first steps (buffer still small) cost the same as later ones: every update is a minibatch
of 64 whatever the buffer holds.

    python benchmarks/bench_bandit.py                 # about two minutes
    python benchmarks/bench_bandit.py --tiny          # seconds: proves it still runs
"""

import argparse
import os
import sys
import time

from bbb_gluon import bandit
from bbb_gluon.data import load_mushroom

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu import print_cpu  # noqa: E402


def gluon_rate(env, config, kind, steps):
    agent = (bandit.ThompsonAgent(env, config, seed=0) if kind == "thompson"
             else bandit.GreedyAgent(env, config, seed=0))
    bandit.run_agent(agent, 2)  # warm-up: builds kernels, hybridizes
    start = time.perf_counter()
    bandit.run_agent(agent, steps, seed=1)
    seconds = time.perf_counter() - start
    engine = getattr(getattr(agent, "step", None), "engine", "hybridized net + Trainer")
    return steps * config.updates / seconds, engine


def stacked_rate(env, config, steps, threads):
    stacked = bandit.StackedAgents(config, env)
    stacked.run(2, threads=threads)  # warm-up
    start = time.perf_counter()
    stacked.run(steps, threads=threads)
    seconds = time.perf_counter() - start
    return stacked.num_agents * steps * config.updates / seconds


def main():
    print_cpu()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200, help="stacked-engine interactions")
    p.add_argument("--gluon-steps", type=int, default=10, help="Gluon-loop interactions")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--data-dir", default=None, help="folder with mushroom/ "
                                                    "(default $BBB_GLUON_DATA)")
    p.add_argument("--tiny", action="store_true", help="a few steps, 2 seeds")
    args = p.parse_args()
    if args.tiny:
        args.steps, args.gluon_steps, args.seeds = 5, 1, 2
    env = bandit.MushroomBandit(load_mushroom(args.data_dir))
    config = bandit.BanditConfig(seeds=tuple(range(args.seeds)))
    kinds = {spec.kind for spec in config.agents}
    print(f"protocol: {config.updates} updates of {config.batch} per step, 2 x "
          f"{config.hidden} ReLU, {len(config.agents)} agents x {args.seeds} seeds")
    gluon = {}
    for kind in sorted(kinds):
        rate, engine = gluon_rate(env, config, kind, args.gluon_steps)
        gluon[kind] = rate
        print(f"Gluon loop, one {kind} agent ({engine}): {rate:,.0f} updates/s")
    # the Gluon loop's rate for the experiment's mix of agents
    mix = [spec.kind for spec in config.agents]
    per_update = sum(1 / gluon[k] for k in mix) / len(mix)
    base = 1 / per_update
    print(f"Gluon loop, the experiment's mix of agents: {base:,.0f} updates/s")
    total = 50000 * config.updates * len(config.agents) * 5
    print(f"  the full experiment (50,000 steps, {len(config.agents)} agents x 5 seeds) "
          f"would take {total / base / 3600:,.1f} h in one Gluon loop")
    for threads in sorted({1, args.threads}):
        rate = stacked_rate(env, config, args.steps, threads)
        print(f"stacked engine, {threads} thread(s): {rate:,.0f} updates/s = "
              f"{rate / base:.1f}x the Gluon loop; the full experiment: "
              f"{total / rate / 60:,.0f} min")


if __name__ == "__main__":
    main()
