"""Tests for bbb_gluon.core.likelihood (the label checks, written when they lived in
core/loss.py, are tested through BBBLoss in test_loss.py)."""

import math

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

from bbb_gluon import MLP, BBBLoss, GaussianPrior, TrainConfig
from bbb_gluon.core.likelihood import (
    LIKELIHOODS,
    BernoulliLikelihood,
    GaussianLikelihood,
    GaussianNLLLoss,
    HeteroscedasticGaussianNLLLoss,
    SoftmaxLikelihood,
    check_labels,
    likelihood_kind,
    likelihood_loss,
    likelihood_of,
    num_classes,
)


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


@pytest.mark.parametrize("given, kind", [
    ("softmax", SoftmaxLikelihood), (gluon.loss.SoftmaxCrossEntropyLoss(), SoftmaxLikelihood),
    ("bernoulli", BernoulliLikelihood), (gluon.loss.SigmoidBCELoss(), BernoulliLikelihood),
    ("gaussian", GaussianLikelihood), (GaussianNLLLoss(None), GaussianLikelihood),
    (gluon.loss.L2Loss(), GaussianLikelihood), (gluon.loss.HuberLoss(), GaussianLikelihood),
    (BBBLoss(GaussianPrior(), gluon.loss.SigmoidBCELoss(), num_batches=1), BernoulliLikelihood),
    (likelihood_of("bernoulli"), BernoulliLikelihood),
])
def test_a_likelihood_is_one_object_found_from_its_loss_or_name(given, kind):
    found = likelihood_of(given)
    assert isinstance(found, kind) and found is likelihood_of(found.name)
    assert likelihood_kind(given) == found.name
    assert isinstance(found.loss(), kind.losses)  # its name stands for one of its losses
    assert LIKELIHOODS == ("softmax", "bernoulli", "gaussian", "heteroscedastic")


def test_an_unknown_likelihood_is_refused_by_name_and_by_loss():
    with pytest.raises(ValueError, match="unknown likelihood 'poisson'"):
        likelihood_of("poisson")
    with pytest.raises(ValueError, match="cannot tell what PoissonNLLLoss makes"):
        likelihood_of(gluon.loss.PoissonNLLLoss())


def test_each_likelihood_makes_its_predictive_of_the_outputs():
    out = mx.nd.array(np.random.default_rng(0).normal(size=(4, 3)))
    probs = likelihood_of("softmax").predictive(out).asnumpy()
    e = np.exp(out.asnumpy() - out.asnumpy().max(axis=1, keepdims=True))
    np.testing.assert_allclose(probs, e / e.sum(axis=1, keepdims=True), rtol=1e-6)
    logit = out[:, :1]
    two = likelihood_of("bernoulli").predictive(logit).asnumpy()
    p1 = 1 / (1 + np.exp(-logit.asnumpy()[:, 0]))
    np.testing.assert_allclose(two, np.stack([1 - p1, p1], axis=1), rtol=1e-6)
    per_sample = mx.nd.array(np.random.default_rng(1).normal(size=(2, 4, 1)))  # (S, N, 1)
    assert likelihood_of("bernoulli").predictive(per_sample).shape == (2, 4, 2)
    assert likelihood_of("gaussian").predictive(out) is out  # the mean itself
    with pytest.raises(ValueError, match="need two or more outputs"):
        likelihood_of("softmax").predictive(logit)


@pytest.mark.parametrize("name, fits, refused", [("softmax", 2, 1), ("bernoulli", 1, 2)])
def test_the_training_configuration_asks_the_likelihood_what_fits(name, fits, refused):
    assert likelihood_of(name).fits(fits) and not likelihood_of(name).fits(refused)
    config = TrainConfig(likelihood=name)
    MLP(num_outputs=fits).check(config)
    with pytest.raises(ValueError, match=f"the {name} likelihood needs num_outputs"):
        MLP(num_outputs=refused).check(config)
    with pytest.raises(ValueError, match="unknown likelihood 'poisson'"):
        TrainConfig(likelihood="poisson")


@pytest.mark.parametrize("name, kind", [
    ("softmax", gluon.loss.SoftmaxCrossEntropyLoss),
    ("bernoulli", gluon.loss.SigmoidBCELoss),
    ("gaussian", GaussianNLLLoss),
])
def test_likelihood_loss_maps_the_names(name, kind):
    loss = likelihood_loss(name, 0.3)
    assert type(loss) is kind
    assert BBBLoss(GaussianPrior(), loss, weighting=1.0).likelihood is loss
    if name == "gaussian":
        assert loss.noise_sigma == 0.3 and loss.sigma() == 0.3
        assert not list(loss.collect_params().values())
        assert likelihood_loss("gaussian", None).noise_sigma is None


@pytest.mark.parametrize("args, match", [
    (("poisson",), "likelihood"),
    (("gaussian", 0.0), "noise_sigma"),
    (("gaussian", -1.0), "noise_sigma"),
    (("gaussian", float("inf")), "noise_sigma"),
])
def test_likelihood_loss_errors(args, match):
    with pytest.raises(ValueError, match=match):
        likelihood_loss(*args)


