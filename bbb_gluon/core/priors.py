r"""Priors over the weights: a Gaussian, Blundell's scale mixture of two Gaussians, a
Laplace (sparsity) prior, and two Gaussians whose scale is set per array: by its fan-in,
or by empirical Bayes.

All are factorised over the weights, so ``log_prob(w)`` is a sum over all elements of
``w``. All are written with as few elementwise passes as possible, because on a CPU the
passes, not the arithmetic, are the cost (see :mod:`bbb_gluon.core.ops`).

A prior class is the one place that knows everything about its prior: its log density
(the reference engine), what the fused kernel runs for it (:meth:`Prior.fused_attrs`), its
name and hyperparameters in ``config.json`` (:meth:`Prior.to_dict`, :func:`make_prior`),
its columns in the run summaries and its spelling on the command line
(:attr:`Prior.cli_options`). Adding a prior is a subclass here plus, for the fused engine,
its code in ``_kernels/fused.cc`` (docs/architecture.md, "Where to add things").

References
----------
.. [1] C. Blundell, J. Cornebise, K. Kavukcuoglu, D. Wierstra. "Weight Uncertainty in
   Neural Networks". ICML 2015. arXiv:1505.05424.
"""

import math
from collections.abc import Callable
from typing import NamedTuple

import mxnet as mx

from . import ops

__all__ = ["Prior", "GaussianPrior", "ScaleMixturePrior", "LaplacePrior",
           "FanInGaussianPrior", "EmpiricalBayesPrior", "make_prior", "prior_kinds"]

HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_E_MINUS_6 = math.exp(-6.0)


def _check_positive(name, value):
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _gaussian_log_prob(w, sigma, F):
    const = -w.size * (HALF_LOG_2PI + math.log(sigma))
    return ops.sum_of_squares(w, F) * (-0.5 / sigma**2) + const


def _gaussian_kl(mu, sigma, log_sigma, sigma_p, F):
    """KL from N(mu, sigma^2), elementwise, to N(0, sigma_p^2); sigma_p a float or an
    array of shape (1,)."""
    if log_sigma is None:
        log_sigma = F.log(sigma)
    log_p = F.log(sigma_p) if isinstance(sigma_p, mx.nd.NDArray) else math.log(sigma_p)
    quad = (ops.sum_of_squares(sigma, F) + ops.sum_of_squares(mu, F)) * (0.5 / sigma_p**2)
    return quad - ops.total(log_sigma, F) + mu.size * (log_p - 0.5)


class CliOption(NamedTuple):
    """How the command line spells one hyperparameter: ``flag`` sets ``param`` to
    ``to_param(value)``; its default is ``from_param`` of the default prior's value."""

    flag: str
    param: str
    help: str
    to_param: Callable = float
    from_param: Callable = float


_KINDS = {}


class Prior:
    """Base class: a factorised prior :math:`P(w) = \\prod_j p(w_j)`.

    A subclass sets :attr:`kind` (its name in ``config.json`` and on the command line),
    :attr:`params` (its constructor's hyperparameters, each with a default) and
    :attr:`cli_options`, and defines :meth:`log_prob` (and :meth:`kl` where a closed form
    exists, :meth:`fused_attrs` where the fused kernel has its code); it is then known to
    :func:`make_prior`, ``TrainConfig``, the command line, the run summaries and
    ``bbb-gluon compare``.
    """

    kind = None
    params = ()
    cli_options = ()
    has_closed_form_kl = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.kind is not None:
            _KINDS[cls.kind] = cls

    def log_prob(self, w, F=mx.nd):
        """:math:`\\sum_j \\log p(w_j)` over every element of ``w``; shape ``(1,)``."""
        raise NotImplementedError

    def kl(self, mu, sigma, log_sigma=None, F=mx.nd):
        """Closed-form :math:`KL(q \\| P)` for :math:`q = N(\\mu, \\sigma^2)`, if one exists."""
        raise NotImplementedError(f"{type(self).__name__} has no closed-form KL")

    def fused_attrs(self, complexity):
        """The fused kernel's attributes for this prior under ``complexity`` ("mc" or
        "kl"): its code in ``_kernels/fused.cc`` (``kind``, the kernel's ``enum Kind``) and
        its hyperparameters as strings, or ``None`` where the kernel has no code for it
        (the step then runs the reference engine)."""
        return None

    def widest_scale(self):
        """The standard deviation of the prior's widest component (None where the class
        does not say): a weight's noise far above it is noise the prior does not allow."""
        return None

    def to_dict(self):
        """``{"kind": ..., hyperparameters...}``, as ``config.json`` stores the prior and
        :func:`make_prior` takes it back."""
        return {"kind": self.kind, **{name: getattr(self, name) for name in self.params}}

    def summary(self):
        """The prior's columns in a run summary (:func:`bbb_gluon.runs.summarize_run`):
        ``prior_<hyperparameter>`` unless the class says otherwise."""
        return {f"prior_{name}": getattr(self, name) for name in self.params}

    @classmethod
    def summary_columns(cls):
        return tuple(f"prior_{name}" for name in cls.params)

    def label(self):
        """A short text for tables (``bbb-gluon compare``)."""
        return f"{self.kind}(" + ", ".join(f"{n}={getattr(self, n):g}" for n in self.params) \
            + ")"

    def __repr__(self):
        return f"{type(self).__name__}(" + ", ".join(
            f"{n}={getattr(self, n):g}" for n in self.params) + ")"

    def __eq__(self, other):
        return type(other) is type(self) and other.to_dict() == self.to_dict()

    def __hash__(self):
        return hash(tuple(sorted(self.to_dict().items())))


