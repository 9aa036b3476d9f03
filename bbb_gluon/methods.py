"""The training methods, one object each: what ``TrainConfig(model=...)``, ``config.json``
and the command line name, and everything that follows from the name.

A method says whether the network gets a posterior (and builds it, once), whether the
built-in MLP keeps its dropout layers, what its predictive averages over, which settings
are its own, and what its reports show. Training, evaluation, reports and the command line
ask it instead of comparing names; the name is read only where ``config.json`` or the
command line gives it (:func:`method_of`).
"""

from .core.posterior import Posterior

__all__ = ["Method", "BayesByBackprop", "Plain", "MCDropout", "METHODS", "method_of",
           "learns_posterior"]

_METHODS = {}

# The settings only Bayes by Backprop takes, with the values that leave them off.
_BBB_SETTINGS = {"complexity_warmup": 0, "complexity_ramp": 0, "complexity_scale": 1,
                 "estimator": "reparam"}


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
        if self.learns_posterior:
            return
        for name, off in _BBB_SETTINGS.items():
            if getattr(config, name) != off:
                raise ValueError(f"{name}={getattr(config, name)!r} is a setting of the bbb "
                                 f"model, not of {self.name!r}")


class BayesByBackprop(Method):
    """Bayes by Backprop (Blundell et al. 2015): a posterior over the weights."""

    name = "bbb"
    learns_posterior = True
    predictive = "Monte-Carlo over weight samples"
    sample_noun = "weight samples"


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


METHODS = _METHODS  # the registry itself: a method defined later is in it too


def method_of(method):
    """The :class:`Method` of a name ("bbb", "plain", "dropout") or a Method."""
    if isinstance(method, Method):
        return method
    if method not in _METHODS:
        raise ValueError(f"unknown model {method!r}; choose one of {tuple(_METHODS)}")
    return _METHODS[method]


def learns_posterior(name):
    """Whether a stored run's method (its name in ``config.json``) learned a posterior."""
    return name in _METHODS and _METHODS[name].learns_posterior
