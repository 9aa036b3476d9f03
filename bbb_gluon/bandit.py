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
  per chunk of steps (``_fused/bandit.cc``, one OpenMP thread per agent at a time). The
  paper's protocol is 3.2 million minibatch updates per agent and run; this is the engine
  that makes its 20 runs fit in an hour on two cores. :func:`run_bandit` drives it, with
  checkpoints, exact resume and the files of a run folder.
* :class:`ThompsonAgent` and :class:`GreedyAgent` are the same agents written with Gluon
  (a :class:`~bbb_gluon.BBBStep` with a :class:`~bbb_gluon.loss.GaussianNLLLoss`, or a
  ``gluon.Trainer``): a loop of your own, the readable version, and the baseline of
  ``benchmarks/bench_bandit.py``. Tests check that both compute the same gradients.
"""

from __future__ import annotations

import csv
import ctypes
import gzip
import io
import json
import math
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from . import _files, fused
from ._checks import check_int, check_positive
from ._files import atomic_write_text
from .data import Mushrooms
from .loss import GaussianNLLLoss
from .posterior import Posterior
from .priors import GaussianPrior, ScaleMixturePrior
from .signals import stop_requests
from .step import BBBStep

__all__ = [
    "AgentSpec", "BanditConfig", "BanditResult", "MushroomBandit", "ReplayBuffer",
    "StackedAgents", "ThompsonAgent", "GreedyAgent", "run_bandit", "run_agent",
    "build_reward_net", "PAPER_AGENTS", "BanditCheckpointError", "BanditInterrupted", "EAT",
    "PASS",
]

EAT, PASS = 1, 0
_FLOAT32_SQRT_MAX = 1.8e19  # about sqrt(float32's largest): a square still fits
_MASK = (1 << 64) - 1


class BanditInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during :func:`run_bandit`: with a run folder, a checkpoint at
    step ``t`` was saved and ``resume=True`` continues; ``exit_status`` is the shell's
    status for the signal (130, 143)."""

    def __init__(self, message, t, signum):
        super().__init__(message)
        self.t = t
        self.exit_status = 128 + int(signum)


class BanditCheckpointError(ValueError):
    """A bandit run's checkpoint is unreadable or belongs to a different configuration."""


