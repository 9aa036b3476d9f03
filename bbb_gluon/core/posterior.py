r"""The variational posterior :math:`q(w \mid \theta)` over a chosen set of a Gluon
network's parameters.

Every chosen weight and bias :math:`w_j` gets an independent Gaussian
:math:`N(\mu_j, \sigma_j^2)` with :math:`\sigma_j = \mathrm{softplus}(\rho_j)`. By default
the chosen ones are the weights and biases of every Dense and convolution layer; a
selector makes only some layers Bayesian (the last one, say), and everything else
(BatchNorm, embeddings, layers left out) stays deterministic, trained by an ordinary
Trainer over :meth:`Posterior.deterministic_params`. The :math:`\mu` and :math:`\rho`
arrays are ordinary Gluon ``Parameter`` objects of the same shapes as the layer's own,
owned by the posterior as a Gluon ``Block`` owns its parameters: ``collect_params()`` for
``gluon.Trainer``, ``save_parameters``/``load_parameters`` with the names
``"<key>_mu"``/``"<key>_rho"``, ``initialize`` and ``reset_ctx``. The network itself stays
an ordinary network; :mod:`bbb_gluon.core.sampling` puts sampled weights into it for each step.

References
----------
.. [1] C. Blundell et al. "Weight Uncertainty in Neural Networks". ICML 2015.
"""

import math
import numbers
import warnings
from dataclasses import dataclass

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from .._checks import check_positive
from .._files import atomic_nd_save, read_nd_file
from .._kernels.private import params_with_prefix
from . import ops
from .noise import NoiseSource
from .priors import HALF_LOG_2PI
from .selection import BAYESIAN_LAYERS, bayesian_parameters, structural_params

__all__ = ["Posterior", "WeightSample", "PosteriorMismatchError", "bayesian_parameters",
           "BAYESIAN_LAYERS"]


class PosteriorMismatchError(ValueError):
    """A posterior (or a posterior file) does not fit the network it is used with."""


@dataclass
class WeightSample:
    """One draw :math:`w = \\mu + \\sigma \\circ \\epsilon` of every Dense parameter on one context.

    Attributes
    ----------
    weights : list of NDArray
        The sampled arrays, in the posterior's key order, recorded by autograd.
    mus, sigmas : list of NDArray
        :math:`\\mu` and :math:`\\sigma` that produced them (recorded).
    eps_sq : NDArray, shape (1,)
        :math:`\\sum \\epsilon^2` over all parameters (a constant: it has no gradient).
    ctx : Context
    eps : list of NDArray, optional
        :math:`\\epsilon` per array (constants): Flipout perturbs by
        :math:`\\sigma \\circ \\epsilon` without the mean.
    """

    weights: list
    mus: list
    sigmas: list
    eps_sq: mx.nd.NDArray
    ctx: mx.Context
    eps: list = None

    @property
    def num_weights(self):
        """Number of weights drawn, :math:`n`."""
        return sum(int(np.prod(s.shape)) for s in self.sigmas)

    def log_q(self, log_sigmas=None):
        r""":math:`\log q(w \mid \theta)` of these weights, summed over all of them; shape
        ``(1,)``.

        Since :math:`(w - \mu)/\sigma = \epsilon`,
        :math:`\log q = -\sum \log\sigma - \tfrac12 \sum \epsilon^2 - \tfrac n2 \log 2\pi`:
        the same value and gradient as the density written in :math:`w`, with one pass.
        ``log_sigmas``: :math:`\log\sigma` per array, where the caller has them already.
        """
        if log_sigmas is None:
            log_sigmas = [mx.nd.log(s) for s in self.sigmas]
        totals = [ops.total(ls) for ls in log_sigmas]
        return (-sum(totals[1:], totals[0]) - 0.5 * self.eps_sq
                - self.num_weights * HALF_LOG_2PI)


