"""Tests for bbb_gluon.core.posterior: layout, initialisation, sampling, densities, persistence.

float64 NumPy references; tolerances: anything through ``ops.softplus`` 1e-4 relative
(its float32 accuracy), log q 1e-5 relative, exact equality where the package copies or
computes ``mu + sigma * eps`` with the same float32 kernels.
"""

import math

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon
from mxnet.gluon import nn

from bbb_gluon import Posterior, PosteriorMismatchError, WeightSample, bayesian_parameters
from bbb_gluon.core import ops

CPU0 = mx.cpu(0)
CONTEXTS = [CPU0, mx.cpu(1)]
CTX_IDS = ["cpu0", "cpu1"]
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def make_net(units=(2, 3, 2), ctx=CPU0, block=nn.HybridSequential, activation="tanh"):
    net = block()
    with net.name_scope():
        for i, (n_in, n_out) in enumerate(zip(units[:-1], units[1:], strict=True)):
            last = i == len(units) - 2
            net.add(nn.Dense(n_out, in_units=n_in, activation=None if last else activation))
    net.initialize(mx.init.Normal(0.5), ctx=ctx)
    return net


def softplus64(x):
    return np.logaddexp(0.0, np.asarray(x, dtype=np.float64))


def np_list(arrays):
    return [a.asnumpy().astype(np.float64) for a in arrays]


# --------------------------------------------------------------------------- layout


def test_mnist_sized_layout():
    net = make_net((784, 400, 400, 10), activation="relu")
    post = Posterior(net, seed=0)
    assert post.num_weights == 478_410
    assert post.num_params == 2 * 478_410
    assert len(list(post.params.values())) == 12
    assert all(isinstance(p, gluon.Parameter) for p in post.params.values())
    named = bayesian_parameters(net)
    assert post.keys == list(named) == ["0.weight", "0.bias", "1.weight", "1.bias",
                                        "2.weight", "2.bias"]
    assert post.shapes == [tuple(p.shape) for p in named.values()]
    for key, param in named.items():
        assert post.params[post.params.prefix + key + "_mu"].shape == param.shape
        assert post.params[post.params.prefix + key + "_rho"].shape == param.shape
    assert sum(int(np.prod(p.shape)) for p in post.params.values()) == post.num_params
    assert "478,410" in repr(post)


def test_a_parameter_layers_share_is_one_entry_under_its_first_name():
    """Weight tying: one weight, one posterior (two would each pay the complexity cost and
    fight over the one Parameter the layers read)."""
    first = nn.Dense(3, in_units=3)
    net = nn.HybridSequential()
    net.add(first, nn.Dense(3, in_units=3, params=first.params), nn.Dense(2, in_units=3))
    net.initialize(ctx=mx.cpu(1))
    assert list(bayesian_parameters(net)) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert list(bayesian_parameters(net, select=r"^1\.")) == ["1.weight", "1.bias"]
    post = Posterior(net)
    assert post.num_weights == 3 * 3 + 3 + 3 * 2 + 2
    assert list(post.deterministic_params(net).keys()) == []  # the tied layer is covered


def test_bayesian_parameters_is_the_same_for_two_instances():
    a, b = make_net(), make_net()
    assert list(bayesian_parameters(a)) == list(bayesian_parameters(b))


@pytest.mark.parametrize("ctx", CONTEXTS, ids=CTX_IDS)
def test_posterior_lives_on_the_net_context(ctx):
    net = make_net(ctx=ctx)
    post = Posterior(net, seed=0)
    assert post.contexts == [ctx]
    for p in post.params.values():
        assert p.list_ctx() == [ctx]
    assert all(a.context == ctx for a in post.mu() + post.rho() + post.sigma())
    other = mx.cpu(1) if ctx == mx.cpu(0) else mx.cpu(0)
    with pytest.raises(ValueError, match="lives on"):
        post.mu(other)


# --------------------------------------------------------------------------- initialisation


@pytest.mark.parametrize("ctx", CONTEXTS, ids=CTX_IDS)
def test_mu_init_copy(ctx):
    net = make_net(ctx=ctx)
    post = Posterior(net, mu_init="copy", seed=3)
    for param, mu in zip(bayesian_parameters(net).values(), post.mu(), strict=True):
        np.testing.assert_array_equal(mu.asnumpy(), param.data(ctx).asnumpy())
    # a copy, not an alias: changing mu leaves the net alone
    before = bayesian_parameters(net)["0.weight"].data(ctx).asnumpy().copy()
    post.mu()[0][:] = 123.0
    np.testing.assert_array_equal(bayesian_parameters(net)["0.weight"].data(ctx).asnumpy(), before)


