"""Tests for bbb_gluon.core.ivon against a float64 NumPy implementation of IVON's
equations (Shen et al. 2024, Algorithm 1).

Tolerance: the means, Hessian estimates and momenta after several steps within 1e-4
relative (1e-6 absolute) of the float64 reference run on the same noise.
"""

import math

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

from bbb_gluon import IVONStep, Posterior

RTOL, ATOL = 1e-4, 1e-6


def linear_problem(ctx=None, n=32, d=4, seed=0):
    ctx = ctx or mx.cpu()
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = (X @ rng.normal(size=(d, 1)) + 0.1 * rng.normal(size=(n, 1))).astype(np.float32)
    mx.random.seed(seed)
    net = gluon.nn.Dense(1, in_units=d)
    net.initialize(mx.init.Xavier(), ctx=ctx)
    posterior = Posterior(net, seed=seed)
    return X, y, net, posterior


def reference(W, b, X, y, eps_steps, ess, lr, wd, h0, b1, b2):
    """IVON's update in float64 on the linear model f = X W^T + b under L2Loss,
    l = mean over the batch of (f - y)^2 / 2; eps_steps[t][s] = (eps_W, eps_b)."""
    m = [W.astype(np.float64), b.astype(np.float64)]
    h = [np.full_like(a, h0) for a in m]
    g = [np.zeros_like(a) for a in m]
    X, y = X.astype(np.float64), y.astype(np.float64)
    for t, draws in enumerate(eps_steps, start=1):
        sigma = [1 / np.sqrt(ess * (hk + wd)) for hk in h]
        g_hat = [np.zeros_like(a) for a in m]
        h_hat = [np.zeros_like(a) for a in m]
        for eps in draws:
            theta = [mk + sk * ek for mk, sk, ek in zip(m, sigma, eps, strict=True)]
            r = X @ theta[0].T + theta[1] - y  # (n, 1)
            grads = [r.T @ X / len(X), r.sum(axis=0) / len(X)]
            for k in range(2):
                g_hat[k] += grads[k] / len(draws)
                h_hat[k] += grads[k] * (theta[k] - m[k]) / sigma[k] ** 2 / len(draws)
        for k in range(2):
            g[k] = b1 * g[k] + (1 - b1) * g_hat[k]
            h[k] = b2 * h[k] + (1 - b2) * h_hat[k] + 0.5 * (1 - b2) ** 2 * (h[k] - h_hat[k]) ** 2 \
                / (h[k] + wd)
            m[k] = m[k] - lr * (g[k] / (1 - b1 ** t) + wd * m[k]) / (h[k] + wd)
    return m, h, g


