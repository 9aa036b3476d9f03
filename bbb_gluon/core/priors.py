r"""Priors over the weights: a Gaussian and Blundell's scale mixture of two Gaussians.

Both are factorised over the weights, so ``log_prob(w)`` is a sum over all elements of
``w``. Both are written with as few elementwise passes as possible, because on a CPU the
passes, not the arithmetic, are the cost (see :mod:`bbb_gluon.ops`).

References
----------
.. [1] C. Blundell, J. Cornebise, K. Kavukcuoglu, D. Wierstra. "Weight Uncertainty in
   Neural Networks". ICML 2015. arXiv:1505.05424.
"""

import math

import mxnet as mx

from . import ops

__all__ = ["Prior", "GaussianPrior", "ScaleMixturePrior", "make_prior"]

HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_E_MINUS_6 = math.exp(-6.0)


def _check_positive(name, value):
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


class Prior:
    """Base class: a factorised prior :math:`P(w) = \\prod_j p(w_j)`."""

    def log_prob(self, w, F=mx.nd):
        """:math:`\\sum_j \\log p(w_j)` over every element of ``w``; shape ``(1,)``."""
        raise NotImplementedError

    def kl(self, mu, sigma, log_sigma=None, F=mx.nd):
        """Closed-form :math:`KL(q \\| P)` for :math:`q = N(\\mu, \\sigma^2)`, if one exists."""
        raise NotImplementedError(f"{type(self).__name__} has no closed-form KL")

    has_closed_form_kl = False

    def to_dict(self):
        raise NotImplementedError

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

    has_closed_form_kl = True

    def __init__(self, sigma=1.0):
        self.sigma = _check_positive("sigma", sigma)

    def __repr__(self):
        return f"GaussianPrior(sigma={self.sigma:g})"

    def to_dict(self):
        return {"kind": "gaussian", "sigma": self.sigma}

    def log_prob(self, w, F=mx.nd):
        const = -w.size * (HALF_LOG_2PI + math.log(self.sigma))
        return ops.sum_of_squares(w, F) * (-0.5 / self.sigma**2) + const

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
        if log_sigma is None:
            log_sigma = F.log(sigma)
        n = mu.size
        quad = (ops.sum_of_squares(sigma, F) + ops.sum_of_squares(mu, F)) * (
            0.5 / self.sigma**2
        )
        return quad - ops.total(log_sigma, F) + n * (math.log(self.sigma) - 0.5)


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

    def __repr__(self):
        return f"ScaleMixturePrior(pi={self.pi:g}, sigma1={self.sigma1:g}, sigma2={self.sigma2:g})"

    def to_dict(self):
        return {"kind": "scale_mixture", "pi": self.pi, "sigma1": self.sigma1,
                "sigma2": self.sigma2}

    def log_prob(self, w, F=mx.nd):
        # ops.softplus, not oneDNN's softrelu: c - k w^2 is mostly far below -5, where
        # softrelu is inaccurate (and below -17 returns zero or negative values).
        narrow_excess = ops.softplus(F.square(w) * (-self._k) + self._c, F)
        return (
            ops.total(narrow_excess, F)
            - ops.sum_of_squares(w, F) * self._wide_coef
            + w.size * self._wide_const
        )


def make_prior(kind="scale_mixture", **kwargs):
    """Build a prior from its name and hyperparameters (as stored in ``to_dict()``).

    ``kind`` is ``"gaussian"`` (``sigma``) or ``"scale_mixture"`` (``pi``, ``sigma1``,
    ``sigma2``).
    """
    kinds = {"gaussian": GaussianPrior, "scale_mixture": ScaleMixturePrior}
    if kind not in kinds:
        raise ValueError(f"unknown prior {kind!r}; choose one of {sorted(kinds)}")
    return kinds[kind](**kwargs)
