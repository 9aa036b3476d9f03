"""Bayes by Backprop for Apache MXNet Gluon.

Blundell, Cornebise, Kavukcuoglu and Wierstra, "Weight Uncertainty in Neural
Networks", ICML 2015 (arXiv:1505.05424).

The core is re-exported here: priors, the posterior, putting weights into a network, the
loss, the training step, ``fit`` and prediction. The rest stays in its module:
``bbb_gluon.data`` (datasets), ``bbb_gluon.metrics`` (calibration, AUROC, regression),
``bbb_gluon.evaluation``, ``bbb_gluon.pruning``, ``bbb_gluon.runs`` (run folders),
``bbb_gluon.plotting`` (matplotlib) and ``bbb_gluon.threads`` (the cores MXNet uses).

Importing the package loads neither MXNet nor its modules: each of these names loads its
module on first use. Nothing compiles and no MXNet operator runs then either: the compiled
kernels are built by ``make setup``, or on first use with a one-line notice.
"""

# ruff: noqa: F401 - the TYPE_CHECKING imports below are re-exports, listed in __all__ at run time
import importlib as _importlib
import importlib.util as _importlib_util
import typing as _typing

from ._kernels import op_cache as _op_cache
from ._mxnet_build import check as _check_mxnet
from ._mxnet_build import installed_builds as _installed_builds

# Two MXNet builds in one mxnet/ folder, or none: an error now, before anything is loaded.
_check_mxnet(_installed_builds(), import_mxnet=False)

# MXNet's operator functions from a file instead of compiled at each import (a third of
# the import's time where MXNet is not imported yet; _kernels/op_cache.py).
_op_cache.install()

__version__ = "0.1.0"

# Each public name and the module that defines it. A name loads its module (and MXNet) on
# first use, so that what needs none of them starts at once: ``bbb-gluon launch``, whose
# launcher only starts processes, and ``bbb-gluon --help`` (docs/architecture.md).
_HOME = {
    # posterior, sampling, loss, step
    **dict.fromkeys(["Posterior", "PosteriorMismatchError", "WeightSample",
                     "bayesian_parameters", "BAYESIAN_LAYERS"], ".core.posterior"),
    **dict.fromkeys(["use_weights", "use_means"], ".core.sampling"),
    "BBBLoss": ".core.loss", "complexity_weight": ".core.loss",
    **dict.fromkeys(["BBBStep", "StepCosts", "NotFiniteError", "trainable_params"],
                    ".core.step"),
    "IVONStep": ".core.ivon",
    # training
    **dict.fromkeys(["TrainConfig", "TrainResult", "TrainingInterrupted", "TrainingDiverged",
                     "CheckpointError", "UnreadableCheckpointError", "fit", "build_mlp", "MLP",
                     "Network", "RunOptions", "load_run"], ".training"),
    "FileWriteError": "._files",
    # prediction
    **dict.fromkeys(["predict_proba", "predict_samples", "error_rate", "uncertainty"],
                    ".prediction"),
    **dict.fromkeys(["predict_intervals", "Intervals"], ".intervals"),
}

if _typing.TYPE_CHECKING:  # what static tools (pyright, mypy, an editor) read: _HOME's names
    from ._files import FileWriteError
    from .core.ivon import IVONStep
    from .core.likelihood import *  # noqa: F403
    from .core.loss import BBBLoss, complexity_weight
    from .core.posterior import (
        BAYESIAN_LAYERS,
        Posterior,
        PosteriorMismatchError,
        WeightSample,
        bayesian_parameters,
    )
    from .core.priors import *  # noqa: F403
    from .core.sampling import use_means, use_weights
    from .core.step import BBBStep, NotFiniteError, StepCosts, trainable_params
    from .intervals import Intervals, predict_intervals
    from .prediction import error_rate, predict_proba, predict_samples, uncertainty
    from .training import (
        MLP,
        CheckpointError,
        Network,
        RunOptions,
        TrainConfig,
        TrainingDiverged,
        TrainingInterrupted,
        TrainResult,
        UnreadableCheckpointError,
        build_mlp,
        fit,
        load_run,
    )


def _load(module):
    _check_mxnet([])  # MXNet itself (the builds were checked at import): says what to install
    return _importlib.import_module(module, __name__)


def _likelihood_names():
    # The losses core/likelihood defines for its likelihoods, and likelihood_loss: a new
    # likelihood's loss is public here once its class is added there.
    return list(_load(".core.likelihood").public_losses())


def _prior_names():
    # The names core/priors.py lists in its __all__ (its prior classes and make_prior): a
    # new prior class is public here once it is added there.
    return list(_load(".core.priors").__all__)


def __getattr__(name):
    if name == "__all__":  # ``from bbb_gluon import *``
        value = [*_prior_names(), *_likelihood_names(), *_HOME, "__version__"]
    elif name in _HOME:
        value = getattr(_load(_HOME[name]), name)
    elif name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    elif _importlib_util.find_spec(f"{__name__}.{name}") is not None:
        # a module of the package (``bbb.data``, ``bbb.training``): it imports what it needs
        value = _importlib.import_module(f".{name}", __name__)
    elif name in _prior_names():
        value = getattr(_load(".core.priors"), name)
    elif name in _likelihood_names():
        value = getattr(_load(".core.likelihood"), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted({*globals(), *_HOME, *_prior_names(), *_likelihood_names()})
