"""The likelihood kinds, one object each, and their registry."""

import math

import mxnet as mx
import numpy as np
from mxnet.gluon.loss import (
    HuberLoss,
    L1Loss,
    L2Loss,
    Loss,
    SigmoidBCELoss,
    SoftmaxCrossEntropyLoss,
)

from ..._kernels import private as _private
from .. import ops
from .families import NORMAL, StudentTNoise
from .losses import GaussianNLLLoss, HeteroscedasticGaussianNLLLoss, StudentTNLLLoss

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

    def label_shape_error(self, loss, pred_shape, label_shape):
        """Why labels of ``label_shape`` cannot be what ``loss`` (one of :attr:`losses`)
        takes for outputs of ``pred_shape``, in the user's words, or None."""
        return None

    def label_classes(self, loss, pred_shape):
        """The classes the labels index for outputs of ``pred_shape`` (None where they are
        not class indices)."""
        return None

    def label_value_error(self, low, high):
        """Why labels from ``low`` to ``high`` (finite) cannot be this likelihood's, or
        None (class labels' range is checked against the classes)."""
        return None

    # A regression's likelihood also says, of a predictive made of weight samples:
    def noise_of(self, loss):
        """The noise per unit scale (:class:`NormalNoise`) that ``loss`` (one of
        :attr:`losses`) gives the targets, which scores and intervals use; None where it
        gives none (a classifier, or a loss without a noise scale such as ``L2Loss``)."""
        return None

    def targets(self, outputs):
        """The targets per example a network of ``outputs`` outputs predicts."""
        return outputs

    def outputs_for(self, targets):
        """The outputs a network needs for ``targets`` targets per example."""
        return targets

    def locations_scales(self, out, loss):
        """The noise's location and scale per sample, point and target, as float64 NumPy
        arrays of the targets' shape, from the network's outputs per sample ``out`` (as
        :meth:`predictive` gives them, ``(samples, N, outputs)``) and ``loss``, the loss
        the network trained with (a learned scale)."""
        raise TypeError(f"the {self.name} likelihood has no noise: it is not a regression's")