def test_mu_init_normal_has_mu_scale_std():
    net = make_net((784, 400, 10), activation="relu")
    for scale in (0.1, 0.5):
        post = Posterior(net, mu_init="normal", mu_scale=scale, seed=1)
        mu = np.concatenate([m.asnumpy().ravel() for m in post.mu()]).astype(np.float64)
        n = mu.size
        assert abs(mu.mean()) < 5 * scale / math.sqrt(n)
        # std of a sample std is about std / sqrt(2n)
        assert abs(mu.std() - scale) < 5 * scale / math.sqrt(2 * n)


def test_mu_init_seeded():
    net = make_net()
    a, b, c = Posterior(net, seed=5), Posterior(net, seed=5), Posterior(net, seed=6)
    for x, y in zip(a.mu(), b.mu(), strict=True):
        np.testing.assert_array_equal(x.asnumpy(), y.asnumpy())
    assert not np.array_equal(a.mu()[0].asnumpy(), c.mu()[0].asnumpy())


@pytest.mark.parametrize("rho", [-6.0, -3.0, 0.0, 2.5])
def test_rho_init_constant(rho):
    post = Posterior(make_net(), rho_init=rho, seed=0)
    assert post.rho_init == rho
    for r, s in zip(post.rho(), post.sigma(), strict=True):
        np.testing.assert_array_equal(r.asnumpy(), np.full(r.shape, rho, np.float32))
        mx.test_utils.assert_almost_equal(s.asnumpy(), np.full(r.shape, softplus64(rho)),
                                          rtol=1e-4, atol=0)


@pytest.mark.parametrize("sigma_init", [1e-6, 1e-3, 0.05, 1.0, 30.0])
def test_sigma_init_sets_rho(sigma_init):
    post = Posterior(make_net(), sigma_init=sigma_init, rho_init=99.0, seed=0)
    assert post.rho_init == pytest.approx(ops.inverse_softplus(sigma_init), rel=1e-12)
    for s in post.sigma():
        mx.test_utils.assert_almost_equal(s.asnumpy(), np.full(s.shape, sigma_init),
                                          rtol=1e-4, atol=0)


@pytest.mark.parametrize("ctx", CONTEXTS, ids=CTX_IDS)
def test_sigma_finite_positive_over_rho_range(ctx):
    post = Posterior(make_net((6, 50, 20), ctx=ctx), seed=0)
    rhos = []
    for r in post.rho():
        values = np.random.uniform(-30, 30, size=r.shape).astype(np.float32)
        values.ravel()[:2] = [-30.0, 30.0]
        r[:] = values
        rhos.append(values.astype(np.float64))
    for s, r in zip(post.sigma(ctx), rhos, strict=True):
        got = s.asnumpy()
        assert s.context == ctx
        assert np.all(np.isfinite(got)) and np.all(got > 0)
        mx.test_utils.assert_almost_equal(got, softplus64(r), rtol=1e-4, atol=0)


def test_signal_to_noise():
    post = Posterior(make_net(), mu_scale=1.0, rho_init=-2.0, seed=0)
    for r in post.rho():
        r[:] = np.random.uniform(-8, 3, size=r.shape)
    snr = post.signal_to_noise()
    assert list(snr) == post.keys
    for key, mu, rho in zip(post.keys, np_list(post.mu()), np_list(post.rho()), strict=True):
        mx.test_utils.assert_almost_equal(snr[key].asnumpy(), np.abs(mu) / softplus64(rho),
                                          rtol=1e-4, atol=0)


# --------------------------------------------------------------------------- sampling