# ---------------------------------------------------------------- hashing (shared with C++)
def _mix64(z):
    """splitmix64's finaliser on uint64 arrays (the kernel's ``mix64``)."""
    z = np.asarray(z, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _key(*parts):
    """A 64-bit key from small non-negative integers (seed, stream, ...)."""
    k = np.uint64(0)
    with np.errstate(over="ignore"):
        for p in parts:
            k = _mix64(k ^ np.uint64(p & _MASK))
    return int(k)


def _stream(key, t0, t1):
    """Hashes of steps ``t0 .. t1 - 1`` under ``key``: a pure function of (key, t)."""
    with np.errstate(over="ignore"):
        return _mix64(np.uint64(key) + np.arange(t0, t1, dtype=np.uint64))


def _below(h, n):
    """Map 64-bit hashes to integers in [0, n) (multiply-shift on the top 32 bits)."""
    return ((h >> np.uint64(32)) * np.uint64(n)) >> np.uint64(32)


def _unit(h):
    """Map 64-bit hashes to float32 uniforms in [0, 1) (24 bits)."""
    return ((h >> np.uint64(8)) & np.uint64(0xFFFFFF)).astype(np.float32) / np.float32(2**24)


# ---------------------------------------------------------------- the environment
class MushroomBandit:
    """The Mushroom contextual bandit.

    The mushroom shown at step ``t`` and whether a poisonous meal then costs −35 are pure
    functions of ``(seed, t)``, so every agent of a seed meets the same mushrooms and the
    same luck (common random numbers), and a resumed run draws what it would have drawn.

    Parameters
    ----------
    mushrooms : bbb_gluon.data.Mushrooms
        From :func:`bbb_gluon.data.load_mushroom`.
    """

    def __init__(self, mushrooms: Mushrooms):
        if not isinstance(mushrooms, Mushrooms):
            raise TypeError("mushrooms must come from bbb_gluon.data.load_mushroom()")
        self.mushrooms = mushrooms
        self.features = np.ascontiguousarray(mushrooms.features, dtype=np.int32)
        self.edible = np.ascontiguousarray(mushrooms.edible, dtype=np.uint8)

    @property
    def num_rows(self):
        return len(self.edible)

    @property
    def context_width(self):
        return self.mushrooms.width

    def draw(self, seed, t0, t1):
        """``(rows, unlucky)`` for steps ``t0 .. t1 - 1``: the mushrooms shown, and 1
        where eating a poisonous one would pay −35 (else +5); ``int32`` and ``uint8``."""
        h = _stream(_key(seed, 1), t0, t1)
        rows = _below(h, self.num_rows).astype(np.int32)
        unlucky = ((h >> np.uint64(7)) & np.uint64(1)).astype(np.uint8)
        return rows, unlucky

    def reward(self, rows, actions, unlucky):
        """Rewards of eating (1) or not (0) the mushrooms ``rows``."""
        rows, actions = np.asarray(rows), np.asarray(actions)
        bad = (self.edible[rows] == 0) & (np.asarray(unlucky) != 0)
        return np.where(actions == EAT, np.where(bad, -35.0, 5.0), 0.0).astype(np.float32)

    def oracle_reward(self, rows):
        """What the oracle gets: 5 for an edible mushroom (it eats), 0 for a poisonous one."""
        return np.where(self.edible[np.asarray(rows)] != 0, 5.0, 0.0).astype(np.float32)

    def regret(self, rows, actions, unlucky):
        """Per-step regret: the oracle's reward minus the reward received."""
        return self.oracle_reward(rows) - self.reward(rows, actions, unlucky)

    def inputs(self, rows, actions):
        """The network's input columns ``(n, 23)``: the context's 22 ones and the action's
        (``width`` + action)."""
        rows = np.asarray(rows)
        act = self.context_width + np.asarray(actions, dtype=np.int32)
        return np.concatenate([self.features[rows], act[:, None]], axis=1).astype(np.int32)

    def one_hot(self, rows, actions):
        """The network's dense inputs ``(n, width + 2)``, float32."""
        cols = self.inputs(rows, actions)
        out = np.zeros((len(cols), self.context_width + 2), np.float32)
        np.put_along_axis(out, cols.astype(np.int64), 1.0, axis=1)
        return out


class ReplayBuffer:
    """The last ``capacity`` interactions ``(row, action, reward)``, oldest overwritten."""

    def __init__(self, capacity=4096):
        check_int(capacity, "capacity", 1)
        self.capacity = capacity
        self.rows = np.zeros(capacity, np.int32)
        self.actions = np.zeros(capacity, np.uint8)
        self.rewards = np.zeros(capacity, np.float32)
        self.count = 0  # interactions ever added

    def __len__(self):
        return min(self.count, self.capacity)

    def add(self, row, action, reward):
        slot = self.count % self.capacity
        self.rows[slot], self.actions[slot], self.rewards[slot] = row, action, reward
        self.count += 1

    def sample(self, n, rng):
        """``n`` items drawn uniformly with replacement: ``(rows, actions, rewards)``."""
        if len(self) == 0:
            raise ValueError("the buffer is empty")
        i = rng.integers(0, len(self), size=n)
        return self.rows[i], self.actions[i], self.rewards[i]


# ---------------------------------------------------------------- configuration
@dataclass(frozen=True)
class AgentSpec:
    """One agent: ``kind`` "thompson" (Bayes by Backprop) or "greedy" (ε-greedy)."""

    name: str
    kind: str
    epsilon: float = 0.0

    def __post_init__(self):
        if self.kind not in ("thompson", "greedy"):
            raise ValueError(f"agent kind must be 'thompson' or 'greedy', got {self.kind!r}")
        if not (isinstance(self.epsilon, (int, float)) and 0.0 <= self.epsilon <= 1.0):
            raise ValueError(f"epsilon must lie in [0, 1], got {self.epsilon!r}")
        if self.kind == "thompson" and self.epsilon:
            raise ValueError("a Thompson agent explores by sampling, not by epsilon")


PAPER_AGENTS = (
    AgentSpec("bayes-by-backprop", "thompson"),
    AgentSpec("greedy", "greedy", 0.0),
    AgentSpec("1%-greedy", "greedy", 0.01),
    AgentSpec("5%-greedy", "greedy", 0.05),
)
"""The agents of the paper's Figure 6."""


@dataclass(frozen=True)
class BanditConfig:
    """An experiment: agents × seeds, the paper's protocol and the choices it leaves open.

    The protocol (§5.3): ``steps`` interactions, a buffer of the last ``capacity``, and
    after each interaction ``updates`` minibatch updates of ``batch``; Thompson decisions
    average ``act_samples`` weight samples. The rest is ours (docs/RESULTS.md says how it
    was chosen): the optimiser and learning rate, the prior, the initialisation
    (μ ~ N(0, ``mu_init``²) for every agent of a seed, ρ = ``rho_init``) and the
    likelihood's noise ``noise_sigma`` (rewards are used as they are, −35 … 5), and what
    the complexity cost is divided by (``complexity_over``: "seen", the interactions so
    far, or "buffer", the items in the buffer).
    """

    steps: int = 50000
    seeds: tuple = (0, 1, 2, 3, 4)
    agents: tuple = PAPER_AGENTS
    hidden: int = 100
    capacity: int = 4096
    updates: int = 64
    batch: int = 64
    act_samples: int = 2
    optimizer: str = "adam"
    lr: float = 1e-3
    prior: str = "gaussian"
    prior_pi: float = 0.5
    prior_sigma1: float = 1.0
    prior_sigma2: float = math.exp(-6)
    prior_sigma: float = 1.0
    noise_sigma: float = 1.0
    mu_init: float = 0.1
    rho_init: float = -5.0
    complexity_over: str = "seen"

    def __post_init__(self):
        for name in ("steps", "hidden", "capacity", "updates", "batch", "act_samples"):
            check_int(getattr(self, name), name, 0 if name == "updates" else 1)
        seeds = tuple(self.seeds)
        if not seeds or any(isinstance(s, bool) or not isinstance(s, int) or s < 0
                            for s in seeds) or len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must be distinct non-negative ints, got {self.seeds!r}")
        object.__setattr__(self, "seeds", seeds)
        agents = tuple(a if isinstance(a, AgentSpec) else AgentSpec(**a) for a in self.agents)
        if not agents or len({a.name for a in agents}) != len(agents):
            raise ValueError("agents must be a non-empty sequence with distinct names")
        object.__setattr__(self, "agents", agents)
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"optimizer must be 'adam' or 'sgd', got {self.optimizer!r}")
        if self.complexity_over not in ("seen", "buffer"):
            raise ValueError(f"complexity_over must be 'seen' or 'buffer', got "
                             f"{self.complexity_over!r}")
        if self.prior not in ("mixture", "gaussian"):
            raise ValueError(f"prior must be 'mixture' or 'gaussian', got {self.prior!r}")
        for name in ("lr", "prior_sigma1", "prior_sigma2", "prior_sigma", "noise_sigma"):
            check_positive(getattr(self, name), name)
            # The kernels compute in float32 (and square the noise).
            if getattr(self, name) > _FLOAT32_SQRT_MAX:
                raise ValueError(f"{name} must be at most {_FLOAT32_SQRT_MAX:.3g}, got "
                                 f"{getattr(self, name)!r}")
        if isinstance(self.mu_init, bool) or not isinstance(self.mu_init, (int, float)) \
                or not (math.isfinite(self.mu_init) and self.mu_init >= 0) \
                or self.mu_init > _FLOAT32_SQRT_MAX:
            raise ValueError(f"mu_init must be a finite number in [0, "
                             f"{_FLOAT32_SQRT_MAX:.3g}], got {self.mu_init!r}")
        object.__setattr__(self, "mu_init", self.mu_init + 0.0)  # -0.0 is 0.0 (NumPy: < 0)
        if not 0.0 < self.prior_pi < 1.0:
            raise ValueError(f"prior_pi must lie in (0, 1), got {self.prior_pi!r}")
        if not (math.isfinite(self.rho_init) and abs(self.rho_init) <= 80):
            raise ValueError(f"rho_init must be a finite number in [-80, 80] (sigma = "
                             f"log(1 + exp(rho))), got {self.rho_init!r}")

    def make_prior(self):
        if self.prior == "mixture":
            return ScaleMixturePrior(self.prior_pi, self.prior_sigma1, self.prior_sigma2)
        return GaussianPrior(self.prior_sigma)

    def to_json(self):
        d = asdict(self)
        d["seeds"] = list(self.seeds)
        d["agents"] = [asdict(a) for a in self.agents]
        return d

    @classmethod
    def from_json(cls, d):
        d = dict(d)
        d["seeds"] = tuple(d["seeds"])
        d["agents"] = tuple(AgentSpec(**a) for a in d["agents"])
        return cls(**d)


