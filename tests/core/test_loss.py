"""Tests for bbb_gluon.core.loss: complexity weights, complexity cost, BBBLoss, and training.

The central check differentiates the paper's minibatch cost

    f_i(mu, rho) = sum_b -log P(y_b | x_b, w) + pi_i * C(w, mu, rho),
    w = mu + softplus(rho) * eps  (eps fixed),

written independently in float64 NumPy, by central finite differences, and compares it with
MXNet's float32 autograd gradient of ``BBBLoss(...).sum()`` (rtol 1e-3, atol 1e-4).
"""

import math

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon
from mxnet.gluon import nn

from bbb_gluon import (
    BBBLoss,
    GaussianPrior,
    Posterior,
    ScaleMixturePrior,
    complexity_weight,
    use_means,
    use_weights,
)
from bbb_gluon.core.likelihood import GaussianNLLLoss, likelihood_loss
from bbb_gluon.core.loss import blundell_weights, complexity_cost

CPU0 = mx.cpu(0)
CONTEXTS = [CPU0, mx.cpu(1)]
CTX_IDS = ["cpu0", "cpu1"]
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
SIGMA2 = math.exp(-6)


# --------------------------------------------------------------------------- helpers


def make_net(units=(2, 3, 2), ctx=CPU0, activation="tanh", hybridize=False):
    net = nn.HybridSequential()
    with net.name_scope():
        for i, (n_in, n_out) in enumerate(zip(units[:-1], units[1:], strict=True)):
            last = i == len(units) - 2
            net.add(nn.Dense(n_out, in_units=n_in, activation=None if last else activation))
    net.initialize(ctx=ctx)
    if hybridize:
        net.hybridize()
    return net


def param_list(post, kind):
    return [post.params[f"{post.params.prefix}{key}_{kind}"] for key in post.keys]


def flat(arrays):
    return np.concatenate([np.asarray(a, np.float64).ravel() for a in arrays])


def split(vector, shapes):
    out, start = [], 0
    for shape in shapes:
        size = int(np.prod(shape))
        out.append(vector[start:start + size].reshape(shape))
        start += size
    return out


def softplus64(x):
    return np.logaddexp(0.0, x)


