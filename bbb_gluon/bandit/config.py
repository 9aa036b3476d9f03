"""What a bandit experiment runs: the agents (``AgentSpec``, ``PAPER_AGENTS``) and the
settings they share (``BanditConfig``), checked before any work starts.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from .._checks import check_int, check_positive
from ..core.priors import GaussianPrior, Prior, ScaleMixturePrior, make_prior

__all__ = ["AgentSpec", "BanditConfig", "PAPER_AGENTS", "GREEDY_LR"]


_FLOAT32_SQRT_MAX = 1.8e19  # about sqrt(float32's largest): a square still fits

# The priors bandit.cc's gradient has code for (under their codes in Prior.fused_attrs,
# as fused.cc's): the bandit runs on the stacked kernels alone.
BANDIT_PRIORS = (ScaleMixturePrior, GaussianPrior)


# ---------------------------------------------------------------- configuration
@dataclass(frozen=True)
class AgentSpec:
    """One agent: ``kind`` "thompson" (Bayes by Backprop) or "greedy" (ε-greedy), and its
    own learning rate ``lr`` and ``optimizer`` ("adam" or "sgd"; None: the
    configuration's), so that each agent can be run at its best setting."""

    name: str
    kind: str
    epsilon: float = 0.0
    lr: float | None = None
    optimizer: str | None = None

    def __post_init__(self):
        if self.kind not in ("thompson", "greedy"):
            raise ValueError(f"agent kind must be 'thompson' or 'greedy', got {self.kind!r}")
        if not (isinstance(self.epsilon, (int, float)) and 0.0 <= self.epsilon <= 1.0):
            raise ValueError(f"epsilon must lie in [0, 1], got {self.epsilon!r}")
        if self.kind == "thompson" and self.epsilon:
            raise ValueError("a Thompson agent explores by sampling, not by epsilon")
        if self.lr is not None:
            check_positive(self.lr, "an agent's lr")
        if self.optimizer not in (None, "adam", "sgd"):
            raise ValueError(f"an agent's optimizer must be 'adam', 'sgd' or None, got "
                             f"{self.optimizer!r}")


GREEDY_LR = 1e-3
"""The ε-greedy agents' learning rate: the best of 3·10⁻⁴, 10⁻³ and 3·10⁻³ for each of them
(docs/RESULTS.md, the bandit's round 2)."""

PAPER_AGENTS = (
    AgentSpec("bayes-by-backprop", "thompson"),  # at BanditConfig.lr
    AgentSpec("greedy", "greedy", 0.0, lr=GREEDY_LR),
    AgentSpec("1%-greedy", "greedy", 0.01, lr=GREEDY_LR),
    AgentSpec("5%-greedy", "greedy", 0.05, lr=GREEDY_LR),
)
"""The agents of the paper's Figure 6, each at its own best learning rate."""


@dataclass(frozen=True)
class BanditConfig:
    """An experiment: agents × seeds, the paper's protocol and the choices it leaves open.

    The protocol (§5.3): ``steps`` interactions, a buffer of the last ``capacity``, and
    after each interaction ``updates`` minibatch updates of ``batch``; Thompson decisions
    average ``act_samples`` weight samples. The rest is ours (docs/RESULTS.md says how it
    was chosen): the optimiser and learning rate (``lr``: every agent's whose spec has none
    of its own, Bayes by Backprop's among the paper's agents), the prior, the initialisation
    (μ ~ N(0, ``mu_init``²) for every agent of a seed, ρ = ``rho_init``) and the
    likelihood's noise ``noise_sigma`` (rewards are used as they are, −35 … 5), how the
    complexity cost is weighted (``complexity_over``: spread over "seen", the interactions
    so far, or "buffer", the items in the buffer; or "blundell", the paper's eq. 9 across a
    step's updates, see :func:`~bbb_gluon.bandit.engine.complexity_scale`), and
    ``rho_lr_mult``, the learning rate of ρ as a multiple of ``lr`` (Bayesian agents);
    ``adam_eps``, Adam's ε (MXNet's default 10⁻⁸; every agent's, ignored by SGD); and
    ``act_draws``, how a Thompson decision draws its weights: "shared" (both actions are
    valued under the same ``act_samples`` draws) or "independent" (each action under its
    own draws, the first action's being the shared ones).
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
    lr: float = 3e-4
    prior: Prior = field(default_factory=GaussianPrior)
    noise_sigma: float = 1.0
    mu_init: float = 0.1
    rho_init: float = -5.0
    complexity_over: str = "seen"
    rho_lr_mult: float = 1.0
    adam_eps: float = 1e-8
    act_draws: str = "shared"

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
        if self.complexity_over not in ("seen", "buffer", "blundell"):
            raise ValueError(f"complexity_over must be 'seen', 'buffer' or 'blundell', got "
                             f"{self.complexity_over!r}")
        if self.act_draws not in ("shared", "independent"):
            raise ValueError(f"act_draws must be 'shared' or 'independent', got "
                             f"{self.act_draws!r}")
        object.__setattr__(self, "prior", _bandit_prior(self.prior))
        for name in ("lr", "rho_lr_mult", "noise_sigma", "adam_eps"):
            check_positive(getattr(self, name), name)
            # The kernels compute in float32 (and square the noise).
            if getattr(self, name) > _FLOAT32_SQRT_MAX:
                raise ValueError(f"{name} must be at most {_FLOAT32_SQRT_MAX:.3g}, got "
                                 f"{getattr(self, name)!r}")
        for spec in (None, *agents):
            lr = self.lr if spec is None else self.agent_lr(spec)
            if lr > _FLOAT32_SQRT_MAX or lr * self.rho_lr_mult > _FLOAT32_SQRT_MAX:
                raise ValueError(f"learning rates (times rho_lr_mult) must be at most "
                                 f"{_FLOAT32_SQRT_MAX:.3g}, got {lr!r}")
        if isinstance(self.mu_init, bool) or not isinstance(self.mu_init, (int, float)) \
                or not (math.isfinite(self.mu_init) and self.mu_init >= 0) \
                or self.mu_init > _FLOAT32_SQRT_MAX:
            raise ValueError(f"mu_init must be a finite number in [0, "
                             f"{_FLOAT32_SQRT_MAX:.3g}], got {self.mu_init!r}")
        object.__setattr__(self, "mu_init", self.mu_init + 0.0)  # -0.0 is 0.0 (NumPy: < 0)
        if not (math.isfinite(self.rho_init) and abs(self.rho_init) <= 80):
            raise ValueError(f"rho_init must be a finite number in [-80, 80] (sigma = "
                             f"log(1 + exp(rho))), got {self.rho_init!r}")

    def agent_lr(self, spec):
        """The learning rate of agent ``spec``: its own, or the configuration's."""
        return self.lr if spec.lr is None else spec.lr

    def agent_optimizer(self, spec):
        """The optimiser of agent ``spec``: its own, or the configuration's."""
        return self.optimizer if spec.optimizer is None else spec.optimizer

    def make_prior(self):
        """The agents' prior (the configuration's own :class:`~bbb_gluon.Prior`)."""
        return self.prior

    def to_json(self):
        d = asdict(self)
        d["seeds"] = list(self.seeds)
        d["agents"] = [asdict(a) for a in self.agents]
        d["prior"] = self.prior.to_dict()
        return d

    @classmethod
    def from_json(cls, d):
        d = dict(d)
        d.setdefault("rho_lr_mult", 1.0)  # runs written before these existed
        d.setdefault("adam_eps", 1e-8)
        d.setdefault("act_draws", "shared")
        d["seeds"] = tuple(d["seeds"])
        d["agents"] = tuple(AgentSpec(**a) for a in d["agents"])
        d["prior"] = _stored_prior(d)
        return cls(**d)


def _stored_prior(d):
    """The prior of a stored configuration, as ``to_json`` writes it, or as runs written
    before the bandit shared the library's priors did: a name ("mixture", "gaussian")
    beside ``prior_pi``, ``prior_sigma1``, ``prior_sigma2`` and ``prior_sigma``."""
    old = {k: d.pop(k) for k in ("prior_pi", "prior_sigma1", "prior_sigma2", "prior_sigma")
           if k in d}
    prior = d.get("prior", "gaussian")
    if prior == "mixture":
        return make_prior("scale_mixture", pi=old.get("prior_pi", 0.5),
                          sigma1=old.get("prior_sigma1", 1.0),
                          sigma2=old.get("prior_sigma2", math.exp(-6)))
    if prior == "gaussian":
        return make_prior("gaussian", sigma=old.get("prior_sigma", 1.0))
    return prior


def _bandit_prior(prior):
    """``prior`` (a Prior, a dict as make_prior takes it, or a prior's name) as a Prior
    that the bandit's kernels run."""
    if isinstance(prior, str):
        prior = make_prior(prior)
    elif isinstance(prior, dict):
        prior = make_prior(**prior)
    if not isinstance(prior, Prior):
        raise ValueError(f"prior must be a bbb_gluon Prior such as GaussianPrior(1.0), got "
                         f"{prior!r}")
    if type(prior) not in BANDIT_PRIORS:
        names = " or ".join(f"{k.kind!r} ({k.__name__})" for k in BANDIT_PRIORS)
        raise ValueError(f"the bandit's kernels have no code for the prior {prior!r}: use "
                         f"{names}")
    for name, value in prior.to_dict().items():
        if name != "kind" and value > _FLOAT32_SQRT_MAX:  # the kernels compute in float32
            raise ValueError(f"the prior's {name} must be at most {_FLOAT32_SQRT_MAX:.3g}, "
                             f"got {value!r}")
    return prior
