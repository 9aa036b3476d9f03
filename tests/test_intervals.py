"""Tests for ``bbb_gluon.intervals``: a regression's error bars in one call."""

import math

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon
from mxnet.gluon import nn

import bbb_gluon as bbb
from bbb_gluon.core import ops
from bbb_gluon.data import ArrayLoader
from bbb_gluon.metrics import mixture_intervals


def _noise(x):
    return 0.05 + 0.125 * (x + 1)  # 0.05 at x = -1, 0.3 at x = 1


def _data(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, 1)).astype(np.float32)
    return x, (np.sin(3 * x) + _noise(x) * rng.normal(size=x.shape)).astype(np.float32)


@pytest.fixture(scope="module")
def heteroscedastic_fit():
    """A 1-32-2 tanh network (a mean and a scale) trained by Bayes by Backprop on 400
    points whose noise grows from 0.05 to 0.3 across the inputs."""
    x, y = _data(400, 0)
    mx.random.seed(0)
    net = nn.HybridSequential()
    net.add(nn.Dense(32, activation="tanh", in_units=1), nn.Dense(2, in_units=32))
    net.initialize(mx.init.Xavier())
    net[-1].bias.set_data(mx.nd.array([0.0, float(ops.inverse_softplus(0.1))]))  # small noise
    net.hybridize()
    posterior = bbb.Posterior(net, rho_init=-5.0, mu_init="copy", seed=0)
    loader = ArrayLoader(x, y, 50, shuffle=True, seed=0)
    loss = bbb.BBBLoss(bbb.GaussianPrior(1.0), bbb.HeteroscedasticGaussianNLLLoss(),
                       num_batches=len(loader))
    trainer = gluon.Trainer(bbb.trainable_params(net, posterior, loss), "adam",
                            {"learning_rate": 1e-2})
    step = bbb.BBBStep(net, posterior, loss, trainer)
    for epoch in range(400):
        for i, (xb, yb) in enumerate(loader.epoch(epoch)):
            step(xb, yb, i, want_complexity=False)
    return net, posterior, loss


def test_the_noise_follows_the_input_and_the_intervals_cover(heteroscedastic_fit):
    net, posterior, loss = heteroscedastic_fit
    x, y = _data(2000, 1)
    r = bbb.predict_intervals(net, posterior, x, loss, samples=50, levels=(0.5, 0.9))
    assert r.mean.shape == r.noise_std.shape == r.std.shape == (2000, 1) and r.samples == 50
    # the mean follows sin(3x), the noise grows with x as the data's does
    assert np.sqrt(np.mean((r.mean - np.sin(3 * x)) ** 2)) < 0.15
    low, high = r.noise_std[x < -0.5].mean(), r.noise_std[x > 0.5].mean()
    assert high > 1.3 * low
    np.testing.assert_allclose(r.std, np.sqrt(r.weights_std**2 + r.noise_std**2))
    for level, (lower, upper) in r.intervals.items():
        assert np.all(lower < r.mean) and np.all(r.mean < upper)
        covered = np.mean((y >= lower) & (y <= upper))
        assert abs(covered - level) < 0.08, (level, covered)
        # the scores' coverage is the same count, made from the mixture's CDF
        assert r.scores(y, level=level)["coverage"] == pytest.approx(covered, abs=2e-3)
    scores = r.scores(y)
    assert scores["rmse"] == pytest.approx(np.sqrt(np.mean((r.mean - y) ** 2)))
    assert scores["log_likelihood"] > 0  # noise far below 1: densities above 1


def test_the_original_scale_and_a_learned_single_noise(heteroscedastic_fit):
    net, posterior, loss = heteroscedastic_fit
    x, _ = _data(50, 2)
    # one deterministic pass (no posterior): the same outputs, put back on the targets'
    # scale; a BBBLoss or its likelihood alike
    with bbb.use_means(net, posterior):
        base = bbb.predict_intervals(net, None, x, loss, levels=0.9)
        scaled = bbb.predict_intervals(net, None, x, loss.likelihood, levels=0.9,
                                       y_mean=10.0, y_std=2.0)
    np.testing.assert_allclose(scaled.mean, 10 + 2 * base.mean, rtol=1e-6)
    np.testing.assert_allclose(scaled.noise_std, 2 * base.noise_std, rtol=1e-6)
    np.testing.assert_allclose(scaled.intervals[0.9][1], 10 + 2 * base.intervals[0.9][1],
                               rtol=1e-5)
    # one noise scale for every input: GaussianNLLLoss's, a plain network's spread is 0
    plain = nn.HybridSequential()
    plain.add(nn.Dense(1, in_units=1))
    plain.initialize(mx.init.Constant(0.5))
    fixed = bbb.GaussianNLLLoss(0.2)
    r = bbb.predict_intervals(plain, None, x, fixed, levels=0.95)
    np.testing.assert_allclose(r.mean, 0.5 * x, rtol=1e-6)  # Gluon starts biases at 0
    assert np.all(r.weights_std == 0) and np.allclose(r.noise_std, 0.2)
    lower, upper = r.intervals[0.95]
    np.testing.assert_allclose(upper - r.mean, 1.959964 * 0.2, rtol=1e-5)


def test_what_it_refuses(heteroscedastic_fit):
    net, posterior, _ = heteroscedastic_fit
    x, _ = _data(5, 3)
    with pytest.raises(TypeError, match="needs the likelihood the network trained with, one "
                                        "that gives the noise"):
        bbb.predict_intervals(net, posterior, x, gluon.loss.L2Loss())
    with pytest.raises(ValueError, match="y_std must be finite and > 0"):
        bbb.predict_intervals(net, posterior, x, bbb.HeteroscedasticGaussianNLLLoss(),
                              y_std=0.0)
    with pytest.raises(ValueError, match="interval levels must lie in"):
        bbb.predict_intervals(net, posterior, x, bbb.HeteroscedasticGaussianNLLLoss(),
                              levels=(0.9, 1.0))


def test_mixture_intervals_against_a_float64_reference():
    rng = np.random.default_rng(0)
    f, s = rng.normal(size=(7, 3)), rng.uniform(0.1, 1.0, size=(7, 3))
    bands = mixture_intervals(f, s, (0.5, 0.95))
    for level, (lower, upper) in bands.items():
        for q, value in ((0.5 - level / 2, lower), (0.5 + level / 2, upper)):
            cdf = np.array([np.mean([0.5 * (1 + math.erf((v - a) / (b * math.sqrt(2))))
                                     for a, b in zip(f[:, j], s[:, j], strict=True)])
                            for j, v in enumerate(value)])
            np.testing.assert_allclose(cdf, q, atol=1e-5)
    with pytest.raises(ValueError, match="sigmas must be > 0"):
        mixture_intervals(f, 0.0, 0.5)
    with pytest.raises(ValueError, match="must be finite"):
        mixture_intervals(np.full((2, 2), np.nan), 1.0, 0.5)
