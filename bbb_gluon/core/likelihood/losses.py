"""The likelihoods' Gluon losses for real-valued targets."""

import math

import mxnet as mx
from mxnet.gluon.loss import Loss

from ..._checks import check_positive
from ..._kernels.private import apply_weighting, loss_settings
from .. import ops
from ..priors import HALF_LOG_2PI


class _OneScaleLoss(Loss):
    r"""A loss with one noise scale, fixed (``noise_sigma``) or learned: the parameter
    ``noise_rho``, :math:`s = \mathrm{softplus}(\rho_s)` starting at 1. It comes
    hybridized."""

    def __init__(self, noise_sigma=None, weight=None, batch_axis=0, **kwargs):
        super().__init__(weight, batch_axis, **kwargs)
        check_positive(noise_sigma, "noise_sigma", allow_none=True)
        self.noise_sigma = noise_sigma
        if noise_sigma is None:
            with self.name_scope():
                self.noise_rho = self.params.get(
                    "noise_rho", shape=(1,), init=mx.init.Constant(ops.inverse_softplus(1.0)))
        self.hybridize()

    def sigma(self, ctx=None):
        """The noise scale :math:`s` (a float)."""
        if self.noise_sigma is not None:
            return float(self.noise_sigma)
        rho = self.noise_rho.data(ctx or self.noise_rho.list_ctx()[0])
        return float(ops.softplus(rho).asscalar())


class GaussianNLLLoss(_OneScaleLoss):
    r"""Negative log-likelihood of real-valued targets under :math:`N(\text{pred}, s^2)`.

    Per example: :math:`\sum_d (y_d - \hat y_d)^2 / (2 s^2) + D (\log s + \tfrac12
    \log 2\pi)`. With ``noise_sigma=None`` the noise scale :math:`s = \mathrm{softplus}(
    \rho_s)` is a parameter of this loss, learned with the network: initialise the loss
    (``loss.initialize(ctx=...)``) and ``fit(..., net=Network(net, loss=loss))`` trains
    and checkpoints it.

    Parameters
    ----------
    noise_sigma : float or None, default None
        A fixed noise standard deviation, or None to learn it (starting at 1).

    The loss comes hybridized (``hybridize(False)`` undoes it): its forward is some twenty
    small operators on a one-element scale, which run as one graph instead of one MXNet
    call each; on the small regression networks it trains, that was close to half of a
    training step.
    """

    def hybrid_forward(self, F, pred, label, noise_rho=None):
        nll = _gaussian_nll(F, pred, label, self.noise_sigma, noise_rho)
        return apply_weighting(F, nll, loss_settings(self)[0])


def _gaussian_nll(F, pred, label, noise_sigma, noise_rho):
    """Per example, :math:`\\sum_d [(y_d - f_d)^2 / (2s^2) + \\log s + \\tfrac12 \\log 2\\pi]`
    over the last axis: with the fixed ``noise_sigma``, or ``s = softplus(noise_rho)``."""
    # D, the outputs per example: known imperatively, an array of the graph when hybridized
    dims = pred.shape[-1] if F is mx.nd else F.sum(F.ones_like(pred), axis=-1)
    if noise_rho is None:
        s = noise_sigma
        return F.sum(F.square(pred - label), axis=-1) * (0.5 / s**2) + \
            dims * (math.log(s) + HALF_LOG_2PI)
    s = ops.softplus(noise_rho, F)
    sq = F.broadcast_div(F.square(pred - label), 2 * F.square(s))
    if F is mx.nd:
        return F.broadcast_add(F.sum(sq, axis=-1), (F.log(s) + HALF_LOG_2PI) * dims)
    return F.sum(sq, axis=-1) + F.broadcast_mul(dims, F.log(s) + HALF_LOG_2PI)


