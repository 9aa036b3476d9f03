"""Tests for bbb_gluon.core.sampling: use_weights / use_means on plain and hybridized networks.

Each check runs for nn.Sequential and nn.HybridSequential, not hybridized, hybridized,
and hybridized with static_alloc/static_shape, on mx.cpu(0) and mx.cpu(1).
References: float64 NumPy forward and backward of the same 2-layer tanh network.
Tolerances: outputs 1e-5 relative + 1e-6 absolute, gradients 1e-4 relative + 1e-6 absolute
(float32 kernels against float64).
"""

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd
from mxnet.gluon import nn

from bbb_gluon import Posterior, PosteriorMismatchError, bayesian_parameters, use_means, use_weights

CPU0 = mx.cpu(0)
CONTEXTS = [CPU0, mx.cpu(1)]
CTX_IDS = ["cpu0", "cpu1"]
BLOCKS = [nn.Sequential, nn.HybridSequential]
HYBRID = [None, "plain", "static"]

pytestmark = pytest.mark.filterwarnings("ignore:All children of this Sequential:UserWarning")


def make_net(units=(3, 4, 2), ctx=CPU0, block=nn.HybridSequential, hybrid=None):
    net = block()
    with net.name_scope():
        net.add(nn.Dense(units[1], in_units=units[0], activation="tanh"))
        net.add(nn.Dense(units[2], in_units=units[1]))
    net.initialize(mx.init.Normal(0.5), ctx=ctx)
    if hybrid == "plain":
        net.hybridize()
    elif hybrid == "static":
        net.hybridize(static_alloc=True, static_shape=True)
    return net


def forward64(x, weights):
    w0, b0, w1, b1 = (np.asarray(w, np.float64) for w in weights)
    h = np.tanh(x @ w0.T + b0)
    return h @ w1.T + b1


def backward64(x, weights, dout):
    """Gradients of sum(out * dout) w.r.t. [W0, b0, W1, b1]."""
    w0, b0, w1, b1 = (np.asarray(w, np.float64) for w in weights)
    h = np.tanh(x @ w0.T + b0)
    dh = dout @ w1 * (1 - h**2)
    return [dh.T @ x, dh.sum(0), dout.T @ h, dout.sum(0)]


def np_list(arrays):
    return [a.asnumpy().astype(np.float64) for a in arrays]


def split(flat, shapes):
    out, start = [], 0
    for shape in shapes:
        size = int(np.prod(shape))
        out.append(flat[start:start + size].reshape(shape))
        start += size
    return out


def zero_grads(post):
    for p in post.params.values():
        p.zero_grad()


def param_list(post, kind):
    """The posterior's mu or rho Parameters in key order, through the public ParameterDict."""
    return [post.params[f"{post.params.prefix}{key}_{kind}"] for key in post.keys]


def grads(post):
    return ([p.grad().asnumpy().astype(np.float64) for p in param_list(post, "mu")],
            [p.grad().asnumpy().astype(np.float64) for p in param_list(post, "rho")])


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


variants = pytest.mark.parametrize("block", BLOCKS, ids=["Sequential", "HybridSequential"])
hybrids = pytest.mark.parametrize("hybrid", HYBRID, ids=["imperative", "hybrid", "static"])
contexts = pytest.mark.parametrize("ctx", CONTEXTS, ids=CTX_IDS)


