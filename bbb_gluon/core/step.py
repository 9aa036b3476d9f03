"""``BBBStep``: one Bayes-by-Backprop update, for a training loop of your own.

It does what ``posterior.sample()``, ``use_weights``, a :class:`~bbb_gluon.BBBLoss`,
``backward`` and ``trainer.step`` do together, for any network and any per-example Gluon
loss, and picks the fastest way the machine offers: the fused CPU kernels of
:mod:`bbb_gluon.fused` on CPU contexts where they build, MXNet operators with autograd
elsewhere (the same estimator; tests compare the two on the same noise). It returns the
batch's costs as NDArrays and never reads them back to the host, so MXNet's engine keeps
running ahead of Python.

Example
-------
>>> step = BBBStep(net, posterior, prior, gluon.loss.SoftmaxCrossEntropyLoss(), trainer,
...                num_batches=len(loader))
>>> for i, (X, y) in enumerate(loader):
...     nll, complexity = step(X, y, i)

Parameters the posterior does not cover (BatchNorm, layers left out by its selector) get
their gradients from the same backward pass: step them with an ordinary Trainer over
``posterior.deterministic_params(net)`` after each call.
"""

import math

from mxnet import gluon

from .._checks import check_int
from .._kernels import fused
from .engines import FusedBBBStep, first_not_finite, forward_with, reference_step
from .loss import BBBLoss
from .priors import GaussianPrior, Prior, ScaleMixturePrior

__all__ = ["BBBStep", "ENGINES", "NotFiniteError"]

ENGINES = ("auto", "fused", "reference")


class NotFiniteError(FloatingPointError):
    """A cost or a parameter is NaN or infinite: training diverged.

    The one family of divergence errors: :class:`BBBStep` raises it, ``fit`` raises its
    subclass :class:`~bbb_gluon.TrainingDiverged` and ``run_bandit``
    :class:`~bbb_gluon.bandit.BanditDiverged`, so ``except NotFiniteError`` catches all.
    """


