"""Bayes by Backprop for Apache MXNet Gluon.

Blundell, Cornebise, Kavukcuoglu and Wierstra, "Weight Uncertainty in Neural
Networks", ICML 2015 (arXiv:1505.05424).

The core is re-exported here: priors, the posterior, putting weights into a network, the
loss, the training step, ``fit`` and prediction. The rest stays in its module:
``bbb_gluon.data`` (datasets), ``bbb_gluon.metrics`` (calibration, AUROC),
``bbb_gluon.evaluation``, ``bbb_gluon.pruning``, ``bbb_gluon.runs`` (run folders),
``bbb_gluon.plotting`` (matplotlib) and ``bbb_gluon.fused`` (the compiled kernels).
"""

import sys as _sys

from ._mxnet_build import check as _check_mxnet

_check_mxnet()

from ._files import FileWriteError
from ._kernels.threads import _claim as _claim_threads
from .core.loss import BBBLoss, GaussianNLLLoss, complexity_weight
from .core.posterior import (
    BAYESIAN_LAYERS,
    Posterior,
    PosteriorMismatchError,
    WeightSample,
    bayesian_parameters,
)
from .core.priors import GaussianPrior, Prior, ScaleMixturePrior, make_prior
from .core.sampling import use_means, use_weights
from .core.step import BBBStep, NotFiniteError
from .prediction import error_rate, predict_proba, predict_samples, uncertainty
from .training import (
    CheckpointError,
    TrainConfig,
    TrainingDiverged,
    TrainingInterrupted,
    TrainResult,
    build_mlp,
    fit,
    load_run,
)

# Before the user's first operator: the engine thread's OpenMP count can only go down
# once oneDNN has made primitives on it (bbb_gluon.threads).
_claim_threads()

__version__ = "0.1.0"

# The modules' paths before the core and the kernels moved into packages
# (docs/architecture.md): notebooks, README and committed results import them.
# ``bbb_gluon.priors`` is the same module object as ``bbb_gluon.core.priors``.
from ._kernels import fused, threads  # noqa: E402
from .core import loss, noise, ops, posterior, priors, sampling, step  # noqa: E402

for _name, _module in {"fused": fused, "threads": threads, "loss": loss, "noise": noise,
                       "ops": ops, "posterior": posterior, "priors": priors,
                       "sampling": sampling, "step": step}.items():
    _sys.modules[f"{__name__}.{_name}"] = _module
del _name, _module

__all__ = [
    # priors, posterior, sampling, loss, step
    "Prior", "GaussianPrior", "ScaleMixturePrior", "make_prior",
    "Posterior", "PosteriorMismatchError", "WeightSample", "bayesian_parameters",
    "BAYESIAN_LAYERS", "use_weights", "use_means", "BBBLoss", "GaussianNLLLoss",
    "complexity_weight", "BBBStep", "NotFiniteError",
    # training
    "TrainConfig", "TrainResult", "TrainingInterrupted", "TrainingDiverged", "CheckpointError",
    "fit", "build_mlp", "load_run", "FileWriteError",
    # prediction
    "predict_proba", "predict_samples", "error_rate", "uncertainty",
    "__version__",
]
