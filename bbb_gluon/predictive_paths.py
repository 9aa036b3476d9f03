"""The fast paths of the Monte-Carlo predictive (:mod:`bbb_gluon.prediction` is its public
face): every weight sample at once for small MLPs, the first layer by the local
reparameterisation for larger ones, and the noise of the prediction stream.
"""

import weakref

import mxnet as mx
import numpy as np
from mxnet import autograd
from mxnet.gluon import nn

from ._checks import check_int
from ._kernels import fused
from ._kernels import private as _private
from .core.sampling import use_weights

__all__ = ["PREDICTION_STREAM"]

PREDICTION_STREAM = 10_000


class _Noise:
    """The standard normals of one draw on the prediction stream (its own counter): from
    the fused ``bbb_normal`` on a CPU where the kernels run (about ten times cheaper than
    NumPy's generator here), else from NumPy's generator, one per draw, in call order."""

    def __init__(self, posterior, ctx):
        self.seed, self.ctx = posterior.noise.seed, ctx
        self.counter = posterior.noise.advance(PREDICTION_STREAM)
        self.fused = _fused_noise(ctx)
        self._rng = None if self.fused else np.random.default_rng(
            [self.seed, PREDICTION_STREAM, self.counter])

    def normal(self, shape, layer):
        if self.fused:
            return mx.nd.bbb_normal(mx.nd.zeros(shape, ctx=self.ctx), seed=self.seed,
                                    stream=PREDICTION_STREAM, counter=self.counter, layer=layer)
        return mx.nd.array(self._rng.standard_normal(shape, dtype=np.float32), ctx=self.ctx)


def _fused_noise(ctx):
    return ctx.device_type == "cpu" and fused.available()


def input_batches(X, batch_size, ctx):
    check_int(batch_size, "batch_size", 1)
    for start in range(0, X.shape[0], batch_size):
        yield mx.nd.array(X[start:start + batch_size], ctx=ctx, dtype="float32")


# Small networks predict every weight sample at once (batched matrix products) instead of
# one forward pass per sample: for a 2x5 network a pass costs far more in Python and
# operator dispatch than in arithmetic. Limits on the arrays one chunk of samples needs:
_BATCHED_MAX_WEIGHTS = 50_000   # posterior size up to which the batched path is taken
_BATCHED_FLOATS = 1 << 23       # floats (32 MiB) per chunk: weight draws, and activations


def batched_plan(net, posterior, X):
    """The layers of ``net`` as steps for :func:`_batched_outputs`, when ``net`` is a small
    Sequential MLP (Dense, Activation, Dropout) whose every Dense parameter the posterior
    covers, in order, and ``X`` is 2-D; else None."""
    if X.ndim != 2 or posterior.num_weights > _BATCHED_MAX_WEIGHTS or \
            not isinstance(net, nn.Sequential | nn.HybridSequential):
        return None
    steps, keys, width = [], [], X.shape[1]
    for i, block in enumerate(net):
        if isinstance(block, nn.Dense):
            bias = f"{i}.bias" if block.bias is not None else None
            steps.append((f"{i}.weight", bias, block.act))
            keys += [f"{i}.weight"] + ([bias] if bias else [])
            width = max(width, block.weight.shape[0])
        elif isinstance(block, nn.Activation):
            steps.append((None, None, block))
        elif not isinstance(block, nn.Dropout):  # dropout is the identity in prediction
            return None
    return (steps, width) if keys == posterior.keys else None


def _batched_draws(posterior, samples, ctx):
    """``samples`` draws of every parameter, each of shape ``(S,) + shape``, from one
    counter of the prediction stream."""
    noise = _Noise(posterior, ctx)
    draws = []
    for k, (mu, sigma) in enumerate(zip(posterior.mu(ctx), posterior.sigma(ctx),
                                        strict=True)):
        eps = noise.normal((samples,) + mu.shape, layer=k)
        draws.append(mx.nd.broadcast_add(mu.expand_dims(0),
                                         mx.nd.broadcast_mul(sigma.expand_dims(0), eps)))
    return dict(zip(posterior.keys, draws, strict=True))


def _batched_outputs(steps, weights, xb):
    """Raw outputs ``(S, N, outputs)`` of the MLP for the S weight draws in ``weights``."""
    samples = next(iter(weights.values())).shape[0]
    h = mx.nd.broadcast_to(xb.expand_dims(0), (samples,) + xb.shape)
    for weight, bias, act in steps:
        if weight is not None:
            h = mx.nd.batch_dot(h, weights[weight], transpose_b=True)
            if bias is not None:
                h = mx.nd.broadcast_add(h, weights[bias].expand_dims(1))
        if act is not None:
            h = act(h)
    return h


