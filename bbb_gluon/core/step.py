"""``BBBStep``: one Bayes-by-Backprop update, for a training loop of your own.

It does what ``posterior.sample()``, ``use_weights``, a :class:`~bbb_gluon.BBBLoss`,
``backward`` and ``trainer.step`` do together, for any network and any per-example Gluon
loss, with one ``gluon.Trainer`` over everything the step trains (Pyro's
``SVI(model, guide, optim, loss).step(batch)`` shape). It picks the fastest way the machine
offers: the fused CPU kernels on CPU contexts where they build, MXNet operators with
autograd elsewhere (the same estimator; tests compare the two on the same noise). It
returns the batch's costs as NDArrays and never reads them back to the host, so MXNet's
engine keeps running ahead of Python.

Example
-------
>>> loss = BBBLoss(prior, gluon.loss.SoftmaxCrossEntropyLoss(), num_batches=len(loader))
>>> trainer = gluon.Trainer(trainable_params(net, posterior, loss), "adam")
>>> step = BBBStep(net, posterior, loss, trainer)
>>> for i, (X, y) in enumerate(loader):
...     costs = step(X, y, i)        # costs.nll, costs.complexity, costs.cost
"""

import math
from typing import NamedTuple

import mxnet as mx
import numpy as np
from mxnet import gluon

from .._checks import as_array, check_int, check_network_takes
from .._kernels import trainer as _trainer
from . import engines
from .engines import FusedBBBStep, first_not_finite, forward_with
from .estimators import check_estimator, plan
from .likelihood import check_label_shape, check_label_values
from .loss import BBBLoss

__all__ = ["BBBStep", "StepCosts", "ENGINES", "NotFiniteError", "trainable_params"]

ENGINES = ("auto", *engines.ENGINES)
# What the optimiser differentiates: the batch's mean cost (Gluon's convention) or its sum
# (the paper's minibatch cost of eq. 8)
LOSS_REDUCTIONS = ("mean", "sum")


def check_engine(engine):
    """Raise ValueError unless ``engine`` is one of :data:`ENGINES`."""
    if not isinstance(engine, str) or engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")


def check_loss_reduction(loss_reduction):
    """Raise ValueError unless ``loss_reduction`` is one of :data:`LOSS_REDUCTIONS`."""
    if not isinstance(loss_reduction, str) or loss_reduction not in LOSS_REDUCTIONS:
        raise ValueError(f"loss_reduction must be 'mean' or 'sum', got {loss_reduction!r}")


class NotFiniteError(FloatingPointError):
    """A cost or a parameter is NaN or infinite: training diverged.

    The one family of divergence errors: :class:`BBBStep` raises it, ``fit`` raises its
    subclass :class:`~bbb_gluon.TrainingDiverged` and ``run_bandit``
    :class:`~bbb_gluon.bandit.BanditDiverged`, so ``except NotFiniteError`` catches all.
    """


class StepCosts(NamedTuple):
    r"""What one :class:`BBBStep` call returns, on the first context, never read back to
    the host.

    Attributes
    ----------
    nll : NDArray, shape (1,)
        The batch's summed negative log-likelihood.
    complexity : NDArray of shape (1,), or None
        The *unweighted* complexity cost :math:`C = \log q(w|\theta) - \log P(w)` of the
        first device's first weight sample; None where it was not computed (not asked
        for, or its weight :math:`\pi_i` was negligible and it was skipped).
    complexity_weight : float
        :math:`\pi_i`, the weight of :math:`C` in this batch's cost.
    """

    nll: object
    complexity: object
    complexity_weight: float

    @property
    def cost(self):
        """The minibatch cost the step followed, :math:`f_i = \\pi_i C + \\text{nll}`
        (NDArray, shape (1,)); None where :math:`C` was weighted in but not computed."""
        if self.complexity is None:
            return self.nll if self.complexity_weight == 0.0 else None
        return self.nll + self.complexity * self.complexity_weight


def trainable_params(net, posterior, loss=None):
    """Everything a :class:`BBBStep` trains, as one ``ParameterDict`` for one
    ``gluon.Trainer``: the posterior's :math:`\\mu` and :math:`\\rho`, the parameters of
    ``net`` the posterior does not cover and that have a gradient (BatchNorm's, layers
    left out by the selector), and ``loss``'s own (a learned noise scale).

    The network's own weights where the posterior covers them are not among them: the
    step replaces them by samples. A parameter you want frozen: set its ``grad_req`` to
    ``'null'``.
    """
    params = gluon.ParameterDict()
    params.update(posterior.params)
    params.update(posterior.deterministic_params(net))
    if loss is not None:
        params.update(loss.collect_params())
    return params


