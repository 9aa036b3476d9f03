"""The package's argument checks, so that every bad number reads the same way."""

import math
import numbers

__all__ = ["check_int", "check_positive", "as_array", "check_class_labels"]


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
