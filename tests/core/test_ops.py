"""Tests for bbb_gluon.core.ops: stable softplus, its inverse, and the fast reductions.

References are float64 NumPy. Tolerances: softplus values 1e-4 relative (the module
promises about 4e-5), gradients 1e-4 relative to sigmoid, reductions 1e-5 relative
(float32 accumulation over at most a few hundred elements).
"""

import math

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd
from mxnet.gluon import HybridBlock

from bbb_gluon.core import ops

CONTEXTS = [mx.cpu(0), mx.cpu(1)]
CTX_IDS = ["cpu0", "cpu1"]


def _softplus64(x):
    return np.logaddexp(0.0, np.asarray(x, dtype=np.float64))


def _sigmoid64(x):
    x = np.asarray(x, dtype=np.float64)
    return np.exp(-np.logaddexp(0.0, -x))


def _grid():
    """[-30, 30] in steps of 0.01 plus points around the cut and exactly at it (-5.0)."""
    x = np.linspace(-30.0, 30.0, 6001)
    extra = np.array([-5.0 - 1e-3, -5.0 + 1e-3, -4.9999, -5.0001, -17.0, -0.0, 1e-6])
    x = np.concatenate([x, extra])
    x = x.astype(np.float32).astype(np.float64)  # exactly what the float32 input holds
    assert (x == -5.0).any()
    return x


class _Apply(HybridBlock):
    """Wraps an ops function so it runs through F = mx.sym when hybridized."""

    def __init__(self, fn, **kwargs):
        super().__init__(**kwargs)
        self._fn = fn

    def hybrid_forward(self, F, x):
        return self._fn(x, F)


# --------------------------------------------------------------------------- softplus


@pytest.mark.parametrize("ctx", CONTEXTS, ids=CTX_IDS)
def test_softplus_values_match_float64_reference(ctx):
    x = _grid()
    y = ops.softplus(mx.nd.array(x, ctx=ctx))
    assert y.context == ctx
    assert y.dtype == np.float32
    got = y.asnumpy().astype(np.float64)
    ref = _softplus64(x)
    assert np.all(np.isfinite(got))
    assert np.all(got > 0), x[got <= 0]
    rel = np.abs(got - ref) / ref
    assert rel.max() < 1e-4, (x[rel.argmax()], rel.max())


@pytest.mark.parametrize("ctx", CONTEXTS, ids=CTX_IDS)
def test_softplus_gradient_is_sigmoid(ctx):
    x = _grid()
    xa = mx.nd.array(x, ctx=ctx)
    xa.attach_grad()
    with autograd.record():
        y = ops.softplus(xa)
    y.backward()
    g = xa.grad.asnumpy().astype(np.float64)
    assert np.all(np.isfinite(g))
    ref = _sigmoid64(x)
    rel = np.abs(g - ref) / ref
    assert rel.max() < 1e-4, (x[rel.argmax()], rel.max())


@pytest.mark.parametrize("hybridize", [False, True])
def test_softplus_and_its_gradient_exactly_at_the_cut(hybridize):
    # Both branches meet at -5.0; the gradient there must come from one branch only (it
    # was once counted twice: 0.0134 instead of sigmoid(-5) = 0.0066929).
    block = _Apply(ops.softplus)
    if hybridize:
        block.hybridize()
    x = mx.nd.array([-5.0])
    x.attach_grad()
    with autograd.record():
        y = block(x)
    y.backward()
    assert y.asscalar() == pytest.approx(math.log1p(math.exp(-5.0)), rel=1e-5)
    assert x.grad.asscalar() == pytest.approx(1 / (1 + math.exp(5.0)), rel=1e-5)


def test_softplus_is_finite_and_positive_far_below_the_grid():
    x = np.array([-79.0, -80.0, -81.0, -200.0, -1e4, -3.0e38], dtype=np.float32)
    xa = mx.nd.array(x)
    xa.attach_grad()
    with autograd.record():
        y = ops.softplus(xa)
    y.backward()
    got = y.asnumpy()
    assert np.all(np.isfinite(got)) and np.all(got > 0)
    # down to -80 it is still accurate, below it is held at softplus(-80)
    np.testing.assert_allclose(got[:2], _softplus64(x[:2]), rtol=1e-4)
    np.testing.assert_allclose(got[2:], _softplus64(-80.0), rtol=1e-4)
    assert np.all(np.isfinite(xa.grad.asnumpy()))


def test_softplus_large_inputs_are_the_identity():
    x = np.array([30.0, 50.0, 88.0, 1e4], dtype=np.float32)
    got = ops.softplus(mx.nd.array(x)).asnumpy()
    np.testing.assert_allclose(got, x, rtol=1e-6)