def log_softmax64(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def forward64(x, weights, activation=np.tanh):
    h = np.asarray(x, np.float64)
    layers = [(weights[i], weights[i + 1]) for i in range(0, len(weights), 2)]
    for j, (w, b) in enumerate(layers):
        h = h @ w.T + b
        if j < len(layers) - 1:
            h = activation(h)
    return h


def nll64(out, label, likelihood, noise_sigma=1.0):
    """Per-example -log P(y | x, w)."""
    if likelihood == "softmax":
        logp = log_softmax64(out)
        if label.ndim == 2:
            return -(logp * label).sum(-1)
        return -logp[np.arange(len(label)), label.astype(int)]
    if likelihood == "bernoulli":
        z = out.reshape(-1)
        return np.logaddexp(0.0, z) - z * label.reshape(-1)
    d = out.shape[-1]
    return (((out - label) ** 2).sum(-1) / (2 * noise_sigma**2)
            + d * (math.log(noise_sigma) + HALF_LOG_2PI))


def log_prior64(w, prior):
    if isinstance(prior, GaussianPrior):
        s = prior.sigma
        return np.sum(-HALF_LOG_2PI - math.log(s) - w**2 / (2 * s**2))
    a = math.log(prior.pi) - HALF_LOG_2PI - math.log(prior.sigma1) - w**2 / (2 * prior.sigma1**2)
    b = (math.log1p(-prior.pi) - HALF_LOG_2PI - math.log(prior.sigma2)
         - w**2 / (2 * prior.sigma2**2))
    return np.sum(np.logaddexp(a, b))


def complexity64(mus, rhos, eps, prior, kind):
    total = 0.0
    for mu, rho, e in zip(mus, rhos, eps, strict=True):
        sigma = softplus64(rho)
        if kind == "kl":
            sp = prior.sigma
            total += np.sum(np.log(sp / sigma) + (sigma**2 + mu**2) / (2 * sp**2) - 0.5)
        else:
            w = mu + sigma * e
            log_q = np.sum(-HALF_LOG_2PI - np.log(sigma) - (w - mu) ** 2 / (2 * sigma**2))
            total += log_q - log_prior64(w, prior)
    return total


def cost64(theta, shapes, eps, x, label, spec):
    """The minibatch cost f_i in float64 as a function of theta = (mu, rho) flattened."""
    n = theta.size // 2
    mus, rhos = split(theta[:n], shapes), split(theta[n:], shapes)
    weights = [m + softplus64(r) * e for m, r, e in zip(mus, rhos, eps, strict=True)]
    out = forward64(x, weights)
    nll = nll64(out, label, spec["likelihood"], spec.get("noise_sigma", 1.0)).sum()
    return nll + spec["pi"] * complexity64(mus, rhos, eps, spec["prior"], spec["complexity"])


def fd_gradient(f, theta, h=1e-6):
    grad = np.empty_like(theta)
    for j in range(theta.size):
        up, down = theta.copy(), theta.copy()
        up[j] += h
        down[j] -= h
        grad[j] = (f(up) - f(down)) / (2 * h)
    return grad


def mx_cost_and_grad(net, post, loss, x, label, eps, batch_index, ctx):
    for p in post.params.values():
        p.zero_grad()
    X = mx.nd.array(x, ctx=ctx)
    with autograd.record():
        sample = post.sample(eps=eps)
        with use_weights(net, post, sample.weights):
            out = net(X)
        value = loss(out, label, sample, batch_index)
    value.backward()
    grad = np.concatenate([flat(p.grad(ctx).asnumpy() for p in param_list(post, "mu")),
                           flat(p.grad(ctx).asnumpy() for p in param_list(post, "rho"))])
    return value, grad


def randomise(post, rng, rho_range=(-5.0, -1.0), small_mu=0.25):
    """Spread rho, and put a share of the means into the scale mixture's narrow spike."""
    for mu, rho in zip(param_list(post, "mu"), param_list(post, "rho"), strict=True):
        m = rng.normal(0, 0.5, mu.shape)
        spike = rng.random(mu.shape) < small_mu
        m[spike] = rng.normal(0, 3 * SIGMA2, spike.sum())
        mu.set_data(mx.nd.array(m))
        rho.set_data(mx.nd.array(rng.uniform(*rho_range, rho.shape)))


def make_likelihood(likelihood, noise_sigma=1.0):
    """The Gluon loss for one of LIKELIHOODS below (one-hot labels need sparse_label=False)."""
    if likelihood == "softmax_onehot":
        return gluon.loss.SoftmaxCrossEntropyLoss(sparse_label=False)
    return likelihood_loss(likelihood, noise_sigma)


def make_labels(likelihood, rng, batch, classes):
    if likelihood == "softmax":
        y = rng.integers(0, classes, batch).astype(np.float32)
        return y, y
    if likelihood == "softmax_onehot":
        y = rng.integers(0, classes, batch)
        onehot = np.eye(classes, dtype=np.float32)[y]
        return onehot, onehot
    if likelihood == "bernoulli":
        y = rng.integers(0, 2, batch).astype(np.float32)
        return y, y
    y = rng.normal(0, 1, (batch, classes)).astype(np.float32)
    return y, y


# --------------------------------------------------------------------------- complexity weights


@pytest.mark.parametrize("num_batches", [1, 2, 3, 60, 391, 469, 5000])
def test_blundell_weights(num_batches):
    w = blundell_weights(num_batches)
    assert len(w) == num_batches
    assert all(math.isfinite(v) and v >= 0 for v in w)
    assert abs(math.fsum(w) - 1.0) < 1e-12
    assert abs(sum(w) - 1.0) < 1e-12
    positive = [v for v in w if v > 0]
    assert positive[0] > 0
    assert all(a > b for a, b in zip(positive, positive[1:], strict=False))
    # zeros (float64 underflow for M > ~1074) only at the end
    assert w[:len(positive)] == positive
    # the paper's formula 2^(M-i) / (2^M - 1) in float64 (2^M overflows from M = 1024 on;
    # there the weights are 2^-i to double precision)
    for i in range(min(num_batches, 40)):
        ref = 2.0 ** (num_batches - i - 1) / (2.0**num_batches - 1) if num_batches < 1000 \
            else 2.0 ** -(i + 1)
        assert w[i] == pytest.approx(ref, rel=1e-14)


def test_blundell_weights_small_exact():
    assert blundell_weights(1) == [1.0]
    assert blundell_weights(3) == pytest.approx([4 / 7, 2 / 7, 1 / 7], rel=1e-15)
    assert complexity_weight("blundell", 1, 3) == pytest.approx(2 / 7, rel=1e-15)


@pytest.mark.parametrize("num_batches", [1, 391, 469, 5000])
def test_uniform_weights(num_batches):
    w = [complexity_weight("uniform", i, num_batches) for i in range(num_batches)]
    assert all(v == 1.0 / num_batches for v in w)
    assert abs(math.fsum(w) - 1.0) < 1e-12


@pytest.mark.parametrize("value", [0, 0.0, 1e-3, 0.5, 2.0, np.float64(0.25)])
def test_constant_weight(value):
    for i, m in [(0, 1), (7, 10), (0, None)]:
        assert complexity_weight(value, i, m) == float(value)


@pytest.mark.parametrize("args", [
    ("uniform", 0, 0),
    ("uniform", 0, -3),
    ("uniform", 0, 2.0),
    ("uniform", 0, None),
    ("blundell", 5, 5),
    ("blundell", -1, 5),
    ("blundell", 1.0, 5),
    ("blundell", 0, None),
    ("geometric", 0, 5),
    (None, 0, 5),
    (True, 0, 5),
    (-0.1, 0, 5),
    (float("nan"), 0, 5),
    (float("inf"), 0, 5),
])
def test_complexity_weight_bad_arguments(args):
    with pytest.raises(ValueError):
        complexity_weight(*args)


@pytest.mark.parametrize("num_batches", [0, -1])
def test_blundell_weights_bad_num_batches(num_batches):
    with pytest.raises(ValueError, match="num_batches"):
        blundell_weights(num_batches)


def test_complexity_weight_accepts_numpy_integers():
    assert complexity_weight("uniform", np.int64(2), 10) == 0.1
    assert complexity_weight("blundell", 0, np.int64(1)) == 1.0


# --------------------------------------------------------------------------- complexity cost


@pytest.mark.slow
def test_mc_complexity_averages_to_closed_form_kl():
    """E_eps[log q(w) - log P(w)] = KL(q || P) for a Gaussian prior.

    Tolerance: 4 standard errors of the Monte-Carlo mean (sample std / sqrt(n)).
    """
    net = make_net((3, 4, 2))
    post = Posterior(net, mu_scale=0.8, seed=0)
    rng = np.random.default_rng(1)
    for rho in param_list(post, "rho"):
        rho.set_data(mx.nd.array(rng.uniform(-2.0, 0.5, rho.shape)))
    prior = GaussianPrior(0.6)
    n = 1000
    values = np.empty(n)
    kl = None
    for i in range(n):
        sample = post.sample()
        values[i] = complexity_cost(sample, prior, "mc").asscalar()
        if kl is None:
            kl = complexity_cost(sample, prior, "kl").asscalar()
    se = values.std(ddof=1) / math.sqrt(n)
    assert abs(values.mean() - kl) < 4 * se, (values.mean(), kl, se)
    # the closed form itself against float64
    mus = [m.asnumpy().astype(np.float64) for m in post.mu()]
    rhos = [r.asnumpy().astype(np.float64) for r in post.rho()]
    assert kl == pytest.approx(complexity64(mus, rhos, [None] * len(mus), prior, "kl"),
                               rel=1e-5)
    # and the test can tell a wrong prior scale: KL for sigma_p = 0.5 is many SEs away
    other = complexity64(mus, rhos, [None] * len(mus), GaussianPrior(0.5), "kl")
    assert abs(values.mean() - other) > 10 * se


@pytest.mark.parametrize("ctx", CONTEXTS, ids=CTX_IDS)
@pytest.mark.parametrize("prior, kind", [
    (ScaleMixturePrior(0.5, 1.0, SIGMA2), "mc"),
    (GaussianPrior(0.8), "mc"),
    (GaussianPrior(0.8), "kl"),
])
def test_complexity_cost_value(ctx, prior, kind):
    post = Posterior(make_net(ctx=ctx), seed=0)
    randomise(post, np.random.default_rng(2))
    eps = np.random.randn(post.num_weights).astype(np.float32)
    cost = complexity_cost(post.sample(eps=eps), prior, kind)
    assert cost.shape == (1,) and cost.context == ctx
    mus = [m.asnumpy().astype(np.float64) for m in post.mu(ctx)]
    rhos = [r.asnumpy().astype(np.float64) for r in post.rho(ctx)]
    ref = complexity64(mus, rhos, split(eps.astype(np.float64), post.shapes), prior, kind)
    assert cost.asscalar() == pytest.approx(ref, rel=1e-4)


def test_complexity_cost_unknown_kind():
    post = Posterior(make_net(), seed=0)
    with pytest.raises(ValueError, match="complexity"):
        complexity_cost(post.sample(), GaussianPrior(), "exact")


# --------------------------------------------------------------------------- gradient vs FD


LIKELIHOODS = ["softmax", "softmax_onehot", "bernoulli", "gaussian"]


@pytest.mark.parametrize("likelihood", LIKELIHOODS)
@pytest.mark.parametrize("prior, complexity, weighting, batch_index", [
    (ScaleMixturePrior(0.5, 1.0, SIGMA2), "mc", "blundell", 1),
    (GaussianPrior(0.8), "kl", "uniform", 2),
], ids=["mc-mixture-blundell", "kl-gaussian-uniform"])
@pytest.mark.parametrize("hybridize", [False, True], ids=["imperative", "hybrid"])
@pytest.mark.parametrize("ctx", CONTEXTS, ids=CTX_IDS)
def test_minibatch_cost_gradient_matches_finite_differences(
        likelihood, prior, complexity, weighting, batch_index, hybridize, ctx):
    rng = np.random.default_rng(7)
    batch, num_batches = 5, 4
    outputs = 1 if likelihood == "bernoulli" else 2
    net = make_net((2, 3, outputs), ctx=ctx, hybridize=hybridize)
    post = Posterior(net, seed=0)
    randomise(post, rng)
    noise_sigma = 0.7
    loss = BBBLoss(prior, make_likelihood(likelihood, noise_sigma), complexity=complexity,
                   weighting=weighting, num_batches=num_batches)
    x = rng.normal(0, 1, (batch, 2)).astype(np.float32)
    label_np, label_ref = make_labels(likelihood, rng, batch, outputs)
    label = mx.nd.array(label_np, ctx=ctx)
    eps = rng.normal(0, 1, post.num_weights).astype(np.float32)

    value, grad = mx_cost_and_grad(net, post, loss, x, label, eps, batch_index, ctx)
    assert value.shape == (batch,) and value.context == ctx

    pi = complexity_weight(weighting, batch_index, num_batches)
    spec = {"likelihood": likelihood.split("_")[0], "prior": prior, "complexity": complexity,
            "pi": pi, "noise_sigma": noise_sigma}
    theta = np.concatenate([flat(m.asnumpy() for m in post.mu(ctx)),
                            flat(r.asnumpy() for r in post.rho(ctx))])
    eps_list = split(eps.astype(np.float64), post.shapes)

    def f(t):
        return cost64(t, post.shapes, eps_list, x.astype(np.float64), label_ref, spec)

    assert value.asnumpy().sum() == pytest.approx(f(theta), rel=1e-4)
    ref = fd_gradient(f, theta)
    assert np.abs(ref).max() > 1e-2
    mx.test_utils.assert_almost_equal(grad, ref, rtol=1e-3, atol=1e-4)


# --------------------------------------------------------------------------- BBBLoss values


@pytest.mark.parametrize("likelihood", LIKELIHOODS)
@pytest.mark.parametrize("ctx", CONTEXTS, ids=CTX_IDS)
def test_loss_is_nll_plus_complexity_share(likelihood, ctx):
    rng = np.random.default_rng(3)
    batch, outputs = 6, (1 if likelihood == "bernoulli" else 3)
    net = make_net((2, 4, outputs), ctx=ctx)
    post = Posterior(net, seed=1)
    prior = ScaleMixturePrior(0.25, 1.0, math.exp(-7))
    loss = BBBLoss(prior, make_likelihood(likelihood, 0.5), weighting="blundell",
                   num_batches=10)
    label_np, label_ref = make_labels(likelihood, rng, batch, outputs)
    X = mx.nd.array(rng.normal(0, 1, (batch, 2)), ctx=ctx)
    sample = post.sample()
    with use_weights(net, post, sample.weights):
        out = net(X)
    values = loss(out, mx.nd.array(label_np, ctx=ctx), sample, 2)
    assert values.shape == (batch,) and values.context == ctx
    pi = 0.125 / (1 - 2.0**-10)
    assert loss.weight_of(2) == pytest.approx(pi, rel=1e-15)
    c = complexity_cost(sample, prior, "mc").asscalar()
    assert c == pytest.approx(loss.complexity_cost(sample).asscalar(), rel=1e-6)
    nll = nll64(out.asnumpy().astype(np.float64), label_ref, likelihood.split("_")[0], 0.5)
    mx.test_utils.assert_almost_equal(values.asnumpy(), nll + pi * c / batch, rtol=1e-5,
                                      atol=1e-5)
    assert values.asnumpy().astype(np.float64).sum() == pytest.approx(nll.sum() + pi * c,
                                                                      rel=1e-5)


def test_loss_several_samples_average():
    net = make_net((2, 4, 3))
    post = Posterior(net, seed=1)
    loss = BBBLoss(GaussianPrior(1.0), weighting="uniform", num_batches=7)
    X = mx.nd.array(np.random.randn(5, 2))
    y = mx.nd.array([0, 1, 2, 1, 0])
    samples, outs = [], []
    for _ in range(3):
        s = post.sample()
        with use_weights(net, post, s.weights):
            outs.append(net(X))
        samples.append(s)
    together = loss(outs, y, samples, 3).asnumpy()
    one_by_one = [loss(o, y, s, 3).asnumpy() for o, s in zip(outs, samples, strict=True)]
    assert not np.allclose(one_by_one[0], one_by_one[1])
    mx.test_utils.assert_almost_equal(together, np.mean(one_by_one, axis=0), rtol=1e-6,
                                      atol=1e-6)
    assert isinstance(loss(tuple(outs), y, tuple(samples), 3), mx.nd.NDArray)
    with pytest.raises(ValueError, match="WeightSample"):
        loss(outs, y, samples[0], 3)
    with pytest.raises(ValueError, match="WeightSample"):
        loss(outs, y, samples[:2], 3)


@pytest.mark.parametrize("ctx", CONTEXTS, ids=CTX_IDS)
def test_loss_on_slices_of_a_batch_adds_up(ctx):
    """Data parallelism: slices of one batch, each told the whole batch size, give the
    full batch's per-example values, and their complexity parts add up to pi * C once."""
    rng = np.random.default_rng(4)
    net = make_net((2, 4, 3), ctx=ctx)
    post = Posterior(net, seed=1)
    prior = ScaleMixturePrior(0.5, 1.0, SIGMA2)
    loss = BBBLoss(prior, weighting="blundell", num_batches=5)
    X = mx.nd.array(rng.normal(0, 1, (6, 2)), ctx=ctx)
    y = mx.nd.array(rng.integers(0, 3, 6), ctx=ctx)
    s = post.sample()
    with use_weights(net, post, s.weights):
        out = net(X)
    pi = loss.weight_of(1)
    c = complexity_cost(s, prior, "mc").asscalar()
    full = loss(out, y, s, 1).asnumpy()
    nll, cost = loss.costs(out, y, s, 1)
    assert cost.shape == (1,) and cost.asscalar() == pytest.approx(c, rel=1e-6)
    mx.test_utils.assert_almost_equal(full - nll.asnumpy(), np.full(6, pi * c / 6),
                                      rtol=1e-4, atol=1e-5)
    parts, complexity = [], 0.0
    for lo, hi in [(0, 2), (2, 6)]:
        # positional: gluon's Block.__call__ takes no keyword arguments
        parts.append(loss(out[lo:hi], y[lo:hi], s, 1, 6).asnumpy())
        nll_part, _ = loss.costs(out[lo:hi], y[lo:hi], s, 1)
        complexity += float((parts[-1] - nll_part.asnumpy()).sum())
    mx.test_utils.assert_almost_equal(np.concatenate(parts), full, rtol=1e-6, atol=1e-6)
    assert complexity == pytest.approx(pi * c, rel=1e-4)
    # without batch_size, a slice would carry the whole complexity cost itself
    alone = loss(out[0:2], y[0:2], s, 1).asnumpy()
    mx.test_utils.assert_almost_equal(alone - parts[0], np.full(2, pi * c / 2 - pi * c / 6),
                                      rtol=1e-4, atol=1e-4)


def test_costs_when_skipped_and_averaged(small):
    post, s, out = small
    y = mx.nd.array([0, 1, 2, 1])
    loss = BBBLoss(GaussianPrior(), weighting="blundell", num_batches=100)
    nll, cost = loss.costs(out, y, s, 80)
    assert cost is None
    np.testing.assert_array_equal(loss(out, y, s, 80).asnumpy(), nll.asnumpy())
    s2 = post.sample()
    nll, cost = loss.costs([out, out], y, [s, s2], 0)
    c1 = complexity_cost(s, GaussianPrior(), "mc").asscalar()
    c2 = complexity_cost(s2, GaussianPrior(), "mc").asscalar()
    assert cost.asscalar() == pytest.approx((c1 + c2) / 2, rel=1e-5)
    np.testing.assert_allclose(loss.combine(nll, cost, 0).asnumpy(),
                               loss([out, out], y, [s, s2], 0).asnumpy(), rtol=1e-6)
    np.testing.assert_allclose((loss([out, out], y, [s, s2], 0) - nll).asnumpy(),
                               loss.weight_of(0) * (c1 + c2) / 2 / 4, rtol=1e-4)


def test_the_loss_keeps_nothing_from_a_call(small):
    """A pure loss: the same arguments give the same values whatever was called before,
    and a call leaves no attribute behind."""
    post, s, out = small
    y = mx.nd.array([0, 1, 2, 1])
    loss = BBBLoss(GaussianPrior(), weighting="blundell", num_batches=3)
    before = dict(vars(loss))
    first = loss(out, y, s, 0).asnumpy()
    loss([out, out], y, [s, post.sample()], 2, 8)
    assert dict(vars(loss)).keys() == before.keys()
    np.testing.assert_array_equal(loss(out, y, s, 0).asnumpy(), first)
    assert not any(name.startswith("last_") for name in vars(loss))


def test_global_weight_scales_the_whole_loss():
    net = make_net((2, 4, 3))
    post = Posterior(net, seed=1)
    prior = GaussianPrior(1.0)
    X, y = mx.nd.array(np.random.randn(5, 2)), mx.nd.array([0, 1, 2, 1, 0])
    s = post.sample()
    with use_weights(net, post, s.weights):
        out = net(X)
    plain = BBBLoss(prior, weighting=1.0)(out, y, s).asnumpy()
    doubled = BBBLoss(prior, weighting=1.0, weight=2.0)(out, y, s).asnumpy()
    mx.test_utils.assert_almost_equal(doubled, 2 * plain, rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------- skip_below


def _mnist_like(rng, batch=128):
    x = rng.integers(0, 256, (batch, 784)).astype(np.float32) / 126.0
    x[rng.random(x.shape) < 0.8] = 0.0  # mostly background, like MNIST digits
    y = rng.integers(0, 10, batch).astype(np.float32)
    return x, y


def _normalised_grads(net, post, loss, X, y, eps, batch_index):
    """Gradients as gluon.Trainer applies them: summed over the batch, divided by B."""
    batch = X.shape[0]
    for p in post.params.values():
        p.zero_grad()
    with autograd.record():
        s = post.sample(eps=eps)
        with use_weights(net, post, s.weights):
            out = net(X)
        value = loss(out, y, s, batch_index)
    value.backward()
    mus = [p.grad().asnumpy() / batch for p in param_list(post, "mu")]
    rhos = [p.grad().asnumpy() / batch for p in param_list(post, "rho")]
    return value.asnumpy(), mus + rhos


@pytest.mark.parametrize("batch_index", [59, 100])
def test_skipping_negligible_complexity_leaves_gradients_unchanged(batch_index):
    """Under Blundell's schedule with M = 391, pi_i <= 2^-60 from the 60th minibatch on
    (batch_index 59): skipping the complexity term there changes no float32 gradient.

    Tolerance: rtol 1e-6 (a few float32 ulps), atol 1e-12 (for gradient entries that are
    exactly 0 without the complexity term, e.g. dead ReLU units, and get ~1e-25 with it).
    """
    rng = np.random.default_rng(0)
    net = make_net((784, 50, 10), activation="relu", hybridize=True)
    post = Posterior(net, seed=0)
    prior = ScaleMixturePrior(0.5, 1.0, SIGMA2)
    x, y = _mnist_like(rng)
    X, Y = mx.nd.array(x), mx.nd.array(y)
    eps = rng.normal(0, 1, post.num_weights).astype(np.float32)
    skipping = BBBLoss(prior, weighting="blundell", num_batches=391)
    computing = BBBLoss(prior, weighting="blundell", num_batches=391, skip_below=0)
    assert skipping.weight_of(batch_index) <= skipping.skip_below
    v1, g1 = _normalised_grads(net, post, skipping, X, Y, eps, batch_index)
    v2, g2 = _normalised_grads(net, post, computing, X, Y, eps, batch_index)
    np.testing.assert_array_equal(v1, v2)
    for a, b in zip(g1, g2, strict=True):
        mx.test_utils.assert_almost_equal(a, b, rtol=1e-6, atol=1e-12)

    # the comparison is sensitive: at batch_index 0 (pi = 1/2) dropping the term changes them
    dropping = BBBLoss(prior, weighting="blundell", num_batches=391, skip_below=1.0)
    _, g3 = _normalised_grads(net, post, dropping, X, Y, eps, 0)
    _, g4 = _normalised_grads(net, post, computing, X, Y, eps, 0)
    assert max(np.abs(a - b).max() for a, b in zip(g3, g4, strict=True)) > 1e-3


def test_skip_threshold_boundary(monkeypatch):
    net = make_net()
    post = Posterior(net, seed=0)
    loss = BBBLoss(GaussianPrior(), weighting="blundell", num_batches=391)
    calls = []
    original = loss.complexity_cost

    def counting(sample):
        calls.append(1)
        return original(sample)

    monkeypatch.setattr(loss, "complexity_cost", counting)
    X, y = mx.nd.array(np.random.randn(3, 2)), mx.nd.array([0, 1, 1])
    s = post.sample()
    with use_weights(net, post, s.weights):
        out = net(X)
    for batch_index, computed in [(0, True), (58, True), (59, False), (60, False),
                                  (390, False)]:
        calls.clear()
        loss(out, y, s, batch_index)
        assert bool(calls) == computed, batch_index


# --------------------------------------------------------------------------- BBBLoss errors


@pytest.fixture
def small():
    net = make_net((2, 3, 3))
    post = Posterior(net, seed=0)
    X = mx.nd.array(np.random.randn(4, 2))
    s = post.sample()
    with use_weights(net, post, s.weights):
        out = net(X)
    return post, s, out


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("label, match, not_in", [
    ([0, 1, 3, 1], r"lie in 0\.\.2 for 3 classes, got labels from 0 to 3", None),
    ([0, -1, 2, 1], r"lie in 0\.\.2 for 3 classes, got labels from -1 to 2", None),
    # a fraction is refused as such, not as a value out of range
    ([0, 1, 1.5, 1], "whole numbers", "lie in"),
    # NaN is named, not reported as a range "from nan to nan"
    ([0, 1, NAN, 1], "NaN or infinity", "nan"),
    ([0, 1, INF, 1], "NaN or infinity", "lie in"),
    ([[1, 0, 0, 0]] * 4, r"class labels must have shape \(4,\)", None),
    ([[1, 0, 0]] * 4, r"class labels must have shape \(4,\)", None),  # one-hot, sparse loss
    ([0, 1, 2], "pred has 4 examples but label has 3", None),
    ([0, 1, 2, 1, 0], "pred has 4 examples but label has 5", None),
])
def test_softmax_label_errors(small, label, match, not_in):
    post, s, out = small
    loss = BBBLoss(GaussianPrior(), gluon.loss.SoftmaxCrossEntropyLoss(), num_batches=10,
                   validate=True)
    with pytest.raises(ValueError, match=match) as info:
        loss(out, mx.nd.array(label), s)
    if not_in is not None:
        assert not_in not in str(info.value)
    with pytest.raises(ValueError, match=match):  # nll checks them the same way
        loss.nll(out, mx.nd.array(label))


@pytest.mark.parametrize("label", [[[1, 0, 0], [0, NAN, 0], [0, 0, 1], [1, 0, 0]],
                                   [[1, 0, 0], [0, 1, 0], [0, 0, -INF], [1, 0, 0]]])
def test_one_hot_label_errors(small, label):
    post, s, out = small
    loss = BBBLoss(GaussianPrior(), gluon.loss.SoftmaxCrossEntropyLoss(sparse_label=False),
                   num_batches=10, validate=True)
    with pytest.raises(ValueError, match="NaN or infinity"):
        loss(out, mx.nd.array(label), s)
    with pytest.raises(ValueError, match=r"one-hot labels must have pred's shape \(4, 3\)"):
        loss(out, mx.nd.array([0, 1, 2, 1]), s)


def test_valid_labels_pass_validation(small):
    """The checks refuse only what they should: valid labels of every kind go through, and
    give the values of the unvalidated loss."""
    post, s, out = small
    prior = GaussianPrior()
    cases = [
        (gluon.loss.SoftmaxCrossEntropyLoss(), out, [0, 1, 2, 1]),
        (gluon.loss.SoftmaxCrossEntropyLoss(), out, [[0], [2], [2], [0]]),  # (B, 1)
        (gluon.loss.SoftmaxCrossEntropyLoss(sparse_label=False), out,
         [[1, 0, 0], [0, 0.5, 0.5], [0, 0, 1], [1, 0, 0]]),
        (gluon.loss.SigmoidBCELoss(), out[:, 0], [0, 0.25, 1, 0]),  # soft labels allowed
        (GaussianNLLLoss(1.0), out, [[-3, 0.5, 7]] * 4),
    ]
    for likelihood, pred, label in cases:
        label = mx.nd.array(label)
        checked = BBBLoss(prior, likelihood, weighting=0.1, validate=True)
        plain = BBBLoss(prior, likelihood, weighting=0.1)
        np.testing.assert_array_equal(checked(pred, label, s).asnumpy(),
                                      plain(pred, label, s).asnumpy())


def test_sequence_predictions_are_validated_per_class(small):
    """Gluon's softmax loss takes (B, T, C) predictions with (B, T) labels: BBBLoss passes
    them through, one value per example, and validates the labels against C."""
    post, s, _ = small
    pred = mx.nd.array(np.random.randn(4, 2, 3))
    loss = BBBLoss(GaussianPrior(), weighting=0.1, validate=True)
    good = mx.nd.array([[0, 1], [2, 1], [0, 0], [1, 2]])
    expected = -(log_softmax64(pred.asnumpy().astype(np.float64))
                 [np.arange(4)[:, None], np.arange(2), good.asnumpy().astype(int)]).mean(1)
    np.testing.assert_allclose(loss.nll(pred, good).asnumpy(), expected, rtol=1e-5)
    with pytest.raises(ValueError, match=r"0\.\.2 for 3 classes"):
        loss(pred, mx.nd.array([[0, 1], [3, 1], [0, 0], [1, 2]]), s)


def test_bernoulli_and_gaussian_label_errors(small):
    post, s, out = small
    bern = BBBLoss(GaussianPrior(), gluon.loss.SigmoidBCELoss(), num_batches=10,
                   validate=True)
    logits = out[:, 0]
    with pytest.raises(ValueError, match=r"SigmoidBCELoss labels must lie in \[0, 1\], got "
                                         r"labels from 0 to 2"):
        bern(logits, mx.nd.array([0, 1, 2, 0]), s)
    with pytest.raises(ValueError, match=r"from -0\.5 to 1"):
        bern(logits, mx.nd.array([0, 1, -0.5, 0]), s)
    with pytest.raises(ValueError, match="NaN or infinity"):
        bern(logits, mx.nd.array([0, 1, NAN, 0]), s)
    with pytest.raises(ValueError, match="one label per output"):
        bern(out, mx.nd.array([0, 1, 1, 0]), s)
    with pytest.raises(ValueError, match="4 examples"):
        bern(logits, mx.nd.array([0, 1, 1]), s)
    gauss = BBBLoss(GaussianPrior(), GaussianNLLLoss(1.0), num_batches=10, validate=True)
    target = np.zeros((4, 3), np.float32)
    target[1, 2] = np.nan
    with pytest.raises(ValueError, match="NaN or infinity"):
        gauss(out, mx.nd.array(target), s)
    with pytest.raises(ValueError, match="4 examples"):
        gauss(out, mx.nd.zeros((3, 3)), s)
    # any Gluon loss: finite labels
    l2 = BBBLoss(GaussianPrior(), gluon.loss.L2Loss(), num_batches=10, validate=True)
    target[1, 2] = np.inf
    with pytest.raises(ValueError, match="NaN or infinity"):
        l2(out, mx.nd.array(target), s)


def test_gaussian_targets_must_have_preds_shape(small):
    post, s, out = small
    gauss = BBBLoss(GaussianPrior(), GaussianNLLLoss(1.0), num_batches=10)
    with pytest.raises(ValueError, match="shape"):
        gauss(out, mx.nd.zeros((4, 1)), s)


def test_validate_false_skips_value_checks(small):
    post, s, out = small
    loss = BBBLoss(GaussianPrior(), num_batches=10)  # validate=False by default
    loss(out, mx.nd.array([0, 1, 7, 1]), s)  # out of range, not checked
    loss(out, mx.nd.array([0, 1, 1.5, NAN]), s)  # nor fractional or NaN
    with pytest.raises(ValueError, match="4 examples"):  # shapes are still checked
        loss(out, mx.nd.array([0, 1, 1]), s)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"prior": ScaleMixturePrior(), "complexity": "kl", "num_batches": 3}, ValueError,
     "closed-form"),
    ({"weighting": "blundell"}, ValueError, "num_batches"),
    ({"weighting": "uniform"}, ValueError, "num_batches"),
    ({"complexity": "exact", "num_batches": 3}, ValueError, "complexity"),
    ({"weighting": "cosine", "num_batches": 3}, ValueError, "weighting"),
    ({"weighting": -1.0}, ValueError, "weight"),
    ({"weighting": float("nan")}, ValueError, "weight"),
    ({"prior": "gaussian", "num_batches": 3}, TypeError, "Prior"),
    # the likelihood is a Gluon loss object; the names of the old API are refused
    ({"likelihood": "softmax", "num_batches": 3}, TypeError, r"gluon\.loss\.Loss"),
    ({"likelihood": "gaussian", "num_batches": 3}, TypeError, r"gluon\.loss\.Loss"),
    ({"likelihood": gluon.loss.SoftmaxCrossEntropyLoss, "num_batches": 3}, TypeError,
     r"gluon\.loss\.Loss"),  # the class, not an instance
    ({"likelihood": BBBLoss(GaussianPrior(), weighting=1.0), "num_batches": 3}, TypeError,
     r"gluon\.loss\.Loss"),
])
def test_constructor_errors(kwargs, error, match):
    kwargs = {"prior": GaussianPrior(), **kwargs}
    with pytest.raises(error, match=match):
        BBBLoss(**kwargs)