@pytest.mark.parametrize("ctx", CONTEXTS, ids=CTX_IDS)
@pytest.mark.parametrize("eps_kind", ["ndarray", "numpy64", "ndarray_cpu0"])
def test_sample_with_given_eps(ctx, eps_kind):
    post = Posterior(make_net(ctx=ctx), rho_init=-1.5, seed=0)
    eps = np.random.randn(post.num_weights).astype(np.float32)
    if eps_kind == "ndarray":
        given = mx.nd.array(eps, ctx=ctx)
    elif eps_kind == "numpy64":
        given = eps.astype(np.float64)
    else:
        given = mx.nd.array(eps, ctx=mx.cpu(0))
    sample = post.sample(eps=given)
    assert isinstance(sample, WeightSample)
    assert sample.ctx == ctx
    assert sample.eps_sq.shape == (1,) and sample.eps_sq.context == ctx
    assert all(a.context == ctx for a in sample.mus + sample.sigmas)
    start = 0
    for w, mu, sigma, shape in zip(sample.weights, post.mu(), post.sigma(), post.shapes,
                                   strict=True):
        size = int(np.prod(shape))
        e = mx.nd.array(eps[start:start + size].reshape(shape), ctx=ctx)
        start += size
        assert w.shape == shape and w.context == ctx
        # exactly the float32 w = mu + softplus(rho) * eps
        np.testing.assert_array_equal(w.asnumpy(), (mu + sigma * e).asnumpy())
        ref = mu.asnumpy().astype(np.float64) + sigma.asnumpy().astype(np.float64) * e.asnumpy()
        mx.test_utils.assert_almost_equal(w.asnumpy(), ref, rtol=1e-6, atol=1e-7)
    assert sample.eps_sq.asscalar() == pytest.approx(float(np.sum(eps.astype(np.float64) ** 2)),
                                                      rel=1e-5)


def test_sample_rejects_wrong_eps_shape():
    post = Posterior(make_net(), seed=0)
    with pytest.raises(ValueError, match="eps"):
        post.sample(eps=np.zeros(post.num_weights + 1))
    with pytest.raises(ValueError, match="eps"):
        post.sample(eps=mx.nd.zeros((1, post.num_weights)))


@pytest.mark.parametrize("ctx", CONTEXTS, ids=CTX_IDS)
def test_samples_differ_between_calls_and_are_reproducible(ctx):
    a = Posterior(make_net(ctx=ctx), seed=11)
    s1, s2 = a.sample(), a.sample()
    assert s1.weights[0].context == ctx
    assert not np.array_equal(s1.weights[0].asnumpy(), s2.weights[0].asnumpy())
    b = Posterior(make_net(ctx=ctx), seed=11)
    b.sample()
    # same seed, same state of the noise: same draw (mu are equal too: same seed)
    np.testing.assert_array_equal(b.sample().weights[2].asnumpy(), s2.weights[2].asnumpy())


def test_sample_statistics():
    """Over many draws, w has mean mu and standard deviation softplus(rho)."""
    post = Posterior(make_net((3, 4, 2)), mu_scale=1.0, seed=0)
    for r in post.rho():
        r[:] = np.random.uniform(-3, 0, size=r.shape)
    n = 1000
    draws = np.stack([np.concatenate([w.asnumpy().ravel() for w in post.sample().weights])
                      for _ in range(n)]).astype(np.float64)
    mu = np.concatenate([m.ravel() for m in np_list(post.mu())])
    sigma = softplus64(np.concatenate([r.ravel() for r in np_list(post.rho())]))
    z = (draws.mean(0) - mu) / (sigma / math.sqrt(n))
    assert np.abs(z).max() < 4.5
    assert np.abs(draws.std(0) / sigma - 1).max() < 5 / math.sqrt(2 * n)


@pytest.mark.parametrize("ctx", CONTEXTS, ids=CTX_IDS)
def test_log_q_is_the_gaussian_density_of_the_sample(ctx):
    post = Posterior(make_net((4, 5, 3), ctx=ctx), mu_scale=0.5, seed=0)
    for r in post.rho():
        r[:] = np.random.uniform(-4, 0.5, size=r.shape)
    sample = post.sample()
    log_q = post.log_q(sample)
    assert log_q.shape == (1,) and log_q.context == ctx
    ref = 0.0
    for w, mu, rho in zip(np_list(sample.weights), np_list(post.mu()), np_list(post.rho()),
                          strict=True):
        sigma = softplus64(rho)
        ref += np.sum(-HALF_LOG_2PI - np.log(sigma) - (w - mu) ** 2 / (2 * sigma**2))
    assert log_q.asscalar() == pytest.approx(ref, rel=1e-5)