@pytest.mark.parametrize("shape", [(1,), (5, 7), (2, 3, 4)])
@pytest.mark.parametrize("hybridize", [False, True])
@pytest.mark.parametrize("ctx", CONTEXTS, ids=CTX_IDS)
def test_softplus_symbolic_path_matches(shape, hybridize, ctx):
    x = np.random.uniform(-25, 25, size=shape).astype(np.float32)
    block = _Apply(ops.softplus)
    if hybridize:
        block.hybridize()
    xa = mx.nd.array(x, ctx=ctx)
    xa.attach_grad()
    with autograd.record():
        y = block(xa)
    y.backward()
    assert y.shape == shape and y.context == ctx
    x64 = x.astype(np.float64)
    mx.test_utils.assert_almost_equal(y.asnumpy(), _softplus64(x64), rtol=1e-4, atol=0)
    mx.test_utils.assert_almost_equal(xa.grad.asnumpy(), _sigmoid64(x64), rtol=1e-4, atol=0)


# --------------------------------------------------------------------------- inverse_softplus


@pytest.mark.parametrize("sigma", [1e-30, 1e-8, 1e-4, 0.01, 0.0485873, 0.5, 1.0, 5.0, 19.9,
                                   20.0, 20.1, 40.0, 1e3])
def test_inverse_softplus_round_trip(sigma):
    rho = ops.inverse_softplus(sigma)
    assert math.isfinite(rho)
    # float64 round trip through a stable softplus
    back = rho + math.log1p(math.exp(-rho)) if rho > 0 else math.log1p(math.exp(rho))
    assert back == pytest.approx(sigma, rel=1e-12)
    if sigma >= 1e-30 and rho >= -80:
        got = ops.softplus(mx.nd.array([rho])).asscalar()
        assert got == pytest.approx(sigma, rel=1e-4)


def test_inverse_softplus_is_increasing():
    sigmas = np.logspace(-10, 3, 200)
    rhos = [ops.inverse_softplus(float(s)) for s in sigmas]
    assert np.all(np.diff(rhos) > 0)


@pytest.mark.parametrize("sigma", [0.0, -0.0, -1e-12, -1.0, float("nan"), float("inf"),
                                   float("-inf")])
def test_inverse_softplus_rejects_non_positive(sigma):
    with pytest.raises(ValueError, match="sigma"):
        ops.inverse_softplus(sigma)


# --------------------------------------------------------------------------- reductions


SHAPES = [(1,), (7,), (3, 4), (2, 3, 5), (401, 3)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("ctx", CONTEXTS, ids=CTX_IDS)
def test_total_matches_numpy(shape, ctx):
    x = np.random.uniform(-3, 5, size=shape).astype(np.float32)
    got = ops.total(mx.nd.array(x, ctx=ctx))
    assert got.shape == (1,)
    assert got.context == ctx
    ref = x.astype(np.float64).sum()
    scale = np.abs(x.astype(np.float64)).sum()
    assert abs(got.asscalar() - ref) <= 1e-6 * scale


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("ctx", CONTEXTS, ids=CTX_IDS)
def test_sum_of_squares_matches_numpy(shape, ctx):
    x = np.random.uniform(-3, 5, size=shape).astype(np.float32)
    got = ops.sum_of_squares(mx.nd.array(x, ctx=ctx))
    assert got.shape == (1,)
    assert got.context == ctx
    ref = np.square(x.astype(np.float64)).sum()
    mx.test_utils.assert_almost_equal(got.asnumpy(), np.array([ref]), rtol=1e-5, atol=0)


def test_total_float64_input():
    x = np.random.randn(13).astype(np.float64)
    got = ops.total(mx.nd.array(x, dtype=np.float64))
    assert got.dtype == np.float64
    assert got.asscalar() == pytest.approx(x.sum(), rel=1e-12, abs=1e-12)


def test_total_same_size_different_context_does_not_mix_caches():
    """The cached ones vector is per context: a cpu(1) input must give a cpu(1) result."""
    x = np.arange(6, dtype=np.float32)
    a = ops.total(mx.nd.array(x, ctx=mx.cpu(0)))
    b = ops.total(mx.nd.array(x, ctx=mx.cpu(1)))
    assert a.context == mx.cpu(0) and b.context == mx.cpu(1)
    assert a.asscalar() == b.asscalar() == 15.0


@pytest.mark.parametrize("fn, ref, dref", [
    (ops.total, lambda x: x.sum(), lambda x: np.ones_like(x)),
    (ops.sum_of_squares, lambda x: np.square(x).sum(), lambda x: 2 * x),
])
@pytest.mark.parametrize("hybridize", [False, True])
@pytest.mark.parametrize("ctx", CONTEXTS, ids=CTX_IDS)
def test_reductions_value_and_gradient(fn, ref, dref, hybridize, ctx):
    x = np.random.uniform(-2, 2, size=(4, 6)).astype(np.float32)
    block = _Apply(fn)
    if hybridize:
        block.hybridize()
    xa = mx.nd.array(x, ctx=ctx)
    xa.attach_grad()
    with autograd.record():
        y = block(xa)
    y.backward()
    assert y.context == ctx and y.size == 1
    x64 = x.astype(np.float64)
    assert y.asnumpy().item() == pytest.approx(ref(x64), rel=1e-5, abs=1e-5)
    mx.test_utils.assert_almost_equal(xa.grad.asnumpy(), dref(x64), rtol=1e-6, atol=1e-6)