def test_the_old_posterior_argument_is_refused(small):
    """BBBLoss(posterior, prior, ...), the old call, fails loudly: the posterior is no prior."""
    with pytest.raises(TypeError, match="Prior"):
        BBBLoss(small[0], GaussianPrior(), weighting=1.0)


def test_default_likelihood_is_sparse_softmax_cross_entropy(small):
    post, s, out = small
    loss = BBBLoss(GaussianPrior(), weighting=1.0)
    assert type(loss.likelihood) is gluon.loss.SoftmaxCrossEntropyLoss
    y = mx.nd.array([0, 1, 2, 1])
    expected = -log_softmax64(out.asnumpy().astype(np.float64))[np.arange(4), [0, 1, 2, 1]]
    np.testing.assert_allclose(loss.nll(out, y).asnumpy(), expected, rtol=1e-5)
    assert loss.nll(out, y).shape == (4,)


def test_global_weight_and_batch_axis_properties():
    assert BBBLoss(GaussianPrior(), weighting=1.0).global_weight is None
    loss = BBBLoss(GaussianPrior(), weighting=1.0, weight=2.5, batch_axis=0)
    assert loss.global_weight == 2.5 and loss.batch_axis == 0


@pytest.mark.parametrize("weighting", ["uniform", "blundell"])
def test_num_batches_zero_is_rejected(weighting):
    with pytest.raises(ValueError, match="num_batches"):
        BBBLoss(GaussianPrior(), weighting=weighting, num_batches=0)