@pytest.mark.parametrize("settings", [
    {"ess": 32.0, "lr": 0.1, "weight_decay": 1e-4, "hess_init": 1.0, "beta1": 0.9,
     "beta2": 0.99999, "samples": 1},
    {"ess": 100.0, "lr": 0.05, "weight_decay": 0.005, "hess_init": 0.5, "beta1": 0.5,
     "beta2": 0.9, "samples": 3},
], ids=["paper-defaults", "fast-betas-3-draws"])
@pytest.mark.parametrize("ctx", [mx.cpu(0), mx.cpu(1)], ids=["cpu0", "cpu1"])
def test_the_update_matches_the_equations_in_float64(settings, ctx):
    X, y, net, posterior = linear_problem(ctx)
    assert posterior.contexts == [ctx]
    W0, b0 = (p.data(ctx).asnumpy() for p in posterior.mu_parameters)
    step = IVONStep(net, posterior, gluon.loss.L2Loss(), **settings)
    rng = np.random.default_rng(3)
    eps_steps = [[[rng.normal(size=W0.shape).astype(np.float32),
                   rng.normal(size=b0.shape).astype(np.float32)]
                  for _ in range(settings["samples"])] for _ in range(6)]
    Xa, ya = mx.nd.array(X, ctx=ctx), mx.nd.array(y, ctx=ctx)
    for eps in eps_steps:
        nll = step(Xa, ya, eps=eps)
        assert nll.shape == (1,) and nll.context == ctx
    m, h, g = reference(W0, b0, X, y, eps_steps, settings["ess"], settings["lr"],
                        settings["weight_decay"], settings["hess_init"], settings["beta1"],
                        settings["beta2"])
    for k in range(2):
        np.testing.assert_allclose(posterior.mu_parameters[k].data(ctx).asnumpy(), m[k],
                                   rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(step.hess[k].asnumpy(), h[k], rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(step.momentum[k].asnumpy(), g[k], rtol=RTOL, atol=ATOL)
    # the posterior reads as IVON's: sigma = softplus(rho) = 1 / sqrt(ess (h + delta))
    for k in range(2):
        want = 1 / np.sqrt(settings["ess"] * (h[k] + settings["weight_decay"]))
        np.testing.assert_allclose(posterior.sigma(ctx)[k].asnumpy(), want, rtol=1e-4)
    assert step.num_updates == 6 and step.skipped == 0


def test_a_resume_continues_as_if_never_stopped():
    X, y, net, posterior = linear_problem()
    Xa, ya = mx.nd.array(X), mx.nd.array(y)
    rng = np.random.default_rng(5)
    eps = [[[rng.normal(size=p.shape).astype(np.float32) for p in posterior.mu_parameters]]
           for _ in range(5)]
    start = [p.data().copy() for p in posterior.mu_parameters]
    whole = IVONStep(net, posterior, gluon.loss.L2Loss(), ess=32.0, beta2=0.99)
    for e in eps:
        whole(Xa, ya, eps=e)
    end = [p.data().asnumpy() for p in posterior.mu_parameters]
    for p, a in zip(posterior.mu_parameters, start, strict=True):
        p.set_data(a)
    first = IVONStep(net, posterior, gluon.loss.L2Loss(), ess=32.0, beta2=0.99)
    for e in eps[:3]:
        first(Xa, ya, eps=e)
    state = first.state_dict()
    means = [p.data().copy() for p in posterior.mu_parameters]
    for p in posterior.mu_parameters:  # a fresh process: the means from the file
        p.set_data(mx.nd.zeros(p.shape))
    second = IVONStep(net, posterior, gluon.loss.L2Loss(), ess=32.0, beta2=0.99)
    for p, a in zip(posterior.mu_parameters, means, strict=True):
        p.set_data(a)
    second.load_state_dict(state)
    for e in eps[3:]:
        second(Xa, ya, eps=e)
    for a, b in zip(end, posterior.mu_parameters, strict=True):
        np.testing.assert_array_equal(a, b.data().asnumpy())
    assert second.num_updates == 5


@pytest.mark.parametrize("bad, match", [
    ({"ess": 0.0}, "ess must be a number in \\(0, inf\\)"),
    ({"ess": -5}, "ess"), ({"hess_init": 0.0}, "hess_init"),
    ({"beta1": 1.0}, "beta1 must be a number in \\[0, 1\\)"), ({"beta2": -0.1}, "beta2"),
    ({"weight_decay": -1e-4}, "weight_decay"), ({"lr": math.nan}, "lr"),
    ({"samples": 0}, "samples"), ({"ess": True}, "ess"),
])
def test_bad_settings_are_refused_in_one_line(bad, match):
    _, _, net, posterior = linear_problem()
    settings = {"ess": 32.0, **bad}
    with pytest.raises(ValueError, match=match) as info:
        IVONStep(net, posterior, gluon.loss.L2Loss(), **settings)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("engine", ["reference", "fused"])
def test_a_batch_that_is_not_finite_changes_nothing(engine):
    X, y, net, posterior = linear_problem()
    step = IVONStep(net, posterior, gluon.loss.L2Loss(), ess=32.0, engine=engine)
    step(mx.nd.array(X), mx.nd.array(y))
    before = [p.data().asnumpy() for p in posterior.mu_parameters]
    hess = [h.asnumpy() for h in step.hess]
    X[3, 1] = np.nan
    step(mx.nd.array(X), mx.nd.array(y))
    assert step.skipped == 1 and step.num_updates == 1
    for a, p in zip(before, posterior.mu_parameters, strict=True):
        np.testing.assert_array_equal(a, p.data().asnumpy())
    for a, h in zip(hess, step.hess, strict=True):
        np.testing.assert_array_equal(a, h.asnumpy())


def test_it_learns_a_classifier_and_trains_the_layers_outside_the_posterior():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(512, 10)).astype(np.float32)
    labels = (X[:, :3].sum(axis=1) > 0).astype(np.float32) + (X[:, 3] > 1)
    mx.random.seed(0)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(32, in_units=10), gluon.nn.BatchNorm(in_channels=32),
            gluon.nn.Activation("relu"), gluon.nn.Dense(3, in_units=32))
    net.initialize(mx.init.Xavier())
    posterior = Posterior(net, seed=0)
    others = gluon.Trainer(posterior.deterministic_params(net), "adam",
                           {"learning_rate": 1e-2})
    with pytest.raises(ValueError, match="trainer holds the posterior's own"):
        IVONStep(net, posterior, gluon.loss.SoftmaxCrossEntropyLoss(), ess=512,
                 trainer=gluon.Trainer(posterior.mu_parameters, "sgd"))
    step = IVONStep(net, posterior, gluon.loss.SoftmaxCrossEntropyLoss(), ess=512.0,
                    lr=0.2, hess_init=0.5, beta2=0.999, trainer=others)
    gamma = net[1].gamma.data().asnumpy().copy()
    first = last = None
    for _ in range(30):
        for i in range(0, 512, 64):
            nll = float(step(mx.nd.array(X[i:i + 64]), mx.nd.array(labels[i:i + 64]))
                        .asscalar()) / 64
            first = nll if first is None else first
            last = nll
    assert last < 0.5 * first
    assert not np.allclose(gamma, net[1].gamma.data().asnumpy())  # BatchNorm trained
    from bbb_gluon import predict_proba

    probs = predict_proba(net, posterior, X, samples=0)
    assert (probs.argmax(axis=1) == labels).mean() > 0.9
    sigma = np.concatenate([s.asnumpy().ravel() for s in posterior.sigma()])
    assert np.all(sigma > 0) and np.all(np.isfinite(sigma))


