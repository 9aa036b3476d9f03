"""The training methods, one object each: what ``TrainConfig(model=...)``, ``config.json``
and the command line name, and everything that follows from the name.

A method says whether the network gets a posterior (and builds it, once), whether the
built-in MLP keeps its dropout layers, what its predictive averages over, which settings
are its own and what it starts from where a configuration leaves them out, how ``fit``'s
step and its optimiser are built, and what its reports show. Training, evaluation, reports
and the command line ask it instead of comparing names; the name is read only where
``config.json`` or the command line gives it (:func:`method_of`).
"""

from dataclasses import dataclass

from .core.posterior import Posterior
from .core.priors import GaussianPrior

__all__ = ["Method", "BayesByBackprop", "IVON", "Plain", "MCDropout", "METHODS",
           "method_of", "learns_posterior"]

_METHODS = {}

# The settings some methods take and others not; TrainConfig's defaults leave them off.
_OWN_SETTINGS = ("complexity_warmup", "complexity_ramp", "complexity_scale", "estimator",
                 "hess_init", "beta2", "others_lr")


def _off(config, name):
    """The value of ``name`` that leaves it off: the configuration class's default where
    no method chooses it."""
    return type(config).defaults()[name]


@dataclass
class StepParts:
    """What ``fit`` hands a method to build its step from: the network, its posterior
    (None for a method without one), the likelihood (a Gluon loss), the devices,
    ``trainer_for(params, lr)`` (a ``gluon.Trainer`` of the run's optimiser), the batches
    of an epoch and the training examples."""

    net: object
    posterior: object
    loss: object
    ctxs: list
    trainer_for: object
    num_batches: int
    examples: int


class Method:
    """A training method. A subclass sets :attr:`name` (its name in ``config.json`` and on
    the command line) and the attributes below; it is then known to :func:`method_of`,
    ``TrainConfig`` and the command line."""

    name = None
    #: the network gets a posterior over its weights (prediction, pruning, weight plots)
    learns_posterior = False
    #: the built-in MLP keeps its dropout layers, and prediction samples dropout masks
    mc_dropout = False
    #: what the predictive averages over, in the reports' words
    predictive = ""
    #: what one Monte-Carlo sample is, in the command line's words (None: no sampling)
    sample_noun = None
    #: the settings of ``_OWN_SETTINGS`` it takes (the others must stay off)
    takes = ()
    #: TrainConfig's settings under this method where ``TrainConfig(...)`` leaves them
    #: out, for a classifier and for a regression, and a regression's warm-up and ramp of
    #: the complexity cost as a fraction of the epochs
    defaults = {}
    regression_defaults = {}
    regression_warmup = 0.0

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.name is not None:
            _METHODS[cls.name] = cls()

    def __repr__(self):
        return f"{type(self).__name__}()"

    @property
    def samples(self):
        """Whether its predictive is a Monte-Carlo average (and has a mutual information)."""
        return self.sample_noun is not None

    def make_posterior(self, net, config):
        """The posterior ``net`` trains under this method, from ``config``'s
        initialisation (None where the method learns none)."""
        if not self.learns_posterior:
            return None
        return Posterior(net, mu_init=config.mu_init, mu_scale=config.mu_scale,
                         rho_init=config.rho_init, seed=config.seed)

    def dropout(self, rate):
        """The built-in MLP's dropout rate under this method."""
        return rate if self.mc_dropout else 0.0

    def check(self, config):
        """Refuse, naming it, a setting of ``config`` that belongs to another method."""
        for name in _OWN_SETTINGS:
            if name not in self.takes and getattr(config, name) != _off(config, name):
                owners = [m.name for m in _METHODS.values() if name in m.takes]
                raise ValueError(f"{name}={getattr(config, name)!r} is a setting of the "
                                 f"{' and '.join(owners)} model{'s' * (len(owners) > 1)}, "
                                 f"not of {self.name!r}")

    def check_run(self, contexts, distributed):
        """Refuse, before any work, devices or workers the method cannot train on."""

    def start_epoch(self, step, config, epoch):
        """Set on ``step`` what changes with the (0-based) epoch (nothing here)."""

    def make_step(self, config, parts):
        """``(step, trainers, pi_sum)`` for ``fit``: the step its loop calls as
        ``BBBStep``'s, ``step(X, y, batch_index, want_complexity, batch_size)`` returning
        ``StepCosts``; the objects whose learning rate ``fit`` sets and whose states it
        checkpoints; and the complexity weights summed over an epoch (0 without a
        complexity cost)."""
        from .training.baselines import PlainStep

        params = parts.net.collect_params()
        params.update(parts.loss.collect_params())
        trainer = parts.trainer_for(params, config.lr)
        return PlainStep(parts.net, parts.loss, trainer, parts.ctxs,
                         config.loss_reduction), [trainer], 0.0


