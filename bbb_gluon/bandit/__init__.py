r"""Thompson sampling on the Mushroom bandit (Blundell et al., 2015, §5.3).

An agent is shown one mushroom at a time (a row of UCI Mushroom, drawn uniformly with
replacement) and decides whether to eat it. Eating an edible mushroom pays +5; eating a
poisonous one pays −35 with probability ½, else +5; not eating pays 0. The oracle eats
exactly the edible ones, so the regret of a step is the oracle's reward (5 or 0) minus the
reward received: 5 for an edible mushroom left, 35 for an unlucky poisonous meal, and −5
for a lucky one (cumulative regret can step down).

Each agent is a network context (one-hot) + action (one-hot) → 2 × 100 ReLU → 1 (the
expected reward), trained after every interaction with ``updates`` minibatch updates of
``batch`` items drawn from a buffer of its last ``capacity`` interactions:

* **Bayes by Backprop with Thompson sampling**: a posterior over all weights, trained on
  the mean Gaussian negative log-likelihood of the minibatch plus the complexity cost
  divided by N, the number of interactions seen so far (``complexity_over="seen"``: the
  buffer stands in for everything observed, so the posterior narrows as evidence
  accumulates) or the number of items in the buffer (``"buffer"``: the buffer as the data
  set, which keeps the complexity cost's weight at 1/4,096 for ever). To decide, it
  samples the weights (``act_samples`` times, averaging the predicted rewards) and takes
  the better action.
* **ε-greedy**: the same network without a posterior, trained on the same likelihood; it
  takes the better action under its weights, or a random one with probability ε.

Two engines run the same agents:

* :class:`StackedAgents` runs every agent and seed of an experiment in one compiled call
  per chunk of steps (``_kernels/bandit.cc``, one OpenMP thread per agent at a time). The
  paper's protocol is 3.2 million minibatch updates per agent and run; this is the engine
  that makes its 20 runs fit in an hour on two cores. :func:`run_bandit` drives it, with
  checkpoints, exact resume and the files of a run folder.
* :class:`ThompsonAgent` and :class:`GreedyAgent` are the same agents written with Gluon
  (a :class:`~bbb_gluon.BBBStep` with a :class:`~bbb_gluon.GaussianNLLLoss`, or a
  ``gluon.Trainer``): a loop of your own, the readable version, and the baseline of
  ``benchmarks/bench_bandit.py``. Tests check that both compute the same gradients.
"""

from .agents import GreedyAgent, ThompsonAgent, build_reward_net, run_agent
from .config import GREEDY_LR, PAPER_AGENTS, AgentSpec, BanditConfig
from .engine import BanditCheckpointError, StackedAgents
from .environment import EAT, PASS, MushroomBandit, ReplayBuffer
from .runner import BanditDiverged, BanditInterrupted, BanditResult, run_bandit

__all__ = [
    "AgentSpec", "BanditConfig", "BanditResult", "MushroomBandit", "ReplayBuffer",
    "StackedAgents", "ThompsonAgent", "GreedyAgent", "run_bandit", "run_agent",
    "build_reward_net", "PAPER_AGENTS", "GREEDY_LR", "BanditCheckpointError", "BanditInterrupted",
    "BanditDiverged",
    "EAT", "PASS",
]
