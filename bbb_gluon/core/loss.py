r"""``BBBLoss``: the minibatch cost of Bayes by Backprop as a Gluon loss.

For minibatch :math:`i` of :math:`M` (Blundell et al. 2015, eq. 8-9):

.. math::

    f_i(w, \theta) = \pi_i \left(\log q(w \mid \theta) - \log P(w)\right)
                     - \sum_{(x, y) \in D_i} \log P(y \mid x, w)

Gluon losses return one value per example and leave the reduction to ``backward`` (which
sums) and ``Trainer.step(batch_size)`` (which divides by the batch size). ``BBBLoss``
follows that convention: example :math:`b` of a batch of :math:`B` gets
:math:`-\log P(y_b \mid x_b, w) + \pi_i \, C / B`, with :math:`C` the complexity cost, so
the per-example values sum to :math:`f_i` and ``loss.backward(); trainer.step(B)``
follows the gradient of :math:`f_i / B`.

References
----------
.. [1] C. Blundell et al. "Weight Uncertainty in Neural Networks". ICML 2015.
"""

import math
import numbers

import mxnet as mx
import numpy as np
from mxnet.gluon.loss import (
    Loss,
    SoftmaxCrossEntropyLoss,
)

from .._checks import check_int
from .._kernels.private import apply_weighting, loss_settings
from .likelihood import check_labels
from .priors import Prior

__all__ = ["BBBLoss", "complexity_weight", "blundell_weights", "complexity_cost",
           "WEIGHTINGS"]

WEIGHTINGS = ("uniform", "blundell")
# the complexity cost: a Monte-Carlo estimate (eq. 2) or the closed-form KL
COMPLEXITIES = ("mc", "kl")


def complexity_weight(weighting, batch_index, num_batches):
    r"""The weight :math:`\pi_i` of the complexity cost for minibatch ``batch_index``.

    Parameters
    ----------
    weighting : "uniform", "blundell" or float
        ``"uniform"``: :math:`\pi_i = 1/M`. ``"blundell"``:
        :math:`\pi_i = 2^{M-i} / (2^M - 1)` with :math:`i = \text{batch_index} + 1`,
        computed as :math:`2^{-i} / (1 - 2^{-M})` so it neither overflows nor loses
        precision for any :math:`M`. A float: that constant for every minibatch.
    batch_index : int
        0-based position of the minibatch in the epoch.
    num_batches : int
        :math:`M`, minibatches per epoch.
    """
    check_weighting(weighting)
    if isinstance(weighting, numbers.Real):
        return float(weighting)
    if isinstance(num_batches, bool) or not isinstance(num_batches, numbers.Integral) \
            or num_batches < 1:
        raise ValueError(f"num_batches must be a positive int, got {num_batches!r}")
    if isinstance(batch_index, bool) or not isinstance(batch_index, numbers.Integral) \
            or not 0 <= batch_index < num_batches:
        raise ValueError(f"batch_index must lie in [0, {num_batches}), got {batch_index!r}")
    if weighting == "uniform":
        return 1.0 / num_batches
    # "blundell"
    return math.ldexp(1.0, -(batch_index + 1)) / -math.expm1(-num_batches * math.log(2.0))


def check_weighting(weighting):
    """Raise ValueError unless ``weighting`` is a name of :data:`WEIGHTINGS` or a
    constant, a finite number >= 0."""
    if isinstance(weighting, numbers.Real) and not isinstance(weighting, bool):
        if not math.isfinite(weighting) or weighting < 0:
            raise ValueError(f"a constant weighting (complexity weight) must be finite and "
                             f">= 0, got {weighting!r}")
    elif not isinstance(weighting, str) or weighting not in WEIGHTINGS:
        raise ValueError(f"unknown weighting {weighting!r}; choose "
                         f"{', '.join(map(repr, WEIGHTINGS))} or a number")


def blundell_weights(num_batches):
    """All :math:`M` weights of Blundell's schedule (they sum to 1)."""
    complexity_weight("blundell", 0, num_batches)  # validates num_batches
    return [complexity_weight("blundell", i, num_batches) for i in range(num_batches)]


def complexity_cost(sample, prior, kind="mc"):
    r"""Complexity cost :math:`C` of one weight sample, shape ``(1,)``.

    Parameters
    ----------
    sample : WeightSample
        The weights the forward pass used (the cost must be of those weights, not of a
        fresh draw); it carries the :math:`\mu`, :math:`\sigma` and :math:`\epsilon`
        that :math:`\log q` needs.
    prior : Prior
    kind : {"mc", "kl"}
        ``"mc"``: the Monte-Carlo estimate :math:`\log q(w|\theta) - \log P(w)` for any
        prior; ``"kl"``: the closed form :math:`KL(q \| P)` (Gaussian prior only).
    """
    log_sigmas = [mx.nd.log(s) for s in sample.sigmas]
    if kind == "kl":
        terms = [prior.kl(m, s, ls) for m, s, ls in
                 zip(sample.mus, sample.sigmas, log_sigmas, strict=True)]
        return sum(terms[1:], terms[0])
    if kind != "mc":
        raise ValueError(f"unknown complexity cost {kind!r}; choose 'mc' or 'kl'")
    log_p = [prior.log_prob(w) for w in sample.weights]
    return sample.log_q(log_sigmas) - sum(log_p[1:], log_p[0])