class GaussianPrior(Prior):
    r"""Gaussian prior :math:`P(w) = \prod_j N(w_j \mid 0, \sigma^2)`.

    .. math::

        \log P(w) = -n \left(\tfrac12 \log 2\pi + \log\sigma\right)
                    - \frac{1}{2\sigma^2} \sum_j w_j^2

    Parameters
    ----------
    sigma : float, default 1.0
        Standard deviation, > 0.
    """

    kind = "gaussian"
    params = ("sigma",)
    cli_options = (CliOption("--prior-sigma", "sigma", "the Gaussian's sigma"),)
    has_closed_form_kl = True

    def __init__(self, sigma=1.0):
        self.sigma = _check_positive("sigma", sigma)

    def fused_attrs(self, complexity):
        return {"kind": 3 if complexity == "kl" else 2, "sigma": repr(self.sigma)}

    def label(self):
        return f"N(0,{self.sigma:g}^2)"

    def widest_scale(self):
        return self.sigma

    def log_prob(self, w, F=mx.nd):
        return _gaussian_log_prob(w, self.sigma, F)

    def kl(self, mu, sigma, log_sigma=None, F=mx.nd):
        r"""Closed-form KL from :math:`N(\mu, \sigma^2)` (elementwise) to this prior.

        .. math::

            KL = \sum_j \log\frac{\sigma_p}{\sigma_j}
                 + \frac{\sigma_j^2 + \mu_j^2}{2\sigma_p^2} - \frac12

        Parameters
        ----------
        mu, sigma : NDArray
            Same shape; ``sigma > 0``.
        log_sigma : NDArray, optional
            ``log(sigma)`` if the caller already has it (saves one pass).

        Returns
        -------
        NDArray of shape ``(1,)``.
        """
        return _gaussian_kl(mu, sigma, log_sigma, self.sigma, F)


