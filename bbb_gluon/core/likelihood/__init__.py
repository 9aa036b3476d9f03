"""The likelihood, the data term of the cost: one :class:`Likelihood` object per kind
(what it makes of a network's outputs, found from the Gluon loss by
:func:`likelihood_of`), :class:`GaussianNLLLoss` for real-valued targets (its noise scale
fixed or learned), :class:`HeteroscedasticGaussianNLLLoss` for real-valued targets whose
noise the network predicts per input, and the checks of the labels a loss takes.
"""

from .families import NORMAL, NormalNoise, StudentTNoise
from .kinds import (
    LIKELIHOODS,
    BernoulliLikelihood,
    GaussianLikelihood,
    HeteroscedasticGaussianLikelihood,
    Likelihood,
    SoftmaxLikelihood,
    StudentTLikelihood,
    check_likelihood_name,
    likelihood_kind,
    likelihood_loss,
    likelihood_of,
    num_classes,
    public_losses,
)
from .labels import check_label_shape, check_label_values, check_labels
from .losses import GaussianNLLLoss, HeteroscedasticGaussianNLLLoss, StudentTNLLLoss

__all__ = ["GaussianNLLLoss", "HeteroscedasticGaussianNLLLoss", "Likelihood",
           "SoftmaxLikelihood", "BernoulliLikelihood", "GaussianLikelihood",
           "HeteroscedasticGaussianLikelihood", "likelihood_of", "likelihood_loss",
           "likelihood_kind", "num_classes", "check_labels", "check_label_shape",
           "check_label_values", "LIKELIHOODS", "NormalNoise", "NORMAL", "public_losses",
           "StudentTNLLLoss", "StudentTLikelihood", "StudentTNoise", "check_likelihood_name"]
