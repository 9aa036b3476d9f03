"""The same agents written with Gluon: Thompson sampling with a ``BBBStep`` and ε-greedy with
a ``gluon.Trainer``, for a loop of your own (and the baseline of
``benchmarks/bench_bandit.py``).
"""

from __future__ import annotations

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from .._checks import check_int, check_positive
from ..core.likelihood import GaussianNLLLoss
from ..core.loss import BBBLoss
from ..core.posterior import Posterior
from ..core.step import BBBStep, trainable_params
from .config import GREEDY_LR, BanditConfig
from .engine import complexity_scale
from .environment import EAT, PASS, ReplayBuffer

__all__ = ["ThompsonAgent", "GreedyAgent", "run_agent", "build_reward_net"]


# ---------------------------------------------------------------- the same agents in Gluon
def build_reward_net(width, hidden=100, ctx=None):
    """The agents' network: ``width`` + 2 inputs → ``hidden`` ReLU → ``hidden`` ReLU → 1."""
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(hidden, activation="relu", in_units=width + 2),
            gluon.nn.Dense(hidden, activation="relu", in_units=hidden),
            gluon.nn.Dense(1, in_units=hidden))
    net.initialize(mx.init.Normal(0.1), ctx=ctx or mx.cpu())
    return net


def _optimizer_params(config, lr, optimizer=None):
    """The Trainer's settings of an agent learning at ``lr`` with ``optimizer`` (None: the
    configuration's): Adam's ε is the configuration's, as in the stacked engine."""
    params = {"learning_rate": lr}
    if (optimizer or config.optimizer) == "adam":
        params["epsilon"] = config.adam_eps
    return params


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
        for u in range(self.config.updates):
            rows, actions, rewards = self.buffer.sample(self.config.batch, self.rng)
            X = mx.nd.array(self.env.one_hot(rows, actions), ctx=self.ctx)
            y = mx.nd.array(rewards[:, None], ctx=self.ctx)
            self._update(X, y, u)


class ThompsonAgent(_GluonAgent):
    """Bayes by Backprop with Thompson sampling, in Gluon: a :class:`~bbb_gluon.Posterior`
    over the reward network, one :class:`~bbb_gluon.BBBStep` per update with a
    :class:`~bbb_gluon.GaussianNLLLoss` and the complexity cost weighted as the
    stacked engine weights it (``config.complexity_over``, see
    :func:`~bbb_gluon.bandit.engine.complexity_scale`), ρ learning at ``config.lr *
    config.rho_lr_mult``, Adam's ε at ``config.adam_eps``, and decisions from sampled
    weights (shared by both actions or drawn per action, ``config.act_draws``)."""

    def __init__(self, env, config=None, seed=0, ctx=None, engine="auto"):
        config = config or BanditConfig()
        super().__init__(env, config, seed, ctx)
        self.prior = config.make_prior()
        self.posterior = Posterior(self.net, mu_init="normal", mu_scale=config.mu_init or 1e-3,
                                   rho_init=config.rho_init, seed=seed)
        for p in self.posterior.rho_parameters:
            p.lr_mult = config.rho_lr_mult
        loss = BBBLoss(self.prior, GaussianNLLLoss(config.noise_sigma), weighting=1.0)
        trainer = gluon.Trainer(trainable_params(self.net, self.posterior, loss),
                                config.optimizer, _optimizer_params(config, config.lr))
        self.step = BBBStep(self.net, self.posterior, loss, trainer, engine=engine,
                            watch=False)

    def act(self, row, eps=None):
        """Eat (1) or not (0): the better action under sampled weights (the predicted
        rewards averaged over ``config.act_samples`` draws; with ``config.act_draws``
        "independent", each action's under draws of its own).

        ``eps`` (for tests and replays): the noise of those draws instead of fresh ones,
        ``(act_samples, 2, num_weights)`` (not eating, eating; flat in the posterior's key
        order), the two equal where the draws are shared.
        """
        X = self._both_actions(row)
        shared = self.config.act_draws == "shared"
        total = None
        for k in range(self.config.act_samples):
            if shared:
                out = self._value(X, None if eps is None else eps[k][0])
            else:
                out = mx.nd.concat(*(self._value(X[a:a + 1], None if eps is None else eps[k][a])
                                     for a in (PASS, EAT)), dim=0)
            total = out if total is None else total + out
        v = total.asnumpy().ravel()
        return EAT if v[1] > v[0] else PASS

    def _value(self, X, eps):
        """The network's outputs on ``X`` under one draw of the weights."""
        from ..core.sampling import use_weights

        draw = self.posterior.sample(self.ctx, eps=eps)
        with use_weights(self.net, self.posterior, draw.weights, self.ctx):
            return self.net(X)

    def _update(self, X, y, u):
        # the loss's weighting multiplies the complexity cost against the minibatch's summed
        # NLL, complexity_scale's against its mean
        scale = complexity_scale(self.config, self.buffer.count - 1, u, len(self.buffer))
        self.step.loss.weighting = X.shape[0] * scale
        self.step(X, y)


class GreedyAgent(_GluonAgent):
    """ε-greedy, in Gluon: the same network and likelihood without a posterior, learning
    at ``lr`` (default :data:`~bbb_gluon.bandit.GREEDY_LR`, the rate of the ε-greedy agents
    in :data:`~bbb_gluon.bandit.PAPER_AGENTS`, not ``config.lr``, which is Bayes by
    Backprop's) with ``optimizer`` (None: ``config.optimizer``), as an
    :class:`~bbb_gluon.bandit.AgentSpec` with those settings does in the stacked engine."""

    def __init__(self, env, config=None, seed=0, ctx=None, epsilon=0.0, lr=GREEDY_LR,
                 optimizer=None):
        config = config or BanditConfig()
        check_positive(lr, "lr")
        if optimizer not in (None, "adam", "sgd"):
            raise ValueError(f"optimizer must be 'adam', 'sgd' or None, got {optimizer!r}")
        super().__init__(env, config, seed, ctx)
        self.epsilon = float(epsilon)
        self.lr = float(lr)
        self.optimizer = optimizer or config.optimizer
        self.loss = GaussianNLLLoss(config.noise_sigma)
        self.trainer = gluon.Trainer(self.net.collect_params(), self.optimizer,
                                     _optimizer_params(config, self.lr, self.optimizer))
        self.net.hybridize()

    def act(self, row):
        if self.rng.random() < self.epsilon:
            return int(self.rng.integers(0, 2))
        v = self.net(self._both_actions(row)).asnumpy().ravel()
        return EAT if v[1] > v[0] else PASS

    def _update(self, X, y, u):
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
