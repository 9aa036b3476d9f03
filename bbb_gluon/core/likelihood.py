"""The likelihood, the data term of the cost: one :class:`Likelihood` object per kind
(what it makes of a network's outputs, found from the Gluon loss by
:func:`likelihood_of`), :class:`GaussianNLLLoss` for real-valued targets (its noise scale
fixed or learned), :class:`HeteroscedasticGaussianNLLLoss` for real-valued targets whose
noise the network predicts per input, and the checks of the labels a loss takes.
"""

import math

import mxnet as mx
from mxnet.gluon.loss import (
    HuberLoss,
    L1Loss,
    L2Loss,
    Loss,
    SigmoidBCELoss,
    SoftmaxCrossEntropyLoss,
)

from .._checks import check_positive
from .._kernels import private as _private
from .._kernels.private import apply_weighting, loss_settings
from . import ops
from .priors import HALF_LOG_2PI

__all__ = ["GaussianNLLLoss", "HeteroscedasticGaussianNLLLoss", "Likelihood",
           "SoftmaxLikelihood", "BernoulliLikelihood", "GaussianLikelihood",
           "HeteroscedasticGaussianLikelihood", "likelihood_of", "likelihood_loss",
           "likelihood_kind", "num_classes", "check_labels", "check_label_shape",
           "check_label_values", "LIKELIHOODS"]



class GaussianNLLLoss(Loss):
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
        """The noise standard deviation :math:`s` (a float)."""
        if self.noise_sigma is not None:
            return float(self.noise_sigma)
        rho = self.noise_rho.data(ctx or self.noise_rho.list_ctx()[0])
        return float(ops.softplus(rho).asscalar())

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


_KINDS = {}


class Likelihood:
    """What a likelihood makes of a network's outputs: one object per kind, found from
    the Gluon loss the network trains with (:func:`likelihood_of`; a name only at the
    edges, the command line and ``config.json``). Training, prediction and evaluation ask
    it instead of switching on a name: how many classes the outputs stand for, whether a
    number of outputs fits, and the per-example predictive made of the outputs.
    """

    name = None
    losses = ()  # the Gluon loss classes that stand for it
    classifies = True
    outputs_needed = ""  # what fits(), in words: "=1", " >= 2"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _KINDS[cls.name] = cls()

    def __repr__(self):
        return f"{type(self).__name__}()"

    def loss(self, noise_sigma=1.0):
        """The Gluon loss this likelihood's name stands for."""
        raise NotImplementedError

    def num_classes(self, outputs):
        """The classes ``outputs`` outputs per example stand for (one per output, unless
        the likelihood says otherwise)."""
        return int(outputs)

    def fits(self, outputs):
        """Whether a network with ``outputs`` outputs per example can take it."""
        return True

    def bound(self, loss):
        """This likelihood as ``loss`` (one of :attr:`losses`) sets it up: itself, unless
        the loss carries a setting the predictive needs."""
        return self

    def predictive(self, out):
        """The per-example predictive made of the network's outputs ``out``: class
        probabilities (last axis), or for real values the outputs themselves (its mean)."""
        raise NotImplementedError


class SoftmaxLikelihood(Likelihood):
    """Classes, one output (score) each: ``SoftmaxCrossEntropyLoss``."""

    name = "softmax"
    losses = (SoftmaxCrossEntropyLoss,)
    outputs_needed = " >= 2"

    def loss(self, noise_sigma=1.0):
        return SoftmaxCrossEntropyLoss()

    def fits(self, outputs):
        return outputs >= 2

    def predictive(self, out):
        if out.shape[-1] < 2:
            raise ValueError("class probabilities under likelihood='softmax' need two or "
                             "more outputs, and this network has one: a regression takes "
                             "likelihood='gaussian' (predict_samples gives its outputs per "
                             "sample, their mean and spread), a binary classifier "
                             "likelihood='bernoulli'")
        return mx.nd.softmax(out, axis=-1)


class BernoulliLikelihood(Likelihood):
    """Two classes from one logit: ``SigmoidBCELoss``."""

    name = "bernoulli"
    losses = (SigmoidBCELoss,)
    outputs_needed = "=1"

    def loss(self, noise_sigma=1.0):
        return SigmoidBCELoss()

    def num_classes(self, outputs):
        return 2

    def fits(self, outputs):
        return outputs == 1

    def predictive(self, out):
        p1 = mx.nd.sigmoid(out.reshape(out.shape[:-1] + (1,) if out.ndim == 3 else (-1, 1)))
        return mx.nd.concat(1 - p1, p1, dim=-1)