class Posterior(gluon.Block):
    r"""Mean-field Gaussian posterior over chosen parameters of an initialised Gluon network.

    A Gluon ``Block`` that owns one :math:`\mu` and one :math:`\rho` ``Parameter`` per
    chosen array: ``collect_params()`` (or ``params``) goes to ``gluon.Trainer``,
    ``save_parameters``/``load_parameters`` write and read them, ``initialize`` draws them
    again, ``reset_ctx`` moves them. It is not called like a layer: :meth:`sample` draws
    weights, and :func:`~bbb_gluon.use_weights` runs the network with them.

    Parameters
    ----------
    net : gluon.Block
        An initialised network (any layers; run one batch through it first if some shapes
        are deferred).
    select : None, list of Blocks, str or callable, optional
        Which parameters are Bayesian; see :func:`bayesian_parameters` (default: the
        weights and biases of every Dense and convolution layer).
    mu_init : {"normal", "uniform", "copy"}, default "normal"
        ``"normal"``: :math:`\mu \sim N(0, \text{mu_scale}^2)` (the MXNet tutorial's
        choice); ``"uniform"``: :math:`\mu \sim U(-\text{mu_scale}, \text{mu_scale})`
        (the published reproduction of the paper's 1.31%: U(-0.03, 0.03));
        ``"copy"``: :math:`\mu` starts at the network's current weights (e.g. a
        pretrained net).
    mu_scale : float, default 0.1
        Standard deviation of the ``"normal"`` initialisation, half-width of the
        ``"uniform"`` one.
    rho_init : float or (low, high), default -3.0
        Initial :math:`\rho`: one constant (-3: :math:`\sigma \approx 0.049`), or a pair
        drawing every :math:`\rho` from :math:`U(\text{low}, \text{high})` (e.g.
        (-3.5, -3): :math:`\sigma` between 0.030 and 0.049).
    sigma_init : float, optional
        Initial :math:`\sigma` instead of ``rho_init`` (:math:`\rho` set to its inverse
        softplus).
    seed : int, optional
        Seeds the :math:`\mu` initialisation and the weight noise. ``None`` takes one from
        NumPy's global generator, so ``np.random.seed`` makes a notebook reproducible.
    prefix : str, default "posterior_"
        Prefix of the Gluon parameter names, as for any Block.

    Attributes
    ----------
    params : gluon.ParameterDict
        The :math:`\mu` and :math:`\rho` parameters (``collect_params()`` returns the
        same ones), named ``"<prefix><key>_mu"``, ``"<prefix><key>_rho"`` for each key
        such as ``"0.weight"``; give it to ``gluon.Trainer``.
    keys : list of str
        Structural names of the chosen parameters (``"0.weight"``, ``"0.bias"``, ...).
    shapes : list of tuple
    num_weights : int
        Number of network weights and biases :math:`n`; the posterior has :math:`2n`
        parameters.
    """

    def __init__(self, net, mu_init="normal", mu_scale=0.1, rho_init=-3.0, sigma_init=None,
                 seed=None, prefix="posterior_", select=None):
        named = bayesian_parameters(net, select)
        check_mu_init(mu_init)
        check_positive(mu_scale, "mu_scale")
        if sigma_init is not None:
            rho_init = ops.inverse_softplus(sigma_init)
        rho_range = check_rho_init(rho_init)
        super().__init__(prefix=prefix)
        if seed is None:
            seed = int(np.random.randint(0, 2**31 - 1))
        self.seed = int(seed)
        self.keys = list(named)
        self.shapes = [tuple(p.shape) for p in named.values()]
        self.num_weights = int(sum(int(np.prod(s)) for s in self.shapes))
        self.rho_init = rho_range[0] if rho_range[0] == rho_range[1] else rho_range
        self._draw = (mu_init, mu_scale, rho_range)
        # "copy" starts mu at the network's weights whenever initialize() runs.
        self._copy_from = [named[k] for k in self.keys] if mu_init == "copy" else None
        self._mu, self._rho = [], []
        for key, shape in zip(self.keys, self.shapes, strict=True):
            mu = self.params.get(f"{key}_mu", shape=shape, init=mx.init.Zero())
            rho = self.params.get(f"{key}_rho", shape=shape, init=mx.init.Constant(rho_range[0]))
            # Registered as the Block's own parameters under the names save_parameters
            # writes ("0.weight_mu"); setattr is Gluon's way, and accepts the dot.
            setattr(self, f"{key}_mu", mu)
            setattr(self, f"{key}_rho", rho)
            self._mu.append(mu)
            self._rho.append(rho)
        self.initialize(ctx=named[self.keys[0]].list_ctx())
        self.noise = NoiseSource(self.num_weights, seed=self.seed)

    def initialize(self, init=None, ctx=None, verbose=False, force_reinit=False):
        r"""Draw :math:`\mu` and :math:`\rho` as ``mu_init`` and ``rho_init`` say (the
        same draws for the same seed) on ``ctx`` (default: where they live now).

        The constructor calls it; call it again with ``force_reinit=True`` to start over.
        Without it, an initialised posterior is left as it is, with Gluon's warning.
        ``init`` must be None: the posterior's own settings are its initialiser.
        ``verbose`` is accepted for Gluon's signature and has nothing to say.
        """
        del verbose
        if init is not None:
            raise ValueError("a posterior is initialised by its mu_init and rho_init "
                             "settings; build a new Posterior for other ones")
        if self._initialised() and not force_reinit:
            warnings.warn(f"{self!r} is already initialised, ignoring; set "
                          "force_reinit=True to draw mu and rho again", stacklevel=2)
            return
        ctx = ctx or self.contexts
        mu_init, mu_scale, rho_range = self._draw
        rng = np.random.default_rng([self.seed, 1])
        # A stream of its own, so a constant rho_init leaves the mu draws as they were.
        rho_rng = np.random.default_rng([self.seed, 2])
        for i, (mu, rho, shape) in enumerate(zip(self._mu, self._rho, self.shapes,
                                                 strict=True)):
            mu.initialize(ctx=ctx, force_reinit=True)
            rho.initialize(ctx=ctx, force_reinit=True)
            if mu_init == "copy":
                source = self._copy_from[i]
                mu.set_data(source.data(source.list_ctx()[0]).copy())
            elif mu_init == "uniform":
                mu.set_data(mx.nd.array(rng.uniform(-mu_scale, mu_scale, shape)
                                        .astype(np.float32)))
            else:
                mu.set_data(mx.nd.array(rng.normal(0.0, mu_scale, shape).astype(np.float32)))
            if rho_range[0] != rho_range[1]:
                rho.set_data(mx.nd.array(rho_rng.uniform(*rho_range, shape).astype(np.float32)))

    def _initialised(self):
        try:
            self._mu[0].list_ctx()
        except RuntimeError:  # Gluon's answer for a parameter without a value
            return False
        return True

    def close(self):
        """End the thread that draws the weight noise ahead (it also ends when the
        posterior is garbage-collected); sampling still works, drawing in the caller."""
        self.noise.close()

    # --- introspection -------------------------------------------------------------
    def __repr__(self):
        return (f"Posterior({len(self.keys)} arrays, {self.num_weights:,} weights, "
                f"{2 * self.num_weights:,} variational parameters)")

    @property
    def contexts(self):
        """The contexts :math:`\\mu` and :math:`\\rho` live on."""
        return self._mu[0].list_ctx()

    @property
    def mu_parameters(self):
        r"""The :math:`\mu` Parameters, in key order."""
        return list(self._mu)

    @property
    def rho_parameters(self):
        r"""The :math:`\rho` Parameters, in key order."""
        return list(self._rho)

    @property
    def num_params(self):
        """Number of variational parameters, :math:`2n` (a :math:`\\mu` and a :math:`\\rho`
        per weight)."""
        return 2 * self.num_weights

    def _ctx(self, ctx):
        ctx = ctx or self.contexts[0]
        if ctx not in self.contexts:
            raise ValueError(f"the posterior lives on {self.contexts}, not on {ctx}")
        return ctx

    def mu(self, ctx=None):
        """:math:`\\mu` arrays (the posterior means) on ``ctx``, in key order."""
        ctx = self._ctx(ctx)
        return [p.data(ctx) for p in self._mu]

    def rho(self, ctx=None):
        """:math:`\\rho` arrays on ``ctx``, in key order."""
        ctx = self._ctx(ctx)
        return [p.data(ctx) for p in self._rho]

    def sigma(self, ctx=None):
        """:math:`\\sigma = \\mathrm{softplus}(\\rho)` arrays on ``ctx``, in key order."""
        return [ops.softplus(r) for r in self.rho(ctx)]

    def signal_to_noise(self, ctx=None):
        """:math:`|\\mu| / \\sigma` of every weight, as a dict ``{key: NDArray}``."""
        return {k: mx.nd.abs(m) / s
                for k, m, s in zip(self.keys, self.mu(ctx), self.sigma(ctx), strict=True)}

    # --- sampling and densities ----------------------------------------------------
    def sample(self, ctx=None, eps=None, stream=None):
        """Draw every weight once: :math:`w = \\mu + \\mathrm{softplus}(\\rho) \\circ \\epsilon`.

        Call it inside ``autograd.record()`` so the gradient of anything computed from the
        weights reaches :math:`\\mu` and :math:`\\rho`.

        Parameters
        ----------
        ctx : Context, optional
            One of the posterior's contexts (default: the first).
        eps : NDArray or ndarray, optional
            Noise of shape ``(num_weights,)`` (flat, in key order) instead of a fresh draw:
            for tests and for repeating a draw.
        stream : int, optional
            Noise stream (default: the index of ``ctx``, so each device draws its own).

        Returns
        -------
        WeightSample
        """
        ctx = self._ctx(ctx)
        if eps is None:
            stream = self.contexts.index(ctx) if stream is None else stream
            flat = self.noise.next(ctx, stream)
        else:
            flat = eps if isinstance(eps, mx.nd.NDArray) else mx.nd.array(eps, dtype="float32")
            if flat.shape != (self.num_weights,):
                raise ValueError(f"eps must have shape ({self.num_weights},), got {flat.shape}")
            flat = flat.as_in_context(ctx)
        with autograd.pause():
            # Views into one block: no copies and no recorded ops for a constant.
            eps_list, start = [], 0
            for shape in self.shapes:
                size = int(np.prod(shape))
                eps_list.append(flat[start:start + size].reshape(shape))
                start += size
            eps_sq = ops.sum_of_squares(flat)
        mus, sigmas, weights = self.mu(ctx), [], []
        for mu, rho, e in zip(mus, self.rho(ctx), eps_list, strict=True):
            sigma = ops.softplus(rho)
            sigmas.append(sigma)
            weights.append(mu + sigma * e)
        return WeightSample(weights, mus, sigmas, eps_sq, ctx, eps_list)

    def log_q(self, sample, log_sigmas=None):
        r""":math:`\log q(w \mid \theta)` of a sample, summed over all weights; shape
        ``(1,)`` (see :meth:`WeightSample.log_q`)."""
        return sample.log_q(log_sigmas)

    # --- the network -------------------------------------------------------------
    def check_net(self, net):
        """``net``'s parameters under the posterior's keys; :class:`PosteriorMismatchError`
        unless ``net`` has every one of them with the same shape."""
        named = structural_params(net)
        mine = dict(zip(self.keys, self.shapes, strict=True))
        theirs = {k: tuple(named[k].shape) for k in self.keys if k in named}
        if mine != theirs:
            raise PosteriorMismatchError(_describe_mismatch(mine, theirs, "posterior", "network"))
        return {k: named[k] for k in self.keys}

    def deterministic_params(self, net):
        """The trainable parameters of ``net`` the posterior does not cover (BatchNorm,
        embeddings, layers left out), as a ``ParameterDict`` for an ordinary
        ``gluon.Trainer``; it may be empty."""
        covered = {id(p) for p in self.check_net(net).values()}
        out = gluon.ParameterDict()
        for param in net.collect_params().values():
            if id(param) not in covered and param.grad_req != "null":
                out.update({param.name: param})
        return out

    def reset_ctx(self, ctx):
        """Move mu, rho (and later samples) to ``ctx`` (a Context or a
        list), as ``ParameterDict.reset_ctx`` does; move the network with
        ``net.collect_params().reset_ctx(ctx)``."""
        self.params.reset_ctx(ctx)

    # --- persistence -----------------------------------------------------------------
    def save_parameters(self, filename, deduplicate=False):
        """Write :math:`\\mu` and :math:`\\rho` as Gluon's ``Block.save_parameters`` does,
        one ``nd.save`` file of arrays named ``"<key>_mu"`` and ``"<key>_rho"`` (e.g.
        ``"0.weight_mu"``), but atomically: a crash while writing leaves the old file.
        ``deduplicate`` is accepted for Gluon's signature; a posterior shares nothing."""
        del deduplicate
        atomic_nd_save(filename, {name: p.data(self.contexts[0])
                                  for name, p in params_with_prefix(self).items()})

    def load_parameters(self, filename, ctx=None, allow_missing=False, ignore_extra=False):
        """Read a file written by :meth:`save_parameters`.

        As Gluon's ``load_parameters``: every array present with the same shape and
        nothing else, unless ``allow_missing`` / ``ignore_extra``; ``ctx``, if given, moves
        the posterior there first. Nothing is changed when the file does not fit
        (:class:`PosteriorMismatchError`, naming the arrays).
        """
        arrays = read_nd_file(filename)
        if not any(k.endswith(("_mu", "_rho")) for k in arrays):
            raise PosteriorMismatchError(f"{filename} is not a bbb_gluon posterior file (no "
                                         f"mu or rho arrays; it holds {sorted(arrays)[:4]})")
        params = params_with_prefix(self)
        wanted = {name: tuple(p.shape) for name, p in params.items()}
        theirs = {k: tuple(v.shape) for k, v in arrays.items()}
        if allow_missing:
            wanted = {k: v for k, v in wanted.items() if k in theirs}
        if ignore_extra:
            theirs = {k: v for k, v in theirs.items() if k in wanted}
        if wanted != theirs:
            raise PosteriorMismatchError(
                f"{filename}: " + _describe_mismatch(wanted, theirs, "posterior", "file"))
        if ctx is not None:
            self.reset_ctx(ctx)
        for name in wanted:
            params[name].set_data(arrays[name])