def test_log_q_gradient_reaches_rho_only():
    """log q = -sum log sigma - eps^2/2 - const: d/dmu = 0, d/drho = -sigmoid(rho)/sigma."""
    post = Posterior(make_net(), seed=0)
    for r in post.rho():
        r[:] = np.random.uniform(-4, 1, size=r.shape)
    with autograd.record():
        sample = post.sample()
        log_q = post.log_q(sample)
    log_q.backward()
    mus = [post.params[f"{post.params.prefix}{key}_mu"] for key in post.keys]
    rhos = [post.params[f"{post.params.prefix}{key}_rho"] for key in post.keys]
    for mu_p, rho_p in zip(mus, rhos, strict=True):
        rho = rho_p.data().asnumpy().astype(np.float64)
        ref = -1.0 / (1.0 + np.exp(-rho)) / softplus64(rho)
        np.testing.assert_array_equal(mu_p.grad().asnumpy(), 0)
        mx.test_utils.assert_almost_equal(rho_p.grad().asnumpy(), ref, rtol=1e-4, atol=1e-6)


# --------------------------------------------------------------------------- persistence


@pytest.mark.parametrize("src_ctx, dst_ctx", [(mx.cpu(0), mx.cpu(0)), (mx.cpu(0), mx.cpu(1)),
                                              (mx.cpu(1), mx.cpu(0))],
                         ids=["cpu0-cpu0", "cpu0-cpu1", "cpu1-cpu0"])
def test_save_load_round_trip(tmp_path, src_ctx, dst_ctx):
    a = Posterior(make_net(ctx=src_ctx), seed=1)
    for r in a.rho():
        r[:] = np.random.uniform(-5, 1, size=r.shape)
    path = tmp_path / "post.params"
    a.save_parameters(path)
    b = Posterior(make_net(ctx=dst_ctx), seed=2)
    assert not np.array_equal(a.mu()[0].asnumpy(), b.mu()[0].asnumpy())
    b.load_parameters(str(path))
    for x, y in zip(a.mu() + a.rho(), b.mu() + b.rho(), strict=True):
        assert y.context == dst_ctx
        np.testing.assert_array_equal(x.asnumpy(), y.asnumpy())
    assert [p.name for p in tmp_path.iterdir()] == ["post.params"]  # no temporary left


def test_save_overwrites_atomically(tmp_path):
    a = Posterior(make_net(), seed=1)
    path = tmp_path / "post.params"
    a.save_parameters(path)
    a.mu()[0][:] = 7.0
    a.save_parameters(path)
    b = Posterior(make_net(), seed=2)
    b.load_parameters(path)
    np.testing.assert_array_equal(b.mu()[0].asnumpy(), 7.0)


@pytest.mark.parametrize("other_units, fragments", [
    ((2, 4, 2), ["0.weight", "(4, 2)", "(3, 2)"]),
    ((2, 3, 3, 2), ["only in", "2.weight"]),
])
def test_load_other_architecture(tmp_path, other_units, fragments):
    path = tmp_path / "post.params"
    Posterior(make_net((2, 3, 2)), seed=1).save_parameters(path)
    other = Posterior(make_net(other_units), seed=1)
    before = np_list(other.mu())
    with pytest.raises(PosteriorMismatchError) as info:
        other.load_parameters(path)
    for fragment in fragments:
        assert fragment in str(info.value)
    assert str(path) in str(info.value)
    for x, y in zip(before, np_list(other.mu()), strict=True):
        np.testing.assert_array_equal(x, y)


def test_load_corrupt_file(tmp_path):
    path = tmp_path / "corrupt.params"
    path.write_bytes(np.random.RandomState(0).bytes(4096))
    post = Posterior(make_net(), seed=0)
    with pytest.raises(ValueError, match="corrupt") as info:
        post.load_parameters(path)
    assert str(path) in str(info.value)


def test_load_file_that_is_not_a_posterior(tmp_path):
    path = tmp_path / "net.params"
    net = make_net()
    net.save_parameters(str(path))
    with pytest.raises(PosteriorMismatchError, match="not a bbb_gluon posterior"):
        Posterior(net, seed=0).load_parameters(path)


def test_load_missing_file(tmp_path):
    path = tmp_path / "nope.params"
    with pytest.raises(FileNotFoundError, match="nope.params"):
        Posterior(make_net(), seed=0).load_parameters(path)


