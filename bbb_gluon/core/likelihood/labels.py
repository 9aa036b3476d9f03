"""The checks of the labels a loss takes."""

import math

import mxnet as mx
from mxnet.gluon.loss import SigmoidBCELoss, SoftmaxCrossEntropyLoss

from ..._kernels import private as _private
from .losses import GaussianNLLLoss, HeteroscedasticGaussianNLLLoss


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
    if isinstance(likelihood, SoftmaxCrossEntropyLoss):
        sparse = _private.sparse_label(likelihood)
        if sparse and len(pred_shape) == 2 and label_shape not in ((b,), (b, 1)):
            raise ValueError(f"class labels must have shape ({b},), got {label_shape}")
        if not sparse and label_shape != pred_shape:
            raise ValueError(f"one-hot labels must have pred's shape {pred_shape}, got "
                             f"{label_shape}")
        return pred_shape[-1] if sparse else None
    if isinstance(likelihood, GaussianNLLLoss) and label_shape != pred_shape:
        raise ValueError(f"GaussianNLLLoss expects targets of pred's shape {pred_shape}, got "
                         f"{label_shape}")
    if isinstance(likelihood, HeteroscedasticGaussianNLLLoss):
        half = pred_shape[:-1] + (pred_shape[-1] // 2,)
        if pred_shape[-1] % 2 or label_shape != half:
            raise ValueError(f"HeteroscedasticGaussianNLLLoss expects outputs with a mean and "
                             f"a scale per target (an even last axis) and targets of the "
                             f"means' shape; got outputs {pred_shape} and targets "
                             f"{label_shape}")
    if isinstance(likelihood, SigmoidBCELoss) and math.prod(label_shape) != math.prod(
            pred_shape):
        raise ValueError(f"SigmoidBCELoss expects one label per output, got pred "
                         f"{pred_shape} and label {label_shape}")
    return None


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
    elif isinstance(likelihood, SigmoidBCELoss) and (lo < 0 or hi > 1):
        raise ValueError(f"SigmoidBCELoss labels must lie in [0, 1], got labels from "
                         f"{lo:g} to {hi:g}")