@variants
@hybrids
@contexts
def test_use_weights_forward_and_gradients(block, hybrid, ctx):
    net = make_net(ctx=ctx, block=block, hybrid=hybrid)
    post = Posterior(net, mu_scale=0.5, rho_init=-1.0, seed=0)
    own = bayesian_parameters(net)
    own_arrays = [p.data(ctx) for p in own.values()]
    own_values = np_list(own_arrays)
    x = np.random.randn(5, 3).astype(np.float32)
    X = mx.nd.array(x, ctx=ctx)
    x64 = x.astype(np.float64)
    dout = np.random.randn(5, 2)
    # run once with the net's own weights first, so a hybridized net has its graph cached
    mx.test_utils.assert_almost_equal(net(X).asnumpy(), forward64(x64, own_values),
                                      rtol=1e-5, atol=1e-6)
    for _ in range(2):  # the second round reuses the cached graph with new weights
        eps = np.random.randn(post.num_weights).astype(np.float32)
        zero_grads(post)
        with autograd.record():
            sample = post.sample(eps=eps)
            with use_weights(net, post, sample.weights) as inner:
                assert inner is net
                out = net(X)
            loss = (out * mx.nd.array(dout, ctx=ctx)).sum()
        loss.backward()
        assert out.context == ctx
        weights = np_list(sample.weights)
        mx.test_utils.assert_almost_equal(out.asnumpy(), forward64(x64, weights),
                                          rtol=1e-5, atol=1e-6)
        g_mu, g_rho = grads(post)
        ref_w = backward64(x64, weights, dout)
        rhos = np_list(post.rho(ctx))
        for gm, gr, rw, rho, e in zip(g_mu, g_rho, ref_w, rhos, split(eps, post.shapes),
                                      strict=True):
            assert np.abs(gm).max() > 0 and np.abs(gr).max() > 0
            mx.test_utils.assert_almost_equal(gm, rw, rtol=1e-4, atol=1e-6)
            mx.test_utils.assert_almost_equal(gr, rw * e * sigmoid(rho), rtol=1e-4, atol=1e-6)
    # afterwards: the same arrays, the same values, and the net computes with them again
    after = [p.data(ctx) for p in own.values()]
    assert all(a is b for a, b in zip(after, own_arrays, strict=True))
    for a, v in zip(np_list(after), own_values, strict=True):
        np.testing.assert_array_equal(a, v)
    for p in own.values():
        np.testing.assert_array_equal(p.grad(ctx).asnumpy(), 0)
    mx.test_utils.assert_almost_equal(net(X).asnumpy(), forward64(x64, own_values),
                                      rtol=1e-5, atol=1e-6)


@variants
@hybrids
@contexts
def test_use_means(block, hybrid, ctx):
    net = make_net(ctx=ctx, block=block, hybrid=hybrid)
    post = Posterior(net, mu_scale=0.7, seed=3)
    own_values = np_list(p.data(ctx) for p in bayesian_parameters(net).values())
    x = np.random.randn(4, 3).astype(np.float32)
    X = mx.nd.array(x, ctx=ctx)
    net(X)
    with use_means(net, post):
        out = net(X).asnumpy()
    mx.test_utils.assert_almost_equal(out, forward64(x, np_list(post.mu(ctx))),
                                      rtol=1e-5, atol=1e-6)
    assert not np.allclose(out, forward64(x, own_values), atol=1e-3)
    mx.test_utils.assert_almost_equal(net(X).asnumpy(), forward64(x, own_values),
                                      rtol=1e-5, atol=1e-6)


@variants
@hybrids
@contexts
def test_restored_after_exception(block, hybrid, ctx):
    net = make_net(ctx=ctx, block=block, hybrid=hybrid)
    post = Posterior(net, seed=0)
    own = bayesian_parameters(net)
    own_arrays = [p.data(ctx) for p in own.values()]
    own_values = np_list(own_arrays)
    X = mx.nd.array(np.random.randn(2, 3), ctx=ctx)
    net(X)
    with pytest.raises(RuntimeError, match="boom"):
        with use_weights(net, post, post.sample().weights):
            net(X)
            raise RuntimeError("boom")
    after = [p.data(ctx) for p in own.values()]
    assert all(a is b for a, b in zip(after, own_arrays, strict=True))
    mx.test_utils.assert_almost_equal(net(X).asnumpy(),
                                      forward64(X.asnumpy(), own_values), rtol=1e-5, atol=1e-6)


@contexts
def test_other_architecture(ctx):
    post = Posterior(make_net((3, 4, 2), ctx=ctx), seed=0)
    other = make_net((3, 5, 2), ctx=ctx)
    with pytest.raises(PosteriorMismatchError, match="0.weight"):
        with use_weights(other, post, post.mu(ctx)):
            pass
    with pytest.raises(PosteriorMismatchError):
        with use_means(other, post):
            pass
    deeper = nn.HybridSequential()
    deeper.add(nn.Dense(4, in_units=3), nn.Dense(4, in_units=4), nn.Dense(2, in_units=4))
    deeper.initialize(ctx=ctx)
    with pytest.raises(PosteriorMismatchError, match=r"1\.weight: \(2, 4\) vs \(4, 4\)"):
        with use_means(deeper, post):
            pass