# --------------------------------------------------------------------------- bad networks


def test_uninitialised_net_without_in_units():
    net = nn.HybridSequential()
    net.add(nn.Dense(3), nn.Dense(2))
    with pytest.raises(ValueError, match="initialis"):
        Posterior(net)
    net.initialize()  # deferred: shapes still unknown
    with pytest.raises(ValueError, match="initialis"):
        Posterior(net)
    net(mx.nd.ones((1, 5)))
    assert Posterior(net, seed=0).shapes == [(3, 5), (3,), (2, 3), (2,)]


def test_uninitialised_net_with_in_units():
    net = nn.HybridSequential()
    net.add(nn.Dense(3, in_units=2))
    with pytest.raises(ValueError, match="initialis"):
        Posterior(net)


@pytest.mark.parametrize("extra", [
    lambda: nn.BatchNorm(in_channels=3),
    lambda: nn.LayerNorm(in_channels=3),
    lambda: nn.Embedding(3, 3),
])
def test_other_layers_stay_deterministic(extra):
    net = nn.HybridSequential()
    net.add(nn.Dense(3, in_units=2), extra())
    net.initialize()
    post = Posterior(net, seed=0)
    assert post.keys == ["0.weight", "0.bias"]
    others = post.deterministic_params(net)
    own = net[1].collect_params()
    assert sorted(others.keys()) == sorted(k for k, p in own.items() if p.grad_req != "null")
    assert len(list(others.keys())) >= 1


def test_net_with_parameterless_layers_is_fine():
    net = nn.HybridSequential()
    net.add(nn.Dense(3, in_units=2), nn.Activation("relu"), nn.Dropout(0.5),
            nn.Dense(2, in_units=3))
    net.initialize()
    assert Posterior(net, seed=0).keys == ["0.weight", "0.bias", "3.weight", "3.bias"]


def test_net_without_parameters():
    net = nn.HybridSequential()
    net.add(nn.Activation("relu"))
    with pytest.raises(ValueError, match="no parameters of the network were selected"):
        Posterior(net)


def test_not_a_block():
    with pytest.raises(TypeError):
        Posterior("not a net")


@pytest.mark.parametrize("kwargs, name", [
    ({"mu_scale": 0}, "mu_scale"),
    ({"mu_scale": -0.1}, "mu_scale"),
    ({"mu_scale": float("nan")}, "mu_scale"),
    ({"mu_scale": float("inf")}, "mu_scale"),
    ({"mu_scale": "0.1"}, "mu_scale"),
    ({"rho_init": float("nan")}, "rho_init"),
    ({"rho_init": float("-inf")}, "rho_init"),
    ({"rho_init": None}, "rho_init"),
    ({"mu_init": "laplace"}, "mu_init"),
    ({"mu_init": None}, "mu_init"),
    ({"sigma_init": 0.0}, "sigma"),
    ({"sigma_init": -1.0}, "sigma"),
    ({"sigma_init": float("nan")}, "sigma"),
])
def test_bad_hyperparameters(kwargs, name):
    with pytest.raises(ValueError, match=name):
        Posterior(make_net(), **kwargs)


def test_uniform_mu_and_rho_ranges():
    net = make_net((50, 40, 30))
    post = Posterior(net, mu_init="uniform", mu_scale=0.03, rho_init=(-3.5, -3.0), seed=4)
    mu = np.concatenate([m.asnumpy().ravel() for m in post.mu()])
    rho = np.concatenate([r.asnumpy().ravel() for r in post.rho()])
    assert np.abs(mu).max() <= 0.03 and np.std(mu) == pytest.approx(0.03 / np.sqrt(3),
                                                                      rel=0.1)
    assert rho.min() >= -3.5 and rho.max() <= -3.0
    assert np.std(rho) == pytest.approx(0.5 / np.sqrt(12), rel=0.1)
    assert post.rho_init == (-3.5, -3.0)


def test_a_constant_rho_leaves_the_mu_draws_as_they_were():
    net = make_net((50, 40, 30))
    a = Posterior(net, rho_init=-3.0, seed=4)
    b = Posterior(net, rho_init=(-4.0, -2.0), seed=4)
    for x, y in zip(a.mu(), b.mu(), strict=True):
        np.testing.assert_array_equal(x.asnumpy(), y.asnumpy())
    assert all((r.asnumpy() == -3.0).all() for r in a.rho())


