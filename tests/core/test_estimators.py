"""Tests for bbb_gluon.core.estimators: Flipout and the local reparameterisation over
ordinary Gluon layers, each proved against its definition on given noise, unbiased
against the shared sample, and leaving the network as it was."""

import json
import logging
import math

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon
from mxnet.gluon import nn
from mxnet.gluon.contrib.nn import HybridConcurrent

from bbb_gluon import (
    BBBLoss,
    BBBStep,
    GaussianPrior,
    Posterior,
    ScaleMixturePrior,
    trainable_params,
    use_weights,
)
from bbb_gluon._kernels import private
from bbb_gluon.core import estimator_forward
from bbb_gluon.core import step as step_module
from bbb_gluon.core.estimator_forward import EstimatorForward, perturbed
from bbb_gluon.core.estimators import VARIANCE_FLOOR, key_modes, plan
from bbb_gluon.core.layer_forward import _leading
from bbb_gluon.training import TrainConfig

CTX = mx.cpu(1)  # a context that is not the default catches a hard-coded one
MIXTURE = ScaleMixturePrior(0.5, 1.0, math.exp(-6))


def recorded_noise(seed):
    """``noise(tag, shape, signs)`` drawing from NumPy, and the arrays it handed out."""
    rng = np.random.default_rng(seed)
    got = {}

    def noise(tag, shape, signs):
        a = rng.choice([-1.0, 1.0], size=shape) if signs else rng.standard_normal(shape)
        got[tag] = a.astype(np.float32)
        return mx.nd.array(got[tag], ctx=CTX)
    return noise, got


def build(*layers, hybridize=True, rho=-2.0):
    net = nn.HybridSequential()
    net.add(*layers)
    mx.random.seed(0)
    net.initialize(mx.init.Xavier(), ctx=CTX)
    if hybridize:
        net.hybridize()
    return net, rho


def posterior_of(net, X, rho=-2.0, **kwargs):
    net(X)  # shapes
    post = Posterior(net, seed=3, rho_init=rho, **kwargs)
    return post


def run(net, post, X, estimator, noise, eps=None):
    """The network's output under ``estimator`` on fixed noise, and the sample."""
    eps = np.random.default_rng(7).standard_normal(post.num_weights).astype(np.float32) \
        if eps is None else eps
    sample = post.sample(CTX, eps=mx.nd.array(eps, ctx=CTX))
    with perturbed(net, post, plan(net, post, estimator), sample, noise):
        out = net(X)
    return out, sample


def as_np(arrays):
    return [a.asnumpy().astype(np.float64) for a in arrays]


@pytest.mark.parametrize("hybridize", [True, False])
def test_flipout_on_dense_is_one_weight_draw_per_example(hybridize):
    net, _ = build(nn.Dense(4, activation="tanh", in_units=5), hybridize=hybridize)
    X = mx.nd.array(np.random.default_rng(0).normal(size=(6, 5)), ctx=CTX)
    post = posterior_of(net, X)
    noise, got = recorded_noise(1)
    out, sample = run(net, post, X, "flipout", noise)
    mu_w, mu_b = (m.asnumpy() for m in sample.mus)
    d_w, d_b = ((s * e).asnumpy() for s, e in zip(sample.sigmas, sample.eps, strict=True))
    s, r = got[1], got[2]  # weight index 0: tags 1 (input signs) and 2 (output signs)
    assert s.shape == (6, 5) and r.shape == (6, 4)
    for n in range(6):
        w_n = mu_w + d_w * np.outer(r[n], s[n])  # W_n = mu + Delta o (r_n s_n^T)
        b_n = mu_b + d_b * r[n]
        with use_weights(net, post, [mx.nd.array(w_n, ctx=CTX), mx.nd.array(b_n, ctx=CTX)]):
            alone = net(X[n:n + 1]).asnumpy()
        np.testing.assert_allclose(out[n:n + 1].asnumpy(), alone, rtol=1e-5, atol=1e-6)


def test_flipout_on_a_convolution_flips_channels_not_pixels():
    net, _ = build(nn.Conv2D(3, 3, padding=1, in_channels=2, activation="relu"))
    X = mx.nd.array(np.random.default_rng(0).normal(size=(4, 2, 5, 5)), ctx=CTX)
    post = posterior_of(net, X)
    noise, got = recorded_noise(2)
    out, sample = run(net, post, X, "flipout", noise)
    s, r = got[1], got[2]
    # one sign per (example, channel), the same at every spatial tap
    assert s.shape == (4, 2, 1, 1) and r.shape == (4, 3, 1, 1)
    mu_w, mu_b = (m.asnumpy() for m in sample.mus)
    d_w, d_b = ((sg * e).asnumpy() for sg, e in zip(sample.sigmas, sample.eps, strict=True))
    for n in range(4):
        flip = np.outer(r[n].ravel(), s[n].ravel())[:, :, None, None]
        w_n, b_n = mu_w + d_w * flip, mu_b + d_b * r[n].ravel()
        with use_weights(net, post, [mx.nd.array(w_n, ctx=CTX), mx.nd.array(b_n, ctx=CTX)]):
            alone = net(X[n:n + 1]).asnumpy()
        np.testing.assert_allclose(out[n:n + 1].asnumpy(), alone, rtol=1e-5, atol=1e-5)


