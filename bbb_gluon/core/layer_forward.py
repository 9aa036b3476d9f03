"""One layer run under its rule (:mod:`.estimators`): the means' forward, then its
estimator's output, on arrays or traced into a graph (:mod:`.estimator_forward` runs the
network of them).
"""

import math

import mxnet as mx
from mxnet import autograd
from mxnet.gluon import nn

from .._kernels import private as _private

__all__ = ["LayerForward"]


def _spread(F, signs, signs_shape, shape):
    """``signs`` broadcast to ``shape`` as a plain array (a constant: no gradient); a 0
    keeps the signs' own length (the batch axis), so a traced graph takes any batch."""
    if tuple(signs_shape) == tuple(shape):
        return signs
    target = tuple(0 if a == b else b for a, b in zip(signs_shape, shape, strict=True))
    if F is mx.sym:
        return F.broadcast_to(signs, shape=target)
    with autograd.pause():
        return F.broadcast_to(signs, shape=target)


def _leading(compact, shape):
    """Whether ``compact`` broadcasts to ``shape`` over trailing axes only (Dense, NCHW),
    so that each of its elements covers consecutive elements of the full array: what the
    fused Flipout operators take (their shape inference, ``signs_shape``, refuses the
    rest)."""
    compact = list(compact)
    while len(compact) > 1 and compact[-1] == 1:
        compact.pop()
    return tuple(compact) == tuple(shape[:len(compact)])


def _channel_shape(ndim, axis, size, batch):
    shape = [1] * ndim
    shape[0], shape[axis] = batch, size
    return tuple(shape)


class _Inputs:
    """What one layer's estimator takes on one call: ``aux_w``, ``aux_b`` (its
    perturbations or variances), ``noise`` (per-example arrays by tag offset) and the
    shapes of the layer's input and mean output."""

    __slots__ = ("aux_w", "aux_b", "noise", "x_shape", "out_shape")

    def __init__(self, aux_w, aux_b, noise, x_shape, out_shape):
        self.aux_w, self.aux_b, self.noise = aux_w, aux_b, noise
        self.x_shape, self.out_shape = tuple(x_shape), tuple(out_shape)


class LayerForward:
    """The ``hybrid_forward`` of one layer under its rule (a
    :class:`~bbb_gluon.core.estimators.LayerRule`): the means' forward, then its
    estimator's :meth:`~bbb_gluon.core.estimators.Estimator.output`. ``source`` hands
    out the estimator's inputs: arrays (imperatively) or symbols (traced into a graph);
    ``fused``: the layer may run the fused kernels' own operators (CPU only).

    What an estimator's ``output`` may use of it, and nothing else: :meth:`linear` (the
    layer's own operator), :attr:`relu` (the activation is the estimator's to apply),
    :attr:`flatten`, :meth:`sign_shapes`, :meth:`compact` and :meth:`spread` (Flipout's
    signs), :attr:`successor` (the covered layer that takes this one's output) and
    :attr:`source`, whose ``keep`` and ``kept`` hand values from one layer to the next
    (:class:`~bbb_gluon.core.estimators.KeptInputs`)."""

    def __init__(self, rule, source, fused=False):
        block = rule.block
        self.rule, self.estimator, self.block, self.source = rule, rule.estimator, block, source
        self.tag = 4 * rule.weight
        self.fused = fused
        # The covered layer that takes this one's output as its input, where a traced
        # graph found one (estimator_forward._Graph): an estimator may make its input here.
        self.successor = None
        self.act = block.act
        # On the fused engine the last step is one of its operators, relu included.
        self.relu = fused and self.act is not None and _private.act_type(self.act) == "relu"
        if isinstance(block, nn.Dense):
            units, flatten = _private.dense_settings(block)
            self._op, self._kwargs = "FullyConnected", {"num_hidden": units, "flatten": flatten}
            self.channel_axis, self.flatten = None, flatten
        else:
            op_name, kwargs = _private.conv_settings(block)
            kwargs.pop("no_bias")
            self._op, self._kwargs = op_name, kwargs
            self.channel_axis, self.flatten = kwargs["layout"].find("C"), False

    def linear(self, F, x, weight, bias):
        """The layer's own operator on ``x`` with ``weight`` and ``bias`` (None: none)."""
        op = getattr(F, self._op)
        if bias is None:
            return op(x, weight, no_bias=True, **self._kwargs)
        return op(x, weight, bias, no_bias=False, **self._kwargs)

    def flat_shape(self, x_shape):
        """The input's shape as the layer's operator sees it (Dense flattens)."""
        if self.flatten:
            return (x_shape[0], math.prod(x_shape[1:]))
        return tuple(x_shape)

    def sign_shapes(self, x_shape, out_shape):
        """Flipout's input and output signs, compact: one per example and channel."""
        x_shape, batch = self.flat_shape(x_shape), x_shape[0]
        if self.channel_axis is None:  # Dense: signs along the last axis (after flatten)
            return ((batch,) + (1,) * (len(x_shape) - 2) + (x_shape[-1],),
                    (batch,) + (1,) * (len(out_shape) - 2) + (out_shape[-1],))
        axis = self.channel_axis
        return (_channel_shape(len(x_shape), axis, x_shape[axis], batch),
                _channel_shape(len(out_shape), axis, out_shape[axis], batch))

    def compact(self, x_shape, out_shape):
        """Whether Flipout's signs go to the fused operators as drawn (see _leading)."""
        s, r = self.sign_shapes(x_shape, out_shape)
        return _leading(s, self.flat_shape(x_shape)) and _leading(r, out_shape)

    def spread(self, F, signs, which, x_shape, out_shape):
        """Input (``which="s"``) or output signs broadcast to the full array's shape."""
        s, r = self.sign_shapes(x_shape, out_shape)
        if which == "s":
            return _spread(F, signs, s, self.flat_shape(x_shape))
        return _spread(F, signs, r, out_shape)

    def __call__(self, F, x, weight, bias=None):
        # weight and bias: the means, or the network's own bias where the posterior has none.
        mean = self.linear(F, x, weight, bias)
        x_shape, out_shape = self.source.shapes(self, x, mean)
        wanted = self.estimator.noise_shapes(self, x_shape, out_shape)
        noise = {off: self.source.noise(self, off, shape, signs)
                 for off, (shape, signs) in wanted.items()}
        rule = self.rule
        inputs = _Inputs(self.source.aux(rule.weight), self.source.aux(rule.bias), noise,
                         x_shape, out_shape)
        out, relu_done = self.estimator.output(F, self, x, mean, inputs, self.fused)
        return out if relu_done or self.act is None else self.act(out)
