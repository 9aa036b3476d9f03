"""How a training run trains: ``TrainConfig`` (the method, likelihood, prior, optimisation,
evaluation), checked before any work starts. What it trains (the package's MLP or a network
of your own) is apart: :mod:`bbb_gluon.training.network`.
"""

import math
import numbers
from dataclasses import MISSING, asdict, dataclass, field, fields

import numpy as np

from .._checks import check_int, check_positive
from ..core.estimators import check_estimator
from ..core.ivon import check_hessian_settings
from ..core.likelihood import LIKELIHOODS, check_likelihood_name, likelihood_of
from ..core.loss import check_complexity, check_weighting
from ..core.posterior import check_mu_init, check_rho_init
from ..core.priors import Prior, ScaleMixturePrior, make_prior
from ..core.step import check_engine, check_loss_reduction
from ..methods import METHODS, BayesByBackprop, method_of

__all__ = ["TrainConfig", "MODELS", "RECIPES", "REGRESSION_DEFAULTS", "OPTIMIZERS"]


MODELS = tuple(METHODS)  # the methods' names (bbb_gluon.methods)
# fit's optimisers (Gluon's names), which the fused engine's update follows
OPTIMIZERS = ("adam", "sgd")
# The built-in MLP's settings, which TrainConfig held before they became bbb_gluon.MLP's;
# config.json files and checkpoints written then hold them in their "train" record.
MLP_FIELDS = ("hidden", "activation", "num_inputs", "num_outputs", "dropout")
_POSTERIOR_INIT_FIELDS = ("mu_init", "mu_scale", "rho_init")
ARCH_FIELDS = ("model", "likelihood")
# Settings a resumed run may change: they decide how long it runs and what it reports,
# not the path its parameters take.
FREE_FIELDS = ("epochs", "log_every", "eval_samples", "restore_best")
# Optimisers take their rates as float32.
_FLOAT32_MAX = float(np.finfo(np.float32).max)


# What a Bayes-by-Backprop regression (likelihood "gaussian" or "heteroscedastic") starts
# from where its TrainConfig() leaves a setting out (bbb_gluon.methods.BayesByBackprop says
# why); another method's are its own (Method.regression_defaults).
REGRESSION_DEFAULTS = BayesByBackprop.regression_defaults
REGRESSION_WARMUP = BayesByBackprop.regression_warmup


def split_record(train):
    """A stored ``"train"`` record as (TrainConfig's fields, the MLP's fields or None): a
    record written before the MLP's settings left TrainConfig holds both."""
    train = dict(train)
    mlp = {name: train.pop(name) for name in MLP_FIELDS if name in train}
    return train, (mlp or None)


# Named sets of `bbb-gluon train` settings: TrainConfig fields (the prior as pi and log
# sigmas), the data split and the test evaluation. An option given on the command line wins
# over the recipe.
RECIPES = {
    # The paper's update (plain SGD, lr 1e-3 on the summed minibatch cost of eq. 8) with the
    # remaining choices of the public reproduction that reported 1.31% at 2x1200
    # (JINKEHE/BayesByBackprop): 600 epochs, lr x0.1 after epoch 300, pi=3/4, sigma1=1,
    # sigma2=e^-8, uniform weighting, mu ~ U(-0.03, 0.03), rho ~ U(-3.5, -3), one sample,
    # all 60,000 training images; the end-of-training network is the one reported.
    "paper": {"optimizer": "sgd", "lr": 1e-3, "loss_reduction": "sum",
              "lr_decay_epochs": [300], "lr_decay_factor": 0.1, "epochs": 600,
              "prior": "scale_mixture", "pi": 0.75, "log_sigma1": 0.0, "log_sigma2": -8.0,
              "weighting": "uniform", "complexity": "mc", "samples": 1,
              "mu_init": "uniform", "mu_scale": 0.03, "rho_init": [-3.5, -3.0],
              "num_valid": 0, "monitor_test": True, "eval_samples": 0,
              "test_samples": 100},
}


class _MethodDefault:
    """What a setting holds where ``TrainConfig(...)`` leaves it out and the method may
    choose it: resolved when the configuration is made."""

    def __repr__(self):
        return "<the method's default>"


