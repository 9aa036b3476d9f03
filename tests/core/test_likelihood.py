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
    NORMAL,
    BernoulliLikelihood,
    GaussianLikelihood,
    GaussianNLLLoss,
    HeteroscedasticGaussianNLLLoss,
    SoftmaxLikelihood,
    StudentTLikelihood,
    StudentTNLLLoss,
    StudentTNoise,
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
    assert LIKELIHOODS == ("softmax", "bernoulli", "gaussian", "heteroscedastic", "studentt")


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


# --------------------------------------------------------------------------- Student's t


def _t_nll(pred, label, s, df):
    """Student's t negative log-likelihood per example in float64, from its density."""
    z2 = ((label - pred) / s) ** 2 / df
    const = math.lgamma(df / 2) - math.lgamma((df + 1) / 2) + 0.5 * math.log(df * math.pi)
    return (math.log(s) + const + 0.5 * (df + 1) * np.log1p(z2)).sum(axis=-1)


@pytest.mark.parametrize("hybrid", [True, False], ids=["graph", "imperative"])
@pytest.mark.parametrize("noise_sigma, df", [(0.7, 4.0), (None, 2.5), (None, 30.0)])
def test_the_student_t_loss_is_its_negative_log_density(noise_sigma, df, hybrid):
    rng = np.random.default_rng(3)
    pred, label = rng.normal(size=(2, 6, 3)).astype(np.float32)
    label[0, 0] = 25.0  # an outlier: a t's cost grows as a log, not a square
    loss = StudentTNLLLoss(noise_sigma, df=df)
    loss.initialize(ctx=mx.cpu(1))
    loss.hybridize(hybrid)
    got = loss(mx.nd.array(pred, ctx=mx.cpu(1)), mx.nd.array(label, ctx=mx.cpu(1)))
    want = _t_nll(pred.astype(np.float64), label.astype(np.float64), loss.sigma(), df)
    np.testing.assert_allclose(got.asnumpy(), want, rtol=2e-5)
    assert got.asnumpy()[0] < GaussianNLLLoss(loss.sigma())(
        mx.nd.array(pred), mx.nd.array(label)).asnumpy()[0]
    with pytest.raises(ValueError, match="df must be"):
        StudentTNLLLoss(df=0)


def test_the_student_t_noise_has_its_distribution():
    z = np.array([-40.0, -3.0, -1.0, -0.2, 0.0, 0.4, 2.0, 10.0, 300.0])
    np.testing.assert_allclose(StudentTNoise(1).cdf(z), 0.5 + np.arctan(z) / np.pi,
                               atol=1e-14)  # Cauchy
    np.testing.assert_allclose(StudentTNoise(2).cdf(z), 0.5 + z / (2 * np.sqrt(2 + z * z)),
                               atol=1e-14)
    np.testing.assert_allclose(StudentTNoise(1e7).cdf(z), NORMAL.cdf(z), atol=3e-7)
    t4 = StudentTNoise(4)
    assert t4.cdf(np.array([2.7764451]))[0] == pytest.approx(0.975, abs=1e-7)  # table value
    grid = np.linspace(-60, 60, 240_001)
    density = np.exp(t4.log_density(grid))
    assert np.trapz(density, grid) == pytest.approx(1.0, abs=2e-4)  # tails beyond 60: 2e-5
    np.testing.assert_allclose(np.gradient(t4.cdf(grid), grid)[1000:-1000],
                               density[1000:-1000], atol=1e-6)
    assert t4.variance == 2.0 and StudentTNoise(2).variance == math.inf
    assert t4.bracket(0.95) == pytest.approx(2.7764451, rel=1e-6)


def test_the_student_t_likelihood_is_one_class_the_package_finds():
    assert "studentt" in LIKELIHOODS
    kind = likelihood_of(StudentTNLLLoss(df=3.0))
    assert isinstance(kind, StudentTLikelihood) and kind.df == 3.0 and not kind.classifies
    assert likelihood_of("studentt").loss(None).df == 4.0
    import bbb_gluon as bbb

    assert bbb.StudentTNLLLoss is StudentTNLLLoss and "StudentTNLLLoss" in bbb.__all__
    with pytest.raises(ValueError, match="StudentTNLLLoss expects targets of pred's shape"):
        check_labels(StudentTNLLLoss(), mx.nd.zeros((4, 2)), mx.nd.zeros((4,)))


@pytest.mark.parametrize("engine", ["reference", "fused"])
def test_a_student_t_regression_trains_in_bbbstep(engine):
    from bbb_gluon import BBBStep, Posterior, trainable_params

    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (256, 1)).astype(np.float32)
    y = (np.sin(2 * X) + 0.1 * rng.standard_t(2, size=X.shape)).astype(np.float32)
    mx.random.seed(0)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(32, activation="relu", in_units=1), gluon.nn.Dense(1, in_units=32))
    net.initialize(mx.init.Xavier())
    likelihood = StudentTNLLLoss(None, df=3.0)
    likelihood.initialize()
    posterior = Posterior(net, mu_init="copy", rho_init=-5.0, seed=0)
    loss = BBBLoss(GaussianPrior(1.0), likelihood, num_batches=8)
    trainer = gluon.Trainer(trainable_params(net, posterior, loss), "adam",
                            {"learning_rate": 1e-2})
    step = BBBStep(net, posterior, loss, trainer, engine=engine)
    assert step.engine == engine
    costs = []
    for _ in range(40):
        total = 0.0
        for i in range(8):
            xb, yb = mx.nd.array(X[i::8]), mx.nd.array(y[i::8])
            total += float(step(xb, yb, i).nll.asscalar())
        costs.append(total / len(X))
    step.check_finite()
    assert costs[-1] < costs[0] - 0.5 and likelihood.sigma() < 0.5  # fit, and the noise shrank


def test_a_student_t_regression_in_fit_round_trips_and_scores(tmp_path):
    import json

    from bbb_gluon import predict_intervals
    from bbb_gluon.training import fit, load_run

    rng = np.random.default_rng(1)
    X = rng.uniform(-2, 2, (200, 1)).astype(np.float32)
    y = (np.sin(2 * X) + 0.1 * rng.standard_t(2, size=X.shape)).astype(np.float32)
    config = TrainConfig(likelihood="studentt", epochs=6, batch_size=32, eval_samples=2)
    result = fit(config, (X, y), net=MLP(hidden=(16,), num_inputs=1, num_outputs=1),
                 run_dir=tmp_path, progress=False)
    assert isinstance(result.loss, StudentTNLLLoss)
    stored = json.loads((tmp_path / "config.json").read_text())["train"]
    assert stored["likelihood"] == "studentt" and TrainConfig.from_dict(stored) == config
    net, posterior, loaded, meta = load_run(tmp_path)
    assert loaded.likelihood == "studentt" and meta["loss"].sigma() == result.loss.sigma()
    bars = predict_intervals(net, posterior, X[:50], meta["loss"], samples=20)
    assert isinstance(bars.noise, StudentTNoise) and bars.noise.df == 4.0
    scores = bars.scores(y[:50])
    assert np.isfinite(scores["log_likelihood"]) and 0 <= scores["coverage"] <= 1
    # the intervals are the t mixture's: its CDF at their ends is the level's
    lower, upper = bars.intervals[0.9]
    z = (upper[:, :, None] - bars.sample_means.transpose(1, 2, 0)) / \
        bars.sample_stds.transpose(1, 2, 0)
    np.testing.assert_allclose(bars.noise.cdf(z).mean(axis=-1), 0.95, atol=1e-4)