class ScaleMixturePrior(Prior):
    r"""Scale mixture prior of Blundell et al. (2015), eq. (7).

    .. math::

        P(w) = \prod_j \left[\pi N(w_j \mid 0, \sigma_1^2)
               + (1 - \pi) N(w_j \mid 0, \sigma_2^2)\right],
        \quad \sigma_1 > \sigma_2

    With :math:`\sigma_2 = e^{-6} \ldots e^{-8}` the two densities under- and overflow in
    float32, so it is evaluated in log space: with
    :math:`a_j = \log\pi - \log\sigma_1 - w_j^2 / 2\sigma_1^2` (the wide component) and
    :math:`b_j` the narrow one,
    :math:`\log(e^{a_j} + e^{b_j}) = a_j + \mathrm{softplus}(b_j - a_j)`, where
    :math:`b_j - a_j = c - k w_j^2` with :math:`k > 0`. The wide term is summed as one
    inner product; only :math:`\mathrm{softplus}(c - k w_j^2)` is elementwise. Where the
    narrow component dominates, :math:`|w|` is below the crossing point and every term is
    small, so nothing large cancels.

    Parameters
    ----------
    pi : float, default 0.5
        Weight of the wide component, ``0 < pi < 1``.
    sigma1 : float, default 1.0
        Standard deviation of the wide component.
    sigma2 : float, default exp(-6)
        Standard deviation of the narrow component, ``sigma2 < sigma1``.
    """

    kind = "scale_mixture"
    params = ("pi", "sigma1", "sigma2")
    cli_options = (
        CliOption("--pi", "pi", "mixture weight of the wide component"),
        CliOption("--log-sigma1", "sigma1", "natural log of the wide component's sigma",
                  math.exp, math.log),
        CliOption("--log-sigma2", "sigma2", "natural log of the narrow component's sigma",
                  math.exp, math.log),
    )

    def __init__(self, pi=0.5, sigma1=1.0, sigma2=_E_MINUS_6):
        if isinstance(pi, bool) or not isinstance(pi, int | float) or not math.isfinite(pi):
            raise ValueError(f"pi must be a finite number, got {pi!r}")
        if not 0 < pi < 1:
            raise ValueError(f"pi is a mixture weight and must lie in (0, 1), got {pi!r}")
        self.pi = float(pi)
        self.sigma1 = _check_positive("sigma1", sigma1)
        self.sigma2 = _check_positive("sigma2", sigma2)
        if not self.sigma1 > self.sigma2:
            raise ValueError(
                f"sigma1 must be larger than sigma2 (sigma1 is the wide component), "
                f"got sigma1={sigma1!r}, sigma2={sigma2!r}"
            )
        self._wide_const = math.log(self.pi) - math.log(self.sigma1) - HALF_LOG_2PI
        self._wide_coef = 0.5 / self.sigma1**2
        # b - a = c - k w^2
        self._c = math.log1p(-self.pi) - math.log(self.pi) + math.log(self.sigma1 / self.sigma2)
        self._k = 0.5 / self.sigma2**2 - 0.5 / self.sigma1**2

    def fused_attrs(self, complexity):
        if complexity != "mc":  # no closed-form KL
            return None
        return {"kind": 1, "pi": repr(self.pi), "sigma1": repr(self.sigma1),
                "sigma2": repr(self.sigma2)}

    def summary(self):
        # The paper (and the command line) give the sigmas as natural logs.
        return {"pi": self.pi, "log_sigma1": math.log(self.sigma1),
                "log_sigma2": math.log(self.sigma2)}

    @classmethod
    def summary_columns(cls):
        return ("pi", "log_sigma1", "log_sigma2")

    def widest_scale(self):
        return self.sigma1

    def label(self):
        return (f"pi={self.pi:g} ls1={math.log(self.sigma1):.3g} "
                f"ls2={math.log(self.sigma2):.3g}")

    def log_prob(self, w, F=mx.nd):
        # ops.softplus, not oneDNN's softrelu: c - k w^2 is mostly far below -5, where
        # softrelu is inaccurate (and below -17 returns zero or negative values).
        narrow_excess = ops.softplus(F.square(w) * (-self._k) + self._c, F)
        return (
            ops.total(narrow_excess, F)
            - ops.sum_of_squares(w, F) * self._wide_coef
            + w.size * self._wide_const
        )


class LaplacePrior(Prior):
    r"""Laplace prior :math:`P(w) = \prod_j \frac{1}{2b} e^{-|w_j| / b}`, a sparsity prior.

    .. math::

        \log P(w) = -n \log 2b - \frac{1}{b} \sum_j |w_j|

    Against a Gaussian of the same variance (:math:`2b^2`) it has a sharper peak at zero
    and heavier tails: it pulls small weights to zero more and leaves large ones more
    alone, which suits pruning (notebook 04). Its gradient with respect to :math:`w` is
    :math:`-\mathrm{sign}(w) / b` (0 at :math:`w = 0`, as MXNet's ``abs``).

    Parameters
    ----------
    scale : float, default 1.0
        :math:`b > 0`; the standard deviation is :math:`\sqrt{2}\, b`.
    """

    kind = "laplace"
    params = ("scale",)
    cli_options = (CliOption("--prior-scale", "scale", "the Laplace prior's scale b"),)

    def __init__(self, scale=1.0):
        self.scale = _check_positive("scale", scale)

    def fused_attrs(self, complexity):
        if complexity != "mc":  # no closed-form KL
            return None
        return {"kind": 4, "b": repr(self.scale)}

    def label(self):
        return f"Laplace(0,{self.scale:g})"

    def widest_scale(self):
        return math.sqrt(2.0) * self.scale

    def log_prob(self, w, F=mx.nd):
        return ops.total(F.abs(w), F) * (-1.0 / self.scale) \
            - w.size * math.log(2.0 * self.scale)


