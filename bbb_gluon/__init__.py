"""Bayes by Backprop for Apache MXNet Gluon.

Blundell, Cornebise, Kavukcuoglu and Wierstra, "Weight Uncertainty in Neural
Networks", ICML 2015 (arXiv:1505.05424).
"""

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
from .posterior import Posterior, PosteriorMismatchError, WeightSample, dense_parameters
from .prediction import (
    class_std,
    entropy,
    expected_entropy,
    mutual_information,
    predictive_entropy,
    uncertainty,
)
from .priors import GaussianPrior, Prior, ScaleMixturePrior, make_prior
from .pruning import evaluate_pruning, export_pruned, load_pruned, pruned_weights, pruning_scores
from .sampling import use_means, use_weights

__version__ = "0.1.0"

__all__ = [
    "BBBLoss", "GaussianPrior", "NoiseSource", "Posterior", "PosteriorMismatchError", "Prior",
    "ScaleMixturePrior", "WeightSample", "__version__", "blundell_weights", "complexity_cost",
    "complexity_weight", "dense_parameters", "make_prior", "use_means", "use_weights",
    "auroc", "brier_score", "calibration_summary", "expected_calibration_error", "nll",
    "reliability_data", "class_std", "entropy", "expected_entropy", "mutual_information",
    "predictive_entropy", "uncertainty", "evaluate_pruning", "export_pruned", "load_pruned",
    "pruned_weights", "pruning_scores",
]