class BBBStep:
    r"""One update of :math:`\mu`, :math:`\rho` and the network's other parameters on a
    minibatch.

    Parameters
    ----------
    net : gluon.Block
        The network the posterior was built from; hybridize it for speed.
    posterior : Posterior
    loss : BBBLoss
        The cost: its prior, likelihood, complexity cost and weighting are the step's.
    trainer : gluon.Trainer
        Over :func:`trainable_params` ``(net, posterior, loss)``: one Trainer for
        everything the step trains.
    samples : int, default 1
        Weight samples averaged per step.
    estimator : {"reparam", "local", "flipout"}, default "reparam"
        How the minibatch sees the posterior (:mod:`bbb_gluon.core.estimators`): one
        weight sample shared by every example (Blundell et al.), the local
        reparameterisation on Dense layers (Flipout on convolutions), or Flipout on
        every Dense and convolution layer. The last two give each example its own
        weight draw, so lower-variance gradients, for a second matrix product per layer.
        ``estimators`` says what each layer runs. A dict ``{layer name: estimator}``
        chooses per layer (the others keep the shared sample), and only it runs the local
        reparameterisation per position on a convolution: a different model, see
        :func:`bbb_gluon.core.estimators.plan`.
    engine : {"auto", "fused", "reference"}, default "auto"
        "auto" takes the fused kernels where they can run (CPU contexts, kernels built,
        a prior the kernel has code for: :meth:`Prior.fused_attrs`, the Gaussian, the
        Laplace and the scale mixture with the Monte-Carlo cost; a loss without a global
        ``weight``), else the reference operators. Where the Trainer is one device's
        float32 Adam or SGD, the fused kernels update :math:`\mu` and :math:`\rho`
        inside the gradient pass and do not write their ``.grad()`` arrays (they stay
        zero); elsewhere they write them and the Trainer updates as usual. To read the
        gradients whatever the Trainer, run ``engine="reference"``.
    loss_reduction : {"mean", "sum"}, default "mean"
        The optimiser follows the gradient of the batch's mean cost (Gluon's convention,
        ``trainer.step(batch_size)``) or of its sum (the paper's, ``trainer.step(1)``).
    watch : bool, default True
        Keep the running sum of the costs that :meth:`check_finite` reads (one small
        device-side addition per call); a caller that watches the costs itself, as ``fit``
        does, turns it off.

    Attributes
    ----------
    engine : str
        "fused" or "reference": what this step runs, and ``engine_reason`` why not the
        fused one (None when it runs).
    estimators : dict
        ``{layer name: "reparam" | "local" | "flipout"}`` for every layer with a
        posterior; ``rules`` has the details (and why a layer runs another estimator
        than the one asked for).
    forward : EstimatorForward
        The network's forward under the estimator, set up here once: under "local" or
        "flipout" one traced graph per shape of examples
        (:class:`~bbb_gluon.core.estimator_forward.EstimatorForward`; ``forward.traced``
        says whether the last call ran it).
    """

    # Nine parameters: Pyro's four (net, posterior, loss, trainer), then keyword-only
    # settings of how the step runs.
    def __init__(self, net, posterior, loss, trainer, *, samples=1, estimator="reparam",
                 engine="auto", loss_reduction="mean", watch=True):
        if not isinstance(loss, BBBLoss):
            raise TypeError(f"loss must be a bbb_gluon.BBBLoss (its prior, likelihood and "
                            f"weighting), got {type(loss).__name__}")
        if not isinstance(trainer, gluon.Trainer):
            raise TypeError(f"trainer must be a gluon.Trainer, got {type(trainer).__name__}")
        check_engine(engine)
        check_loss_reduction(loss_reduction)
        check_int(samples, "samples", 1)
        check_estimator(estimator)
        posterior.check_net(net)
        _check_trainer(trainer, net, posterior, loss)
        self.net, self.posterior, self.loss, self.trainer = net, posterior, loss, trainer
        self.samples = samples
        self.estimator = estimator
        self.rules = plan(net, posterior, estimator)
        self.loss_reduction = loss_reduction
        self.engine_reason = self._why_not_fused()
        if engine == "fused" and self.engine_reason:
            raise ValueError(f"engine='fused' cannot run here: {self.engine_reason}")
        if engine == "reference" and not self.engine_reason:
            self.engine_reason = "engine='reference' was asked for"
        self.engine = "reference" if self.engine_reason else "fused"
        # Running sum of the costs since the last check_finite(): a NaN or infinity stays
        # in it, so one device-side addition per call is all the watching costs.
        self._watch, self._checked, self._calls = None, 0, 0
        # the shapes of examples (and labels) the network and the loss were seen to take
        self._taken, self._labels_read = set(), False
        self.watch = bool(watch)
        # The network's forward under the estimator, set up once (a traced graph per shape
        # of examples where a layer runs Flipout or the local reparameterisation).
        self.forward = forward_with(net, posterior, self.rules, self.engine == "fused")
        self._engine = engines.ENGINES[self.engine](self.forward, posterior, trainer, loss,
                                                    self.rules)

    @property
    def estimators(self):
        return {r.name: r.rule for r in self.rules}

    def _why_not_fused(self):
        return FusedBBBStep.unavailable(self.posterior, self.loss)

    def __call__(self, X, y, batch_index=0, want_complexity=True, *, batch_size=None):
        """Update on the batch ``(X, y)``, split over the posterior's contexts.

        Parameters
        ----------
        X, y : NDArray
            The batch (any shapes the network and the loss take), on the first context.
        batch_index : int
            0-based position of the batch in its epoch (for the complexity weighting).
        want_complexity : bool, default True
            Also return the complexity cost's value. The fused engine sums it in the
            update's own pass over the posterior (one context, one sample, Adam or SGD:
            a few percent of a step), else in one more pass.
        batch_size : int, optional
            Examples in the whole batch when ``X`` is one worker's shard of it in
            distributed training (default ``X.shape[0]``): the learning rate applies to
            the whole batch's cost, and the complexity cost is shared out by it.

        Returns
        -------
        StepCosts
            ``nll``, the (unweighted) ``complexity`` and its weight, and their weighted
            sum ``cost``, as NDArrays on the first context.

        Raises
        ------
        ValueError
            Before any work, naming the shapes: an empty or one-axis batch, X and y of
            different lengths, X the network does not take, y that does not fit its
            output; on the step's first call also labels the likelihood cannot take (out
            of range, negative, fractional, NaN), the one host read of a step object.
            Later calls' label values are read only with ``BBBLoss(validate=True)``.
        """
        nll, complexity = self._step(X, y, batch_index, want_complexity, batch_size)
        return StepCosts(nll, complexity, self.loss.weight_of(batch_index))

    def _step(self, X, y, batch_index, want_complexity, batch_size, eps=None):
        """``__call__`` with ``eps``, fixed noise for tests: ``eps[k][s]`` for device ``k``
        and sample ``s``, a flat array (reference engine) or a list of per-parameter
        arrays (fused), so that the two engines can be compared on the same noise."""
        X, y = self._as_batch(X, "X"), self._as_batch(y, "y")
        # Shapes only (no host sync): NaN in a batch shows in the costs (``watch``). Each
        # read of a shape is a call into MXNet: read once.
        x_shape, y_shape = X.shape, y.shape
        if len(x_shape) == 0 or x_shape[0] == 0 or len(y_shape) == 0 \
                or y_shape[0] != x_shape[0]:
            raise ValueError(batch_shapes_message(x_shape, y_shape))
        batch_size = x_shape[0] if batch_size is None else batch_size
        if batch_size < x_shape[0]:
            raise ValueError(f"batch_size ({batch_size}) must be at least X's examples "
                             f"({x_shape[0]})")
        if (x_shape[1:], y_shape[1:]) not in self._taken:
            self._check_new_shapes(X, y, x_shape, y_shape)
        step_size = batch_size if self.loss_reduction == "mean" else 1
        # The watch: each call's likelihood cost added on the device (inside the fused
        # step's guard operator, no operator of its own). The complexity cost is finite
        # where mu and rho are, and check_finite reads those.
        if self.watch and self._watch is None:
            self._watch = mx.nd.zeros((1,), ctx=self.posterior.contexts[0])
        costs = self._engine(X, y, batch_index, self.samples, eps=eps,
                             want_complexity=want_complexity, step_size=step_size,
                             batch_size=batch_size, watch=self._watch if self.watch else None)
        self._calls += 1
        return costs

    def _check_new_shapes(self, X, y, x_shape, y_shape):
        """Once for each shape of examples and labels: the network is shown one example,
        and the labels' shape is checked against its output, so that a mis-shaped batch is
        refused before MXNet sees it; the first time, the labels' values too (the one host
        read a step object makes: a label out of range would otherwise train silently, as
        Gluon's losses clip it; ``BBBLoss(validate=True)`` checks every call's)."""
        if 0 in x_shape:
            raise ValueError(f"X holds no values (shape {tuple(x_shape)}): each example "
                             "needs at least one")
        out = check_network_takes(self.net, X, "X", self.posterior.contexts[0])
        outs = out if isinstance(out, list | tuple) else [out]
        likelihood = self.loss.likelihood
        try:
            classes = check_label_shape(likelihood, (x_shape[0], *outs[0].shape[1:]),
                                        tuple(y_shape))
            if not self._labels_read:
                check_label_values(likelihood, y, classes)
        except ValueError as e:
            raise ValueError(f"y (shape {tuple(y_shape)}) for X (shape {tuple(x_shape)}): "
                             f"{e}") from None
        self._labels_read = True
        self._taken.add((x_shape[1:], y_shape[1:]))

    def _as_batch(self, a, name):
        """``a`` as an NDArray on the first context (NumPy arrays are copied there once);
        float inputs must be float32, as the parameters are (a float64 batch would fail
        inside MXNet with a message about its operators)."""
        if not isinstance(a, mx.nd.NDArray):
            a = mx.nd.array(as_array(a, name), ctx=self.posterior.contexts[0],
                            dtype=np.float32)  # labels too: Gluon's losses take float32
        if name == "X" and a.dtype != np.float32:
            raise TypeError(f"X must be float32 like the network's parameters, got "
                            f"{np.dtype(a.dtype).name}: pass X.astype('float32')")
        return a

    def check_finite(self):
        """Raise :class:`NotFiniteError` if a cost returned since the last check, a mu or
        rho of the posterior, or a parameter of the network is NaN or infinite.

        One host sync and one pass over the parameters: call it every few hundred steps,
        or once an epoch, rather than every step. The message names the calls or the
        parameter.
        """
        watch, first = self._watch, self._checked + 1
        self._watch, self._checked = None, self._calls
        if watch is not None and not math.isfinite(float(watch.asscalar())):
            raise NotFiniteError(f"a cost returned by step calls {first} to {self._calls} "
                                 "is not finite")
        named = [(f"{k} (mu)", m) for k, m in zip(self.posterior.keys, self.posterior.mu(),
                                                  strict=True)]
        named += [(f"{k} (rho)", r) for k, r in zip(self.posterior.keys, self.posterior.rho(),
                                                    strict=True)]
        named += [(p.name, p.data(p.list_ctx()[0])) for p in self.net.collect_params().values()]
        name = first_not_finite(named)
        if name is not None:
            raise NotFiniteError(f"parameter {name} holds NaN or infinite values")