def test_constant_weighting_needs_no_num_batches():
    loss = BBBLoss(GaussianPrior(), weighting=0.01)
    assert loss.weight_of(12345) == 0.01


@pytest.mark.parametrize("ctx", CONTEXTS, ids=CTX_IDS)
def test_learned_gaussian_noise_gets_a_gradient(ctx):
    net = make_net((2, 3, 2), ctx=ctx)
    post = Posterior(net, seed=0)
    likelihood = GaussianNLLLoss(None)
    loss = BBBLoss(GaussianPrior(), likelihood, num_batches=3)
    # the learned noise scale is a parameter of the likelihood, hence of the BBBLoss
    params = list(loss.collect_params().values())
    assert len(params) == 1
    noise_rho = params[0]
    assert noise_rho is likelihood.noise_rho
    loss.initialize(ctx=ctx)
    assert noise_rho.list_ctx() == [ctx]
    assert noise_rho.data(ctx).asscalar() == pytest.approx(math.log(math.e - 1), rel=1e-6)
    assert likelihood.sigma() == pytest.approx(1.0, rel=1e-6)
    X = mx.nd.array(np.random.randn(4, 2), ctx=ctx)
    target = np.random.randn(4, 2).astype(np.float32)
    with autograd.record():
        s = post.sample(ctx)
        with use_weights(net, post, s.weights, ctx):
            out = net(X)
        value = loss(out, mx.nd.array(target, ctx=ctx), s, 0)
    value.backward()
    assert value.context == ctx
    # d/drho sum_b [sum_d (y - f)^2 / (2 s^2) + D log s], s = softplus(rho) = 1
    resid = ((out.asnumpy() - target) ** 2).sum()
    sig = 1 / (1 + math.exp(-math.log(math.e - 1)))
    expected = (-resid + 4 * 2) * sig
    assert noise_rho.grad(ctx).asscalar() == pytest.approx(expected, rel=1e-4)


