"""Running a network with its layers under an estimator's rules (:mod:`.estimators`)."""

from contextlib import ExitStack, contextmanager

import mxnet as mx
from mxnet import autograd
from mxnet.gluon import HybridBlock, nn

from .._kernels import private as _private
from .estimators import VARIANCE_FLOOR, aux_arrays, key_modes
from .sampling import use_weights

__all__ = ["perturbed", "swapped", "sample_noise"]


def _spread(signs, shape):
    """``signs`` broadcast to ``shape`` as a plain array (a constant: no gradient)."""
    if tuple(signs.shape) == tuple(shape):
        return signs
    with autograd.pause():
        return signs.broadcast_to(shape)


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


class _Layer:
    """The forward of one layer under Flipout (``aux``: the perturbations) or the local
    reparameterisation (``aux``: the variances) of this sample."""

    def __init__(self, rule, aux, noise, fused=False):
        self.rule, self.noise, self.block = rule, noise, rule.block
        self.fused = fused
        w, b = rule.weight, rule.bias
        self.tag = 4 * w
        if rule.rule == "flipout":
            self.dw, self.db = aux[w], None if b is None else aux[b]
        else:
            self.var_w, self.var_b = aux[w], None if b is None else aux[b]
        if isinstance(self.block, nn.Dense):
            units, flatten = _private.dense_settings(self.block)
            self.linear = lambda x, weight, bias: mx.nd.FullyConnected(
                x, weight, bias, no_bias=bias is None, num_hidden=units, flatten=flatten)
            self.channel_axis = None
            self.flatten = flatten
        else:
            op_name, kwargs = _private.conv_settings(self.block)
            kwargs.pop("no_bias")
            op = getattr(mx.nd, op_name)
            self.linear = lambda x, weight, bias: op(x, weight, bias, no_bias=bias is None,
                                                     **kwargs)
            self.channel_axis = kwargs["layout"].find("C")

    def __call__(self, F, x, weight, bias=None):
        # weight and bias: the means (use_weights put them there), or the network's own
        # bias where the posterior has none.
        mean = self.linear(x, weight, bias)
        act = self.block.act
        # On the fused engine (CPU) the last step is one of its operators, relu included.
        fused = self.fused and mean.context.device_type == "cpu"
        relu = fused and act is not None and _private.act_type(act) == "relu"
        if self.rule.rule == "local":
            var = self.linear(mx.nd.square(x), self.var_w, self.var_b)
            zeta = self.noise(self.tag, mean.shape, False)
            if fused:  # one pass where MXNet runs five operators
                out = mx.nd.bbb_lrt_combine(mean, var, zeta, floor=repr(VARIANCE_FLOOR),
                                            relu=int(relu))
            else:
                out = mx.nd.elemwise_add(
                    mean, mx.nd.elemwise_mul(mx.nd.sqrt(var + VARIANCE_FLOOR), zeta))
        else:
            x, s, r = self._signs(x, mean.shape)
            if fused and _leading(s.shape, x.shape) and _leading(r.shape, mean.shape):
                # The signs stay compact, and the output side (multiply, add, relu) is one
                # operator.
                z = self.linear(mx.nd.bbb_flip(x, s), self.dw, self.db)
                out = mx.nd.bbb_flipout_combine(mean, z, r, relu=int(relu))
            else:
                # The bias perturbation goes in as the operator's bias, and the signs as
                # full arrays into elementwise operators: NDArray's * and + are MXNet's
                # broadcast ones, whose backward reduces, single-threaded (it took longer
                # than the convolutions' on LeNet).
                relu = False
                z = self.linear(mx.nd.elemwise_mul(x, _spread(s, x.shape)), self.dw, self.db)
                out = mx.nd.elemwise_add(mean, mx.nd.elemwise_mul(z, _spread(r, mean.shape)))
        return out if relu or act is None else act(out)

    def _signs(self, x, out_shape):
        """``(x, s, r)``: the input (flattened where the layer flattens it) and this
        step's input and output signs, compact: one per example and channel."""
        batch = x.shape[0]
        if self.channel_axis is None:  # Dense: signs along the last axis (after flatten)
            if self.flatten:
                x = x.reshape((batch, -1))
            s_shape = (batch,) + (1,) * (x.ndim - 2) + (x.shape[-1],)
            r_shape = (batch,) + (1,) * (len(out_shape) - 2) + (out_shape[-1],)
        else:
            axis = self.channel_axis
            s_shape = _channel_shape(x.ndim, axis, x.shape[axis], batch)
            r_shape = _channel_shape(len(out_shape), axis, out_shape[axis], batch)
        return (x, self.noise(self.tag + 1, s_shape, True),
                self.noise(self.tag + 2, r_shape, True))


def sample_noise(posterior, ctx, stream):
    """``noise(tag, shape, signs)`` for the estimators' per-example arrays: drawn beside
    the posterior's last weight block of ``stream`` (call it after ``sample``), so a
    resumed run draws the same."""
    source = posterior.noise
    counter = source.last_counter(stream)

    def noise(tag, shape, signs):
        return mx.nd.array(source.extra(stream, counter, tag, shape, signs), ctx=ctx)
    return noise


@contextmanager
def perturbed(net, posterior, rules, sample, noise):
    """Inside the block, ``net(X)`` runs each layer as its rule says, with the weight
    sample ``sample`` (a :class:`~bbb_gluon.core.posterior.WeightSample`, recorded by
    autograd) and ``noise(tag, shape, signs)`` for the per-example arrays; the network
    is restored on leaving. Where every rule is "reparam" this is ``use_weights``."""
    modes = key_modes(rules, len(posterior.keys))
    # Layers under Flipout or the local reparameterisation see the means; others the sample.
    weights = [w if mode == 0 else m for mode, w, m in
               zip(modes, sample.weights, sample.mus, strict=True)]
    with swapped(net, posterior, rules, weights, sample.ctx, aux_arrays(rules, sample),
                 noise):
        yield net


@contextmanager
def swapped(net, posterior, rules, weights, ctx, aux, noise, fused=False):
    """:func:`perturbed` on arrays: ``weights`` go into the network (the means for the
    layers under Flipout or the local reparameterisation), ``aux`` as
    :func:`aux_arrays` gives them; ``fused``: the layers may run the fused kernels' own
    operators (the fused engine; the reference engine runs MXNet's)."""
    special = [r for r in rules if r.rule != "reparam"]
    with ExitStack() as stack:
        stack.enter_context(use_weights(net, posterior, weights, ctx))
        if special:
            stack.enter_context(_imperative(net))
        for r in special:
            stack.enter_context(_forward_of(r.block, _Layer(r, aux, noise, fused)))
        yield net


@contextmanager
def _forward_of(block, forward):
    """``block.hybrid_forward`` is ``forward`` inside the block (an attribute of this
    instance only, removed on leaving)."""
    had = "hybrid_forward" in vars(block)
    saved = vars(block).get("hybrid_forward")
    object.__setattr__(block, "hybrid_forward", forward)
    try:
        yield
    finally:
        if had:
            object.__setattr__(block, "hybrid_forward", saved)
        else:
            object.__delattr__(block, "hybrid_forward")


@contextmanager
def _imperative(net):
    """Run the network imperatively (the swapped forwards are Python), keeping every
    hybridized block's cached graph for the calls after the block."""
    active = []
    net.apply(lambda b: active.append(b) if isinstance(b, HybridBlock)
              and _private.is_hybridized(b) else None)
    for b in active:
        _private.set_hybridized(b, False)
    try:
        yield
    finally:
        for b in active:
            _private.set_hybridized(b, True)