# ---------------------------------------------------------------- the compiled engine
_SOURCE = Path(__file__).with_name("_fused") / "bandit.cc"
_lib_lock = threading.Lock()
_lib = {"handle": None, "reason": None}


class _Args(ctypes.Structure):
    _fields_ = (
        [(n, ctypes.c_int32) for n in (
            "A", "D", "H", "F", "P", "capacity", "batch", "updates", "act_samples",
            "optimizer", "prior_kind", "chunk", "complexity_over")]
        + [("t0", ctypes.c_int64)]
        + [(n, ctypes.c_float) for n in (
            "lr", "beta1", "beta2", "adam_eps", "inv_noise_var", "pi", "sigma1", "sigma2",
            "sigma")]
        + [(n, ctypes.c_void_p) for n in (
            "features", "edible", "rows", "unlucky", "explore_u", "explore_a", "epsilon",
            "bayes", "key", "mu", "rho", "m_mu", "v_mu", "m_rho", "v_rho", "buf_row",
            "buf_action", "buf_reward", "actions_out", "rewards_out", "loss_out")])


def kernels():
    """The compiled bandit kernels (built on first use), or raise RuntimeError saying why
    they cannot be built (no C++ compiler, or a failed compile)."""
    with _lib_lock:
        if _lib["handle"] is None and _lib["reason"] is None:
            cxx = fused.compiler()
            try:
                if cxx is None:
                    raise RuntimeError("no C++ compiler found (install g++ or set CXX)")
                lib = ctypes.CDLL(str(fused.build(cxx, _SOURCE, "bbb_bandit",
                                                  mxnet_library=False)))
                if lib.bandit_args_size() != ctypes.sizeof(_Args):
                    raise RuntimeError("bandit.cc and bandit.py disagree on BanditArgs")
                lib.bandit_run.argtypes = [ctypes.POINTER(_Args)]
                lib.bandit_grad.restype = ctypes.c_float
                lib.bandit_grad.argtypes = [ctypes.POINTER(_Args), ctypes.c_void_p,
                                            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32,
                                            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                            ctypes.c_void_p, ctypes.c_float, ctypes.c_void_p]
                _lib["handle"] = lib
            except Exception as e:  # reported to the caller, once
                _lib["reason"] = f"{type(e).__name__}: {e}"
        if _lib["handle"] is None:
            raise RuntimeError(f"the bandit kernels are unavailable: {_lib['reason']}")
        return _lib["handle"]


def _ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def num_params(width, hidden):
    """Parameters of one agent's network for a ``width``-wide context."""
    d = width + 2
    return d * hidden + hidden + hidden * hidden + hidden + hidden + 1