class BBBLoss(Loss):
    r"""Complexity cost + likelihood cost of one minibatch (Blundell et al. 2015).

    Per example :math:`b` of a batch of :math:`B`:

    .. math::

        L_b = -\log P(y_b \mid x_b, w) + \frac{\pi_i}{B}
              \left(\log q(w \mid \theta) - \log P(w)\right)

    so :math:`\sum_b L_b` is the paper's minibatch cost :math:`f_i` (see the module
    docstring). With several weight samples per step, pass lists of outputs and samples:
    the cost is their average.

    The loss keeps no result of a call: :meth:`costs` returns the likelihood and
    complexity costs apart, :meth:`combine` makes the per-example values from them, and
    calling the loss does both. ``hybridize()`` hybridizes the likelihood; the complexity
    cost takes weight samples, Python objects, and stays imperative.

    Parameters
    ----------
    prior : Prior
    likelihood : gluon.loss.Loss, default ``gluon.loss.SoftmaxCrossEntropyLoss()``
        The negative log-likelihood :math:`-\log P(y_b \mid x_b, w)` (up to a constant),
        any Gluon loss returning one value per example: ``SoftmaxCrossEntropyLoss``,
        ``SigmoidBCELoss``, ``L2Loss``, :class:`GaussianNLLLoss` (whose learned noise
        scale is then among this loss's ``collect_params()``), or your own.
    complexity : {"mc", "kl"}, default "mc"
        Monte-Carlo estimate (any prior) or closed-form KL (Gaussian prior).
    weighting : "uniform", "blundell" or float, default "uniform"
        :math:`\pi_i`, see :func:`complexity_weight`.
    num_batches : int, optional
        :math:`M`; needed for "uniform" and "blundell".
    skip_below : float, default 2**-60
        Minibatches whose :math:`\pi_i` is at or below this skip the complexity cost
        entirely (under Blundell's schedule from the 60th minibatch on, its contribution
        is far below float32 resolution of the likelihood; tests check the gradients
        agree). Set 0 to always compute it.
    validate : bool, default False
        Also check the labels' values on every call (finite; for
        ``SoftmaxCrossEntropyLoss`` whole numbers within the classes, for
        ``SigmoidBCELoss`` within [0, 1]). That reads the labels back to the host (a sync
        per call, which stalls MXNet's asynchronous engine), so it is off unless asked;
        shapes are always checked. Check data once, up front, instead
        (:class:`~bbb_gluon.BBBStep` reads the labels of its first call whatever this
        says).
    weight : float, optional
        Global scalar weight, as in every Gluon loss.
    batch_axis : int, default 0

    Attributes
    ----------
    complexity_scale : float, default 1.0
        Multiplies every :math:`\pi_i` from the next step on, on both engines: 0 switches
        the complexity cost off (a warm-up, in which the network fits the data as a
        point estimate), values between 0 and 1 ramp it in. Below 1 the cost is no longer
        the free energy of eq. (2) but a down-weighted one (a "tempered" posterior).
        ``fit`` sets it at each epoch from ``TrainConfig.complexity_warmup`` and
        ``complexity_ramp``; a loop of your own may set it too.

    Inputs
    ------
    - **pred**: network output (or a list of them, one per weight sample).
    - **label**: targets, as ``likelihood`` takes them.
    - **sample**: the ``WeightSample`` the output was computed with (or a list).
    - **batch_index**: 0-based minibatch index in the epoch (for the weighting).

    Outputs
    -------
    - **loss**: shape ``(B,)``.
    """

    # Nine parameters: Gluon's two (weight, batch_axis), the prior and likelihood, the
    # complexity cost's kind and weighting, and the checks; keyword-only past the first two.
    def __init__(self, prior, likelihood=None, *, complexity="mc", weighting="uniform",
                 num_batches=None, skip_below=2.0**-60, validate=False, weight=None,
                 batch_axis=0, **kwargs):
        super().__init__(weight, batch_axis, **kwargs)
        if not isinstance(prior, Prior):
            raise TypeError(f"prior must be a bbb_gluon Prior, got {type(prior).__name__}")
        if likelihood is None:
            likelihood = SoftmaxCrossEntropyLoss()
        if not isinstance(likelihood, Loss) or isinstance(likelihood, BBBLoss):
            raise TypeError(f"likelihood must be a gluon.loss.Loss such as "
                            f"gluon.loss.SoftmaxCrossEntropyLoss(), got {likelihood!r}")
        check_complexity(complexity, prior)
        check_weighting(weighting)
        if isinstance(weighting, str):
            if num_batches is None:
                raise ValueError(f"weighting={weighting!r} needs num_batches")
            complexity_weight(weighting, 0, num_batches)  # validates num_batches
        self.prior = prior
        self.likelihood = likelihood  # a child Block: its parameters are this loss's
        self.complexity = complexity
        self.weighting = weighting
        self.num_batches = num_batches
        self.skip_below = float(skip_below)
        self.validate = validate
        self.complexity_scale = 1.0

    @property
    def global_weight(self):
        """The ``weight`` it was built with (None: 1)."""
        return loss_settings(self)[0]

    @property
    def batch_axis(self):
        return loss_settings(self)[1]

    def weight_of(self, batch_index):
        """:math:`\\pi_i` for a 0-based minibatch index, times :attr:`complexity_scale`."""
        pi = complexity_weight(self.weighting, batch_index,
                               1 if self.num_batches is None else self.num_batches)
        return pi * self.complexity_scale if self.complexity_scale != 1.0 else pi

    def complexity_cost(self, sample):
        """:math:`C` for one :class:`WeightSample`, shape ``(1,)``."""
        return complexity_cost(sample, self.prior, self.complexity)

    def nll(self, pred, label):
        """The likelihood cost alone, one value per example, shape ``(B,)``; the labels
        checked first (see ``validate``), and taken in pred's dtype (integer labels too)."""
        check_labels(self.likelihood, pred, label, self.batch_axis, self.validate)
        nll = self.likelihood(pred, label.astype(pred.dtype, copy=False))
        return nll if nll.ndim == 1 else nll.reshape((-1,))

    def costs(self, pred, label, sample, batch_index=0):
        """The minibatch's two costs apart, as the loss computes them.

        Returns
        -------
        (nll, complexity) : NDArray, NDArray or None
            The per-example negative log-likelihood, shape ``(B,)``, and the unweighted
            complexity cost :math:`C`, shape ``(1,)``, or None where :math:`\\pi_i` is
            at or below ``skip_below``; with several samples, both are their averages.
        """
        if isinstance(pred, list | tuple):
            if not isinstance(sample, list | tuple) or len(sample) != len(pred):
                raise ValueError("with several outputs, pass one WeightSample per output")
            nlls, cs = zip(*(self.costs(p, label, s, batch_index)
                             for p, s in zip(pred, sample, strict=True)), strict=True)
            # Python's sum keeps the order of a running sum (mx.nd.add_n does not).
            nll = sum(nlls[1:], nlls[0]) / len(pred)
            return nll, None if cs[0] is None else sum(cs[1:], cs[0]) / len(pred)
        nll = self.nll(pred, label)
        if nll.dtype != np.float32:  # the complexity cost is: they could not be added
            raise TypeError(f"pred must be float32 like the posterior's weights, got "
                            f"{np.dtype(pred.dtype).name}")
        skip = self.weight_of(batch_index) <= self.skip_below
        return nll, None if skip else self.complexity_cost(sample)

    def combine(self, nll, complexity, batch_index=0, batch_size=None):
        """Per-example loss from :meth:`costs`' two parts: :math:`\\pi_i C / B` added to
        each example's negative log-likelihood, then the global ``weight``.

        ``batch_size``: the whole batch's :math:`B` where ``nll`` holds one device's
        slice of it (data parallelism), so the complexity cost is spread over the whole
        batch, not counted once per device.
        """
        if complexity is not None:
            # A slice's whole batch holds at least the slice (checked: it divides the cost).
            batch_size = check_int(nll.shape[0] if batch_size is None else batch_size,
                                   "batch_size", nll.shape[0])
            nll = mx.nd.broadcast_add(nll, complexity * (self.weight_of(batch_index)
                                                         / batch_size))
        # The global weight scales the whole cost, complexity included.
        return apply_weighting(mx.nd, nll, self.global_weight)

    def forward(self, pred, label, sample, batch_index=0, batch_size=None):
        """See the class docstring; ``batch_size`` as in :meth:`combine`. The result
        depends on the arguments alone: :meth:`costs` gives its two parts."""
        nll, complexity = self.costs(pred, label, sample, batch_index)
        return self.combine(nll, complexity, batch_index, batch_size)

    def __repr__(self):
        return (f"BBBLoss({self.prior!r}, {type(self.likelihood).__name__}(), "
                f"complexity={self.complexity!r}, weighting={self.weighting!r}, "
                f"num_batches={self.num_batches!r})")


def check_complexity(complexity, prior):
    """Raise ValueError unless ``complexity`` is a cost ``prior`` has."""
    if complexity not in COMPLEXITIES:
        raise ValueError(f"unknown complexity cost {complexity!r}; choose 'mc' or 'kl'")
    if complexity == "kl" and not prior.has_closed_form_kl:
        raise ValueError(f"{prior!r} has no closed-form KL; use complexity='mc'")