HYBRID_LIKELIHOODS = [
    pytest.param("softmax", id="softmax"),
    pytest.param("softmax_onehot", id="softmax_onehot"),
    pytest.param("bernoulli", id="bernoulli"),
    pytest.param("gaussian", id="gaussian"),
    pytest.param("gaussian_learned", id="gaussian_learned"),
]


@pytest.mark.parametrize("likelihood", HYBRID_LIKELIHOODS)
def test_hybridized_loss_gives_the_same_values_and_gradients(likelihood):
    """hybridize() hybridizes the likelihood (it runs as a cached graph) and changes no
    value: neither the loss nor its gradients with respect to pred and the learned noise."""
    rng = np.random.default_rng(5)
    outputs = 1 if likelihood == "bernoulli" else 3
    net = make_net((2, 4, outputs))
    post = Posterior(net, seed=1)
    s = post.sample()
    with use_weights(net, post, s.weights):
        out = net(mx.nd.array(rng.normal(0, 1, (6, 2))))
    label_np, _ = make_labels(likelihood.replace("_learned", ""), rng, 6, outputs)
    label = mx.nd.array(label_np)
    results = []
    for hybrid in (False, True):
        noise = None if likelihood == "gaussian_learned" else 0.5
        lik = make_likelihood(likelihood.replace("_learned", ""), noise)
        loss = BBBLoss(ScaleMixturePrior(0.5, 1.0, SIGMA2), lik, weighting="blundell",
                       num_batches=4)
        loss.initialize()
        loss.hybridize(hybrid)  # GaussianNLLLoss comes hybridized: undone for the reference
        pred = out.copy()
        pred.attach_grad()
        with autograd.record():
            value = loss(pred, label, s, 1)
        value.backward()
        grads = [pred.grad.asnumpy()] + [p.grad().asnumpy()
                                         for p in loss.collect_params().values()]
        results.append((value.asnumpy(), grads))
        if hybrid:
            assert lik._cached_op is not None  # it did run as a graph
        else:
            assert lik._cached_op is None
    (v0, g0), (v1, g1) = results
    np.testing.assert_allclose(v1, v0, rtol=1e-6, atol=1e-6)
    assert len(g0) == len(g1) == (2 if likelihood == "gaussian_learned" else 1)
    for a, b in zip(g0, g1, strict=True):
        assert np.abs(a).max() > 0
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)