def split_params(flat, width, hidden):
    """A flat parameter vector (the kernel's layout) as Gluon's Dense arrays:
    ``[(weight (out, in), bias (out,)), ...]`` for the three layers."""
    d, h = width + 2, hidden
    o = np.cumsum([0, d * h, h, h * h, h, h, 1])
    flat = np.asarray(flat)
    return [(flat[o[0]:o[1]].reshape(d, h).T, flat[o[1]:o[2]]),
            (flat[o[2]:o[3]].reshape(h, h).T, flat[o[3]:o[4]]),
            (flat[o[4]:o[5]].reshape(1, h), flat[o[5]:o[6]])]


class StackedAgents:
    """Every agent of every seed of a :class:`BanditConfig`, advanced together.

    Agent ``i`` is ``config.agents[i % n_agents]`` under seed ``config.seeds[i //
    n_agents]``. State lives in NumPy arrays (the parameters, the optimiser's moments, the
    buffers); :meth:`run` advances every agent by a chunk of steps in one kernel call,
    with OpenMP threads over agents (``threads``, default ``OMP_NUM_THREADS`` or all).

    Parameters
    ----------
    config : BanditConfig
    env : MushroomBandit
    """

    STATE = ("mu", "rho", "m_mu", "v_mu", "m_rho", "v_rho", "buf_row", "buf_action",
             "buf_reward")

    def __init__(self, config: BanditConfig, env: MushroomBandit):
        self.lib = kernels()
        self.config, self.env = config, env
        c = config
        self.specs = [(seed, spec) for seed in c.seeds for spec in c.agents]
        A = len(self.specs)
        self.width = env.context_width
        P = num_params(self.width, c.hidden)
        self.P = P
        self.mu = np.empty((A, P), np.float32)
        for s, seed in enumerate(c.seeds):
            init = np.random.Generator(np.random.PCG64(_key(seed, 2))).normal(
                0.0, c.mu_init, size=P).astype(np.float32)
            # biases start at 0; every agent of a seed starts from the same weights
            for _, b in split_params(np.arange(P), self.width, c.hidden):
                init[b] = 0.0
            self.mu[s * len(c.agents):(s + 1) * len(c.agents)] = init
        self.rho = np.full((A, P), c.rho_init, np.float32)
        for name in ("m_mu", "v_mu", "m_rho", "v_rho"):
            setattr(self, name, np.zeros((A, P), np.float32))
        self.buf_row = np.zeros((A, c.capacity), np.int32)
        self.buf_action = np.zeros((A, c.capacity), np.uint8)
        self.buf_reward = np.zeros((A, c.capacity), np.float32)
        self.t = 0
        self.epsilon = np.array([spec.epsilon for _, spec in self.specs], np.float32)
        self.bayes = np.array([spec.kind == "thompson" for _, spec in self.specs], np.uint8)
        self.key = np.array([_key(seed, 3, i % len(c.agents)) for i, (seed, _) in
                             enumerate(self.specs)], np.uint64)

    @property
    def num_agents(self):
        return len(self.specs)

    def _args(self, chunk, t0, rows, unlucky, explore_u, explore_a, out):
        c = self.config
        prior = c.make_prior()
        a = _Args()
        a.A, a.D, a.H, a.F, a.P = (self.num_agents, self.width + 2, c.hidden,
                                   self.env.features.shape[1], self.P)
        a.capacity, a.batch, a.updates, a.act_samples = c.capacity, c.batch, c.updates, \
            c.act_samples
        a.optimizer = 1 if c.optimizer == "adam" else 0
        a.prior_kind = 1 if isinstance(prior, ScaleMixturePrior) else 2
        a.chunk, a.t0 = chunk, t0
        a.complexity_over = 1 if c.complexity_over == "seen" else 0
        a.lr, a.beta1, a.beta2, a.adam_eps = c.lr, 0.9, 0.999, 1e-8
        a.inv_noise_var = 1.0 / c.noise_sigma**2
        a.pi, a.sigma1, a.sigma2, a.sigma = c.prior_pi, c.prior_sigma1, c.prior_sigma2, \
            c.prior_sigma
        self._keep = [self.env.features, self.env.edible, rows, unlucky, explore_u,
                      explore_a, self.epsilon, self.bayes, self.key, *out]
        for name, arr in zip(("features", "edible", "rows", "unlucky", "explore_u",
                              "explore_a", "epsilon", "bayes", "key"), self._keep[:9],
                             strict=True):
            setattr(a, name, _ptr(arr))
        for name in self.STATE:
            setattr(a, name, _ptr(getattr(self, name)))
        a.actions_out, a.rewards_out, a.loss_out = (_ptr(x) for x in out)
        return a

    def draws(self, t0, t1):
        """Per agent, steps ``t0 .. t1 - 1``: rows, luck, exploration uniforms and actions."""
        n = len(self.config.agents)
        rows, unlucky, eu, ea = [], [], [], []
        for i, (seed, _) in enumerate(self.specs):
            if i % n == 0:
                r, u = self.env.draw(seed, t0, t1)
            h = _stream(int(self.key[i]) ^ 0x5A5A, t0, t1)
            rows.append(r)
            unlucky.append(u)
            eu.append(_unit(h))
            ea.append(((h >> np.uint64(3)) & np.uint64(1)).astype(np.uint8))
        return (np.ascontiguousarray(np.stack(rows)), np.ascontiguousarray(np.stack(unlucky)),
                np.ascontiguousarray(np.stack(eu)), np.ascontiguousarray(np.stack(ea)))

    def run(self, chunk, threads=None):
        """Advance every agent by ``chunk`` steps; returns ``(rows, actions, rewards,
        losses)``, each ``(agents, chunk)`` (``losses``: the mean NLL of each step's
        minibatches)."""
        check_int(chunk, "chunk", 1)
        t0 = self.t
        rows, unlucky, eu, ea = self.draws(t0, t0 + chunk)
        out = (np.zeros((self.num_agents, chunk), np.uint8),
               np.zeros((self.num_agents, chunk), np.float32),
               np.zeros((self.num_agents, chunk), np.float32))
        args = self._args(chunk, t0, rows, unlucky, eu, ea, out)
        with _omp_threads(threads):
            if self.lib.bandit_run(ctypes.byref(args)) != 0:
                raise RuntimeError("bandit_run rejected its arguments (a bug)")
        self.t += chunk
        return (rows, *out)

    def state_dict(self):
        d = {name: getattr(self, name) for name in self.STATE}
        d["t"] = np.array(self.t, np.int64)
        return d

    def load_state_dict(self, d):
        for name in self.STATE:
            arr = d[name]
            ref = getattr(self, name)
            if arr.shape != ref.shape or arr.dtype != ref.dtype:
                raise BanditCheckpointError(f"checkpoint array {name} is {arr.dtype}"
                                            f"{arr.shape}, expected {ref.dtype}{ref.shape}")
            setattr(self, name, np.ascontiguousarray(arr))
        self.t = int(d["t"])