def test_the_local_reparameterisation_matches_float64_numpy_with_its_gradients():
    net, _ = build(nn.Dense(4, in_units=5))
    rng = np.random.default_rng(0)
    X = mx.nd.array(rng.normal(size=(6, 5)), ctx=CTX)
    post = posterior_of(net, X)
    noise, got = recorded_noise(3)
    c = rng.normal(size=(6, 4))
    with autograd.record():
        out, sample = run(net, post, X, "local", noise)
        total = (out * mx.nd.array(c, ctx=CTX)).sum()
    total.backward()
    x = X.asnumpy().astype(np.float64)
    mu_w, mu_b = as_np(post.mu(CTX))
    rho_w, rho_b = as_np(post.rho(CTX))
    sig_w, sig_b = np.log1p(np.exp(rho_w)), np.log1p(np.exp(rho_b))
    zeta = got[0].astype(np.float64)
    mean = x @ mu_w.T + mu_b
    sd = np.sqrt((x ** 2) @ (sig_w ** 2).T + sig_b ** 2 + VARIANCE_FLOOR)
    np.testing.assert_allclose(out.asnumpy(), mean + sd * zeta, rtol=1e-5, atol=1e-6)
    # d/dmu: the mean's; d/drho through the variance: c zeta / (2 sd) * d var/d sigma^2
    g_sd = c * zeta / (2 * sd)
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    expect = {"mu": [c.T @ x, c.sum(0)],
              "rho": [(g_sd.T @ x ** 2) * 2 * sig_w * sigmoid(rho_w),
                      g_sd.sum(0) * 2 * sig_b * sigmoid(rho_b)]}
    for which, params in (("mu", post.mu_parameters), ("rho", post.rho_parameters)):
        for p, e in zip(params, expect[which], strict=True):
            np.testing.assert_allclose(p.grad(CTX).asnumpy(), e, rtol=1e-4, atol=1e-6)


def mean_and_var_of_gradients(net, post, X, y, estimator, draws, seed):
    """Mean and variance over ``draws`` of the likelihood's gradient w.r.t. mu and rho."""
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    rules = plan(net, post, estimator)
    rng = np.random.default_rng(seed)
    grads = []
    for _ in range(draws):
        noise = lambda tag, shape, signs: mx.nd.array(  # noqa: E731
            rng.choice([-1.0, 1.0], size=shape) if signs else rng.standard_normal(shape),
            ctx=CTX)
        eps = mx.nd.array(rng.standard_normal(post.num_weights), ctx=CTX)
        with autograd.record():
            sample = post.sample(CTX, eps=eps)
            with perturbed(net, post, rules, sample, noise):
                cost = loss(net(X), y).sum()
        cost.backward()
        grads.append(np.concatenate([p.grad(CTX).asnumpy().ravel() for p in
                                     post.mu_parameters + post.rho_parameters]))
    grads = np.array(grads, dtype=np.float64)
    return grads.mean(0), grads.var(0, ddof=1)


@pytest.mark.slow
def test_each_estimator_is_unbiased_for_the_shared_samples_gradient():
    net, _ = build(nn.Dense(8, activation="relu", in_units=4), nn.Dense(3, in_units=8))
    rng = np.random.default_rng(0)
    # Wide weights (sigma 0.97) and inputs, so that a wrong variance shows: |x| in place
    # of x^2 in the local reparameterisation's fails by z > 7.
    X = mx.nd.array(3 * rng.normal(size=(6, 4)), ctx=CTX)
    y = mx.nd.array(rng.integers(0, 3, size=6), ctx=CTX)
    post = posterior_of(net, X, rho=0.5)
    draws = 500
    base, base_var = mean_and_var_of_gradients(net, post, X, y, "reparam", draws, 1)
    for k, estimator in enumerate(("local", "flipout")):
        mean, var = mean_and_var_of_gradients(net, post, X, y, estimator, draws, 2 + k)
        z = (mean - base) / np.sqrt((var + base_var) / draws + 1e-12)
        # 134 gradients: the largest of as many standard normals passes 4.5 rarely
        assert np.abs(z).max() < 4.5, (estimator, np.abs(z).max())


@pytest.mark.parametrize("estimator", ["local", "flipout"])
def test_with_sigma_near_zero_the_plain_network_and_its_gradient(estimator):
    net, _ = build(nn.Dense(6, activation="relu", in_units=4), nn.Dense(3, in_units=6))
    X = mx.nd.array(np.random.default_rng(0).normal(size=(5, 4)), ctx=CTX)
    post = posterior_of(net, X, rho=-40.0)  # sigma = softplus(-40), about 4e-18
    with autograd.record():
        out, _ = run(net, post, X, estimator, recorded_noise(0)[0])
        out.sum().backward()
    grads = [p.grad(CTX).asnumpy().copy() for p in post.mu_parameters]
    with autograd.record():
        with use_weights(net, post, post.mu(CTX)):
            plain = net(X)
        plain.sum().backward()
    np.testing.assert_allclose(out.asnumpy(), plain.asnumpy(), rtol=1e-5, atol=1e-5)
    for g, p in zip(grads, post.mu_parameters, strict=True):
        np.testing.assert_allclose(g, p.grad(CTX).asnumpy(), rtol=1e-5, atol=1e-5)


def test_rows_of_zeros_give_no_nan_gradient():
    # No Bayesian bias: a zero input row, and the dead ReLU row it makes, have variance 0.
    net, _ = build(nn.Dense(5, activation="relu", in_units=3, use_bias=False),
                   nn.Dense(2, in_units=5, use_bias=False))
    X = mx.nd.array([[0.0, 0.0, 0.0], [1.0, -2.0, 0.5]], ctx=CTX)
    post = posterior_of(net, X)
    with autograd.record():
        out, _ = run(net, post, X, "local", recorded_noise(0)[0])
        out.sum().backward()
    for p in post.mu_parameters + post.rho_parameters:
        assert np.isfinite(p.grad(CTX).asnumpy()).all(), p.name


def snapshot(net):
    return [(b, dict(vars(b)).get("hybrid_forward"),
             private.is_hybridized(b) if isinstance(b, gluon.HybridBlock) else None)
            for b in _blocks(net)], \
        [private.parameter_arrays(p) for p in net.collect_params().values()]


def _blocks(net):
    found = []
    net.apply(found.append)
    return found


def assert_unchanged(net, before):
    blocks, arrays = snapshot(net)
    assert [(id(b), f, h) for b, f, h in blocks] == [(id(b), f, h) for b, f, h in before[0]]
    assert all(all(x is y for x, y in zip(a, b, strict=True))
               for a, b in zip(arrays, before[1], strict=True))
    for (_, f, _) in blocks:
        assert f is None


