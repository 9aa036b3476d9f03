"""Tests for bbb_gluon.core.likelihood beyond those in test_loss.py (which also covers
GaussianNLLLoss, likelihood_loss and the label checks, written when they lived in
core/loss.py)."""

import pytest
from mxnet import gluon

from bbb_gluon import BBBLoss, GaussianPrior
from bbb_gluon.core.likelihood import GaussianNLLLoss, num_classes


@pytest.mark.parametrize("likelihood, outputs, classes", [
    ("softmax", 10, 10), (gluon.loss.SoftmaxCrossEntropyLoss(), 3, 3),
    ("bernoulli", 1, 2), (gluon.loss.SigmoidBCELoss(), 1, 2),
    (BBBLoss(GaussianPrior(), gluon.loss.SigmoidBCELoss(), num_batches=1), 1, 2),
    (BBBLoss(GaussianPrior(), num_batches=1), 7, 7),
])
def test_num_classes_is_two_for_one_bernoulli_logit_else_the_outputs(likelihood, outputs,
                                                                     classes):
    assert num_classes(likelihood, outputs) == classes


def test_num_classes_refuses_what_it_cannot_tell():
    with pytest.raises(ValueError, match="unknown likelihood"):
        num_classes("poisson", 3)
    assert num_classes(GaussianNLLLoss(1.0), 2) == 2  # regression: one per output
    assert num_classes("gaussian", 1) == 1