def test_the_fused_update_matches_the_equations_in_float64():
    """The fused engine draws its own noise (the posterior's counter-based stream, in the
    kernel): the reference runs on the noise each step drew."""
    X, y, net, posterior = linear_problem()
    W0, b0 = (p.data().asnumpy() for p in posterior.mu_parameters)
    settings = {"ess": 50.0, "lr": 0.1, "weight_decay": 1e-3, "hess_init": 0.5,
                "beta1": 0.8, "beta2": 0.95}
    step = IVONStep(net, posterior, gluon.loss.L2Loss(), engine="fused", **settings)
    assert step.engine == "fused"
    eps_steps = []
    for _ in range(6):
        step(mx.nd.array(X), mx.nd.array(y))
        eps_steps.append([[e.asnumpy().copy() for e in step._drawn[:2]]])
    m, h, g = reference(W0, b0, X, y, eps_steps, settings["ess"], settings["lr"],
                        settings["weight_decay"], settings["hess_init"], settings["beta1"],
                        settings["beta2"])
    for k in range(2):
        np.testing.assert_allclose(posterior.mu_parameters[k].data().asnumpy(), m[k],
                                   rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(step.hess[k].asnumpy(), h[k], rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(step.momentum[k].asnumpy(), g[k], rtol=RTOL, atol=ATOL)
        want = 1 / np.sqrt(settings["ess"] * (h[k] + settings["weight_decay"]))
        np.testing.assert_allclose(posterior.sigma()[k].asnumpy(), want, rtol=1e-4)
    assert step.num_updates == 6 and step.skipped == 0
    # the noise is the posterior's stream: six blocks taken
    assert posterior.noise.state_dict()["counters"] == {"0": 6}


@pytest.mark.parametrize("engine", ["reference", "fused"])
def test_a_resume_from_the_state_continues_exactly(engine):
    X, y, net, posterior = linear_problem()
    Xa, ya = mx.nd.array(X), mx.nd.array(y)
    start = [p.data().copy() for p in posterior.mu_parameters]
    whole = IVONStep(net, posterior, gluon.loss.L2Loss(), ess=32.0, engine=engine)
    for _ in range(5):
        whole(Xa, ya)
    end = [p.data().asnumpy() for p in posterior.mu_parameters]
    posterior.noise.load_state_dict({"seed": posterior.noise.seed, "counters": {}})
    for p, a in zip(posterior.mu_parameters, start, strict=True):
        p.set_data(a)
    first = IVONStep(net, posterior, gluon.loss.L2Loss(), ess=32.0, engine=engine)
    for _ in range(3):
        first(Xa, ya)
    state, means = first.state_dict(), [p.data().copy() for p in posterior.mu_parameters]
    second = IVONStep(net, posterior, gluon.loss.L2Loss(), ess=32.0, engine=engine)
    for p, a in zip(posterior.mu_parameters, means, strict=True):
        p.set_data(a)
    second.load_state_dict(state)
    for _ in range(2):
        second(Xa, ya)
    for a, p in zip(end, posterior.mu_parameters, strict=True):
        np.testing.assert_array_equal(a, p.data().asnumpy())


def test_the_engine_choice():
    _, _, net, posterior = linear_problem()
    assert IVONStep(net, posterior, gluon.loss.L2Loss(), ess=8.0).engine == "fused"
    assert IVONStep(net, posterior, gluon.loss.L2Loss(), ess=8.0, samples=3).engine \
        == "reference"
    with pytest.raises(ValueError, match="engine='fused' cannot run here: .*one draw"):
        IVONStep(net, posterior, gluon.loss.L2Loss(), ess=8.0, samples=3, engine="fused")
    with pytest.raises(ValueError, match="engine must be"):
        IVONStep(net, posterior, gluon.loss.L2Loss(), ess=8.0, engine="gpu")


def test_a_batch_of_mismatched_shapes_is_refused_before_any_work():
    X, y, net, posterior = linear_problem()
    step = IVONStep(net, posterior, gluon.loss.L2Loss(), ess=32.0)
    before = [p.data().asnumpy() for p in posterior.mu_parameters]
    with pytest.raises(ValueError, match="same number of examples"):
        step(mx.nd.array(X), mx.nd.array(y[:-3]))
    with pytest.raises(ValueError, match="no examples"):
        step(mx.nd.array(X[:0]), mx.nd.array(y[:0]))
    assert step.num_updates == 0 and step.skipped == 0
    for a, p in zip(before, posterior.mu_parameters, strict=True):
        np.testing.assert_array_equal(a, p.data().asnumpy())
    step(X, y)  # NumPy arrays are taken as a batch
    assert step.num_updates == 1


def test_it_has_a_trainers_learning_rate_and_state_file(tmp_path):
    """What fit reads of a Trainer: the rate (a schedule sets alpha, the other parameters'
    trainer keeps its own) and a states file holding h, g, the counts, the noise and the
    other parameters' optimiser, which a fresh step continues from exactly."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(64, 6)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.float32)

    def build():
        mx.random.seed(1)
        net = gluon.nn.HybridSequential()
        net.add(gluon.nn.Dense(8, in_units=6), gluon.nn.BatchNorm(in_channels=8),
                gluon.nn.Dense(2, in_units=8))
        net.initialize(mx.init.Xavier())
        posterior = Posterior(net, seed=1)
        others = gluon.Trainer(posterior.deterministic_params(net), "adam",
                               {"learning_rate": 1e-2})
        return net, posterior, IVONStep(net, posterior, gluon.loss.SoftmaxCrossEntropyLoss(),
                                        ess=64.0, trainer=others)

    Xa, ya = mx.nd.array(X), mx.nd.array(y)
    net, posterior, step = build()
    step.set_learning_rate(0.05)
    assert step.learning_rate == 0.05 == step.lr and step.trainer.learning_rate == 1e-2
    with pytest.raises(ValueError, match=r"lr must be a number in \(0, inf\), got -1"):
        step.set_learning_rate(-1)
    for _ in range(3):
        step(Xa, ya)
    step.save_states(str(tmp_path / "states"))
    saved = [p.data().copy() for p in net.collect_params().values()] + \
        [p.data().copy() for p in posterior.mu_parameters]
    for _ in range(2):
        step(Xa, ya)
    whole = [p.data().asnumpy() for p in net.collect_params().values()] + \
        [p.data().asnumpy() for p in posterior.mu_parameters]
    net2, posterior2, step2 = build()
    step2.set_learning_rate(0.05)
    params2 = list(net2.collect_params().values()) + posterior2.mu_parameters
    for p, a in zip(params2, saved, strict=True):
        p.set_data(a)
    step2.load_states(str(tmp_path / "states"))
    assert step2.num_updates == 3 and not list(tmp_path.glob("*.trainer"))
    for _ in range(2):
        step2(Xa, ya)
    again = [p.data().asnumpy() for p in net2.collect_params().values()] + \
        [p.data().asnumpy() for p in posterior2.mu_parameters]
    names = list(net2.collect_params().keys()) + ["mu"] * 4
    for n, a, b in zip(names, whole, again, strict=True):
        np.testing.assert_array_equal(a, b, err_msg=n)


def test_a_state_file_without_the_others_trainer_changes_nothing(tmp_path):
    X, y, net, posterior = linear_problem()
    plain = IVONStep(net, posterior, gluon.loss.L2Loss(), ess=32.0)
    plain(mx.nd.array(X), mx.nd.array(y))
    plain.save_states(str(tmp_path / "states"))
    extra = gluon.nn.Dense(1, in_units=1)  # a parameter outside the posterior
    extra.initialize()
    other = gluon.Trainer(extra.collect_params(), "sgd")
    with_trainer = IVONStep(net, posterior, gluon.loss.L2Loss(), ess=32.0, trainer=other)
    hess = [h.asnumpy().copy() for h in with_trainer.hess]
    with pytest.raises(ValueError, match="trainer does not fit this step's"):
        with_trainer.load_states(str(tmp_path / "states"))
    for a, h in zip(hess, with_trainer.hess, strict=True):
        np.testing.assert_array_equal(a, h.asnumpy())
    assert with_trainer.num_updates == 0