# --------------------------------------------------------------------------- any network


def conv_net(ctx=CPU0):
    net = nn.HybridSequential()
    net.add(nn.Conv2D(4, 3, in_channels=1, activation="relu"), nn.BatchNorm(in_channels=4),
            nn.MaxPool2D(), nn.Conv2DTranspose(2, 2, in_channels=4), nn.Flatten(),
            nn.Dense(5, in_units=2 * 4 * 4))
    net.initialize(mx.init.Xavier(), ctx=ctx)
    return net


def test_default_selection_covers_dense_and_convolutions():
    net = conv_net()
    post = Posterior(net, seed=0)
    assert post.keys == ["0.weight", "0.bias", "3.weight", "3.bias", "5.weight", "5.bias"]
    assert post.shapes[0] == (4, 1, 3, 3) and post.shapes[2] == (4, 2, 2, 2)
    # BatchNorm's gamma and beta are trained by an ordinary Trainer; its running
    # statistics are not trained at all.
    assert sorted(p.rsplit("_", 1)[-1] for p in post.deterministic_params(net).keys()) == \
        ["beta", "gamma"]


@pytest.mark.parametrize("select, keys", [
    (lambda net: [net[-1]], ["5.weight", "5.bias"]),
    (lambda net: r"^5\.", ["5.weight", "5.bias"]),
    (lambda net: r"weight$", ["0.weight", "3.weight", "5.weight"]),
    (lambda net: (lambda name, p: name.startswith("0.")), ["0.weight", "0.bias"]),
    (lambda net: [net[1]], ["1.gamma", "1.beta"]),
])
def test_selectors(select, keys):
    net = conv_net()
    post = Posterior(net, seed=0, select=select(net))
    assert post.keys == keys
    others = post.deterministic_params(net)
    covered = {id(p) for p in post.check_net(net).values()}
    trainable = [p for p in net.collect_params().values() if p.grad_req != "null"]
    assert len(list(others.keys())) + len(keys) == len(trainable)
    assert not covered & {id(p) for p in others.values()}


@pytest.mark.parametrize("select", ["nothing-matches", [], lambda name, p: False])
def test_a_selector_that_chooses_nothing(select):
    with pytest.raises(ValueError, match="no parameters"):
        Posterior(conv_net(), select=select)


def test_a_selector_of_an_unknown_kind():
    with pytest.raises(ValueError, match="select must be"):
        Posterior(conv_net(), select=3)


def test_deferred_conv_shapes_need_a_batch_first():
    net = nn.HybridSequential()
    net.add(nn.Conv2D(4, 3), nn.Flatten(), nn.Dense(2))
    net.initialize()
    with pytest.raises(ValueError, match="run one batch"):
        Posterior(net)
    net(mx.nd.ones((1, 1, 6, 6)))
    assert Posterior(net, seed=0).shapes == [(4, 1, 3, 3), (4,), (2, 64), (2,)]


def test_save_and_load_parameters_like_gluon(tmp_path):
    net = conv_net()
    a = Posterior(net, seed=1, select=[net[-1]])
    path = tmp_path / "post.params"
    a.save_parameters(path)
    saved = mx.nd.load(str(path))
    assert sorted(saved) == ["5.bias_mu", "5.bias_rho", "5.weight_mu", "5.weight_rho"]
    b = Posterior(net, seed=2, select=[net[-1]])
    b.load_parameters(path)
    for x, y in zip(a.mu() + a.rho(), b.mu() + b.rho(), strict=True):
        np.testing.assert_array_equal(x.asnumpy(), y.asnumpy())
    c = Posterior(net, seed=2)  # covers more arrays than the file holds
    with pytest.raises(PosteriorMismatchError, match="only in the posterior"):
        c.load_parameters(path)


def test_reset_ctx_moves_the_posterior_and_its_samples():
    net = conv_net(CPU0)
    post = Posterior(net, seed=0)
    mu = [m.asnumpy() for m in post.mu()]
    post.reset_ctx(mx.cpu(1))
    net.collect_params().reset_ctx(mx.cpu(1))
    assert post.contexts == [mx.cpu(1)]
    assert all(m.context == mx.cpu(1) for m in post.mu())
    for a, b in zip(mu, post.mu(), strict=True):
        np.testing.assert_array_equal(a, b.asnumpy())
    sample = post.sample()
    assert sample.weights[0].context == mx.cpu(1)