class _omp_threads:
    """Sets the kernels' OpenMP thread count for a block (None: leave it)."""

    def __init__(self, threads):
        self.threads = threads

    def __enter__(self):
        if self.threads is not None:
            lib = kernels()
            self.before = lib.bandit_get_threads()
            lib.bandit_set_threads(int(self.threads))

    def __exit__(self, *exc):
        if self.threads is not None:
            kernels().bandit_set_threads(self.before)


def kernel_noise(key, n):
    """The ``n`` normals the kernel draws under ``key`` (for tests)."""
    out = np.empty(n, np.float32)
    kernels().bandit_noise(ctypes.c_uint64(key), ctypes.c_int64(n), _ptr(out))
    return out


def _tagged(key, tag, offset):
    """The kernel's ``mix64(mix64(key ^ (tag << 56)) + offset)``."""
    with np.errstate(over="ignore"):
        inner = _mix64(np.uint64(key) ^ np.uint64(tag << 56))
        return int(_mix64(inner + np.uint64(offset)))


def update_noise_key(agent_key, t, u, updates):
    """Key of the weight noise of update ``u`` after step ``t`` (0-based)."""
    return _tagged(agent_key, 1, t * updates + u + 1)


def minibatch_indices(agent_key, t, u, updates, batch, n):
    """Buffer slots of the minibatch of update ``u`` after step ``t`` (``n`` items stored)."""
    ukey = _tagged(agent_key, 2, t * updates + u)
    with np.errstate(over="ignore"):
        h = _mix64(np.uint64(ukey) + np.arange(batch, dtype=np.uint64))
    return _below(h, n).astype(np.int64)


def kernel_gradients(config, width, w, inputs, y, eps=None, mu=None, rho=None, scale=0.0):
    """The kernel's mean NLL and gradients for one minibatch (for tests).

    ``inputs``: ``(B, 23)`` input columns, ``y``: ``(B,)`` rewards, ``w``: flat weights.
    Without ``eps``: ``(nll, dNLL/dw)``. With ``eps, mu, rho``: ``(nll, dmu, drho)`` with
    the complexity cost weighted by ``scale``.
    """
    lib = kernels()
    prior = config.make_prior()
    a = _Args()
    a.D, a.H, a.F = width + 2, config.hidden, inputs.shape[1] - 1
    a.P = num_params(width, config.hidden)
    a.inv_noise_var = 1.0 / config.noise_sigma**2
    a.prior_kind = 1 if isinstance(prior, ScaleMixturePrior) else 2
    a.pi, a.sigma1, a.sigma2, a.sigma = config.prior_pi, config.prior_sigma1, \
        config.prior_sigma2, config.prior_sigma
    w = np.ascontiguousarray(w, np.float32)
    inputs = np.ascontiguousarray(inputs, np.int32)
    y = np.ascontiguousarray(y, np.float32)
    g = np.zeros(a.P, np.float32)
    if eps is None:
        nll = lib.bandit_grad(ctypes.byref(a), _ptr(w), _ptr(inputs), _ptr(y), len(y), _ptr(g),
                              None, None, None, 0.0, None)
        return float(nll), g
    eps, mu, rho = (np.ascontiguousarray(x, np.float32) for x in (eps, mu, rho))
    grho = np.zeros(a.P, np.float32)
    nll = lib.bandit_grad(ctypes.byref(a), _ptr(w), _ptr(inputs), _ptr(y), len(y), _ptr(g),
                          _ptr(eps), _ptr(mu), _ptr(rho), scale, _ptr(grho))
    return float(nll), g, grho