def batched_probs(plan, posterior, X, samples, batch_size, ctx, likelihood):
    """Per-sample probabilities as a list over batches of ``X`` of ``(S, B, C)`` NDArrays."""
    steps, width = plan
    batches = list(input_batches(X, batch_size, ctx))
    per_chunk = max(1, min(_BATCHED_FLOATS // max(posterior.num_weights, 1),
                           _BATCHED_FLOATS // (min(batch_size, len(X)) * width)))
    out = [[] for _ in batches]
    with autograd.pause():
        for start in range(0, samples, per_chunk):
            weights = _batched_draws(posterior, min(per_chunk, samples - start), ctx)
            for i, xb in enumerate(batches):
                out[i].append(likelihood.predictive(_batched_outputs(steps, weights, xb)))
    return [mx.nd.concat(*chunks, dim=0) for chunks in out]


def draw_weights(posterior, ctx, keep_means=0):
    """One weight sample (list of arrays) for prediction, on its own noise stream.

    With the fused kernels the noise comes from ``bbb_normal`` (about ten times cheaper
    than NumPy's generator here), and the first ``keep_means`` arrays are left at the
    means (unused by the caller, so not worth drawing); otherwise all come from
    ``posterior.sample``.
    """
    if _fused_noise(ctx):
        noise = _Noise(posterior, ctx)
        return [m if k < keep_means else mx.nd.bbb_sample(m, r, noise.normal(m.shape, layer=k))
                for k, (m, r) in enumerate(zip(posterior.mu(ctx), posterior.rho(ctx),
                                               strict=True))]
    return posterior.sample(ctx, stream=PREDICTION_STREAM).weights


_REST = weakref.WeakKeyDictionary()


def _first_dense(net, posterior):
    """``(first_layer, rest)`` when ``net`` is a Sequential starting with a Dense layer whose
    parameters are the posterior's first ones and no later layer's; else None."""
    if not isinstance(net, nn.Sequential | nn.HybridSequential) or len(net) < 2:
        return None
    first = net[0]
    if not isinstance(first, nn.Dense) or posterior.keys[:1] != ["0.weight"]:
        return None
    # A weight the later layers share (tying) must be one sample in all its uses: drawing
    # the first layer's pre-activations would give the others the means instead.
    mine = {id(p) for p in first.collect_params().values()}
    if any(id(p) in mine for block in net[1:] for p in block.collect_params().values()):
        return None
    # net[1:] shares the layers (and their parameters); build and hybridize it once.
    cached = _REST.get(net)
    if cached is None or cached[0] != len(net) or cached[1] is not first:
        rest = net[1:]
        # The slice must match the network.
        if _private.is_hybridized(net):
            rest.hybridize()
        cached = _REST[net] = (len(net), first, rest)
    return first, cached[2]


def mc_mean(net, posterior, X, samples, batch_size, ctx, likelihood):
    """Monte-Carlo predictive mean, one NDArray chunk per batch.

    The first layer's input is the same for every weight sample, so its pre-activations
    are drawn directly (the local reparameterisation of Kingma et al. 2015): for one
    example they are independent Gaussians with mean :math:`x\\mu^T` and variance
    :math:`x^2 (\\sigma^2)^T`, both computed once for all samples; each sample then
    costs one normal draw per hidden unit instead of a 784-wide matrix product. The
    predictive of every example has exactly the distribution it has with sampled weights
    (examples are never mixed in a prediction). Later layers use sampled weights.
    """
    plan = batched_plan(net, posterior, X)
    if plan is not None:
        posterior.check_net(net)
        return [p.mean(axis=0) for p in
                batched_probs(plan, posterior, X, samples, batch_size, ctx, likelihood)]
    batches = list(input_batches(X, batch_size, ctx))
    acc = [None] * len(batches)
    # The moments below treat each example as one row of features: 2-D inputs only.
    split = _first_dense(net, posterior) if X.ndim == 2 else None
    with autograd.pause(), autograd.predict_mode():
        if split is not None:
            first, rest = split
            mu, sigma = posterior.mu(ctx), posterior.sigma(ctx)
            has_bias = len(posterior.keys) > 1 and posterior.keys[1] == "0.bias"
            units = posterior.shapes[0][0]
            moments = []
            for xb in batches:
                args = dict(num_hidden=units, no_bias=not has_bias)
                mean = mx.nd.FullyConnected(xb, mu[0], *(mu[1:2] if has_bias else []), **args)
                var = mx.nd.FullyConnected(mx.nd.square(xb), mx.nd.square(sigma[0]),
                                           *([mx.nd.square(sigma[1])] if has_bias else []),
                                           **args)
                moments.append((mean, mx.nd.sqrt(var)))
            # relu goes into the same pass as the draw; another activation after it.
            fused_relu = _fused_noise(ctx) and isinstance(first.act, nn.Activation) \
                and _private.act_type(first.act) == "relu"
            first_keys = 2 if has_bias else 1
            for _ in range(samples):
                weights = draw_weights(posterior, ctx, keep_means=first_keys)
                noise = _Noise(posterior, ctx)
                with use_weights(net, posterior, weights, ctx):
                    for i, (mean, std) in enumerate(moments):
                        if noise.fused:  # the draw, mean + std * zeta and relu in one pass
                            hidden = mx.nd.bbb_lrt(mean, std, seed=noise.seed,
                                                   stream=PREDICTION_STREAM,
                                                   counter=noise.counter, layer=1000 + i,
                                                   relu=int(fused_relu))
                        else:
                            hidden = mean + std * noise.normal(mean.shape, layer=1000 + i)
                        if first.act is not None and not fused_relu:
                            hidden = first.act(hidden)
                        p = likelihood.predictive(rest(hidden))
                        acc[i] = p if acc[i] is None else acc[i] + p
        else:
            for _ in range(samples):
                with use_weights(net, posterior, draw_weights(posterior, ctx), ctx):
                    for i, xb in enumerate(batches):
                        p = likelihood.predictive(net(xb))
                        acc[i] = p if acc[i] is None else acc[i] + p
    return [a / samples for a in acc]
