"""The package's argument checks, so that every bad number reads the same way."""

import functools
import math
import numbers

from ._kernels.private import children, input_width

__all__ = ["renamed_keywords", "check_int", "check_positive", "as_array", "check_class_labels",
           "check_network_takes"]


def renamed_keywords(**renamed):
    """A decorator that refuses the keywords a function no longer takes, naming the ones
    that replaced them (``renamed_keywords(num_samples="samples")``): one name per idea
    across the package, and an old call fails with the new name in its message."""
    def decorate(function):
        @functools.wraps(function)
        def checked(*args, **kwargs):
            for old, new in renamed.items():
                if old in kwargs:
                    raise TypeError(f"{function.__name__}() takes {new}=, not {old}= (the "
                                    f"package says {new!r} everywhere)")
            return function(*args, **kwargs)
        return checked
    return decorate


def check_int(value, name, minimum):
    """``value`` as an int; ``ValueError`` unless it is an integer (not a bool) >= minimum."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_positive(value, name, allow_none=False):
    """``value`` as a float; ``ValueError`` unless it is a finite number > 0 (or None where
    ``allow_none``)."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (
            math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0{' or None' if allow_none else ''}, "
                         f"got {value!r}")
    return float(value)


def as_array(value, name):
    """``value`` (a NumPy array, an MXNet NDArray or anything ``np.asarray`` takes) as a NumPy
    array; ``ValueError`` naming ``name`` when it is not numbers."""
    import numpy as np  # here: the helpers import nothing at the package's import

    if hasattr(value, "asnumpy"):  # an NDArray, on any device
        value = value.asnumpy()
    try:
        out = np.asarray(value)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} must be an array of numbers, got {type(value).__name__}: "
                         f"{e}") from None
    if out.dtype == object or not (np.issubdtype(out.dtype, np.number) or out.dtype == bool):
        raise ValueError(f"{name} must be an array of numbers, got one of {out.dtype}")
    return out


def check_class_labels(y, classes, name):
    """``ValueError``, in the user's words, unless ``y`` (a NumPy array) holds class indices
    for ``classes`` classes: finite, whole, in 0..classes-1."""
    import numpy as np

    if not np.isfinite(y).all():
        raise ValueError(f"{name} contain NaN or infinity")
    fractional = y[y != np.round(y)]
    if fractional.size:
        raise ValueError(f"{name} must be whole numbers (class indices 0..{classes - 1}), "
                         f"got {fractional[0]:g}")
    if y.size and (y.min() < 0 or y.max() > classes - 1):
        raise ValueError(f"{name} must lie in 0..{classes - 1} for {classes} classes, got "
                         f"labels from {y.min():g} to {y.max():g}")


def check_network_takes(net, X, name, ctx):
    """``net``'s output (an NDArray, not read back) for ``X``'s first example on ``ctx``, in
    predict mode; ``ValueError`` naming ``name`` and its shape where the network cannot
    take ``X``'s examples (MXNet's reason after it), so that a mis-shaped array is refused
    before any work. The network's own weights do: a forward pass checks only shapes."""
    import mxnet as mx
    from mxnet import autograd

    first = X[:1].as_in_context(ctx) if isinstance(X, mx.nd.NDArray) else \
        mx.nd.array(X[:1], ctx=ctx, dtype="float32")
    try:
        with autograd.pause(), autograd.predict_mode():
            return net(first)
    except mx.base.MXNetError as e:
        reason = str(e).strip().splitlines()[-1].removeprefix("MXNetError: ")
        if "shape" not in reason.lower():
            raise
        raise ValueError(f"the network does not take {name} of shape {tuple(X.shape)}"
                         f"{_first_layer_takes(net, X.shape)}: {reason}") from None


def _first_layer_takes(net, shape):
    """" (its first layer takes (N, 784))" where the network's first layer is a Dense or a
    convolution that knows its input's width and examples of ``shape`` do not have it,
    else ""."""
    block = net
    while input_width(block) == (None, None) and children(block):
        block = next(iter(children(block).values()))
    units, channels = input_width(block)
    if units and math.prod(shape[1:]) != units:  # a Dense flattens each example
        return f" (its first layer takes (N, {units}))"
    if channels and (len(shape) < 2 or shape[1] != channels):
        return f" (its first layer takes (N, {channels}, ...))"
    return ""