@pytest.mark.parametrize("estimator", ["local", "flipout"])
def test_the_network_is_as_it_was_after_a_step_and_after_an_exception(estimator, monkeypatch):
    net, _ = build(nn.Conv2D(3, 3, in_channels=1, activation="relu"), nn.Flatten(),
                   nn.Dense(4, in_units=3 * 4 * 4))
    X = mx.nd.array(np.random.default_rng(0).normal(size=(5, 1, 6, 6)), ctx=CTX)
    y = mx.nd.array([0, 1, 2, 3, 0], ctx=CTX)
    post = posterior_of(net, X)
    expected_before = net(X).asnumpy()
    before = snapshot(net)
    loss = BBBLoss(MIXTURE, num_batches=1)
    trainer = gluon.Trainer(trainable_params(net, post, loss), "sgd", {"learning_rate": 0.0})
    step = BBBStep(net, post, loss, trainer, estimator=estimator)
    step(X, y)
    assert_unchanged(net, before)
    with pytest.raises(ValueError, match=r"does not take X of shape \(5, 1, 4, 4\): "):
        step(X[:, :, :4, :4], y)  # the Dense layer's input no longer fits: refused up front
    assert_unchanged(net, before)
    # past the up-front check (it would give the network's output of one example)
    monkeypatch.setattr(step_module, "check_network_takes",
                        lambda *args: mx.nd.zeros((1, 4), ctx=CTX))
    with pytest.raises(mx.base.MXNetError):
        step(X[:, :, :4, :4], y)  # past that check, it fails inside
    assert_unchanged(net, before)
    # lr 0: the parameters did not move; the cached graph still runs the plain network
    np.testing.assert_allclose(net(X).asnumpy(), expected_before, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("estimator", ["local", "flipout"])
@pytest.mark.parametrize("grad_req, fail", [("write", False), ("add", False),
                                            ("write", True)])
def test_after_a_step_autograd_on_the_means_fills_their_own_gradients(estimator, grad_req,
                                                                      fail):
    """The step runs the means of the layers under an estimator as its autograd leaves
    (with its own gradient buffers, not a copy per step); afterwards, also after a step
    that failed inside, a user's backward through the posterior's means writes (or adds
    to) their Parameters' gradients, as before a step."""
    net, _ = build(nn.Dense(6, in_units=4, activation="relu"), nn.Dense(3, in_units=6))
    X = mx.nd.array(np.random.default_rng(0).normal(size=(5, 4)), ctx=CTX)
    y = mx.nd.array([0, 1, 2, 0, 1], ctx=CTX)
    post = posterior_of(net, X)
    for p in post.mu_parameters:
        p.grad_req = grad_req
    loss = BBBLoss(MIXTURE, num_batches=1)
    trainer = gluon.Trainer(trainable_params(net, post, loss), "adam", {"learning_rate": 0.1})
    step = BBBStep(net, post, loss, trainer, estimator=estimator)
    step(X, y)
    if fail:
        def broken(*args):
            raise RuntimeError("inside the step")
        step._engine.nll = broken
        with pytest.raises(RuntimeError, match="inside the step"):
            step(X, y)
    else:
        step(X, y)
    for p, m in zip(post.mu_parameters, post.mu(CTX), strict=True):
        for _ in range(2):
            with autograd.record():
                cost = (m * 3.0).sum()
            cost.backward()
        want = 6.0 if grad_req == "add" else 3.0
        np.testing.assert_array_equal(p.grad(CTX).asnumpy(), np.full(m.shape, want, np.float32))


def test_hybridized_and_imperative_networks_agree():
    outs = []
    for hybridize in (True, False):
        net, _ = build(nn.Dense(6, activation="relu", in_units=4), nn.Dense(3, in_units=6),
                       hybridize=hybridize)
        X = mx.nd.array(np.random.default_rng(0).normal(size=(5, 4)), ctx=CTX)
        post = posterior_of(net, X)
        outs.append([run(net, post, X, e, recorded_noise(4)[0])[0].asnumpy()
                     for e in ("local", "flipout")])
    np.testing.assert_allclose(np.array(outs[0]), np.array(outs[1]), rtol=1e-6)


def test_the_plan_says_what_each_layer_runs_and_why():
    net = nn.HybridSequential()
    net.add(nn.Conv2D(2, 3, in_channels=1), nn.Conv2DTranspose(2, 3, in_channels=2),
            nn.Dense(3, flatten=False, in_units=5), nn.Flatten(), nn.Dense(4),
            nn.Dense(2, in_units=4))
    net.initialize(ctx=CTX)
    X = mx.nd.ones((2, 1, 5, 5), ctx=CTX)
    post = posterior_of(net, X, select=r"^(0|1|2|4)\.|^5\.bias")
    rules = {r.name: r for r in plan(net, post, "local")}
    assert {k: r.rule for k, r in rules.items()} == {
        "0": "flipout", "1": "reparam", "2": "flipout", "4": "local", "5": "reparam"}
    assert "convolution" in rules["0"].why and "Conv2DTranspose" in rules["1"].why
    assert "flatten=False" in rules["2"].why and "no posterior" in rules["5"].why
    assert {r.rule for r in plan(net, post, "flipout")} == {"flipout", "reparam"}
    assert {r.rule for r in plan(net, post, "reparam")} == {"reparam"}


def tiny_step(estimator, **kwargs):
    net, _ = build(nn.Dense(5, activation="relu", in_units=3), nn.Dense(2, in_units=5))
    X = mx.nd.ones((4, 3), ctx=CTX)
    post = posterior_of(net, X)
    loss = BBBLoss(kwargs.pop("prior", MIXTURE), num_batches=1,
                   complexity=kwargs.pop("complexity", "mc"))
    trainer = gluon.Trainer(trainable_params(net, post, loss), "sgd",
                            {"learning_rate": kwargs.pop("lr", 0.1)})
    return BBBStep(net, post, loss, trainer, estimator=estimator, **kwargs), X, post


def test_bbbstep_takes_an_estimator_and_says_what_runs():
    step, _, _ = tiny_step("local")
    assert step.estimators == {"0": "local", "1": "local"}
    assert tiny_step("flipout", engine="reference")[0].engine == "reference"
    with pytest.raises(ValueError, match="estimator must be one of"):
        tiny_step("lrt")
    with pytest.raises(ValueError, match="estimator must be one of"):
        TrainConfig(estimator="Flipout")
    with pytest.raises(ValueError, match="setting of the bbb model"):
        TrainConfig(model="plain", estimator="local")


@pytest.mark.parametrize("estimator", ["local", "flipout"])
@pytest.mark.parametrize("prior", [GaussianPrior(0.5), MIXTURE])
def test_the_steps_complexity_cost_is_unbiased(estimator, prior):
    """The cost the step reports (the Monte-Carlo log q - log P at the shared sample)
    averages to KL(q || P): the closed form for a Gaussian prior, quadrature for the
    scale mixture. lr 0, so every step draws from the same posterior."""
    step, X, post = tiny_step(estimator, prior=prior, lr=0.0)
    y = mx.nd.array([0, 1, 1, 0], ctx=CTX)
    costs = np.array([step(X, y).complexity.asscalar() for _ in range(400)])
    mus = np.concatenate([m.asnumpy().ravel() for m in post.mu(CTX)]).astype(np.float64)
    sig = np.concatenate([s.asnumpy().ravel() for s in post.sigma(CTX)]).astype(np.float64)
    if isinstance(prior, GaussianPrior):
        exact = np.sum(np.log(prior.sigma / sig) + (sig ** 2 + mus ** 2)
                       / (2 * prior.sigma ** 2) - 0.5)
    else:
        nodes, weights = np.polynomial.hermite_e.hermegauss(80)
        w = mus[:, None] + sig[:, None] * nodes[None, :]

        def normal(v, s):
            return np.exp(-0.5 * (v / s) ** 2) / (s * math.sqrt(2 * math.pi))
        log_p = np.log(prior.pi * normal(w, prior.sigma1) + (1 - prior.pi)
                       * normal(w, prior.sigma2))
        log_q = -np.log(sig)[:, None] - 0.5 * nodes[None, :] ** 2 - 0.5 * math.log(2 * math.pi)
        exact = np.sum((log_q - log_p) @ weights / math.sqrt(2 * math.pi))
    se = costs.std(ddof=1) / math.sqrt(len(costs))
    assert abs(costs.mean() - exact) < 4 * se + 1e-3 * abs(exact), (costs.mean(), exact, se)
    # and the closed form for the Gaussian prior, with any estimator
    if isinstance(prior, GaussianPrior):
        step, X, post = tiny_step(estimator, prior=prior, lr=0.0, complexity="kl")
        assert step(X, y).complexity.asscalar() == pytest.approx(exact, rel=1e-4)


@pytest.mark.parametrize("estimator", ["local", "flipout"])
def test_a_convolutional_network_with_batchnorm_learns(estimator):
    net, _ = build(nn.Conv2D(4, 3, in_channels=1, activation="relu"), nn.BatchNorm(),
                   nn.Flatten(), nn.Dense(3, in_units=4 * 4 * 4))
    rng = np.random.default_rng(0)
    X = mx.nd.array(rng.normal(size=(30, 1, 6, 6)), ctx=CTX)
    y = mx.nd.array((X.asnumpy()[:, 0, :3].sum((1, 2)) > 0).astype(np.float32), ctx=CTX)
    post = posterior_of(net, X, rho=-5.0)
    loss = BBBLoss(GaussianPrior(1.0), num_batches=1)
    trainer = gluon.Trainer(trainable_params(net, post, loss), "adam", {"learning_rate": 0.02})
    step = BBBStep(net, post, loss, trainer, estimator=estimator)
    assert step.estimators == {"0": "flipout", "3": estimator}
    gamma = net[1].gamma.data(CTX).asnumpy().copy()
    first = [step(X, y).nll.asscalar() for _ in range(3)]
    for _ in range(60):
        last = step(X, y).nll.asscalar()
    step.check_finite()
    assert last < 0.5 * np.mean(first)
    assert not np.allclose(net[1].gamma.data(CTX).asnumpy(), gamma)  # BatchNorm learns


def fixed_extra(tag, shape, signs):
    """The estimators' per-example noise as a function of its tag alone, so that both
    engines get the same arrays whatever order they ask in."""
    rng = np.random.default_rng(100 + tag)
    a = rng.choice([-1.0, 1.0], size=shape) if signs else rng.standard_normal(shape)
    return mx.nd.array(a, ctx=CTX)


def lenet():
    net = nn.HybridSequential()
    net.add(nn.Conv2D(4, 3, in_channels=1, activation="relu"), nn.BatchNorm(in_channels=4),
            nn.MaxPool2D(), nn.Flatten(), nn.Dense(16, activation="relu", in_units=4 * 3 * 3),
            nn.Dense(5, in_units=16))
    mx.random.seed(0)
    net.initialize(mx.init.Xavier(), ctx=CTX)
    net.hybridize()
    return net


def engine_run(engine, estimator, prior, complexity, optimizer, samples, steps=2):
    net = lenet()
    rng = np.random.default_rng(0)
    X = mx.nd.array(rng.normal(size=(8, 1, 8, 8)), ctx=CTX)
    y = mx.nd.array(rng.integers(0, 5, size=8), ctx=CTX)
    post = posterior_of(net, X, rho=-3.0)
    loss = BBBLoss(prior, complexity=complexity, weighting="blundell", num_batches=4)
    trainer = gluon.Trainer(trainable_params(net, post, loss), optimizer,
                            {"learning_rate": 0.05})
    step = BBBStep(net, post, loss, trainer, estimator=estimator, engine=engine,
                   samples=samples)
    costs = []
    for i in range(steps):
        flats = [np.random.default_rng(10 * i + s).standard_normal(post.num_weights)
                 .astype(np.float32) for s in range(samples)]
        if engine == "reference":
            eps = [[(mx.nd.array(f, ctx=CTX), fixed_extra) for f in flats]]
        else:
            cuts = np.cumsum([int(np.prod(s)) for s in post.shapes])[:-1]
            eps = [[([mx.nd.array(part.reshape(shape), ctx=CTX) for part, shape in
                      zip(np.split(f, cuts), post.shapes, strict=True)], fixed_extra)
                    for f in flats]]
        costs.append(step._step(X, y, i, True, None, eps=eps))
    values = [a.asnumpy().copy() for a in post.mu(CTX) + post.rho(CTX)]
    values += [net[1].gamma.data(CTX).asnumpy().copy()]
    return values, [(n.asscalar(), c.asscalar()) for n, c in costs]


@pytest.mark.usefixtures("fused_kernels")
@pytest.mark.parametrize("estimator", ["local", "flipout"])
@pytest.mark.parametrize(("prior", "complexity", "optimizer", "samples"), [
    (MIXTURE, "mc", "sgd", 1), (GaussianPrior(1.0), "mc", "adam", 1),
    (GaussianPrior(0.5), "kl", "adam", 1), (MIXTURE, "mc", "sgd", 2)])
def test_the_fused_engine_makes_the_reference_engines_updates(estimator, prior, complexity,
                                                              optimizer, samples):
    """Flipout on the convolution, the estimator on the Dense layers, BatchNorm between,
    two steps on the same noise: the fused kernels (gradients and update in one pass, or
    bbb_grad with two samples) move mu, rho and gamma as autograd through BBBLoss does."""
    ref, ref_costs = engine_run("reference", estimator, prior, complexity, optimizer, samples)
    fused, fused_costs = engine_run("fused", estimator, prior, complexity, optimizer, samples)
    # The mixture's narrow component (curvature 1/sigma2^2 = e^12) turns float32 rounding
    # of a weight near its crossing point into a 1e-3 change of its gradient
    # (test_engines.py says more); the Gaussian priors have no such term.
    mixture = isinstance(prior, ScaleMixturePrior)
    for a, b in zip(ref, fused, strict=True):
        np.testing.assert_allclose(b, a, rtol=2e-3 if mixture else 2e-4,
                                   atol=3e-4 if mixture else 2e-5)
    # the costs (with two samples, the nll: the fused engine reports the complexity of
    # the first sample, the reference engine their mean)
    keep = slice(None) if samples == 1 else slice(0, 1)
    np.testing.assert_allclose(np.array(fused_costs)[:, keep], np.array(ref_costs)[:, keep],
                               rtol=1e-4)


def test_the_local_reparameterisation_per_position_only_when_asked_for():
    """On a 1x1 convolution it is the Dense layer's local reparameterisation at every
    pixel (float64 NumPy), and only a dict naming the layer runs it."""
    net, _ = build(nn.Conv2D(3, 1, in_channels=2), nn.Flatten(), nn.Dense(2, in_units=3 * 4 * 4))
    X = mx.nd.array(np.random.default_rng(0).normal(size=(5, 2, 4, 4)), ctx=CTX)
    post = posterior_of(net, X)
    rules = {r.name: r for r in plan(net, post, {"0": "local"})}
    assert rules["0"].rule == "local" and "different model" in rules["0"].why
    assert rules["2"].rule == "reparam"
    assert plan(net, post, "local")[0].rule == "flipout"  # never by the global setting
    noise, got = recorded_noise(5)
    eps = np.random.default_rng(7).standard_normal(post.num_weights).astype(np.float32)
    sample = post.sample(CTX, eps=mx.nd.array(eps, ctx=CTX))
    with perturbed(net, post, plan(net, post, {"0": "local"}), sample, noise):
        hidden = net[0](X).asnumpy()
    x = X.asnumpy().astype(np.float64)
    mu_w, mu_b = as_np(post.mu(CTX))[:2]
    sig_w, sig_b = (np.log1p(np.exp(r)) for r in as_np(post.rho(CTX))[:2])
    mean = np.einsum("bchw,oc->bohw", x, mu_w[:, :, 0, 0]) + mu_b[None, :, None, None]
    var = (np.einsum("bchw,oc->bohw", x ** 2, sig_w[:, :, 0, 0] ** 2)
           + sig_b[None, :, None, None] ** 2)
    np.testing.assert_allclose(hidden, mean + np.sqrt(var + VARIANCE_FLOOR) * got[0],
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"layers without a posterior: \['1'\]"):
        plan(net, post, {"1": "flipout"})
    with pytest.raises(ValueError, match=r"estimator\['0'\] must be one of"):
        plan(net, post, {"0": "lrt"})


def tied(hybridize=True):
    """Dense(5) -> Dense(5) with the first one's parameters (weight tying) -> Dense(3)."""
    first = nn.Dense(5, activation="tanh", in_units=5)
    return build(first, nn.Dense(5, activation="tanh", in_units=5, params=first.params),
                 nn.Dense(3, in_units=5), hybridize=hybridize)[0]


def test_a_shared_weight_is_one_key_and_each_example_sees_one_weight_in_every_use():
    """Weight tying: one posterior key for the shared Parameter; under "local" its layers
    run Flipout (per-use draws would untie it) with the reason, and both draw the same
    signs for an example, so example n sees W_n = mu + Delta o (r_n s_n^T) in both."""
    net = tied()
    X = mx.nd.array(np.random.default_rng(0).normal(size=(6, 5)), ctx=CTX)
    post = posterior_of(net, X)
    assert post.keys == ["0.weight", "0.bias", "2.weight", "2.bias"]
    rules = plan(net, post, "local")
    assert [(r.name, r.rule, r.weight) for r in rules] == [
        ("0", "flipout", 0), ("1", "flipout", 0), ("2", "local", 2)]
    assert "shared with 1" in rules[0].why and "shared with 0" in rules[1].why
    # the package's noise is a function of (step, tag): fixed_extra is one of the tag alone
    eps = np.random.default_rng(7).standard_normal(post.num_weights).astype(np.float32)
    sample = post.sample(CTX, eps=mx.nd.array(eps, ctx=CTX))
    with perturbed(net, post, plan(net, post, "flipout"), sample, fixed_extra):
        out = net(X).asnumpy()
    mu = [m.asnumpy() for m in sample.mus]
    delta = [(s * e).asnumpy() for s, e in zip(sample.sigmas, sample.eps, strict=True)]
    # keys 0 and 2: input signs tag 4k + 1, output signs 4k + 2
    s0, r0 = (fixed_extra(t, sh, True).asnumpy() for t, sh in ((1, (6, 5)), (2, (6, 5))))
    s2, r2 = (fixed_extra(t, sh, True).asnumpy() for t, sh in ((9, (6, 5)), (10, (6, 3))))
    for n in range(6):
        w0 = mu[0] + delta[0] * np.outer(r0[n], s0[n])
        w2 = mu[2] + delta[2] * np.outer(r2[n], s2[n])
        h = np.tanh(X[n].asnumpy() @ w0.T + mu[1] + delta[1] * r0[n])
        h = np.tanh(h @ w0.T + mu[1] + delta[1] * r0[n])  # the same W_n, second use
        np.testing.assert_allclose(out[n], h @ w2.T + mu[3] + delta[3] * r2[n],
                                   rtol=1e-5, atol=1e-5)


def assert_engines_agree(make_net, inputs, classes, estimator, seed):
    """Two steps of ``make_net()`` on 8 random examples move mu and rho on the fused engine
    as on the reference one."""
    rng = np.random.default_rng(seed)
    X = mx.nd.array(rng.normal(size=(8, inputs)), ctx=CTX)
    y = mx.nd.array(rng.integers(0, classes, size=8), ctx=CTX)
    reference, fused = two_steps_on_each_engine(make_net, X, y, estimator)
    for a, b in zip(reference, fused, strict=True):
        np.testing.assert_allclose(b, a, rtol=2e-4, atol=2e-5)


def two_steps_on_each_engine(make_net, X, y, estimator, steps=None):
    """mu and rho after two Adam steps on the same noise, on the reference engine and on
    the fused one (the step objects appended to ``steps``)."""
    results = []
    for engine in ("reference", "fused"):
        net = make_net()
        rng = np.random.default_rng(0)
        post = posterior_of(net, X, rho=-3.0)
        loss = BBBLoss(GaussianPrior(1.0), num_batches=4)
        trainer = gluon.Trainer(trainable_params(net, post, loss), "adam",
                                {"learning_rate": 0.05})
        step = BBBStep(net, post, loss, trainer, estimator=estimator, engine=engine)
        for i in range(2):
            flat = rng.standard_normal(post.num_weights).astype(np.float32)
            if engine == "reference":
                eps = [[(mx.nd.array(flat, ctx=CTX), fixed_extra)]]
            else:
                cuts = np.cumsum([int(np.prod(s)) for s in post.shapes])[:-1]
                eps = [[([mx.nd.array(p.reshape(s), ctx=CTX) for p, s in
                          zip(np.split(flat, cuts), post.shapes, strict=True)], fixed_extra)]]
            step._step(X, y, i, True, None, eps=eps)
        if steps is not None:
            steps.append(step)
        results.append([a.asnumpy() for a in post.mu(CTX) + post.rho(CTX)])
    return results


@pytest.mark.usefixtures("fused_kernels")
@pytest.mark.parametrize("estimator", ["reparam", "local", "flipout"])
def test_a_tied_network_trains_on_both_engines_alike(estimator):
    """The gradient of a shared weight gathers both uses on the fused engine as under
    autograd: two steps on the same noise move mu and rho alike."""
    assert_engines_agree(tied, 5, 3, estimator, seed=0)


def test_flipouts_compact_signs_cover_leading_axes_only():
    """Where the fused engine may hand Flipout's signs to its operators as drawn: the
    signs' shape without trailing 1s must be the full shape's leading axes."""
    assert _leading((8, 16), (8, 16))  # Dense
    assert _leading((8, 3, 1, 1), (8, 3, 5, 5))  # NCHW
    assert _leading((1, 1, 1, 1), (1, 1, 5, 5))  # batch 1, one channel
    assert not _leading((8, 1, 1, 3), (8, 5, 5, 3))  # NHWC: a sign every 3 elements
    assert not _leading((8, 1, 16), (8, 7, 16))  # Dense(flatten=False) at 7 positions
    assert _leading((8, 1, 16), (8, 1, 16))


@pytest.mark.usefixtures("fused_kernels")
def test_the_fused_engine_runs_flipouts_passes_where_the_layout_allows():
    """A convolution (NCHW), a Dense layer at 4 positions (flatten=False: the signs do
    not cover leading axes, so MXNet's broadcast operators run) and a Dense layer: the
    fused engine's traced graph runs its two operators on the first and last only, and
    makes the reference engine's updates."""
    def make_net():
        return build(nn.Conv2D(4, 1, in_channels=2, activation="relu"),  # (5, 4, 4, 4)
                     nn.Dense(6, flatten=False, activation="relu", in_units=4),
                     nn.Flatten(), nn.Dense(3, in_units=4 * 4 * 6))[0]
    rng = np.random.default_rng(1)
    X = mx.nd.array(rng.normal(size=(5, 2, 4, 4)), ctx=CTX)
    y = mx.nd.array(rng.integers(0, 3, size=5), ctx=CTX)
    steps = []
    reference, fused = two_steps_on_each_engine(make_net, X, y, "flipout", steps)
    for a, b in zip(reference, fused, strict=True):
        np.testing.assert_allclose(b, a, rtol=2e-4, atol=2e-5)
    # fused: the convolution's input signs (key 0: tag 1) and the last layer's (key 4:
    # tag 17) go to bbb_flip as drawn, the Dense layer's at every position (tags 9, 10)
    # are broadcast; the reference engine broadcasts every sign not already full-sized
    expected = [([], ["bbb_noise1", "bbb_noise10", "bbb_noise2", "bbb_noise9"]),
                (["bbb_noise1", "bbb_noise17"], ["bbb_noise10", "bbb_noise9"])]
    for step, (flipped, spread) in zip(steps, expected, strict=True):
        assert step.forward.traced
        graph = json.loads(step.forward.symbol_for(X.shape[1:]).tojson())
        names = [n["name"] for n in graph["nodes"]]
        ops = {op: sorted(names[i] for n in graph["nodes"] if n["op"] == op
                          for i, _, _ in n["inputs"] if names[i].startswith("bbb_noise"))
               for op in ("bbb_flip", "broadcast_to")}
        assert (ops["bbb_flip"], ops["broadcast_to"]) == (flipped, spread)


def test_layers_sharing_a_weight_run_one_estimator_or_are_refused():
    """An Embedding tied to the output layer (a language model's tying) cannot run Flipout,
    so under "flipout" both keep the shared sample, with the reason; a dict that gives
    tied layers different estimators, or "local" to a shared weight, is refused."""
    emb = nn.Embedding(10, 5)
    net = nn.HybridSequential()
    net.add(emb, nn.Dense(10, in_units=5, flatten=False, params=emb.params))
    net.initialize(mx.init.Xavier(), ctx=CTX)
    post = posterior_of(net, mx.nd.array([[1, 2, 3]], ctx=CTX))
    for estimator in ("flipout", "local"):
        rules = plan(net, post, estimator)
        assert [(r.name, r.rule) for r in rules] == [("0", "reparam"), ("1", "reparam")]
        assert "shares a parameter with 1" in rules[0].why
        assert key_modes(rules, len(post.keys)) == [0] * len(post.keys)
    dense_net = tied()
    X = mx.nd.array(np.random.default_rng(0).normal(size=(6, 5)), ctx=CTX)
    post = posterior_of(dense_net, X)
    for asked in ({"1": "flipout"}, {"0": "flipout", "1": "reparam"}):
        with pytest.raises(ValueError, match="share a parameter"):
            plan(dense_net, post, asked)
    with pytest.raises(ValueError, match="'local' cannot run on layer '0'.*'flipout'"):
        plan(dense_net, post, {"0": "local", "1": "local"})
    rules = plan(dense_net, post, {"0": "flipout", "1": "flipout"})
    assert [r.rule for r in rules] == ["flipout", "flipout", "reparam"]


def graph_and_swap(net, post, X, estimator, noise):
    """The output and the means' gradients from the step's traced graph and from the
    imperative swap (``perturbed``), on the same sample and noise."""
    rules = plan(net, post, estimator)
    eps = mx.nd.array(np.random.default_rng(5).standard_normal(post.num_weights)
                      .astype(np.float32), ctx=CTX)
    results, forward = [], EstimatorForward(net, post, rules, fused=False)
    for traced in (True, False):
        mus = post.mu(CTX)
        for m in mus:
            m.attach_grad()
        with autograd.record():
            sample = post.sample(CTX, eps=eps)
            if traced:
                out = forward.with_sample(sample, X, noise)
            else:
                with perturbed(net, post, rules, sample, noise):
                    out = net(X)
            (out * out).sum().backward()
        results.append([out.asnumpy()] + [m.grad.asnumpy() for m in mus])
    return forward, results


@pytest.mark.parametrize("estimator", ["local", "flipout"])
def test_the_traced_graph_computes_what_the_swapped_layers_compute(estimator):
    """A convolution, BatchNorm, a tied pair and Dense layers: the step's graph gives the
    imperative swap's output and gradients to the bit (the same operators)."""
    first = nn.Dense(5, activation="tanh", in_units=5)
    net, _ = build(nn.Conv2D(3, 3, in_channels=1, activation="relu"), nn.BatchNorm(),
                   nn.MaxPool2D(2), nn.Flatten(), nn.Dense(5, activation="relu"), first,
                   nn.Dense(5, activation="tanh", in_units=5, params=first.params),
                   nn.Dense(3, in_units=5))
    X = mx.nd.array(np.random.default_rng(0).normal(size=(6, 1, 8, 8)), ctx=CTX)
    post = posterior_of(net, X)
    forward, (graph, swap) = graph_and_swap(net, post, X, estimator, fixed_extra)
    assert forward.traced and forward.symbol_for(X.shape[1:]) is not None
    for a, b in zip(graph, swap, strict=True):
        np.testing.assert_array_equal(a, b)


def test_after_a_local_layer_with_relu_the_next_takes_its_inputs_square_from_it():
    """Under the local reparameterisation a layer's variances' product takes its input's
    square. After a local layer whose relu the fused step runs, that square comes from the
    layer's own pass (bbb_lrt_combine's second output): the step's graph squares the
    examples only, and its updates are the reference engine's (tested there)."""
    net, _ = build(nn.Dense(6, in_units=4, activation="relu"),
                   nn.Dense(5, in_units=6, activation="relu"), nn.Dense(3, in_units=5))
    X = mx.nd.array(np.random.default_rng(0).normal(size=(7, 4)), ctx=CTX)
    y = mx.nd.array([0, 1, 2, 0, 1, 2, 0], ctx=CTX)
    post = posterior_of(net, X)
    loss = BBBLoss(MIXTURE, num_batches=1)
    trainer = gluon.Trainer(trainable_params(net, post, loss), "sgd", {"learning_rate": 0.1})
    step = BBBStep(net, post, loss, trainer, estimator="local")
    step(X, y)
    nodes = json.loads(step.forward.symbol_for((4,)).tojson())["nodes"]
    ops = [n["op"] for n in nodes]
    assert ops.count("bbb_lrt_combine") == 3 and ops.count("square") == 1
    squares = [n for n in nodes if n["op"] == "bbb_lrt_combine"
               and n.get("attrs", {}).get("square") == "1"]
    assert len(squares) == 2  # the two hidden layers'; the last has no relu


@pytest.mark.parametrize("between, estimator, flips, combined", [
    (None, "flipout", 1, 2),  # the examples' only: the hidden layers' come from the combine
    (nn.Dropout(0.5), "flipout", 2, 1),  # the dropout's output goes into the next layer
    (None, {"0": "flipout", "1": "local", "2": "flipout"}, 2, 0)])  # by position
def test_after_a_flipout_layer_with_relu_the_next_takes_its_flipped_input_from_it(
        between, estimator, flips, combined):
    """Under Flipout a layer's perturbation takes its input times its signs. Where a
    Flipout layer's relu'd output goes straight into another Flipout layer, the fused
    step's bbb_flipout_combine makes that product in its own pass (flip=1): the graph
    flips the examples only. Anything between, or another estimator next, keeps bbb_flip."""
    layers = [nn.Dense(6, in_units=4, activation="relu"),
              nn.Dense(5, in_units=6, activation="relu"), nn.Dense(3, in_units=5)]
    net, _ = build(*layers[:1], *([between] if between is not None else []), *layers[1:])
    X = mx.nd.array(np.random.default_rng(0).normal(size=(7, 4)), ctx=CTX)
    y = mx.nd.array([0, 1, 2, 0, 1, 2, 0], ctx=CTX)
    post = posterior_of(net, X)
    loss = BBBLoss(MIXTURE, num_batches=1)
    trainer = gluon.Trainer(trainable_params(net, post, loss), "sgd", {"learning_rate": 0.1})
    step = BBBStep(net, post, loss, trainer, estimator=estimator)
    step(X, y)
    nodes = json.loads(step.forward.symbol_for((4,)).tojson())["nodes"]
    assert [n["op"] for n in nodes].count("bbb_flip") == flips
    fused = [n for n in nodes if n["op"] == "bbb_flipout_combine"
             and n.get("attrs", {}).get("flip") == "1"]
    assert len(fused) == combined


@pytest.mark.parametrize("estimator", ["local", "flipout"])
def test_an_output_taken_by_two_layers_under_the_estimator_trains_as_the_reference(estimator):
    """A layer's relu'd output goes into two layers (HybridConcurrent): each takes its own
    signs (Flipout: neither gets the other's x * s) or the same square (local), and the
    fused engine's updates are the reference engine's."""
    def make_net():
        both = HybridConcurrent(axis=1)
        both.add(nn.Dense(3, in_units=6), nn.Dense(3, in_units=6))
        return build(nn.Dense(6, in_units=4, activation="relu"), both)[0]
    assert_engines_agree(make_net, 4, 6, estimator, seed=1)


class Branching(nn.Block):
    """A network whose forward reads its input's shape: it cannot be traced."""

    def __init__(self):
        super().__init__()
        with self.name_scope():
            self.hidden = nn.Dense(4, activation="relu", in_units=3)
            self.out = nn.Dense(2, in_units=4)

    def forward(self, x):
        h = self.hidden(x)
        return self.out(h if x.shape[0] > 1 else h * 2)


@pytest.mark.parametrize("estimator", ["local", "flipout"])
def test_a_network_that_cannot_be_traced_runs_its_layers_swapped(estimator):
    net = Branching()
    net.initialize(mx.init.Xavier(), ctx=CTX)
    X = mx.nd.array(np.random.default_rng(0).normal(size=(6, 3)), ctx=CTX)
    post = posterior_of(net, X)
    forward, (imperative, swap) = graph_and_swap(net, post, X, estimator, fixed_extra)
    assert not forward.traced and forward.symbol_for(X.shape[1:]) is None
    for a, b in zip(imperative, swap, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_network_that_cannot_be_traced_says_so_once_in_the_log(caplog):
    net = Branching()
    net.initialize(mx.init.Xavier(), ctx=CTX)
    post = posterior_of(net, mx.nd.ones((6, 3), ctx=CTX))
    forward = EstimatorForward(net, post, plan(net, post, "local"), fused=False)
    with caplog.at_level(logging.INFO, logger="bbb_gluon.core.estimator_forward"):
        for n in (6, 5, 6):  # two shapes of examples, each traced (and failing) once
            forward.with_sample(post.sample(CTX), mx.nd.ones((n, 3), ctx=CTX), fixed_extra)
    said = [r.getMessage() for r in caplog.records if "runs imperatively" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("Branching runs imperatively") \
        and "cannot be traced" in said[0]


@pytest.mark.usefixtures("fused_kernels")
@pytest.mark.parametrize("engine", ["reference", "fused"])
@pytest.mark.parametrize("estimator", ["local", "flipout"])
def test_the_step_sets_up_its_estimator_once_and_runs_one_graph(estimator, engine,
                                                                  monkeypatch):
    """After the first call no layer is patched, no hybridization switched off and no
    parameter tree walked: every call (another batch size too) runs the traced graph."""
    net, _ = build(nn.Conv2D(3, 3, in_channels=1, activation="relu"), nn.Flatten(),
                   nn.Dense(4, in_units=3 * 4 * 4))
    rng = np.random.default_rng(0)
    X = mx.nd.array(rng.normal(size=(5, 1, 6, 6)), ctx=CTX)
    y = mx.nd.array(rng.integers(0, 4, size=5), ctx=CTX)
    post = posterior_of(net, X)
    loss = BBBLoss(MIXTURE, num_batches=3)
    trainer = gluon.Trainer(trainable_params(net, post, loss), "adam", {"learning_rate": 0.01})
    step = BBBStep(net, post, loss, trainer, estimator=estimator, engine=engine)
    step(X, y, 0)
    seen = []
    monkeypatch.setattr(estimator_forward, "_forward_of", lambda *a: seen.append("patch"))
    monkeypatch.setattr(private, "set_hybridized", lambda *a: seen.append("switch"))
    for cls in (nn.Block, nn.HybridBlock):
        monkeypatch.setattr(cls, "collect_params", lambda *a, **k: seen.append("walk"))
        monkeypatch.setattr(cls, "apply", lambda *a, **k: seen.append("walk"))
    for i in range(3):
        costs = step(X, y, i)
    step(X[:3], y[:3], 1)
    assert seen == [] and step.forward.traced
    assert np.isfinite(costs.cost.asscalar())
