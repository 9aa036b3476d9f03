"""Bayes by Backprop for Apache MXNet Gluon.

Blundell, Cornebise, Kavukcuoglu and Wierstra, "Weight Uncertainty in Neural
Networks", ICML 2015 (arXiv:1505.05424).

The public API is re-exported here; ``bbb_gluon.plotting`` (matplotlib) and
``bbb_gluon.fused`` (the compiled kernels) are imported on their own.
"""

from .data import (
    ArrayLoader,
    DataFileError,
    DatasetNotFoundError,
    PixelTransform,
    load_dataset,
    regression_curve,
    two_moons,
)
from .loss import BBBLoss, blundell_weights, complexity_cost, complexity_weight
from .metrics import (
    auroc,
    brier_score,
    calibration_summary,
    expected_calibration_error,
    nll,
    reliability_data,
)
from .noise import NoiseSource
from .posterior import (
    BAYESIAN_LAYERS,
    Posterior,
    PosteriorMismatchError,
    WeightSample,
    bayesian_parameters,
)
from .prediction import (
    class_std,
    entropy,
    error_rate,
    expected_entropy,
    mutual_information,
    predict_proba,
    predict_samples,
    predictive_entropy,
    uncertainty,
)
from .priors import GaussianPrior, Prior, ScaleMixturePrior, make_prior
from .pruning import (
    evaluate_pruning,
    export_pruned,
    load_pruned,
    prune_masks,
    pruned_weights,
    pruning_scores,
    thresholds,
)
from .sampling import use_means, use_weights
from .step import BBBStep
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

__version__ = "0.1.0"

__all__ = [
    # priors, posterior, sampling, loss
    "Prior", "GaussianPrior", "ScaleMixturePrior", "make_prior",
    "Posterior", "PosteriorMismatchError", "WeightSample", "bayesian_parameters",
    "BAYESIAN_LAYERS", "NoiseSource",
    "use_weights", "use_means", "BBBStep",
    "BBBLoss", "blundell_weights", "complexity_cost", "complexity_weight",
    # data
    "ArrayLoader", "DataFileError", "DatasetNotFoundError", "PixelTransform", "load_dataset",
    "regression_curve", "two_moons",
    # training
    "TrainConfig", "TrainResult", "TrainingInterrupted", "TrainingDiverged", "CheckpointError",
    "fit",
    "build_mlp", "load_run",
    # prediction and metrics
    "predict_proba", "predict_samples", "error_rate", "uncertainty", "entropy",
    "predictive_entropy", "expected_entropy", "mutual_information", "class_std",
    "auroc", "brier_score", "calibration_summary", "expected_calibration_error", "nll",
    "reliability_data",
    # pruning
    "evaluate_pruning", "export_pruned", "load_pruned", "prune_masks", "pruned_weights",
    "pruning_scores", "thresholds",
    "__version__",
]