class GaussianLikelihood(Likelihood):
    """Real values, the outputs the mean: :class:`GaussianNLLLoss` (and Gluon's L2, L1 and
    Huber losses, which make the same of the outputs)."""

    name = "gaussian"
    losses = (GaussianNLLLoss, L2Loss, L1Loss, HuberLoss)
    classifies = False

    def loss(self, noise_sigma=1.0):
        return GaussianNLLLoss(noise_sigma)

    def predictive(self, out):
        return out


class HeteroscedasticGaussianLikelihood(Likelihood):
    """Real values, the outputs a mean and a noise scale per target:
    :class:`HeteroscedasticGaussianNLLLoss`. Its predictive per sample is the means,
    then the noise scales (last axis), a mixture over weight samples
    (:func:`bbb_gluon.predict_intervals`)."""

    name = "heteroscedastic"
    losses = (HeteroscedasticGaussianNLLLoss,)
    classifies = False
    outputs_needed = " even (a mean and a scale per target)"

    def __init__(self, min_sigma=1e-3):
        self.min_sigma = min_sigma

    def __repr__(self):
        return f"{type(self).__name__}(min_sigma={self.min_sigma!r})"

    def loss(self, noise_sigma=1.0):
        return HeteroscedasticGaussianNLLLoss(self.min_sigma)

    def bound(self, loss):
        return self if loss.min_sigma == self.min_sigma else type(self)(loss.min_sigma)

    def fits(self, outputs):
        return outputs >= 2 and outputs % 2 == 0

    def predictive(self, out):
        if out.shape[-1] % 2:
            raise ValueError(f"a heteroscedastic likelihood needs an even number of outputs "
                             f"(a mean and a scale per target), got {out.shape[-1]}")
        mean, raw = mx.nd.split(out, num_outputs=2, axis=-1)
        return mx.nd.concat(mean, ops.softplus(raw) + self.min_sigma, dim=-1)


LIKELIHOODS = tuple(_KINDS)


def likelihood_of(likelihood):
    """The :class:`Likelihood` of a name ("softmax", "bernoulli", "gaussian",
    "heteroscedastic"), a Gluon
    loss, a :class:`BBBLoss` (its likelihood's) or a Likelihood; the one place that tells
    them apart."""
    if isinstance(likelihood, Likelihood):
        return likelihood
    if isinstance(getattr(likelihood, "likelihood", None), Loss):  # BBBLoss: its likelihood's
        likelihood = likelihood.likelihood
    if isinstance(likelihood, str):
        if likelihood not in _KINDS:
            raise ValueError(f"unknown likelihood {likelihood!r}; choose one of {LIKELIHOODS} "
                             "or pass the loss")
        return _KINDS[likelihood]
    for kind in _KINDS.values():
        if isinstance(likelihood, kind.losses):
            return kind.bound(likelihood)
    raise ValueError(f"cannot tell what {type(likelihood).__name__} makes of the network's "
                     "outputs; pass likelihood='softmax', 'bernoulli' or 'gaussian'")


def likelihood_loss(name, noise_sigma=1.0):
    """The Gluon loss a likelihood's name stands for (the names ``TrainConfig`` and the
    command line use): "softmax" → ``SoftmaxCrossEntropyLoss``, "bernoulli" →
    ``SigmoidBCELoss``, "gaussian" → :class:`GaussianNLLLoss` (``noise_sigma`` None:
    learned)."""
    if name not in _KINDS:
        raise ValueError(f"unknown likelihood {name!r}; choose one of {LIKELIHOODS}")
    return _KINDS[name].loss(noise_sigma)


def likelihood_kind(likelihood):
    """The name of :func:`likelihood_of`'s answer: "softmax" (class scores), "bernoulli"
    (one logit) or "gaussian" (real values)."""
    return likelihood_of(likelihood).name