# --------------------------------------------------------------------------- training


def _cost(net, post, loss, X, y, eps, batch_index=0):
    with autograd.record():
        s = post.sample(eps=eps)
        with use_weights(net, post, s.weights):
            out = net(X)
        value = loss(out, y, s, batch_index)
    return value


def test_one_adam_step_on_cpu1_lowers_the_cost():
    ctx = mx.cpu(1)
    rng = np.random.default_rng(0)
    net = make_net((4, 8, 3), ctx=ctx, activation="relu", hybridize=True)
    post = Posterior(net, seed=0)
    assert post.contexts == [ctx]
    loss = BBBLoss(ScaleMixturePrior(0.5, 1.0, SIGMA2), weighting="uniform",
                   num_batches=10)
    X = mx.nd.array(rng.normal(0, 1, (16, 4)), ctx=ctx)
    y = mx.nd.array(rng.integers(0, 3, 16), ctx=ctx)
    eps = mx.nd.array(rng.normal(0, 1, post.num_weights), ctx=ctx)
    trainer = gluon.Trainer(post.params, "adam", {"learning_rate": 0.01})
    before_mu = [m.asnumpy() for m in post.mu()]
    value = _cost(net, post, loss, X, y, eps)
    assert value.context == ctx
    value.backward()
    trainer.step(16)
    after = _cost(net, post, loss, X, y, eps).asnumpy().sum()
    assert after < value.asnumpy().sum()
    assert all(m.context == ctx for m in post.mu())
    assert any(not np.array_equal(a, b.asnumpy())
               for a, b in zip(before_mu, post.mu(), strict=True))


