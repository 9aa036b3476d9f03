"""A step's guard against a batch with a NaN or an infinity: one float that is the batch's
summed cost where the batch, its labels, its costs and its likelihood gradients are all
finite, else NaN, so that the kernels (or, on the reference engine, zeroed gradients) leave
the parameters alone; and the other parameters' gradients made finite beside it.
"""

import math

import mxnet as mx
import numpy as np

from .._kernels.fused import load
from . import ops

__all__ = ["batch_guard", "fused_guard", "zero_nonfinite", "all_float32", "first_not_finite"]

def batch_guard(nll, X, y, grads, watch=None, keep=()):
    """The sum of ``nll`` (the batch's costs, any shape) where it, the step's inputs, its
    labels and its gradients are all finite, else NaN: the kernels leave mu and rho alone
    when it is not. A NaN in an input can vanish from the cost (a ReLU maps it to 0) and
    still reach the gradients; a NaN label can vanish from both (Gluon's softmax loss
    picks a class for it). One operator, ``bbb_finite``, where the kernels run (the sum
    included: on a small network each operator is a good part of the step); else sums by
    matrix products (``ops.total``), since 0 times a NaN or an infinity is NaN.

    ``watch``: an array of shape (1,) on X's context that the result is added to;
    ``keep``: gradients (of the parameters the Trainer updates) to make finite as
    :func:`zero_nonfinite` does with the result as its guard. Both in the same operator
    where the kernels run."""
    arrays = [a for a in (X, y, *grads) if a.dtype == np.float32]
    keep = list(keep)
    if arrays and X.context.device_type == "cpu" and load() and nll.dtype == np.float32 \
            and all(g.dtype == np.float32 for g in keep):
        return _finite_op(nll, arrays, watch, keep)
    if not arrays:  # nothing float32 to look at (integer inputs, no gradient arrays)
        guard = nll.sum()
    else:
        arrays = [a.reshape((-1,)) if a.ndim != 1 else a for a in arrays]
        extra = ops.total(arrays[0])
        for g in arrays[1:]:
            extra = extra + ops.total(g)
        guard = nll.sum() + extra * 0
    if watch is not None:
        watch += guard.reshape((1,))
    zero_nonfinite(keep, guard)
    return guard


def _finite_op(nll, arrays, watch, keep):
    tail = keep + ([] if watch is None else [watch])
    return mx.nd.bbb_finite(nll, *arrays, *tail, num_arrays=len(arrays) + 1 + len(tail),
                            value=2, keep=len(keep), watch=int(watch is not None))


def all_float32(*arrays):
    return all(a.dtype == np.float32 for a in arrays)


def fused_guard(nll, X, y, grads, watch, keep):
    """:func:`batch_guard` for the fused step, whose gradient buffers are float32 arrays
    on a CPU with the kernels loaded: only the batch's and the others' types are read
    (each read is a call into MXNet, and on a small network they add up)."""
    if all_float32(nll, X, y, *keep):
        return _finite_op(nll, [X, y, *grads], watch, keep)
    return batch_guard(nll, X, y, grads, watch, keep)


def zero_nonfinite(grads, guard):
    """Set each gradient's NaN and infinite entries to 0, and all its entries where
    ``guard`` (shape (1,)) is not finite (on the device, no host read): a batch with a NaN
    then moves no parameter, but by the optimiser's momentum or weight decay."""
    if not grads:
        return
    # One operator where the kernels run (MXNet's way is a dozen, isfinite alone six)
    if guard.dtype == np.float32 and all(g.dtype == np.float32 and g.context.device_type ==
                                         "cpu" for g in grads) and load():
        mx.nd.bbb_keep_finite(guard, *grads, num_arrays=len(grads) + 1)
        return
    ok = mx.nd.contrib.isfinite(guard)
    for g in grads:
        keep = mx.nd.broadcast_mul(mx.nd.contrib.isfinite(g),
                                   ok.as_in_context(g.context).reshape((1,) * g.ndim))
        mx.nd.where(keep, g, mx.nd.zeros_like(g), out=g)


def first_not_finite(named_arrays):
    """The name of the first ``(name, NDArray)`` pair holding a NaN or an infinity, else
    None (one pass and one host read per array: NaN * 0 and inf * 0 are NaN)."""
    for name, value in named_arrays:
        if not math.isfinite(float(mx.nd.sum(value * 0).asscalar())):
            return name
    return None


