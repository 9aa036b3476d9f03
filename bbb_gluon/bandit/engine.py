"""The stacked engine: every agent and seed of an experiment in one compiled call per chunk
of steps (``_kernels/bandit.cc``), and Python mirrors of its noise, minibatches and
gradients that the tests compare it with.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path

import numpy as np

from .._checks import check_int
from .._kernels import build as _build
from .config import BanditConfig
from .environment import MushroomBandit, hash_below, hash_key, hash_stream, hash_unit, mix64

__all__ = ["StackedAgents", "BanditCheckpointError", "complexity_scale"]


class BanditCheckpointError(ValueError):
    """A bandit run's checkpoint is unreadable or belongs to a different configuration."""


# ---------------------------------------------------------------- the compiled engine
_SOURCE = Path(_build.__file__).with_name("bandit.cc")  # beside the training kernels
_lib_lock = threading.Lock()
_lib = {"handle": None, "reason": None}


class _Args(ctypes.Structure):
    _fields_ = (
        [(n, ctypes.c_int32) for n in (
            "A", "D", "H", "F", "P", "capacity", "batch", "updates", "act_samples",
            "prior_kind", "chunk", "complexity_over", "act_draws")]
        + [("t0", ctypes.c_int64)]
        + [(n, ctypes.c_float) for n in (
            "rho_lr_mult", "beta1", "beta2", "adam_eps", "inv_noise_var", "pi", "sigma1",
            "sigma2", "sigma")]
        + [(n, ctypes.c_void_p) for n in (
            "features", "edible", "rows", "unlucky", "explore_u", "explore_a", "epsilon",
            "bayes", "lr", "adam", "key", "mu", "rho", "m_mu", "v_mu", "m_rho", "v_rho", "buf_row",
            "buf_action", "buf_reward", "actions_out", "rewards_out", "loss_out")])


def kernels():
    """The compiled bandit kernels (built on first use), or raise RuntimeError saying why
    they cannot be built (no C++ compiler, or a failed compile)."""
    with _lib_lock:
        if _lib["handle"] is None and _lib["reason"] is None:
            cxx = _build.compiler()
            try:
                if cxx is None:
                    raise RuntimeError("no C++ compiler found (install g++ or set CXX)")
                lib = ctypes.CDLL(str(_build.build(cxx, _SOURCE, "bbb_bandit",
                                                  mxnet_library=False)))
                if lib.bandit_args_size() != ctypes.sizeof(_Args):
                    raise RuntimeError("bandit.cc and bandit/engine.py disagree on BanditArgs")
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


_COMPLEXITY_OVER = {"buffer": 0, "seen": 1, "blundell": 2}  # bandit.cc's codes
_ACT_DRAWS = {"shared": 0, "independent": 1}