class SoftmaxLikelihood(Likelihood):
    """Classes, one output (score) each: ``SoftmaxCrossEntropyLoss``."""

    name = "softmax"
    losses = (SoftmaxCrossEntropyLoss,)
    outputs_needed = " >= 2"

    def loss(self, noise_sigma=1.0):
        return SoftmaxCrossEntropyLoss()

    def fits(self, outputs):
        return outputs >= 2

    def label_shape_error(self, loss, pred_shape, label_shape):
        b = pred_shape[0]
        sparse = _private.sparse_label(loss)
        if sparse and len(pred_shape) == 2 and label_shape not in ((b,), (b, 1)):
            return f"class labels must have shape ({b},), got {label_shape}"
        if not sparse and label_shape != pred_shape:
            return f"one-hot labels must have pred's shape {pred_shape}, got {label_shape}"
        return None

    def label_classes(self, loss, pred_shape):
        return pred_shape[-1] if _private.sparse_label(loss) else None

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

    def label_value_error(self, low, high):
        if low < 0 or high > 1:
            return (f"SigmoidBCELoss labels must lie in [0, 1], got labels from {low:g} to "
                    f"{high:g}")
        return None

    def loss(self, noise_sigma=1.0):
        return SigmoidBCELoss()

    def num_classes(self, outputs):
        return 2

    def fits(self, outputs):
        return outputs == 1

    def label_shape_error(self, loss, pred_shape, label_shape):
        if math.prod(label_shape) != math.prod(pred_shape):
            return (f"SigmoidBCELoss expects one label per output, got pred {pred_shape} "
                    f"and label {label_shape}")
        return None

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

    def noise_of(self, loss):
        return NORMAL if isinstance(loss, GaussianNLLLoss) else None

    def predictive(self, out):
        return out

    def label_shape_error(self, loss, pred_shape, label_shape):
        if isinstance(loss, GaussianNLLLoss) and label_shape != pred_shape:
            return (f"GaussianNLLLoss expects targets of pred's shape {pred_shape}, got "
                    f"{label_shape}")
        return None

    def locations_scales(self, out, loss):
        out = np.asarray(out, dtype=np.float64)
        return out, np.full_like(out, loss.sigma())


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

    def noise_of(self, loss):
        return NORMAL

    def targets(self, outputs):
        return outputs // 2

    def outputs_for(self, targets):
        return 2 * targets

    def label_shape_error(self, loss, pred_shape, label_shape):
        half = pred_shape[:-1] + (pred_shape[-1] // 2,)
        if pred_shape[-1] % 2 or label_shape != half:
            return (f"HeteroscedasticGaussianNLLLoss expects outputs with a mean and a scale "
                    f"per target (an even last axis) and targets of the means' shape; got "
                    f"outputs {pred_shape} and targets {label_shape}")
        return None

    def locations_scales(self, out, loss):
        return tuple(np.split(np.asarray(out, dtype=np.float64), 2, axis=-1))

    def predictive(self, out):
        if out.shape[-1] % 2:
            raise ValueError(f"a heteroscedastic likelihood needs an even number of outputs "
                             f"(a mean and a scale per target), got {out.shape[-1]}")
        mean, raw = mx.nd.split(out, num_outputs=2, axis=-1)
        return mx.nd.concat(mean, ops.softplus(raw) + self.min_sigma, dim=-1)


class StudentTLikelihood(Likelihood):
    """Real values, the outputs the location of Student's t noise with a scale (learned or
    fixed) and ``df`` degrees of freedom: :class:`StudentTNLLLoss`; its predictive is a
    mixture of t's over weight samples."""

    name = "studentt"
    losses = (StudentTNLLLoss,)
    classifies = False

    def __init__(self, df=4.0):
        self.df = float(df)

    def __repr__(self):
        return f"{type(self).__name__}(df={self.df:g})"

    def loss(self, noise_sigma=1.0):
        return StudentTNLLLoss(noise_sigma, df=self.df)

    def bound(self, loss):
        return self if loss.df == self.df else type(self)(loss.df)

    def predictive(self, out):
        return out

    def label_shape_error(self, loss, pred_shape, label_shape):
        if label_shape != pred_shape:
            return (f"StudentTNLLLoss expects targets of pred's shape {pred_shape}, got "
                    f"{label_shape}")
        return None

    def noise_of(self, loss):
        return StudentTNoise(loss.df)

    def locations_scales(self, out, loss):
        out = np.asarray(out, dtype=np.float64)
        return out, np.full_like(out, loss.sigma())


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


def public_losses():
    """The names of the losses defined here that stand for a likelihood (the package's
    public names: ``bbb.GaussianNLLLoss``, ...), and ``likelihood_loss``."""
    return [kind.losses[0].__name__ for kind in _KINDS.values()
            if kind.losses[0].__module__.startswith(__package__ + ".")] + ["likelihood_loss"]


def likelihood_loss(name, noise_sigma=1.0):
    """The Gluon loss a likelihood's name stands for (the names ``TrainConfig`` and the
    command line use): "softmax" → ``SoftmaxCrossEntropyLoss``, "bernoulli" →
    ``SigmoidBCELoss``, "gaussian" → :class:`GaussianNLLLoss` (``noise_sigma`` None:
    learned)."""
    check_likelihood_name(name)
    return _KINDS[name].loss(noise_sigma)


def check_likelihood_name(name):
    """Raise ValueError unless ``name`` is one of :data:`LIKELIHOODS` (the names
    ``TrainConfig``, ``config.json`` and the command line use)."""
    if not isinstance(name, str) or name not in _KINDS:
        raise ValueError(f"unknown likelihood {name!r}; choose one of {LIKELIHOODS}")


def likelihood_kind(likelihood):
    """The name of :func:`likelihood_of`'s answer: "softmax" (class scores), "bernoulli"
    (one logit) or "gaussian" (real values)."""
    return likelihood_of(likelihood).name


def num_classes(likelihood, outputs):
    """The classes a classifier's ``outputs`` outputs per example stand for: two for one
    Bernoulli logit, else one per output (a name, a Gluon loss or a BBBLoss)."""
    return likelihood_of(likelihood).num_classes(outputs)
