"""The package's argument checks, so that every bad number reads the same way."""

import math
import numbers

__all__ = ["check_int", "check_positive"]


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
