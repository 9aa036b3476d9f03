"""Short-horizon probes behind the bandit's settings (docs/RESULTS.md, "The Mushroom
bandit"): each named setting on seeds 0 and 1, one thread, printing mean cumulative regret
at step 1,000 and at the end, and over the last 1,000 steps. Logs: results/bandit/probes/.

    OMP_NUM_THREADS=1 python experiments/bandit_probes.py 3000 greedies mix-s1=1 gauss-1
    OMP_NUM_THREADS=1 python experiments/bandit_probes.py 10000 seen-gauss-1

They ran (at commits 297205c and just before it: the defaults then were the mixture prior
and the complexity over the buffer, which is why settings name what differs from those)
four at a time beside other work, so the seconds printed are not timings. The settings are
written with the package's prior classes since the bandit shares them (then: BanditConfig's
prior="mixture", prior_sigma1=..., which its configurations still read from JSON).
"""
import math
import sys
import time

from bbb_gluon import GaussianPrior, ScaleMixturePrior, bandit, data

BBB = (bandit.AgentSpec("bbb", "thompson"),)
GREEDY = (bandit.AgentSpec("1%", "greedy", 0.01), bandit.AgentSpec("5%", "greedy", 0.05),
          bandit.AgentSpec("greedy", "greedy", 0.0))
E1 = math.exp(-1)
E6 = math.exp(-6)


def mixture(sigma1=1.0):
    return ScaleMixturePrior(0.5, sigma1, E6)


PROBES = {  # name: (agents, settings that differ from the mixture / buffer defaults then)
    "greedies": (GREEDY, {}),
    "mix-s1=1": (BBB, {}),
    "mix-s1=e-1": (BBB, {"prior": mixture(E1)}),
    "mix-s1=e-2": (BBB, {"prior": mixture(math.exp(-2))}),
    "gauss-1": (BBB, {"prior": GaussianPrior(1.0)}),
    "gauss-0.3": (BBB, {"prior": GaussianPrior(0.3)}),
    "mix-s1=e-1-noise0.5": (BBB, {"prior": mixture(E1), "noise_sigma": 0.5}),
    "mix-s1=e-1-noise3": (BBB, {"prior": mixture(E1), "noise_sigma": 3.0}),
    "mix-s1=e-1-noise10": (BBB, {"prior": mixture(E1), "noise_sigma": 10.0}),
    "seen-gauss-1": (BBB, {"prior": GaussianPrior(1.0), "complexity_over": "seen"}),
    "seen-mix-1": (BBB, {"complexity_over": "seen"}),
    "seen-mix-e-1": (BBB, {"prior": mixture(E1), "complexity_over": "seen"}),
    "seen-mix-e-1-noise0.5": (BBB, {"prior": mixture(E1), "complexity_over": "seen",
                                    "noise_sigma": 0.5}),
}


def main():
    env = bandit.MushroomBandit(data.load_mushroom())  # $BBB_GLUON_DATA/mushroom
    steps = int(sys.argv[1])
    for name in sys.argv[2:]:
        agents, kw = PROBES[name]
        kw = {"prior": mixture(), "complexity_over": "buffer", **kw}
        cfg = bandit.BanditConfig(steps=steps, seeds=(0, 1), agents=agents, **kw)
        start = time.time()
        cum = bandit.run_bandit(cfg, env, progress=False, threads=1).cumulative_regret
        for j, a in enumerate(agents):
            c = cum[:, j]
            print(f"{name:22s} {a.name:7s} regret@1000 {c[:, 999].mean():7.0f} @{steps} "
                  f"{c[:, -1].mean():7.0f} last1000 {(c[:, -1] - c[:, -1001]).mean():6.0f}  "
                  f"seeds {c[:, -1].tolist()}  {time.time() - start:.0f}s", flush=True)


if __name__ == "__main__":
    main()