def num_classes(likelihood, outputs):
    """The classes a classifier's ``outputs`` outputs per example stand for: two for one
    Bernoulli logit, else one per output (a name, a Gluon loss or a BBBLoss)."""
    return likelihood_of(likelihood).num_classes(outputs)


def check_labels(likelihood, pred, label, batch_axis=0, values=False):
    """Raise ValueError, in the user's words, where ``label`` cannot be what ``likelihood``
    takes for ``pred``: shapes always (no host read), values (a host read) if ``values``."""
    for name, a in (("pred", pred), ("label", label)):
        if not isinstance(a, mx.nd.NDArray):
            raise TypeError(f"{name} must be an MXNet NDArray, got {type(a).__name__}")
    classes = check_label_shape(likelihood, tuple(pred.shape), tuple(label.shape), batch_axis)
    if values:
        check_label_values(likelihood, label, classes)


def check_label_shape(likelihood, pred_shape, label_shape, batch_axis=0):
    """Raise ValueError where labels of ``label_shape`` cannot be what ``likelihood`` takes
    for outputs of ``pred_shape`` (tuples: no array, no host read); else the number of
    classes the labels index (None where they are not class indices)."""
    b = pred_shape[batch_axis]
    if b == 0:
        raise ValueError(f"pred holds no examples (shape {pred_shape})")
    if label_shape[:1] != (b,):
        raise ValueError(f"pred has {b} examples but label has "
                         f"{label_shape[0] if label_shape else 'none (a scalar)'}")
    if isinstance(likelihood, SoftmaxCrossEntropyLoss):
        sparse = _private.sparse_label(likelihood)
        if sparse and len(pred_shape) == 2 and label_shape not in ((b,), (b, 1)):
            raise ValueError(f"class labels must have shape ({b},), got {label_shape}")
        if not sparse and label_shape != pred_shape:
            raise ValueError(f"one-hot labels must have pred's shape {pred_shape}, got "
                             f"{label_shape}")
        return pred_shape[-1] if sparse else None
    if isinstance(likelihood, GaussianNLLLoss) and label_shape != pred_shape:
        raise ValueError(f"GaussianNLLLoss expects targets of pred's shape {pred_shape}, got "
                         f"{label_shape}")
    if isinstance(likelihood, HeteroscedasticGaussianNLLLoss):
        half = pred_shape[:-1] + (pred_shape[-1] // 2,)
        if pred_shape[-1] % 2 or label_shape != half:
            raise ValueError(f"HeteroscedasticGaussianNLLLoss expects outputs with a mean and "
                             f"a scale per target (an even last axis) and targets of the "
                             f"means' shape; got outputs {pred_shape} and targets "
                             f"{label_shape}")
    if isinstance(likelihood, SigmoidBCELoss) and math.prod(label_shape) != math.prod(
            pred_shape):
        raise ValueError(f"SigmoidBCELoss expects one label per output, got pred "
                         f"{pred_shape} and label {label_shape}")
    return None


def check_label_values(likelihood, label, classes):
    """Raise ValueError where ``label`` (an NDArray) holds values ``likelihood`` cannot
    take: NaN or infinity; for ``classes`` classes, fractions or indices outside
    0..classes-1; for a Bernoulli likelihood, values outside [0, 1]. One host read."""
    label = label.astype("float32", copy=False)  # NaN and fractions of any dtype alike
    frac = mx.nd.abs(label - mx.nd.round(label)).max().reshape((1,))
    finite = mx.nd.contrib.isfinite(label).min().reshape((1,))
    lo, hi, frac, finite = mx.nd.concat(label.min().reshape((1,)), label.max().reshape((1,)),
                                        frac, finite, dim=0).asnumpy().astype(float)
    if not finite:
        raise ValueError("labels contain NaN or infinity")
    if classes is not None:
        if frac > 0:
            raise ValueError("class labels must be whole numbers (0, 1, 2, ...), got a "
                             "label with a fractional part")
        if lo < 0 or hi > classes - 1:
            raise ValueError(f"class labels must lie in 0..{classes - 1} for {classes} "
                             f"classes, got labels from {lo:g} to {hi:g}")
    elif isinstance(likelihood, SigmoidBCELoss) and (lo < 0 or hi > 1):
        raise ValueError(f"SigmoidBCELoss labels must lie in [0, 1], got labels from "
                         f"{lo:g} to {hi:g}")
