"""Bayes by Backprop for Apache MXNet Gluon.

Blundell, Cornebise, Kavukcuoglu and Wierstra, "Weight Uncertainty in Neural
Networks", ICML 2015 (arXiv:1505.05424).

The core is re-exported here: priors, the posterior, putting weights into a network, the
loss, the training step, ``fit`` and prediction. The rest stays in its module:
``bbb_gluon.data`` (datasets), ``bbb_gluon.metrics`` (calibration, AUROC, regression),
``bbb_gluon.evaluation``, ``bbb_gluon.pruning``, ``bbb_gluon.runs`` (run folders),
``bbb_gluon.plotting`` (matplotlib) and ``bbb_gluon.threads`` (the cores MXNet uses).

Importing the package compiles nothing and runs no MXNet operator: the compiled kernels
are built by ``make setup``, or on first use with a one-line notice.
"""

from ._mxnet_build import check as _check_mxnet

_check_mxnet()

from ._files import FileWriteError
from .core.likelihood import GaussianNLLLoss, likelihood_loss
from .core.loss import BBBLoss, complexity_weight
from .core.posterior import (
    BAYESIAN_LAYERS,
    Posterior,
    PosteriorMismatchError,
    WeightSample,
    bayesian_parameters,
)

# Every prior class (a new one in core/priors.py is public here at once) and make_prior.
from .core.priors import *  # noqa: F403
from .core.priors import __all__ as _prior_names
from .core.sampling import use_means, use_weights
from .core.step import BBBStep, NotFiniteError, StepCosts, trainable_params
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

__version__ = "0.1.0"

__all__ = [
    # priors, posterior, sampling, loss, step
    *_prior_names,
    "Posterior", "PosteriorMismatchError", "WeightSample", "bayesian_parameters",
    "BAYESIAN_LAYERS", "use_weights", "use_means", "BBBLoss", "GaussianNLLLoss",
    "complexity_weight", "likelihood_loss", "BBBStep", "StepCosts", "NotFiniteError",
    "trainable_params",
    # training
    "TrainConfig", "TrainResult", "TrainingInterrupted", "TrainingDiverged", "CheckpointError",
    "UnreadableCheckpointError", "fit", "build_mlp", "MLP", "Network", "RunOptions",
    "load_run", "FileWriteError",
    # prediction
    "predict_proba", "predict_samples", "error_rate", "uncertainty",
    "__version__",
]