# ---------------------------------------------------------------- a run folder
@dataclass
class BanditResult:
    """Per-step records of every agent and seed, ``(seeds, agents, steps)`` each: the
    mushrooms shown (``rows``), the actions, rewards and regret; ``edible`` is the data
    set's ``(rows,)`` mask."""

    config: BanditConfig
    rows: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    regret: np.ndarray
    edible: np.ndarray
    seconds: float = 0.0
    out: Path | None = None

    @property
    def cumulative_regret(self):
        return np.cumsum(self.regret, axis=-1, dtype=np.float64)

    def summary(self):
        """Per agent: cumulative regret at the end (mean, std and per seed), in the first
        1,000 steps, and the shares of edible/poisonous mushrooms eaten in the last 10%."""
        c = self.config
        cum = self.cumulative_regret
        steps = self.regret.shape[-1]
        tail = slice(steps - max(1, steps // 10), steps)
        out = {}
        for j, spec in enumerate(c.agents):
            final = cum[:, j, -1]
            d = {"kind": spec.kind, "epsilon": spec.epsilon,
                 "cumulative_regret": float(final.mean()),
                 "cumulative_regret_std": float(final.std(ddof=1)) if len(final) > 1 else 0.0,
                 "cumulative_regret_per_seed": [float(x) for x in final],
                 "regret_first_1000": float(cum[:, j, min(steps, 1000) - 1].mean()),
                 "regret_last_10pct": float(self.regret[:, j, tail].sum(-1).mean())}
            ed = self.edible[self.rows[:, j, tail]]
            eat = self.actions[:, j, tail] == EAT
            d["eats_edible_last_10pct"] = float(eat[ed].mean()) if ed.any() else None
            d["eats_poisonous_last_10pct"] = float(eat[~ed].mean()) if (~ed).any() else None
            out[spec.name] = d
        return out


def _regret_steps(n):
    """The steps (1-based) at which regret.csv samples the curves: every step to 100,
    every 10th to 1,000, then every 100th, and the last."""
    s = list(range(1, min(n, 100) + 1)) + list(range(110, min(n, 1000) + 1, 10)) + \
        list(range(1100, n + 1, 100))
    if s[-1] != n:
        s.append(n)
    return np.array(s)


def _write_outputs(result, env, out, plot=True):
    c = result.config
    out = Path(out)
    seeds, agents = c.seeds, c.agents
    S, A, T = result.regret.shape
    cum = result.cumulative_regret
    # steps.csv.gz: one row per (seed, step); per agent its action, reward and regret.
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    header = ["seed", "step", "mushroom", "edible"]
    for spec in agents:
        header += [f"{spec.name}:action", f"{spec.name}:reward", f"{spec.name}:regret"]
    w.writerow(header)
    for s in range(S):
        rows = result.rows[s, 0]
        cols = [np.full(T, seeds[s]), np.arange(1, T + 1), rows, env.edible[rows]]
        for j in range(A):
            cols += [result.actions[s, j], result.rewards[s, j].astype(np.int64),
                     result.regret[s, j].astype(np.int64)]
        w.writerows(np.stack(cols, axis=1).tolist())
    data = gzip.compress(buf.getvalue().encode(), mtime=0)

    def write_bytes(tmp):
        with open(tmp, "wb") as f:
            f.write(data)

    _files.atomic_write(out / "steps.csv.gz", write_bytes)
    # regret.csv: mean (and min, max over seeds) cumulative regret per agent.
    at = _regret_steps(T)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    header = ["step"]
    for spec in agents:
        header += [f"{spec.name}:mean", f"{spec.name}:min", f"{spec.name}:max"]
    w.writerow(header)
    for t in at:
        row = [int(t)]
        for j in range(A):
            v = cum[:, j, t - 1]
            row += [f"{v.mean():.1f}", f"{v.min():.0f}", f"{v.max():.0f}"]
        w.writerow(row)
    atomic_write_text(out / "regret.csv", buf.getvalue())
    metrics = {"steps": T, "seeds": list(seeds), "seconds": round(result.seconds, 1),
               "agents": result.summary()}
    atomic_write_text(out / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    if plot:
        import matplotlib.pyplot as plt

        from .plotting import plot_cumulative_regret

        curves = {spec.name: cum[:, j] for j, spec in enumerate(agents)}
        plt.close(plot_cumulative_regret(
            curves, path=out / "regret.png",
            title=f"Mushroom bandit: cumulative regret, mean of {S} seeds"))


def _read_checkpoint(path):
    try:
        with np.load(path, allow_pickle=False) as z:
            d = {k: z[k] for k in z.files}
    except Exception as e:  # any unreadable file
        raise BanditCheckpointError(f"{path} is unreadable ({type(e).__name__}: {e}); it was "
                                    "left as it is: move it away to start over") from e
    need = set(StackedAgents.STATE) | {"t", "actions", "rewards", "rows"}
    if not need <= set(d):
        raise BanditCheckpointError(f"{path} lacks {sorted(need - set(d))}; left as it is")
    return d


def run_bandit(config: BanditConfig, env: MushroomBandit, out=None, resume=False,
               force=False, progress=True, chunk=100, checkpoint_every=1000, threads=None,
               plot=True):
    """Run every agent of ``config`` for ``config.steps`` steps on every seed.

    Parameters
    ----------
    config : BanditConfig
    env : MushroomBandit
    out : path, optional
        A run folder: ``config.json``, ``checkpoint.npz`` (every ``checkpoint_every``
        steps, written atomically), and at the end ``steps.csv.gz`` (one row per seed and
        step: each agent's action, reward and regret), ``regret.csv`` (mean, min and max
        cumulative regret over seeds), ``metrics.json`` and ``regret.png``.
    resume : bool
        Continue the run in ``out`` from its checkpoint (``config`` None or equal to the
        folder's); the result is the one an uninterrupted run gives.
    force : bool
        Start afresh even if ``out`` holds a run (its files are replaced).
    threads : int, optional
        OpenMP threads of the kernels (default: ``OMP_NUM_THREADS``, else every core).

    Returns
    -------
    BanditResult
    """
    check_int(chunk, "chunk", 1)
    check_int(checkpoint_every, "checkpoint_every", 1)
    out = None if out is None else Path(out)
    state = None
    if out is not None:
        cfg_file, ckpt = out / "config.json", out / "checkpoint.npz"
        if resume:
            if not cfg_file.is_file():
                raise FileNotFoundError(f"nothing to resume: {cfg_file} does not exist")
            try:
                saved = BanditConfig.from_json(json.loads(cfg_file.read_text())["config"])
            except (ValueError, KeyError, TypeError) as e:  # JSONDecodeError is a ValueError
                raise BanditCheckpointError(f"{cfg_file} is not a bandit run's configuration "
                                            f"({type(e).__name__}: {e}); left as it is") from None
            if config is not None and config != saved:
                diff = [k for k in saved.to_json() if saved.to_json()[k] != config.to_json()[k]]
                raise ValueError(f"{out} holds a run with a different configuration "
                                 f"({', '.join(diff)} differ); resume it as it is, or start "
                                 "a new folder")
            config = saved
            if ckpt.is_file():
                state = _read_checkpoint(ckpt)
        elif not force and out.exists() and any(
                (out / f).exists() for f in ("config.json", "checkpoint.npz", "metrics.json")):
            raise FileExistsError(f"{out} already holds a bandit run: resume it (--resume), "
                                  "choose another folder, or pass --force to replace it")
    if config is None:
        raise ValueError("config is required unless resuming")
    stacked = StackedAgents(config, env)
    S, A, T = len(config.seeds), len(config.agents), config.steps
    rows = np.zeros((S * A, T), np.int32)
    actions = np.zeros((S * A, T), np.uint8)
    rewards = np.zeros((S * A, T), np.float32)
    seconds = 0.0
    if state is not None:
        t = int(state["t"])
        if state["actions"].shape != (S * A, T) or not 0 <= t <= T:
            raise BanditCheckpointError(f"{out / 'checkpoint.npz'} does not match the run's "
                                        "configuration; left as it is")
        stacked.load_state_dict(state)
        rows[:, :t], actions[:, :t], rewards[:, :t] = (state["rows"][:, :t],
                                                       state["actions"][:, :t],
                                                       state["rewards"][:, :t])
        seconds = float(state.get("seconds", 0.0))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        if state is None:
            meta = {"config": config.to_json(), "context_width": env.context_width,
                    "engine": "stacked"}
            atomic_write_text(out / "config.json", json.dumps(meta, indent=2) + "\n")

    def save():
        def write(tmp):
            with open(tmp, "wb") as f:
                np.savez(f, rows=rows, actions=actions, rewards=rewards,
                         seconds=np.array(seconds), **stacked.state_dict())
        _files.atomic_write(out / "checkpoint.npz", write)

    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=T, initial=stacked.t, desc="bandit steps", unit="step")
    # Ctrl-C (or SIGTERM) is a flag read between chunks: the run stops at a whole chunk,
    # saves a checkpoint there, and raises BanditInterrupted.
    try:
        with stop_requests() as stop:
            while stacked.t < T:
                t0 = stacked.t
                n = min(chunk, T - t0, checkpoint_every - t0 % checkpoint_every)
                start = time.perf_counter()
                r, a, rw, _ = stacked.run(n, threads=threads)
                seconds += time.perf_counter() - start
                rows[:, t0:t0 + n], actions[:, t0:t0 + n], rewards[:, t0:t0 + n] = r, a, rw
                if not np.isfinite(stacked.mu).all():
                    raise FloatingPointError(f"an agent's weights became NaN or infinite by "
                                             f"step {stacked.t}; lower the learning rate")
                if bar is not None:
                    bar.update(n)
                if out is not None and (stacked.t % checkpoint_every == 0
                                        or stacked.t == T or stop.requested):
                    save()
                if stop.requested and stacked.t < T:
                    raise BanditInterrupted(
                        f"stopped at step {stacked.t:,} of {T:,}"
                        + (f"; checkpoint in {out}, continue with resume" if out else ""),
                        stacked.t, stop.signum)
    finally:
        if bar is not None:
            bar.close()
    shape = (S, A, T)
    rows, actions, rewards = rows.reshape(shape), actions.reshape(shape), rewards.reshape(shape)
    regret = np.stack([env.regret(rows[s, j], actions[s, j], env.draw(config.seeds[s], 0, T)[1])
                       for s in range(S) for j in range(A)]).reshape(shape)
    result = BanditResult(config, rows, actions, rewards, regret, env.edible.astype(bool),
                          seconds, out)
    if out is not None:
        _write_outputs(result, env, out, plot=plot)
    return result


# ---------------------------------------------------------------- the same agents in Gluon
def build_reward_net(width, hidden=100, ctx=None):
    """The agents' network: ``width`` + 2 inputs → ``hidden`` ReLU → ``hidden`` ReLU → 1."""
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(hidden, activation="relu", in_units=width + 2),
            gluon.nn.Dense(hidden, activation="relu", in_units=hidden),
            gluon.nn.Dense(1, in_units=hidden))
    net.initialize(mx.init.Normal(0.1), ctx=ctx or mx.cpu())
    return net


class _GluonAgent:
    """What the two Gluon agents share: a buffer, a loop of updates, the bookkeeping."""

    def __init__(self, env, config, seed, ctx):
        self.env, self.config, self.seed = env, config, seed
        self.ctx = ctx or mx.cpu()
        self.buffer = ReplayBuffer(config.capacity)
        self.rng = np.random.default_rng([seed, 4])
        self.net = build_reward_net(env.context_width, config.hidden, self.ctx)

    def _both_actions(self, row):
        """The network's inputs for leaving (row 0) and eating (row 1) mushroom ``row``."""
        return mx.nd.array(self.env.one_hot([row, row], [PASS, EAT]), ctx=self.ctx)

    def observe(self, row, action, reward):
        """Store the interaction, then make ``config.updates`` minibatch updates."""
        self.buffer.add(row, action, reward)
        for _ in range(self.config.updates):
            rows, actions, rewards = self.buffer.sample(self.config.batch, self.rng)
            X = mx.nd.array(self.env.one_hot(rows, actions), ctx=self.ctx)
            y = mx.nd.array(rewards[:, None], ctx=self.ctx)
            self._update(X, y)


class ThompsonAgent(_GluonAgent):
    """Bayes by Backprop with Thompson sampling, in Gluon: a :class:`~bbb_gluon.Posterior`
    over the reward network, one :class:`~bbb_gluon.BBBStep` per update with a
    :class:`~bbb_gluon.loss.GaussianNLLLoss` and the complexity cost spread over the
    interactions seen (or the items in the buffer: ``config.complexity_over``), and
    decisions from sampled weights."""

    def __init__(self, env, config=None, seed=0, ctx=None, engine="auto"):
        config = config or BanditConfig()
        super().__init__(env, config, seed, ctx)
        self.prior = config.make_prior()
        self.posterior = Posterior(self.net, mu_init="normal", mu_scale=config.mu_init or 1e-3,
                                   rho_init=config.rho_init, seed=seed)
        trainer = gluon.Trainer(self.posterior.params, config.optimizer,
                                {"learning_rate": config.lr})
        self.step = BBBStep(self.net, self.posterior, self.prior,
                            GaussianNLLLoss(config.noise_sigma), trainer, weighting=1.0,
                            engine=engine, watch=False)

    def act(self, row):
        """Eat (1) or not (0): the better action under sampled weights (the predicted
        rewards averaged over ``config.act_samples`` draws)."""
        from .sampling import use_weights

        X = self._both_actions(row)
        total = None
        for _ in range(self.config.act_samples):
            draw = self.posterior.sample(self.ctx)
            with use_weights(self.net, self.posterior, draw.weights, self.ctx):
                out = self.net(X)
            total = out if total is None else total + out
        v = total.asnumpy().ravel()
        return EAT if v[1] > v[0] else PASS

    def _update(self, X, y):
        # the complexity cost over N (interactions seen, or items in the buffer):
        # pi = B / N on the minibatch's mean cost
        n = self.buffer.count if self.config.complexity_over == "seen" else len(self.buffer)
        self.step.loss.weighting = X.shape[0] / n
        self.step(X, y)


class GreedyAgent(_GluonAgent):
    """ε-greedy, in Gluon: the same network and likelihood without a posterior."""

    def __init__(self, env, config=None, seed=0, ctx=None, epsilon=0.0):
        config = config or BanditConfig()
        super().__init__(env, config, seed, ctx)
        self.epsilon = float(epsilon)
        self.loss = GaussianNLLLoss(config.noise_sigma)
        self.trainer = gluon.Trainer(self.net.collect_params(), config.optimizer,
                                     {"learning_rate": config.lr})
        self.net.hybridize()

    def act(self, row):
        if self.rng.random() < self.epsilon:
            return int(self.rng.integers(0, 2))
        v = self.net(self._both_actions(row)).asnumpy().ravel()
        return EAT if v[1] > v[0] else PASS

    def _update(self, X, y):
        with autograd.record():
            loss = self.loss(self.net(X), y)
        loss.backward()
        self.trainer.step(X.shape[0])


def run_agent(agent, steps, seed=None, progress=False):
    """One agent's loop on its environment for ``steps`` steps (the mushrooms and luck of
    ``seed``, default the agent's); returns ``(rows, actions, rewards, regret)``."""
    check_int(steps, "steps", 1)
    env = agent.env
    seed = agent.seed if seed is None else seed
    rows, unlucky = env.draw(seed, 0, steps)
    actions = np.zeros(steps, np.uint8)
    it = range(steps)
    if progress:
        from tqdm.auto import tqdm
        it = tqdm(it, desc=type(agent).__name__, unit="step")
    for t in it:
        a = agent.act(int(rows[t]))
        actions[t] = a
        reward = float(env.reward(rows[t:t + 1], [a], unlucky[t:t + 1])[0])
        agent.observe(int(rows[t]), a, reward)
    rewards = env.reward(rows, actions, unlucky)
    return rows, actions, rewards, env.regret(rows, actions, unlucky)