def _check_trainer(trainer, net, posterior, loss):
    """Refuse, before any work, a Trainer that would leave part of the model untrained or
    train the network's sampled weights themselves (whose gradients backward never
    writes): the usual mistakes, a Trainer over ``posterior.params`` alone or over
    ``net.collect_params()``."""
    trained = {id(p) for p in _trainer.params(trainer)}
    wanted = trainable_params(net, posterior, loss)
    missing = [name for name, p in wanted.items() if id(p) not in trained]
    sampled = [p.name for p in posterior.check_net(net).values() if id(p) in trained]
    if not (missing or sampled):
        return
    what = (f"does not train {', '.join(missing[:4])}{' …' if len(missing) > 4 else ''}"
            if missing else f"trains the network's own {', '.join(sampled[:4])}, which "
            "the step replaces by weight samples")
    raise ValueError(f"the trainer {what}: build it over everything the step trains, "
                     "gluon.Trainer(bbb_gluon.trainable_params(net, posterior, loss), ...)")


def batch_shapes_message(x_shape, y_shape):
    """Why a batch of these shapes cannot be one, in the user's words."""
    x_shape, y_shape = tuple(x_shape), tuple(y_shape)
    shapes = f"got X {x_shape} and y {y_shape}"
    if not x_shape:
        return f"X must be an array of examples along its first axis, not a scalar: {shapes}"
    if x_shape[0] == 0:
        return f"X holds no examples (shape {x_shape}): a batch needs at least one"
    if not y_shape:
        return (f"y must hold one label per example along its first axis, not a scalar: "
                f"{shapes}")
    if len(x_shape) == 1 and y_shape[0] == 1:
        return (f"X holds {x_shape[0]} examples and y {y_shape[0]} label ({shapes}); for "
                f"one example of {x_shape[0]} values, pass X.reshape((1, {x_shape[0]}))")
    return (f"X and y must hold the same number of examples along their first axis, "
            f"{shapes}")
