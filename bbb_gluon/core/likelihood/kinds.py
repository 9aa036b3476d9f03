"""The likelihood kinds, one object each, and their registry."""

import mxnet as mx
from mxnet.gluon.loss import (
    HuberLoss,
    L1Loss,
    L2Loss,
    Loss,
    SigmoidBCELoss,
    SoftmaxCrossEntropyLoss,
)

from .. import ops
from .losses import GaussianNLLLoss, HeteroscedasticGaussianNLLLoss

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
