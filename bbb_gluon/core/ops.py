"""Numerically stable elementwise building blocks that are cheap on MXNet 1.9.1 CPUs.

Bayes by Backprop spends its time in elementwise passes over every parameter, not in
matrix products (see ``docs/benchmarks.md``). On the CPU wheel, ``Activation`` runs on
oneDNN kernels that are fast but not accurate everywhere, while ``nd.exp``, ``nd.log1p``
and whole-array ``nd.sum`` run single-threaded and cost up to 40 times more. The helpers
here pick the cheap kernels where they are exact and patch the ranges where they are not.
All of them take ``F`` (``mx.nd`` or ``mx.sym``) so they work inside ``hybrid_forward``.
"""

import mxnet as mx

__all__ = ["softplus", "inverse_softplus", "total", "sum_of_squares"]

# oneDNN's softrelu computes log(1 + exp(x)) in float32: below about -5 its relative error
# exceeds 1e-5 and below -17 it returns zero or negative values. Under the cut the
# series -log(1 - s) = s + s^2/2 + s^3/3 in s = sigmoid(x) (also a oneDNN kernel) is exact
# to float32 resolution, because s <= sigmoid(-5) = 0.0067.
_CUT = -5.0
# sigmoid flushes to zero below about -87; keep sigma a positive normal float32.
_FLOOR = -80.0


def _series_tail(F, x):
    s = F.Activation(x, act_type="sigmoid")
    return s * (1.0 + s * (0.5 + s * (1.0 / 3.0)))


def softplus(x, F=mx.nd):
    r"""Stable :math:`\log(1 + e^x)`, the map from :math:`\rho` to :math:`\sigma`.

    Accurate to about 4e-5 relative in float32 for every ``x >= -80`` (below that the
    value is held at ``softplus(-80)``, about 1.8e-35, and its gradient is zero), with
    finite values and gradients everywhere.

    Parameters
    ----------
    x : NDArray or Symbol
        Any shape.
    F : module
        ``mx.nd`` (default) or ``mx.sym``.
    """
    # The upper branch is offset by its own float32 value at the cut, so below the cut it
    # contributes exactly zero and nothing cancels against the tiny tail values; above the
    # cut the tail branch is the constant tail(cut) and restores the offset.
    # relu(x - cut) + cut rather than maximum(x, cut): relu passes no gradient at exactly
    # the cut, so the gradient there comes from the tail branch alone instead of twice.
    upper = F.Activation(F.relu(x - _CUT) + _CUT, act_type="softrelu") - _at_cut()
    lower = _series_tail(F, F.clip(x, _FLOOR, _CUT))
    return upper + lower


_CUT_VALUES = []


def _at_cut():
    """The float32 value oneDNN's softrelu takes at the cut (measured once, lazily)."""
    if not _CUT_VALUES:
        cut = mx.nd.array([_CUT], ctx=mx.cpu())
        _CUT_VALUES.append(float(mx.nd.Activation(cut, act_type="softrelu").asscalar()))
    return _CUT_VALUES[0]


def inverse_softplus(sigma):
    """:math:`\\rho = \\log(e^\\sigma - 1)` for a positive float, stable for small sigma."""
    import math

    if not sigma > 0 or not math.isfinite(sigma):
        raise ValueError(f"sigma must be a positive finite number, got {sigma!r}")
    if sigma > 20:
        return sigma + math.log(-math.expm1(-sigma))
    return math.log(math.expm1(sigma))


_ONES = {}


def _ones(size, ctx, dtype):
    key = (size, ctx, str(dtype))
    ones = _ONES.get(key)
    if ones is None:
        if len(_ONES) > 64:
            _ONES.clear()
        ones = _ONES[key] = mx.nd.ones((size,), ctx=ctx, dtype=dtype)
    return ones


def total(x, F=mx.nd):
    """Sum of all elements, shape ``(1,)``.

    With ``F=mx.nd`` it is a matrix product with a cached ones vector: on MXNet 1.9.1
    CPUs a multi-threaded BLAS call instead of ``nd.sum``'s single-threaded reduction
    (docs/benchmarks.md has the measured ratio), with the same float32 accuracy.
    """
    if F is mx.nd:
        return F.dot(x.reshape((-1,)), _ones(x.size, x.context, x.dtype)).reshape((1,))
    return F.sum(x).reshape((1,))


def sum_of_squares(x, F=mx.nd):
    """:math:`\\sum x^2` as one inner product (no elementwise pass), shape ``(1,)``."""
    flat = x.reshape((-1,))
    return F.dot(flat, flat).reshape((1,))