def complexity_scale(config, t, u, n):
    """The weight of the complexity cost (per item of the minibatch's mean NLL) in update
    ``u`` after step ``t`` (both 0-based) with ``n`` items stored, as the kernel computes it.

    "seen" and "buffer" spread the cost evenly: ``1 / (t + 1)`` or ``1 / n``. "blundell" is
    the paper's eq. 9 over a step's ``U = config.updates`` updates: update ``u`` carries
    ``beta_u = 2^(U-1-u) / (2^U - 1)`` of one whole cost (the shares sum to 1), divided by
    the batch since the NLL is a mean over it.
    """
    if config.complexity_over == "blundell":
        return 2.0 ** -(u + 1) / (1.0 - 2.0 ** -config.updates) / config.batch
    return 1.0 / (t + 1 if config.complexity_over == "seen" else n)


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
            init = np.random.Generator(np.random.PCG64(hash_key(seed, 2))).normal(
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
        self.lr = np.array([c.agent_lr(spec) for _, spec in self.specs], np.float32)
        self.adam = np.array([c.agent_optimizer(spec) == "adam" for _, spec in self.specs],
                             np.uint8)
        self.key = np.array([hash_key(seed, 3, i % len(c.agents)) for i, (seed, _) in
                             enumerate(self.specs)], np.uint64)

    @property
    def num_agents(self):
        return len(self.specs)

    def _args(self, chunk, t0, rows, unlucky, explore_u, explore_a, out):
        c = self.config
        a = _Args()
        a.A, a.D, a.H, a.F, a.P = (self.num_agents, self.width + 2, c.hidden,
                                   self.env.features.shape[1], self.P)
        a.capacity, a.batch, a.updates, a.act_samples = c.capacity, c.batch, c.updates, \
            c.act_samples
        _set_prior(a, c.prior)
        a.chunk, a.t0 = chunk, t0
        a.complexity_over = _COMPLEXITY_OVER[c.complexity_over]
        a.rho_lr_mult = c.rho_lr_mult
        a.act_draws = _ACT_DRAWS[c.act_draws]
        a.beta1, a.beta2, a.adam_eps = 0.9, 0.999, c.adam_eps
        a.inv_noise_var = 1.0 / c.noise_sigma**2
        self._keep = [self.env.features, self.env.edible, rows, unlucky, explore_u,
                      explore_a, self.epsilon, self.bayes, self.lr, self.adam, self.key, *out]
        for name, arr in zip(("features", "edible", "rows", "unlucky", "explore_u",
                              "explore_a", "epsilon", "bayes", "lr", "adam", "key"),
                             self._keep[:11], strict=True):
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
            h = hash_stream(int(self.key[i]) ^ 0x5A5A, t0, t1)
            rows.append(r)
            unlucky.append(u)
            eu.append(hash_unit(h))
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
        inner = mix64(np.uint64(key) ^ np.uint64(tag << 56))
        return int(mix64(inner + np.uint64(offset)))


def update_noise_key(agent_key, t, u, updates):
    """Key of the weight noise of update ``u`` after step ``t`` (0-based)."""
    return _tagged(agent_key, 1, t * updates + u + 1)


def minibatch_indices(agent_key, t, u, updates, batch, n):
    """Buffer slots of the minibatch of update ``u`` after step ``t`` (``n`` items stored)."""
    ukey = _tagged(agent_key, 2, t * updates + u)
    with np.errstate(over="ignore"):
        h = mix64(np.uint64(ukey) + np.arange(batch, dtype=np.uint64))
    return hash_below(h, n).astype(np.int64)


def act_noise_keys(agent_key, t, k, act_draws="shared"):
    """Keys of the weight noise of Thompson draw ``k`` at step ``t`` (0-based): ``(key for
    not eating, key for eating)``, one key twice when ``act_draws`` is "shared"."""
    shared = _tagged(agent_key, 3, t * 64 + k)
    return (shared, shared if act_draws == "shared" else _tagged(agent_key, 4, t * 64 + k))


def gluon_order(flat, width, hidden):
    """A flat vector in the kernel's layout (``W[in][out]``) reordered as a
    :class:`~bbb_gluon.Posterior` of :func:`~bbb_gluon.bandit.build_reward_net` lays out its
    weights (key order, Gluon's ``(out, in)`` weights): its ``eps``, μ or ρ."""
    return np.concatenate([x.ravel() for layer in split_params(flat, width, hidden)
                           for x in layer])


def thompson_action(config, width, mu, rho, inputs, agent_key, t):
    """The action the kernel's Thompson agent takes at step ``t`` with parameters ``mu``,
    ``rho`` (flat, the kernel's layout) on ``inputs`` (``(2, 23)``: not eating, eating),
    computed in NumPy from the kernel's noise; returns ``(action, values)``."""
    value = np.zeros(2)
    sigma = np.logaddexp(0, np.asarray(rho, np.float64))
    for k in range(config.act_samples):
        for action, key in enumerate(act_noise_keys(agent_key, t, k, config.act_draws)):
            w = mu + sigma * kernel_noise(key, len(mu))
            (W1, b1), (W2, b2), (w3, b3) = split_params(w, width, config.hidden)
            x = np.zeros(width + 2)
            x[inputs[action]] = 1.0
            h = np.maximum(W2 @ np.maximum(W1 @ x + b1, 0) + b2, 0)
            value[action] += float(w3 @ h + b3)
    return int(value[1] > value[0]), value


def _set_prior(a, prior):
    """The kernel's prior arguments: the prior's fused-kernel code and hyperparameters
    (BanditConfig admits only the priors bandit.cc has code for)."""
    attrs = prior.fused_attrs("mc")
    a.prior_kind = int(attrs["kind"])
    a.pi, a.sigma1 = float(attrs.get("pi", 0.5)), float(attrs.get("sigma1", 1.0))
    a.sigma2, a.sigma = float(attrs.get("sigma2", 1.0)), float(attrs.get("sigma", 1.0))


# Nine parameters: the kernel's own inputs, so that tests can set each of them.
def kernel_gradients(config, width, w, inputs, y, eps=None, mu=None, rho=None, scale=0.0):
    """The kernel's mean NLL and gradients for one minibatch (for tests).

    ``inputs``: ``(B, 23)`` input columns, ``y``: ``(B,)`` rewards, ``w``: flat weights.
    Without ``eps``: ``(nll, dNLL/dw)``. With ``eps, mu, rho``: ``(nll, dmu, drho)`` with
    the complexity cost weighted by ``scale``.
    """
    lib = kernels()
    a = _Args()
    a.D, a.H, a.F = width + 2, config.hidden, inputs.shape[1] - 1
    a.P = num_params(width, config.hidden)
    a.inv_noise_var = 1.0 / config.noise_sigma**2
    _set_prior(a, config.prior)
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