def two_moons(n, noise, rng):
    t1, t2 = rng.uniform(0, np.pi, n // 2), rng.uniform(0, np.pi, n - n // 2)
    a = np.c_[np.cos(t1), np.sin(t1)]
    b = np.c_[1 - np.cos(t2), 0.5 - np.sin(t2)]
    x = np.r_[a, b] + rng.normal(0, noise, (n, 2))
    y = np.r_[np.zeros(n // 2), np.ones(n - n // 2)]
    order = rng.permutation(n)
    x = (x - x.mean(0)) / x.std(0)
    return x[order].astype(np.float32), y[order].astype(np.float32)


@pytest.mark.parametrize("prior, complexity", [
    (ScaleMixturePrior(0.5, 1.0, SIGMA2), "mc"),
    (GaussianPrior(1.0), "kl"),
], ids=["mixture-mc", "gaussian-kl"])
def test_two_moons_training_reaches_high_accuracy(prior, complexity):
    ctx = mx.cpu(1)
    rng = np.random.default_rng(0)
    x, y = two_moons(500, 0.1, rng)
    net = make_net((2, 32, 32, 2), ctx=ctx, activation="relu", hybridize=True)
    # rho_init -5.0 sits exactly on ops.softplus's cut between its two branches
    post = Posterior(net, rho_init=-5.0, seed=0)
    batch, num_batches = 100, 5
    loss = BBBLoss(prior, complexity=complexity, weighting="uniform",
                   num_batches=num_batches)
    trainer = gluon.Trainer(post.params, "adam", {"learning_rate": 0.05})
    X, Y = mx.nd.array(x, ctx=ctx), mx.nd.array(y, ctx=ctx)
    with use_means(net, post):
        acc0 = (net(X).argmax(axis=1) == Y).mean().asscalar()
    for step in range(200):
        i = step % num_batches
        xb, yb = X[i * batch:(i + 1) * batch], Y[i * batch:(i + 1) * batch]
        with autograd.record():
            s = post.sample()
            with use_weights(net, post, s.weights):
                out = net(xb)
            value = loss(out, yb, s, i)
        value.backward()
        trainer.step(batch)
    with use_means(net, post):
        acc = (net(X).argmax(axis=1) == Y).mean().asscalar()
    # a linear classifier gets about 0.88 on this data; 8 runs with other seeds got 0.97-1.0
    assert acc >= 0.93, (acc0, acc)


def test_combine_refuses_a_batch_smaller_than_its_slice(small):
    post, s, out = small
    y = mx.nd.array([0, 1, 2, 1])
    loss = BBBLoss(GaussianPrior(), weighting=0.5)
    nll, cost = loss.costs(out, y, s, 0)
    for bad in (3, 0, 2.5, True):
        with pytest.raises(ValueError, match="batch_size must be an integer >= 4"):
            loss.combine(nll, cost, 0, bad)
    np.testing.assert_allclose(loss.combine(nll, cost, 0, 8).asnumpy(),
                               (nll + cost * 0.5 / 8).asnumpy(), rtol=1e-6)