def test_the_parameters_in_key_order_train_and_move():
    net = make_net()
    post = Posterior(net, seed=0)
    assert [p.name for p in post.mu_parameters] == [f"posterior_{k}_mu" for k in post.keys]
    assert [p.name for p in post.rho_parameters] == [f"posterior_{k}_rho" for k in post.keys]
    assert set(post.params.values()) == set(post.mu_parameters + post.rho_parameters)
    before = [m.copy() for m in post.mu()]
    trainer = gluon.Trainer(post.mu_parameters, "sgd", {"learning_rate": 0.1})
    with mx.autograd.record():
        loss = sum((m * m).sum() for m in [p.data() for p in post.mu_parameters])
    loss.backward()
    trainer.step(1)
    for b, a in zip(before, post.mu(), strict=True):
        np.testing.assert_allclose(a.asnumpy(), 0.8 * b.asnumpy(), rtol=1e-6)
    post.reset_ctx(mx.cpu(1))
    assert post.contexts == [mx.cpu(1)] and post.mu()[0].context == mx.cpu(1)


# --------------------------------------------------------------------------- a Gluon Block


def test_a_posterior_is_a_gluon_block_that_owns_mu_and_rho():
    net = make_net()
    post = Posterior(net, seed=0)
    assert isinstance(post, gluon.Block)
    params = post.collect_params()
    assert list(params.keys()) == list(post.params.keys())
    assert [params[f"posterior_{k}_mu"] for k in post.keys] == post.mu_parameters
    assert [params[f"posterior_{k}_rho"] for k in post.keys] == post.rho_parameters
    # none of the network's own parameters
    assert not {id(p) for p in params.values()} & {id(p) for p in net.collect_params().values()}
    trainer = gluon.Trainer(params, "sgd", {"learning_rate": 0.1})
    assert len(trainer._params) == 2 * len(post.keys)


def test_load_parameters_allow_missing_and_ignore_extra(tmp_path):
    net = conv_net()
    last = Posterior(net, seed=1, select=[net[-1]])
    last.save_parameters(tmp_path / "last.params")
    full = Posterior(net, seed=2)
    full.save_parameters(tmp_path / "full.params")
    before = np_list(full.mu())
    full.load_parameters(tmp_path / "last.params", allow_missing=True)
    after = np_list(full.mu())
    np.testing.assert_array_equal(after[-2], last.mu()[0].asnumpy())
    np.testing.assert_array_equal(after[0], before[0])  # left as it was
    fresh = Posterior(net, seed=3, select=[net[-1]])
    with pytest.raises(PosteriorMismatchError, match="only in the file"):
        fresh.load_parameters(tmp_path / "full.params")
    fresh.load_parameters(tmp_path / "full.params", ignore_extra=True)
    np.testing.assert_array_equal(fresh.mu()[0].asnumpy(), before[-2])


@pytest.mark.parametrize("mu_init", ["normal", "uniform", "copy"])
def test_initialize_draws_again_as_the_constructor_did(mu_init):
    net = make_net()
    post = Posterior(net, seed=5, mu_init=mu_init, rho_init=(-4.0, -3.0))
    first = np_list(post.mu() + post.rho())
    for p in post.mu_parameters + post.rho_parameters:
        p.set_data(p.data() + 1.0)
    with pytest.warns(UserWarning, match="already initialised"):
        post.initialize()
    assert not np.array_equal(np_list(post.mu())[0], first[0])  # left as it was
    post.initialize(force_reinit=True)
    for x, y in zip(first, np_list(post.mu() + post.rho()), strict=True):
        np.testing.assert_array_equal(x, y)
    with pytest.raises(ValueError, match="mu_init and rho_init"):
        post.initialize(mx.init.Normal(0.1), force_reinit=True)


def test_initialize_on_another_context():
    post = Posterior(make_net(), seed=5)
    first = np_list(post.mu())
    post.initialize(ctx=mx.cpu(1), force_reinit=True)
    assert post.contexts == [mx.cpu(1)] and post.mu()[0].context == mx.cpu(1)
    for x, y in zip(first, np_list(post.mu()), strict=True):
        np.testing.assert_array_equal(x, y)