class BBBStep:
    r"""One update of :math:`\mu` and :math:`\rho` on a minibatch.

    Parameters
    ----------
    net : gluon.Block
        The network the posterior was built from; hybridize it for speed.
    posterior : Posterior
    prior : Prior
    loss : gluon.loss.Loss or {"softmax", "bernoulli", "gaussian"}
        The likelihood cost: any Gluon loss returning one negative log-likelihood per
        example (``SoftmaxCrossEntropyLoss``, ``L2Loss``, ``SigmoidBCELoss``, your own),
        or one of :class:`BBBLoss`'s named likelihoods.
    trainer : gluon.Trainer
        Over ``posterior.params``.
    num_batches : int, optional
        Minibatches per epoch, :math:`M` (needed by the "uniform" and "blundell"
        weightings).
    weighting : "uniform", "blundell" or float, default "uniform"
        The complexity weight :math:`\pi_i` of minibatch :math:`i`.
    complexity : {"mc", "kl"}, default "mc"
        Monte-Carlo complexity cost (any prior) or the closed-form KL (Gaussian prior).
    samples : int, default 1
        Weight samples averaged per step.
    engine : {"auto", "fused", "reference"}, default "auto"
        "auto" takes the fused kernels where they can run (CPU contexts, kernels built,
        a scale-mixture prior with the Monte-Carlo cost or a Gaussian prior, a likelihood
        other than the named "gaussian"), else the reference operators.
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
        "fused" or "reference": what this step runs.
    loss : BBBLoss
        The cost (its ``weight_of`` gives :math:`\pi_i`; a learned Gaussian noise scale
        is among its ``collect_params()``).
    """

    def __init__(self, net, posterior, prior, loss, trainer, num_batches=None,
                 weighting="uniform", complexity="mc", samples=1, engine="auto",
                 loss_reduction="mean", watch=True):
        if not isinstance(prior, Prior):
            raise TypeError(f"prior must be a bbb_gluon Prior, got {type(prior).__name__}")
        if not isinstance(trainer, gluon.Trainer):
            raise TypeError(f"trainer must be a gluon.Trainer, got {type(trainer).__name__}")
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
        if loss_reduction not in ("mean", "sum"):
            raise ValueError(f"loss_reduction must be 'mean' or 'sum', got {loss_reduction!r}")
        check_int(samples, "samples", 1)
        posterior.check_net(net)
        self.net, self.posterior, self.prior, self.trainer = net, posterior, prior, trainer
        self.samples = samples
        self.loss_reduction = loss_reduction
        self.loss = BBBLoss(posterior, prior, likelihood=loss, complexity=complexity,
                            weighting=weighting, num_batches=num_batches)
        reason = self._why_not_fused(loss, complexity)
        if engine == "fused" and reason:
            raise ValueError(f"engine='fused' cannot run here: {reason}")
        self.engine = "reference" if engine == "reference" or reason else "fused"
        self._fused = None
        # Running sum of the costs since the last check_finite(): a NaN or infinity stays
        # in it, so one device-side addition per call is all the watching costs.
        self._watch, self._checked, self._calls = None, 0, 0
        self.watch = bool(watch)
        if self.engine == "fused":
            self._fused = FusedBBBStep(forward_with(net, posterior), posterior, trainer,
                                             prior, complexity, loss, self.loss.weight_of,
                                             self.loss.skip_below)

    def _why_not_fused(self, loss, complexity):
        if any(c.device_type != "cpu" for c in self.posterior.contexts):
            return "the fused kernels run on CPU contexts only"
        if not (isinstance(self.prior, GaussianPrior) or
                (isinstance(self.prior, ScaleMixturePrior) and complexity == "mc")):
            return f"no fused kernel for {self.prior!r} with complexity {complexity!r}"
        if loss == "gaussian":
            return "the named 'gaussian' likelihood runs on the reference engine (pass a " \
                   "Gluon loss such as L2Loss for the fused one)"
        if not fused.available():
            return f"the kernels are unavailable ({fused.unavailable_reason()})"
        return None

    def __call__(self, X, y, batch_index=0, want_complexity=True, *, batch_size=None):
        """Update on the batch ``(X, y)``, split over the posterior's contexts.

        Parameters
        ----------
        X, y : NDArray
            The batch (any shapes the network and the loss take), on the first context.
        batch_index : int
            0-based position of the batch in its epoch (for the complexity weighting).
        want_complexity : bool, default True
            Also return the complexity cost's value (one more pass over the posterior on
            the fused engine, which otherwise computes only its gradient).
        batch_size : int, optional
            Examples in the whole batch when ``X`` is one worker's shard of it in
            distributed training (default ``X.shape[0]``): the learning rate applies to
            the whole batch's cost, and the complexity cost is shared out by it.

        Returns
        -------
        (nll, complexity) : NDArray, NDArray or None
            The batch's summed negative log-likelihood, shape ``(1,)``, and the
            unweighted complexity cost :math:`C` of the first device's first sample
            (``None`` if not asked for, or where the weighting skipped it); both on the
            first context, not read back to the host.
        """
        return self._step(X, y, batch_index, want_complexity, batch_size)

    def _step(self, X, y, batch_index, want_complexity, batch_size, eps=None):
        """``__call__`` with ``eps``, fixed noise for tests: ``eps[k][s]`` for device ``k``
        and sample ``s``, a flat array (reference engine) or a list of per-parameter
        arrays (fused), so that the two engines can be compared on the same noise."""
        # Shapes only (no host sync): NaN in a batch shows in the costs (``watch``).
        if len(X.shape) == 0 or X.shape[0] == 0 or len(y.shape) == 0 \
                or y.shape[0] != X.shape[0]:
            raise ValueError(f"X and y must hold the same number (> 0) of examples along "
                             f"their first axis, got X {tuple(X.shape)} and y "
                             f"{tuple(y.shape)}")
        batch_size = X.shape[0] if batch_size is None else batch_size
        if batch_size < X.shape[0]:
            raise ValueError(f"batch_size ({batch_size}) must be at least X's examples "
                             f"({X.shape[0]})")
        step_size = batch_size if self.loss_reduction == "mean" else 1
        if self._fused is not None:
            costs = self._fused(X, y, batch_index, self.samples, eps=eps,
                                want_complexity=want_complexity, step_size=step_size,
                                batch_size=batch_size)
        else:
            costs = reference_step(self.net, self.posterior, self.loss, self.trainer, X, y,
                                   batch_index, self.posterior.contexts, self.samples, eps,
                                   step_size, batch_size)
        self._calls += 1
        if self.watch:
            total = costs[0] if costs[1] is None else costs[0] + costs[1]
            self._watch = total if self._watch is None else self._watch + total
        return costs

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