class HeteroscedasticGaussianNLLLoss(Loss):
    r"""Negative log-likelihood of real-valued targets whose noise depends on the input:
    the network predicts a mean and a scale per target.

    For ``D`` targets the network's last axis holds ``2D`` numbers: the means
    :math:`\hat y_d`, then the raw scales :math:`r_d`, with the noise
    :math:`s_d = \mathrm{softplus}(r_d) + s_{\min}`. Per example:
    :math:`\sum_d (y_d - \hat y_d)^2 / (2 s_d^2) + \log s_d + \tfrac12 \log 2\pi`;
    the targets have the means' shape, ``(N, D)``.

    Start the scale's output small (the last layer's bias of the scales, e.g.
    ``inverse_softplus(0.1)``): a network that starts with large noise can explain the
    data as noise before it has learned the mean. The loss comes hybridized, as
    :class:`GaussianNLLLoss` does.

    Parameters
    ----------
    min_sigma : float, default 1e-3
        A floor under the noise: without it a network can drive one point's scale to 0
        and its cost to minus infinity (on standardised targets, 1e-3 is a thousandth of
        their spread).
    """

    def __init__(self, min_sigma=1e-3, weight=None, batch_axis=0, **kwargs):
        super().__init__(weight, batch_axis, **kwargs)
        check_positive(min_sigma, "min_sigma")
        self.min_sigma = float(min_sigma)
        self.hybridize()

    def split(self, pred, F=mx.nd):
        """The means and the noise scales of the outputs ``pred`` (each of half its last
        axis)."""
        mean, raw = F.split(pred, num_outputs=2, axis=-1)
        return mean, ops.softplus(raw, F) + self.min_sigma

    def hybrid_forward(self, F, pred, label):
        mean, s = self.split(pred, F)
        nll = F.sum(F.square(mean - label) / (2 * F.square(s)) + F.log(s), axis=-1)
        dims = label.shape[-1] if F is mx.nd else F.sum(F.ones_like(label), axis=-1)
        nll = nll + dims * HALF_LOG_2PI
        return apply_weighting(F, nll, loss_settings(self)[0])


class StudentTNLLLoss(_OneScaleLoss):
    r"""Negative log-likelihood of real-valued targets under Student's t, location the
    prediction, scale :math:`s`, ``df`` degrees of freedom :math:`\nu`: a regression whose
    noise has heavier tails than the Gaussian's, so that a few outlying targets pull the
    fit less.

    Per example: :math:`\sum_d \log s - \log\Gamma(\tfrac{\nu+1}{2})
    + \log\Gamma(\tfrac{\nu}{2}) + \tfrac12\log(\nu\pi)
    + \tfrac{\nu+1}{2}\log\big(1 + (y_d - \hat y_d)^2/(\nu s^2)\big)`. With
    ``noise_sigma=None`` the scale :math:`s = \mathrm{softplus}(\rho_s)` is learned, as
    :class:`GaussianNLLLoss`'s is (initialise the loss); it comes hybridized.

    Parameters
    ----------
    noise_sigma : float or None, default None
        A fixed scale, or None to learn it (starting at 1).
    df : float, default 4.0
        The degrees of freedom, > 0 (the variance is finite above 2).
    """

    def __init__(self, noise_sigma=None, df=4.0, weight=None, batch_axis=0, **kwargs):
        check_positive(df, "df")
        self.df = float(df)
        self._constant = (math.lgamma(self.df / 2) - math.lgamma((self.df + 1) / 2)
                          + 0.5 * math.log(self.df * math.pi))
        super().__init__(noise_sigma, weight, batch_axis, **kwargs)

    def hybrid_forward(self, F, pred, label, noise_rho=None):
        dims = pred.shape[-1] if F is mx.nd else F.sum(F.ones_like(pred), axis=-1)
        half = 0.5 * (self.df + 1)
        if noise_rho is None:
            s = self.noise_sigma
            z2 = F.square(pred - label) / (s * s * self.df)
            nll = half * F.sum(F.log1p(z2), axis=-1) + dims * (math.log(s) + self._constant)
        else:
            s = ops.softplus(noise_rho, F)
            z2 = F.broadcast_div(F.square(pred - label), F.square(s) * self.df)
            per = half * F.sum(F.log1p(z2), axis=-1)
            if F is mx.nd:
                nll = F.broadcast_add(per, (F.log(s) + self._constant) * dims)
            else:
                nll = per + F.broadcast_mul(dims, F.log(s) + self._constant)
        return apply_weighting(F, nll, loss_settings(self)[0])