@pytest.mark.parametrize("noise_sigma", [None, 0.3])
def test_gaussian_nll_loss_matches_float64(noise_sigma):
    from bbb_gluon.core.likelihood import GaussianNLLLoss

    rng = np.random.default_rng(0)
    pred, label = rng.normal(size=(6, 2)), rng.normal(size=(6, 2))
    loss = GaussianNLLLoss(noise_sigma)
    loss.initialize()
    s = 1.0 if noise_sigma is None else noise_sigma
    expected = ((label - pred) ** 2).sum(axis=1) / (2 * s**2) + 2 * (math.log(s)
                                                                      + 0.5 * math.log(2 * math.pi))
    got = loss(mx.nd.array(pred), mx.nd.array(label)).asnumpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert loss.sigma() == pytest.approx(s, rel=1e-5)
    if noise_sigma is None:  # the noise scale gets a gradient
        with autograd.record():
            value = loss(mx.nd.array(pred), mx.nd.array(label)).sum()
        value.backward()
        assert loss.noise_rho.grad().asscalar() != 0
    with pytest.raises(ValueError, match="noise_sigma"):
        GaussianNLLLoss(0.0)


@pytest.mark.parametrize("noise_sigma", [None, 0.3])
def test_gaussian_nll_loss_comes_hybridized_with_the_imperative_values(noise_sigma):
    # One graph instead of some twenty operator calls; the values and the noise scale's
    # gradient are those of the imperative forward, batch sizes may change between calls.
    rng = np.random.default_rng(1)
    results = {}
    for hybrid in (True, False):
        loss = GaussianNLLLoss(noise_sigma)
        loss.initialize()
        if noise_sigma is None:
            loss.noise_rho.set_data(mx.nd.array([-0.7]))
        if not hybrid:
            loss.hybridize(False)
        assert loss._active is hybrid  # noqa: SLF001 - Gluon's own flag
        for n in (5, 3):  # a smaller last batch
            pred = mx.nd.array(rng.normal(size=(n, 2)).astype(np.float32))
            label = mx.nd.array(rng.normal(size=(n, 2)).astype(np.float32))
            pred.attach_grad()
            with autograd.record():
                value = loss(pred, label)
                total = value.sum()
            total.backward()
            grad = loss.noise_rho.grad().asnumpy().copy() if noise_sigma is None else 0.0
            results.setdefault(n, []).append((value.asnumpy(), pred.grad.asnumpy(), grad))
        rng = np.random.default_rng(1)
    for hybrid, imperative in results.values():
        for a, b in zip(hybrid, imperative, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5)


def test_heteroscedastic_loss_matches_float64_and_both_paths():
    rng = np.random.default_rng(2)
    pred, label = rng.normal(size=(6, 4)), rng.normal(size=(6, 2))  # two targets
    s = np.log1p(np.exp(pred[:, 2:])) + 0.01
    expected = ((label - pred[:, :2]) ** 2 / (2 * s**2) + np.log(s)
                + 0.5 * math.log(2 * math.pi)).sum(axis=1)
    for hybrid in (True, False):
        loss = HeteroscedasticGaussianNLLLoss(min_sigma=0.01)
        if not hybrid:
            loss.hybridize(False)
        p = mx.nd.array(pred)
        p.attach_grad()
        with autograd.record():
            got = loss(p, mx.nd.array(label))
            total = got.sum()
        total.backward()
        np.testing.assert_allclose(got.asnumpy(), expected, rtol=1e-5)
        # d/d mean = (mean - y) / s^2, as by hand
        np.testing.assert_allclose(p.grad.asnumpy()[:, :2], (pred[:, :2] - label) / s**2,
                                   rtol=1e-4)
    with pytest.raises(ValueError, match="min_sigma"):
        HeteroscedasticGaussianNLLLoss(min_sigma=0.0)


def test_heteroscedastic_likelihood_is_one_object_with_its_predictive_and_labels():
    loss = HeteroscedasticGaussianNLLLoss(min_sigma=0.01)
    kind = likelihood_of(loss)
    assert kind.name == "heteroscedastic" and not kind.classifies
    assert kind.min_sigma == 0.01 and likelihood_of("heteroscedastic").min_sigma == 1e-3
    assert kind.fits(2) and kind.fits(4) and not kind.fits(1) and not kind.fits(3)
    out = mx.nd.array([[0.5, 0.0], [-1.0, 2.0]])
    pred = kind.predictive(out).asnumpy()
    np.testing.assert_allclose(pred[:, 0], [0.5, -1.0])
    np.testing.assert_allclose(pred[:, 1], np.log1p(np.exp([0.0, 2.0])) + 0.01, rtol=1e-6)
    with pytest.raises(ValueError, match="even number of outputs"):
        kind.predictive(mx.nd.ones((2, 3)))
    check_labels(loss, mx.nd.ones((5, 4)), mx.nd.ones((5, 2)))
    with pytest.raises(ValueError, match="a mean and a scale per target"):
        check_labels(loss, mx.nd.ones((5, 4)), mx.nd.ones((5, 4)))
    with pytest.raises(ValueError, match="a mean and a scale per target"):
        check_labels(loss, mx.nd.ones((5, 3)), mx.nd.ones((5, 1)))
    assert type(likelihood_loss("heteroscedastic")) is HeteroscedasticGaussianNLLLoss