@contexts
def test_wrong_weight_arrays(ctx):
    net = make_net(ctx=ctx)
    post = Posterior(net, seed=0)
    own = bayesian_parameters(net)
    own_arrays = [p.data(ctx) for p in own.values()]
    weights = post.mu(ctx)
    with pytest.raises(PosteriorMismatchError, match="4 weight arrays, got 3"):
        with use_weights(net, post, weights[:3]):
            pass
    with pytest.raises(PosteriorMismatchError, match="4 weight arrays, got 5"):
        with use_weights(net, post, weights + weights[:1]):
            pass
    # the last array has the wrong shape: the first three were already swapped in and
    # must be put back
    bad = weights[:3] + [mx.nd.zeros((3,), ctx=ctx)]
    with pytest.raises(PosteriorMismatchError, match="1.bias"):
        with use_weights(net, post, bad):
            pass
    bad = [weights[0].T] + weights[1:]
    with pytest.raises(PosteriorMismatchError, match="0.weight"):
        with use_weights(net, post, bad):
            pass
    other = mx.cpu(1) if ctx == mx.cpu(0) else mx.cpu(0)
    # mixed contexts
    bad = weights[:2] + [w.as_in_context(other) for w in weights[2:]]
    with pytest.raises(PosteriorMismatchError, match="on cpu"):
        with use_weights(net, post, bad):
            pass
    # arrays on a context the network has no copy on
    with pytest.raises(PosteriorMismatchError, match="no copy"):
        with use_weights(net, post, [w.as_in_context(other) for w in weights]):
            pass
    after = [p.data(ctx) for p in own.values()]
    assert all(a is b for a, b in zip(after, own_arrays, strict=True))


def test_posterior_from_one_net_drives_another_instance():
    """Structural names: a posterior built on one instance works with a twin network."""
    a, b = make_net(), make_net(hybrid="static")
    post = Posterior(a, seed=0)
    x = np.random.randn(3, 3).astype(np.float32)
    with use_means(b, post):
        out = b(mx.nd.array(x)).asnumpy()
    mx.test_utils.assert_almost_equal(out, forward64(x, np_list(post.mu())), rtol=1e-5,
                                      atol=1e-6)


@hybrids
def test_several_samples_in_one_graph(hybrid):
    """Two samples used one after the other inside one record() give both gradients."""
    net = make_net(hybrid=hybrid)
    post = Posterior(net, mu_scale=0.5, rho_init=-1.0, seed=0)
    x = np.random.randn(4, 3).astype(np.float32)
    X = mx.nd.array(x)
    eps = [np.random.randn(post.num_weights).astype(np.float32) for _ in range(2)]
    d = [np.random.randn(4, 2) for _ in range(2)]
    zero_grads(post)
    with autograd.record():
        samples = [post.sample(eps=e) for e in eps]
        total = 0
        for s, di in zip(samples, d, strict=True):
            with use_weights(net, post, s.weights):
                total = total + (net(X) * mx.nd.array(di)).sum()
    total.backward()
    g_mu, _ = grads(post)
    ref = [backward64(x, np_list(s.weights), di) for s, di in zip(samples, d, strict=True)]
    for i, gm in enumerate(g_mu):
        mx.test_utils.assert_almost_equal(gm, ref[0][i] + ref[1][i], rtol=1e-4, atol=1e-6)


def test_two_threads_take_turns_on_one_network():
    import threading
    import time

    net = make_net()
    post = Posterior(net, seed=0)
    own = [p.data().asnumpy().copy() for p in bayesian_parameters(net).values()]
    inside, overlaps, errors = [], [], []

    def worker(scale):
        try:
            work(scale)
        except Exception as e:  # a thread's exception would not fail the test by itself
            errors.append(e)

    def work(scale):
        for _ in range(20):
            weights = [m * scale for m in post.mu()]
            with use_weights(net, post, weights):
                inside.append(scale)
                if len(inside) > 1:
                    overlaps.append(tuple(inside))
                time.sleep(0.001)
                seen = [p.data().asnumpy() for p in bayesian_parameters(net).values()]
                for got, want in zip(seen, weights, strict=True):
                    np.testing.assert_array_equal(got, want.asnumpy())
                inside.remove(scale)

    threads = [threading.Thread(target=worker, args=(s,)) for s in (2.0, 3.0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and overlaps == []
    for p, before in zip(bayesian_parameters(net).values(), own, strict=True):
        np.testing.assert_array_equal(p.data().asnumpy(), before)
