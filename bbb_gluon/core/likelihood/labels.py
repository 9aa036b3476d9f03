"""The checks of the labels a loss takes."""

import mxnet as mx

from .kinds import likelihood_of


def check_labels(likelihood, pred, label, batch_axis=0, values=False):
    """Raise ValueError, in the user's words, where ``label`` cannot be what ``likelihood``
    takes for ``pred``: shapes always (no host read), values (a host read) if ``values``."""
    for name, a in (("pred", pred), ("label", label)):
        if not isinstance(a, mx.nd.NDArray):
            raise TypeError(f"{name} must be an MXNet NDArray, got {type(a).__name__}")
    classes = check_label_shape(likelihood, tuple(pred.shape), tuple(label.shape), batch_axis)
    if values:
        check_label_values(likelihood, label, classes)


def check_label_shape(likelihood, pred_shape, label_shape, batch_axis=0):
    """Raise ValueError where labels of ``label_shape`` cannot be what ``likelihood`` takes
    for outputs of ``pred_shape`` (tuples: no array, no host read); else the number of
    classes the labels index (None where they are not class indices)."""
    b = pred_shape[batch_axis]
    if b == 0:
        raise ValueError(f"pred holds no examples (shape {pred_shape})")
    if label_shape[:1] != (b,):
        raise ValueError(f"pred has {b} examples but label has "
                         f"{label_shape[0] if label_shape else 'none (a scalar)'}")
    try:
        kind = likelihood_of(likelihood)
    except ValueError:  # a loss of the user's own: its shapes are its business
        return None
    error = kind.label_shape_error(likelihood, pred_shape, label_shape)
    if error is not None:
        raise ValueError(error)
    return kind.label_classes(likelihood, pred_shape)


def check_label_values(likelihood, label, classes):
    """Raise ValueError where ``label`` (an NDArray) holds values ``likelihood`` cannot
    take: NaN or infinity; for ``classes`` classes, fractions or indices outside
    0..classes-1; for a Bernoulli likelihood, values outside [0, 1]. One host read."""
    label = label.astype("float32", copy=False)  # NaN and fractions of any dtype alike
    frac = mx.nd.abs(label - mx.nd.round(label)).max().reshape((1,))
    finite = mx.nd.contrib.isfinite(label).min().reshape((1,))
    lo, hi, frac, finite = mx.nd.concat(label.min().reshape((1,)), label.max().reshape((1,)),
                                        frac, finite, dim=0).asnumpy().astype(float)
    if not finite:
        raise ValueError("labels contain NaN or infinity")
    if classes is not None:
        if frac > 0:
            raise ValueError("class labels must be whole numbers (0, 1, 2, ...), got a "
                             "label with a fractional part")
        if lo < 0 or hi > classes - 1:
            raise ValueError(f"class labels must lie in 0..{classes - 1} for {classes} "
                             f"classes, got labels from {lo:g} to {hi:g}")
        return
    try:
        error = likelihood_of(likelihood).label_value_error(lo, hi)
    except ValueError:  # a loss of the user's own
        return
    if error is not None:
        raise ValueError(error)