MU_INITS = ("normal", "uniform", "copy")


def check_mu_init(mu_init):
    """``ValueError`` unless ``mu_init`` is one of :data:`MU_INITS`."""
    if mu_init not in MU_INITS:
        raise ValueError(f"mu_init must be 'normal', 'uniform' or 'copy', got {mu_init!r}")
    return mu_init


def check_rho_init(rho_init):
    """``rho_init`` as a ``(low, high)`` pair (equal for a constant); ``ValueError`` unless
    it is a finite number or a pair of finite numbers with ``low <= high``."""
    values = list(rho_init) if isinstance(rho_init, list | tuple) else [rho_init, rho_init]
    if len(values) != 2 or any(isinstance(v, bool) or not isinstance(v, numbers.Real)
                               or not math.isfinite(v) for v in values) \
            or values[0] > values[1]:
        raise ValueError(f"rho_init must be a finite number or a pair (low, high) of finite "
                         f"numbers with low <= high, got {rho_init!r}")
    return float(values[0]), float(values[1])


def _describe_mismatch(a, b, name_a, name_b):
    only_a = [k for k in a if k not in b]
    only_b = [k for k in b if k not in a]
    shapes = [f"{k}: {a[k]} vs {b[k]}" for k in a if k in b and a[k] != b[k]]
    parts = []
    if only_a:
        parts.append(f"only in the {name_a}: {only_a}")
    if only_b:
        parts.append(f"only in the {name_b}: {only_b}")
    if shapes:
        parts.append(f"shapes differ ({name_a} vs {name_b}): {shapes}")
    return f"the {name_a} does not match the {name_b}: " + "; ".join(parts)