METHOD_DEFAULT = _MethodDefault()

# The settings a method may choose where a configuration leaves them out
# (Method.defaults, Method.regression_defaults, a regression's warm-up), and what they are
# where no method chooses them.
_FALLBACKS = {
    "lr": 1e-3, "prior": lambda: ScaleMixturePrior(0.5, 1.0, math.exp(-6)),
    "mu_init": "normal", "rho_init": -3.0, "complexity_scale": 1.0,
    "complexity_warmup": 0, "complexity_ramp": 0, "hess_init": 1.0, "beta2": 0.99999,
}


def _fallback(name):
    value = _FALLBACKS[name]
    return value() if callable(value) else value


def _chosen_by_method():
    return field(default=METHOD_DEFAULT)


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """How a run trains (stored as ``config.json``'s ``"train"`` entry in the run folder);
    the network it trains is ``fit``'s ``net=`` (:class:`bbb_gluon.MLP` by default).

    Frozen, and checked once, when it is made: ``dataclasses.replace(config, epochs=50)``
    makes a changed copy, checked again. Each choice is checked by the module that owns
    it (the method by :mod:`bbb_gluon.methods`, the likelihood by
    :mod:`bbb_gluon.core.likelihood`, the prior by :mod:`bbb_gluon.core.priors`, ...).
    The settings come in four groups, in this order: the method (``model`` to
    ``others_lr``); the likelihood, the prior and the posterior's start (``likelihood`` to
    ``rho_init``); the optimiser and its schedule (``optimizer`` to ``seed``); evaluation
    and reporting (``eval_samples``, ``log_every``, ``restore_best``).

    Parameters
    ----------
    model : {"bbb", "ivon", "plain", "dropout"}, default "bbb"
        Whether the network gets a posterior, learned by Bayes by Backprop or by IVON's
        natural-gradient update (:class:`bbb_gluon.methods.IVON` says which settings it
        reads), or trains as it is (the plain and dropout baselines; "dropout" adds the
        MLP's Dropout layers). The settings marked *method's default* below, where
        ``TrainConfig(...)`` leaves them out, start from the method's own
        (:attr:`bbb_gluon.methods.Method.defaults`; a regression's:
        :attr:`~bbb_gluon.methods.Method.regression_defaults`): under "ivon" ``lr`` 0.1,
        ``prior`` N(0, 1), ``mu_init`` "copy". :meth:`defaults` gives the values where no
        method chooses.
    samples : int, default 1
        Weight samples per step (bbb, ivon).
    estimator : {"reparam", "local", "flipout"}, default "reparam"
        How a minibatch sees the posterior (bbb; :class:`bbb_gluon.BBBStep`): one shared
        weight sample, the local reparameterisation (Dense layers; Flipout on
        convolutions), or Flipout. A resumed run keeps it.
    engine : {"auto", "fused", "reference"}, default "auto"
        How a step is computed: "fused" uses the compiled CPU kernels of
        :mod:`bbb_gluon.core.engines`, "reference" MXNet operators with autograd through
        :class:`BBBLoss` (same estimator, slower); "auto" takes "fused" on CPUs where the
        kernels build. The weight noise differs between the two (each is reproducible).
    hess_init, beta2 : float, method's default (1.0, 0.99999)
        IVON's :math:`h_0 > 0` and its Hessian estimate's rate in ``[0, 1)`` (ivon).
    others_lr : float, default 1e-3
        The learning rate of the parameters outside the posterior (a learned noise scale,
        BatchNorm) under ``optimizer`` (ivon; under bbb they share ``lr``).
    likelihood : str, default "softmax"
        A name of :data:`bbb_gluon.core.likelihood.LIKELIHOODS` (each likelihood's class
        says what it makes of the outputs): "softmax", "bernoulli" (one output unit), or a
        regression's, such as "gaussian" (one learned noise scale) and "heteroscedastic"
        (a scale per input, the network's second half of outputs), which train on the
        package's MLP (``MLP(num_inputs=..., num_outputs=...)``: the outputs the
        likelihood needs per target) or a network of your own; the loss is built, its
        noise learned and checkpointed (``TrainResult.loss``, ``load_run``'s
        ``meta["loss"]``); the settings a regression's ``TrainConfig(...)`` leaves out
        take :data:`REGRESSION_DEFAULTS` under bbb (``mu_init`` "copy", ``rho_init`` -5,
        ``lr`` 3e-3, the complexity cost off for the first fifth of the epochs, ramped in
        over the next fifth to ``complexity_scale`` 0.01: docs/regression.md says why).
    prior : Prior, method's default (``ScaleMixturePrior(0.5, 1, e^-6)``)
        The prior, the object :class:`BBBLoss` takes (a dict as
        :func:`bbb_gluon.make_prior` takes it, as config.json stores it, is turned into
        one).
    complexity : {"mc", "kl"}, default "mc"
    weighting : "uniform", "blundell" or float, default "uniform"
        Complexity-cost weighting :math:`\\pi_i` across the minibatches of an epoch.
    complexity_scale : float, method's default (1.0)
        The complexity cost's weight once ramped in, times :math:`\\pi_i`: 1 is the free
        energy of eq. (2); below 1 a tempered posterior, narrower than the Bayesian one,
        which on a small data set keeps the signal the full cost prunes away
        (docs/regression.md says when and by how much). Under ivon, :math:`\\lambda` is
        the number of examples over it.
    complexity_warmup : int, method's default (0)
        Epochs at the start with the complexity cost switched off (bbb): the network
        first fits the data as a point estimate would.
    complexity_ramp : int, method's default (0)
        Epochs after the warm-up over which the complexity cost's weight rises linearly
        to ``complexity_scale`` (:attr:`BBBLoss.complexity_scale`). Until then the run
        minimises a down-weighted free energy, not eq. (2)'s; on a small regression set
        the full cost from the first step can prune the signal away
        (docs/regression.md).
    mu_init, mu_scale, rho_init : see :class:`bbb_gluon.Posterior` (``rho_init`` may be a
        pair ``[low, high]`` drawing every rho uniformly in that range); ``mu_init`` and
        ``rho_init`` are method's defaults ("normal", -3.0), ``mu_scale`` 0.1.
    optimizer : {"adam", "sgd"}, default "adam"
        "sgd" is plain gradient descent (no momentum), the paper's update.
    lr : float, method's default (1e-3)
        Learning rate, applied to the gradient of the batch cost that ``loss_reduction``
        names.
    loss_reduction : {"mean", "sum"}, default "mean"
        What the optimiser differentiates: the batch's mean cost (Gluon's convention,
        ``trainer.step(batch_size)``) or its summed cost, the paper's minibatch cost
        :math:`f_i` of eq. (8) (``trainer.step(1)``). For SGD, lr 1e-3 with "sum" is lr
        0.128 with "mean" at batch 128; Adam is nearly indifferent to the scale.
    rho_lr_mult : float, default 1.0
        Multiplier of the learning rate for the :math:`\\rho` parameters (Gluon's
        ``Parameter.lr_mult``). Under plain SGD the complexity cost moves each
        :math:`\\rho` by only about ``lr / batches`` per epoch; a multiplier above 1 lets
        :math:`\\sigma` leave its start without changing the step of :math:`\\mu`.
    batch_size : int, default 128
    epochs : int, default 10
    lr_decay_epochs : tuple of int, default ()
        Epochs after which the learning rate is multiplied by ``lr_decay_factor``
        (``(300,)``: epochs 301 onwards run at ``lr * lr_decay_factor``).
    lr_decay_factor : float, default 0.1
    seed : int, default 0
    eval_samples : int, default 10
        Weight samples of the Monte-Carlo validation error (0: means only).
    log_every : int, default 50
        Batches between progress-bar updates (the only host syncs inside an epoch).
    restore_best : bool, default False
        End with the weights of the epoch with the lowest validation error (kept in
        memory) instead of the last epoch's; ``TrainResult.best_epoch`` says which.
    """

    # the method
    model: str = "bbb"
    samples: int = 1
    estimator: str = "reparam"
    engine: str = "auto"
    hess_init: float = _chosen_by_method()
    beta2: float = _chosen_by_method()
    others_lr: float = 1e-3
    # the likelihood, the prior and the posterior's start
    likelihood: str = "softmax"
    prior: Prior = _chosen_by_method()
    complexity: str = "mc"
    weighting: object = "uniform"
    complexity_scale: float = _chosen_by_method()
    complexity_warmup: int = _chosen_by_method()
    complexity_ramp: int = _chosen_by_method()
    mu_init: str = _chosen_by_method()
    mu_scale: float = 0.1
    rho_init: float = _chosen_by_method()
    # the optimiser and its schedule
    optimizer: str = "adam"
    lr: float = _chosen_by_method()
    loss_reduction: str = "mean"
    rho_lr_mult: float = 1.0
    batch_size: int = 128
    epochs: int = 10
    lr_decay_epochs: tuple = ()
    lr_decay_factor: float = 0.1
    seed: int = 0
    # evaluation and reporting
    eval_samples: int = 10
    log_every: int = 50
    restore_best: bool = False

    def __new__(cls, *args, **kwargs):
        # Said here, before the dataclass's own "takes 1 positional argument" and
        # "unexpected keyword": settings come by name, and the built-in MLP's settings
        # left TrainConfig, so a call that still gives them is told where they went.
        if args:
            raise TypeError(f"TrainConfig takes its settings by name, not positional "
                            f"arguments: TrainConfig(model={args[0]!r}, ...), got {args!r}")
        moved = [name for name in MLP_FIELDS if name in kwargs]
        if moved:
            given = ", ".join(f"{name}={kwargs[name]!r}" for name in moved)
            raise TypeError(f"TrainConfig() takes no {', '.join(moved)}: the built-in MLP's "
                            f"settings are its own, fit(config, train, net=bbb.MLP({given}))")
        return super().__new__(cls)

    def __post_init__(self):
        self._take_method_defaults()
        object.__setattr__(self, "lr_decay_epochs", tuple(self.lr_decay_epochs))
        if isinstance(self.rho_init, list | tuple):
            object.__setattr__(self, "rho_init", tuple(self.rho_init))
        self.validate()

    def _take_method_defaults(self):
        """Give the settings left out the method's defaults, a regression's where the
        likelihood is one (a stored record or ``dataclasses.replace`` gives every setting:
        nothing changes there), else :meth:`defaults`'."""
        left_out = [f.name for f in fields(self) if getattr(self, f.name) is METHOD_DEFAULT]
        if not left_out:
            return
        method = METHODS.get(self.model)  # an unknown name: validate() names it
        regression = _regression(self.likelihood)
        own = {} if method is None else (
            method.regression_defaults if regression else method.defaults)
        chosen = dict(own)
        unchoosable = sorted(set(chosen) - set(_FALLBACKS))
        if unchoosable:
            raise TypeError(f"{method!r} has defaults for {unchoosable}, which TrainConfig "
                            f"lets no method choose (_FALLBACKS)")
        if regression and method is not None and method.regression_warmup and isinstance(
                self.epochs, numbers.Integral) and not isinstance(self.epochs, bool):
            warmup = int(self.epochs * method.regression_warmup)
            chosen.update(complexity_warmup=warmup, complexity_ramp=warmup)
        for name in left_out:
            object.__setattr__(self, name, chosen[name] if name in chosen else _fallback(name))

    @classmethod
    def defaults(cls):
        """Every setting's value where neither a call nor a method chooses it (a Bayes by
        Backprop classifier's), by name."""
        return {f.name: _fallback(f.name) if f.default is METHOD_DEFAULT else
                f.default if f.default is not MISSING else f.default_factory()
                for f in fields(cls)}

    def validate(self):
        """Raise ``ValueError`` naming the first impossible setting; each choice is
        checked by the module that owns it."""
        def positive_int(name, minimum=1):
            check_int(getattr(self, name), name, minimum)

        def positive_float(name):
            check_positive(getattr(self, name), name)

        # the method
        method_of(self.model)  # a known name: the object answers from here on
        positive_int("samples")
        check_estimator(self.estimator)
        check_engine(self.engine)
        check_hessian_settings(self.hess_init, self.beta2)
        positive_float("others_lr")
        # the likelihood, the prior and the posterior's start
        check_likelihood_name(self.likelihood)
        if isinstance(self.prior, dict):
            # raises for bad hyperparameters
            object.__setattr__(self, "prior", make_prior(**self.prior))
        if not isinstance(self.prior, Prior):
            raise TypeError(f"prior must be a bbb_gluon Prior such as GaussianPrior(1.0), got "
                            f"{self.prior!r}")
        check_complexity(self.complexity, self.prior)
        check_weighting(self.weighting)
        if isinstance(self.complexity_scale, bool) or not isinstance(
                self.complexity_scale, numbers.Real) or not 0 < self.complexity_scale <= 1:
            raise ValueError(f"complexity_scale must lie in (0, 1], got "
                             f"{self.complexity_scale!r}")
        positive_int("complexity_warmup", 0)
        positive_int("complexity_ramp", 0)
        check_mu_init(self.mu_init)
        positive_float("mu_scale")
        check_rho_init(self.rho_init)
        # the optimiser and its schedule
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.optimizer!r}; choose one of "
                             f"{', '.join(map(repr, OPTIMIZERS))}")
        positive_float("lr")
        check_loss_reduction(self.loss_reduction)
        positive_float("rho_lr_mult")
        if self.lr * max(self.rho_lr_mult, 1.0) > _FLOAT32_MAX:
            raise ValueError(f"lr must fit in float32 (at most {_FLOAT32_MAX:.3g}, with "
                             f"rho_lr_mult), got {self.lr!r}")
        positive_int("batch_size")
        positive_int("epochs")
        decay = self.lr_decay_epochs
        if any(isinstance(e, bool) or not isinstance(e, numbers.Integral) or e < 1
               for e in decay) or list(decay) != sorted(set(decay)):
            raise ValueError(f"lr_decay_epochs must be increasing positive epoch numbers, "
                             f"got {list(decay)!r}")
        positive_float("lr_decay_factor")
        positive_int("seed", 0)
        # evaluation and reporting
        positive_int("eval_samples", 0)
        positive_int("log_every")
        if not isinstance(self.restore_best, bool):
            raise ValueError(f"restore_best must be True or False, got {self.restore_best!r}")
        self.method.check(self)  # no setting of another method; the method's own rules

    def record(self, own_posterior=False):
        """:meth:`to_dict` without the settings that do not apply to the run: the
        posterior's initialisation when the user built the posterior."""
        d = self.to_dict()
        for name in _POSTERIOR_INIT_FIELDS if own_posterior else ():
            d.pop(name)
        return d

    def to_dict(self):
        d = asdict(self)
        d["prior"] = self.prior.to_dict()
        d["lr_decay_epochs"] = list(self.lr_decay_epochs)
        if isinstance(self.rho_init, tuple):
            d["rho_init"] = list(self.rho_init)
        return d

    @property
    def method(self):
        """The training method ``model`` names (:mod:`bbb_gluon.methods`)."""
        return method_of(self.model)

    def complexity_scale_at(self, epoch):
        """The complexity cost's scale in 0-based ``epoch``: 0 in the warm-up, then
        ``complexity_scale * k / (complexity_ramp + 1)`` in the ramp's ``k``-th epoch,
        then ``complexity_scale``."""
        if epoch < self.complexity_warmup:
            return 0.0
        k = epoch - self.complexity_warmup + 1
        return self.complexity_scale * min(1.0, k / (self.complexity_ramp + 1))

    def lr_at(self, epoch):
        """The learning rate of 0-based ``epoch`` under the decay schedule."""
        drops = sum(1 for e in self.lr_decay_epochs if epoch >= e)
        return self.lr * self.lr_decay_factor ** drops

    def step_size(self, batch_size):
        """What ``trainer.step`` is given: the batch size for a mean cost, 1 for a sum."""
        return batch_size if self.loss_reduction == "mean" else 1

    @classmethod
    def from_dict(cls, d):
        """From a stored ``"train"`` record; one written before the MLP's settings left
        TrainConfig may hold them (they are dropped here: :func:`split_record` reads them)."""
        d, _ = split_record(d)
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown configuration keys {sorted(unknown)}")
        return cls(**d)


def _regression(likelihood):
    return likelihood in LIKELIHOODS and not likelihood_of(likelihood).classifies