class FanInGaussianPrior(Prior):
    r"""A Gaussian whose scale shrinks with the fan-in of the array it is on:
    :math:`N(0, g^2 / n_{in})`.

    The fan-in :math:`n_{in}` is the product of the array's shape after the first axis
    (a Dense weight ``(units, in_units)``: ``in_units``; a convolution's ``(channels,
    in_channels, *kernel)``: ``in_channels`` times the kernel's size); a one-axis array
    (a bias) keeps :math:`\sigma = g`. With :math:`g = 1` a unit's pre-activation has an
    input's variance under the prior whatever the layer's width (docs/regression.md).

    Parameters
    ----------
    gain : float, default 1.0
        :math:`g > 0`.
    """

    kind = "fan_in_gaussian"
    params = ("gain",)
    cli_options = (CliOption("--prior-gain", "gain",
                             "the fan-in Gaussian's gain g: sigma = g / sqrt(fan-in)"),)
    has_closed_form_kl = True

    def __init__(self, gain=1.0):
        self.gain = _check_positive("gain", gain)

    def sigma_of(self, shape):
        """The prior's standard deviation on an array of ``shape``."""
        return self.gain / math.sqrt(max(math.prod(shape[1:]), 1))

    def label(self):
        return f"N(0,{self.gain:g}^2/fan-in)"

    def widest_scale(self):
        return self.gain

    def log_prob(self, w, F=mx.nd):
        return _gaussian_log_prob(w, self.sigma_of(w.shape), F)

    def kl(self, mu, sigma, log_sigma=None, F=mx.nd):
        """Closed-form KL to this prior, as :meth:`GaussianPrior.kl` with the array's
        own scale."""
        return _gaussian_kl(mu, sigma, log_sigma, self.sigma_of(mu.shape), F)


class EmpiricalBayesPrior(Prior):
    r"""A Gaussian :math:`N(0, v)` on each array whose variance :math:`v` is chosen by
    empirical Bayes: at every step, the :math:`v` that maximises the ELBO under an
    inverse-gamma hyperprior :math:`IG(\alpha, \beta)`,

    .. math::

        \hat v = \frac{\sum_j (\mu_j^2 + \sigma_j^2) + 2\beta}{n + 2\alpha + 2}

    (the Monte-Carlo cost puts the sampled weights' squares in place of
    :math:`\mu_j^2 + \sigma_j^2`), one :math:`v` per array (a layer's weight, its bias).
    :math:`\hat v` is held fixed in the gradient, which at the optimum of :math:`v` is the
    gradient of the ELBO with :math:`v` optimised out; the cost reported is
    :math:`KL(q \| N(0, \hat v))`, without the hyperprior's term.

    Parameters
    ----------
    alpha, beta : float, default 1.0, 1.0
        The hyperprior's shape (``>= 0``) and scale (``> 0``): they keep :math:`\hat v`
        away from 0 on small arrays (a one-unit bias).
    """

    kind = "empirical_bayes"
    params = ("alpha", "beta")
    cli_options = (
        CliOption("--prior-alpha", "alpha", "the empirical-Bayes hyperprior's shape"),
        CliOption("--prior-beta", "beta", "the empirical-Bayes hyperprior's scale"),
    )
    has_closed_form_kl = True

    def __init__(self, alpha=1.0, beta=1.0):
        if isinstance(alpha, bool) or not isinstance(alpha, int | float) \
                or not math.isfinite(alpha) or alpha < 0:
            raise ValueError(f"alpha must be a finite number >= 0, got {alpha!r}")
        self.alpha = float(alpha)
        self.beta = _check_positive("beta", beta)

    def variance(self, sum_of_squares, n, F=mx.nd):
        r""":math:`\hat v` from the sum of squares of ``n`` values, outside autograd."""
        return F.stop_gradient((sum_of_squares + 2.0 * self.beta) /
                               (n + 2.0 * self.alpha + 2.0))

    def log_prob(self, w, F=mx.nd):
        squares = ops.sum_of_squares(w, F)
        v = self.variance(squares, w.size, F)
        return squares * (-0.5) / v - w.size * (HALF_LOG_2PI + 0.5 * F.log(v))

    def kl(self, mu, sigma, log_sigma=None, F=mx.nd):
        v = self.variance(ops.sum_of_squares(mu, F) + ops.sum_of_squares(sigma, F),
                          mu.size, F)
        return _gaussian_kl(mu, sigma, log_sigma, F.sqrt(v), F)


def prior_kinds():
    """``{name: class}`` of every prior :func:`make_prior` knows, in definition order."""
    return dict(_KINDS)


def make_prior(kind="scale_mixture", **kwargs):
    """Build a prior from its name and hyperparameters (as stored in ``to_dict()``).

    ``kind`` is a :attr:`Prior.kind`: ``"gaussian"`` (``sigma``), ``"scale_mixture"``
    (``pi``, ``sigma1``, ``sigma2``), ``"laplace"`` (``scale``), or any other subclass of
    :class:`Prior` (:func:`prior_kinds`).
    """
    if kind not in _KINDS:
        raise ValueError(f"unknown prior {kind!r}; choose one of {sorted(_KINDS)}")
    cls = _KINDS[kind]
    unknown = sorted(set(kwargs) - set(cls.params))
    if unknown:
        raise ValueError(f"prior {kind!r} takes {', '.join(cls.params)}; got {unknown[0]!r}")
    return cls(**kwargs)