class BayesByBackprop(Method):
    """Bayes by Backprop (Blundell et al. 2015): a posterior over the weights."""

    name = "bbb"
    learns_posterior = True
    predictive = "Monte-Carlo over weight samples"
    sample_noun = "weight samples"
    takes = ("complexity_warmup", "complexity_ramp", "complexity_scale", "estimator")
    # What a regression starts from, chosen on a 200-point 1-D set with a gap
    # (experiments/small_regression.py, results/small-regression/; docs/regression.md):
    # with the classification defaults the complexity cost prunes the signal away and the
    # fit is a flat line. mu at the layers' own initialisation, sigma small (rho -5), the
    # cost off for the first fifth of the epochs and ramped in over the next fifth, to a
    # tempered weight.
    regression_defaults = {"mu_init": "copy", "rho_init": -5.0, "lr": 3e-3,
                           "complexity_scale": 0.01}
    regression_warmup = 0.2

    def start_epoch(self, step, config, epoch):
        """The complexity cost's weight, a function of the epoch (a resumed run gets it
        again)."""
        step.loss.complexity_scale = config.complexity_scale_at(epoch)

    def make_step(self, config, parts):
        from .core.loss import BBBLoss
        from .core.step import BBBStep, trainable_params

        for param in parts.posterior.rho_parameters:
            param.lr_mult = config.rho_lr_mult
        loss = BBBLoss(config.prior, parts.loss, complexity=config.complexity,
                       weighting=config.weighting, num_batches=parts.num_batches)
        trainer = parts.trainer_for(trainable_params(parts.net, parts.posterior, loss),
                                    config.lr)
        # watch=False: fit watches the costs itself
        step = BBBStep(parts.net, parts.posterior, loss, trainer, samples=config.samples,
                       estimator=config.estimator, engine=config.engine,
                       loss_reduction=config.loss_reduction, watch=False)
        pi_sum = sum(loss.weight_of(i) for i in range(parts.num_batches))
        return step, [trainer], pi_sum


class Plain(Method):
    """One set of weights, trained plainly: the baseline."""

    name = "plain"
    predictive = "softmax"


class MCDropout(Method):
    """Dropout in training and in prediction (Gal and Ghahramani 2016): the MC-dropout
    baseline."""

    name = "dropout"
    mc_dropout = True
    predictive = "MC dropout"
    sample_noun = "dropout masks"


class IVON(Method):
    """IVON (Shen et al. 2024): the same posterior, learned by a natural-gradient update
    (:class:`bbb_gluon.IVONStep`). The prior is ``config.prior``, a Gaussian (its weight
    decay :math:`\\delta = 1/(\\lambda\\sigma^2)`); :math:`\\lambda` is the number of
    training examples over ``complexity_scale`` (below 1: tempered, as for Bayes by
    Backprop); ``lr`` is IVON's :math:`\\alpha`, ``hess_init`` and ``beta2`` its own; the
    parameters outside the posterior (a learned noise scale, BatchNorm) train with the
    run's optimiser at ``others_lr``."""

    name = "ivon"
    learns_posterior = True
    predictive = "Monte-Carlo over weight samples"
    sample_noun = "weight samples"
    takes = ("complexity_scale", "hess_init", "beta2", "others_lr")
    # IVONStep's own defaults, the prior N(0, 1) (GaussianPrior's default), and the means
    # started at the network's own initialisation, as IVON starts
    defaults = {"lr": 0.1, "prior": GaussianPrior(), "mu_init": "copy"}
    # From a pilot on the UCI sets (experiments/uci_benchmark.py's GRID_IVON): lr 0.1 to
    # 0.01 diverged on Boston and Yacht, 3e-3 held, tempered tenfold did best; beta2 0.999
    # and h0 0.5 as in IVON's one-hidden-layer regression setting.
    regression_defaults = {"lr": 3e-3, "prior": GaussianPrior(), "mu_init": "copy",
                           "complexity_scale": 0.1, "hess_init": 0.5, "beta2": 0.999}

    def check(self, config):
        super().check(config)
        if type(config.prior) is not GaussianPrior:
            raise ValueError(f"the ivon model takes a Gaussian prior (its weight decay), "
                             f"got {config.prior.label()}")
        if config.loss_reduction != "mean":
            raise ValueError("the ivon model differentiates the batch's mean likelihood "
                             "cost: loss_reduction must be 'mean'")
        if config.engine == "fused" and config.samples != 1:
            raise ValueError(f"the ivon model's fused engine takes one draw a step; "
                             f"samples={config.samples} needs engine 'reference' or 'auto'")
        # Bayes by Backprop's settings of the posterior's sigma: IVON's starts at
        # 1/sqrt(lambda (h0 + delta)) and moves by its own update
        for name in ("rho_lr_mult", "rho_init"):
            if getattr(config, name) != _off(config, name):
                raise ValueError(f"{name}={getattr(config, name)!r} is a setting of the bbb "
                                 f"model, not of 'ivon' (its sigma starts from hess_init)")

    def check_run(self, contexts, distributed):
        if len(contexts) != 1 or distributed:
            raise ValueError("the ivon model trains on one device in one process "
                             f"(here {len(contexts)} devices"
                             + (", distributed" if distributed else "") + ")")

    def make_step(self, config, parts):
        from .core.ivon import IVONStep
        from .training.ivon_step import IVONRunStep

        others = parts.posterior.deterministic_params(parts.net)
        others.update(parts.loss.collect_params())
        trainer = parts.trainer_for(others, config.others_lr) if list(others.keys()) else None
        ess = parts.examples / config.complexity_scale
        step = IVONStep(parts.net, parts.posterior, parts.loss, ess=ess, lr=config.lr,
                        weight_decay=1.0 / (ess * config.prior.sigma ** 2),
                        hess_init=config.hess_init, beta2=config.beta2,
                        samples=config.samples, trainer=trainer, engine=config.engine)
        return IVONRunStep(step), [step], 0.0


METHODS = _METHODS  # the registry itself: a method defined later is in it too


def method_of(method):
    """The :class:`Method` of a name ("bbb", "ivon", "plain", "dropout") or a Method."""
    if isinstance(method, Method):
        return method
    if method not in _METHODS:
        raise ValueError(f"unknown model {method!r}; choose one of {tuple(_METHODS)}")
    return _METHODS[method]


def learns_posterior(name):
    """Whether a stored run's method (its name in ``config.json``) learned a posterior."""
    return name in _METHODS and _METHODS[name].learns_posterior
