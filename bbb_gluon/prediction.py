"""Predictions from a trained network: with the posterior means, or Monte-Carlo averaged.

The Monte-Carlo predictive :math:`p(y \\mid x) \\approx \\frac1S \\sum_s p(y \\mid x, w_s)`
draws each weight sample once and runs every batch through it; probabilities accumulate
on the device and reach the host once, at the end.

From the per-sample probabilities of :func:`predict_samples` (shape ``(S, N, C)``) the
uncertainty of each prediction splits into the predictive entropy (total), the expected
entropy (aleatoric) and their difference, the mutual information between label and
weights (epistemic); :func:`uncertainty` computes all of them in one call.
"""

import weakref

import mxnet as mx
import numpy as np
from mxnet import autograd
from mxnet.gluon import nn

from ._checks import check_int
from ._kernels import fused
from ._kernels.threads import predict_threads, using_threads
from .core.sampling import use_means, use_weights
from .entropies import class_std, entropy, expected_entropy, mutual_information, predictive_entropy

__all__ = ["predict_proba", "predict_samples", "error_rate", "PREDICTION_STREAM", "entropy",
           "predictive_entropy", "expected_entropy", "mutual_information", "class_std",
           "uncertainty"]

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


def _check_inputs(X):
    X = np.asarray(X, dtype=np.float32)
    if X.ndim < 2:
        raise ValueError(f"X must have an examples axis first and the input's axes after it "
                         f"(N, features) or (N, channels, height, width), got shape {X.shape}")
    if X.shape[0] == 0:
        raise ValueError(f"X holds no examples (shape {X.shape})")
    # Checked a pass at a time: np.isfinite of all of X would be an N x D temporary.
    if not all(np.isfinite(part).all() for part in _passes(X)):
        raise ValueError("X contains NaN or infinity")
    return X


# Inputs are predicted in passes of at most this many examples: what a pass holds on the
# device (the inputs, the first layer's moments) is bounded by it, not by len(X). Up to
# it (the 10,000-image test sets) one pass gives exactly what predicting all at once
# gives; each further pass takes the next weight samples, so every example still gets
# num_samples independent draws.
PASS_EXAMPLES = 10_000


def _passes(X):
    for start in range(0, X.shape[0], PASS_EXAMPLES):
        yield X[start:start + PASS_EXAMPLES]


def _batches(X, batch_size, ctx):
    check_int(batch_size, "batch_size", 1)
    for start in range(0, X.shape[0], batch_size):
        yield mx.nd.array(X[start:start + batch_size], ctx=ctx, dtype="float32")


def _probs(out, likelihood):
    if likelihood == "gaussian":  # the network's output is the predictive mean itself
        return out
    if likelihood == "bernoulli":
        p1 = mx.nd.sigmoid(out.reshape(out.shape[:-1] + (1,) if out.ndim == 3 else (-1, 1)))
        return mx.nd.concat(1 - p1, p1, dim=-1)
    return mx.nd.softmax(out, axis=-1)


# Small networks predict every weight sample at once (batched matrix products) instead of
# one forward pass per sample: for a 2x5 network a pass costs far more in Python and
# operator dispatch than in arithmetic. Limits on the arrays one chunk of samples needs:
_BATCHED_MAX_WEIGHTS = 50_000   # posterior size up to which the batched path is taken
_BATCHED_FLOATS = 1 << 23       # floats (32 MiB) per chunk: weight draws, and activations


def _batched_plan(net, posterior, X):
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


def _batched_draws(posterior, num_samples, ctx):
    """``num_samples`` draws of every parameter, each of shape ``(S,) + shape``, from one
    counter of the prediction stream."""
    noise = _Noise(posterior, ctx)
    draws = []
    for k, (mu, sigma) in enumerate(zip(posterior.mu(ctx), posterior.sigma(ctx),
                                        strict=True)):
        eps = noise.normal((num_samples,) + mu.shape, layer=k)
        draws.append(mx.nd.broadcast_add(mu.expand_dims(0),
                                         mx.nd.broadcast_mul(sigma.expand_dims(0), eps)))
    return dict(zip(posterior.keys, draws, strict=True))


def _batched_outputs(steps, weights, xb):
    """Raw outputs ``(S, N, outputs)`` of the MLP for the S weight draws in ``weights``."""
    num_samples = next(iter(weights.values())).shape[0]
    h = mx.nd.broadcast_to(xb.expand_dims(0), (num_samples,) + xb.shape)
    for weight, bias, act in steps:
        if weight is not None:
            h = mx.nd.batch_dot(h, weights[weight], transpose_b=True)
            if bias is not None:
                h = mx.nd.broadcast_add(h, weights[bias].expand_dims(1))
        if act is not None:
            h = act(h)
    return h


def _batched_probs(plan, posterior, X, num_samples, batch_size, ctx, likelihood):
    """Per-sample probabilities as a list over batches of ``X`` of ``(S, B, C)`` NDArrays."""
    steps, width = plan
    batches = list(_batches(X, batch_size, ctx))
    per_chunk = max(1, min(_BATCHED_FLOATS // max(posterior.num_weights, 1),
                           _BATCHED_FLOATS // (min(batch_size, len(X)) * width)))
    out = [[] for _ in batches]
    with autograd.pause():
        for start in range(0, num_samples, per_chunk):
            weights = _batched_draws(posterior, min(per_chunk, num_samples - start), ctx)
            for i, xb in enumerate(batches):
                out[i].append(_probs(_batched_outputs(steps, weights, xb), likelihood))
    return [mx.nd.concat(*chunks, dim=0) for chunks in out]


def predict_proba(net, X, posterior=None, num_samples=0, batch_size=1000, ctx=None,
                  likelihood="softmax", mc_dropout=False):
    """Class probabilities for ``X``.

    Parameters
    ----------
    net : gluon.Block
    X : ndarray, shape (N, D)
    posterior : Posterior, optional
        ``None`` for a deterministic network (plain or dropout baseline).
    num_samples : int, default 0
        With a posterior: 0 predicts with the means :math:`\\mu`; ``S > 0`` averages the
        class probabilities over ``S`` weight samples. Without one: ``S > 0`` with
        ``mc_dropout=True`` averages over ``S`` dropout masks (MC dropout).
    batch_size : int, default 1000
    ctx : Context, optional
        Default: the posterior's (or the network's) first context.
    likelihood : {"softmax", "bernoulli", "gaussian"}
        How outputs map to probabilities (bernoulli: one logit, returned as two columns);
        "gaussian" (regression) returns the network's outputs, the means of the predictive
        for each input, averaged over the samples.

    Returns
    -------
    ndarray
        Shape (N, C), float32, rows summing to 1.

    Notes
    -----
    Runs with :func:`bbb_gluon.threads.predict_threads` OpenMP threads (every core by
    default) on a CPU context.
    """
    X = _check_inputs(X)
    check_int(num_samples, "num_samples", 0)
    if ctx is None:
        ctx = posterior.contexts[0] if posterior is not None else \
            next(iter(net.collect_params().values())).list_ctx()[0]
    with using_threads(predict_threads(), ctx):
        return np.concatenate([_predict_proba(net, part, posterior, num_samples, batch_size,
                                              ctx, likelihood, mc_dropout)
                               for part in _passes(X)])


def _predict_proba(net, X, posterior, num_samples, batch_size, ctx, likelihood, mc_dropout):
    chunks = []
    if posterior is None:
        repeats = num_samples if (mc_dropout and num_samples > 0) else 1
        for xb in _batches(X, batch_size, ctx):
            acc = None
            for _ in range(repeats):
                with autograd.train_mode() if mc_dropout else autograd.predict_mode():
                    p = _probs(net(xb), likelihood)
                acc = p if acc is None else acc + p
            chunks.append(acc / repeats)
    elif num_samples == 0:
        with use_means(net, posterior, ctx):
            chunks = [_probs(net(xb), likelihood) for xb in _batches(X, batch_size, ctx)]
    else:
        chunks = _mc_mean(net, posterior, X, num_samples, batch_size, ctx, likelihood)
    return mx.nd.concat(*chunks, dim=0).asnumpy()


def _draw_weights(posterior, ctx, keep_means=0):
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
    parameters are the posterior's first ones; else None."""
    if not isinstance(net, nn.Sequential | nn.HybridSequential) or len(net) < 2:
        return None
    first = net[0]
    if not isinstance(first, nn.Dense) or posterior.keys[:1] != ["0.weight"]:
        return None
    # net[1:] shares the layers (and their parameters); build and hybridize it once.
    cached = _REST.get(net)
    if cached is None or cached[0] != len(net) or cached[1] is not first:
        rest = net[1:]
        # Block has no public "is hybridized" query; the slice must match the network.
        if net._active:
            rest.hybridize()
        cached = _REST[net] = (len(net), first, rest)
    return first, cached[2]


def _mc_mean(net, posterior, X, num_samples, batch_size, ctx, likelihood):
    """Monte-Carlo predictive mean, one NDArray chunk per batch.

    The first layer's input is the same for every weight sample, so its pre-activations
    are drawn directly (the local reparameterisation of Kingma et al. 2015): for one
    example they are independent Gaussians with mean :math:`x\\mu^T` and variance
    :math:`x^2 (\\sigma^2)^T`, both computed once for all samples; each sample then
    costs one normal draw per hidden unit instead of a 784-wide matrix product. The
    predictive of every example has exactly the distribution it has with sampled weights
    (examples are never mixed in a prediction). Later layers use sampled weights.
    """
    plan = _batched_plan(net, posterior, X)
    if plan is not None:
        posterior.check_net(net)
        return [p.mean(axis=0) for p in
                _batched_probs(plan, posterior, X, num_samples, batch_size, ctx, likelihood)]
    batches = list(_batches(X, batch_size, ctx))
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
                and first.act._act_type == "relu"
            first_keys = 2 if has_bias else 1
            for _ in range(num_samples):
                weights = _draw_weights(posterior, ctx, keep_means=first_keys)
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
                        p = _probs(rest(hidden), likelihood)
                        acc[i] = p if acc[i] is None else acc[i] + p
        else:
            for _ in range(num_samples):
                with use_weights(net, posterior, _draw_weights(posterior, ctx), ctx):
                    for i, xb in enumerate(batches):
                        p = _probs(net(xb), likelihood)
                        acc[i] = p if acc[i] is None else acc[i] + p
    return [a / num_samples for a in acc]


def predict_samples(net, posterior, X, num_samples, batch_size=1000, ctx=None,
                    likelihood="softmax"):
    """Class probabilities under each of ``num_samples`` weight samples.

    Returns
    -------
    ndarray of shape (num_samples, N, C): its mean over axis 0 is the Monte-Carlo
    predictive, its standard deviation the spread that the weight uncertainty causes.
    With ``likelihood="gaussian"`` the network's outputs per sample instead of
    probabilities (regression: the quantiles over axis 0 give a credible band).

    Notes
    -----
    Small Sequential MLPs (up to 50,000 weights, Dense/Activation/Dropout layers, every
    weight Bayesian, 2-D inputs) compute all samples at once with batched matrix
    products; other networks run one forward pass per sample. Runs with
    :func:`bbb_gluon.threads.predict_threads` OpenMP threads on a CPU context.
    """
    X = _check_inputs(X)
    check_int(num_samples, "num_samples", 1)
    ctx = ctx or posterior.contexts[0]
    with using_threads(predict_threads(), ctx):
        # Each pass goes straight into the result: a list of passes to concatenate would
        # hold the (S, N, C) result twice.
        out, start = None, 0
        for part in _passes(X):
            probs = _predict_samples(net, posterior, part, num_samples, batch_size, ctx,
                                     likelihood)
            if out is None:
                if len(part) == len(X):
                    return probs
                out = np.empty((probs.shape[0], len(X), *probs.shape[2:]), probs.dtype)
            out[:, start:start + len(part)] = probs
            start += len(part)
        return out


def _predict_samples(net, posterior, X, num_samples, batch_size, ctx, likelihood):
    plan = _batched_plan(net, posterior, X)
    if plan is not None:
        posterior.check_net(net)
        parts = _batched_probs(plan, posterior, X, num_samples, batch_size, ctx, likelihood)
        return mx.nd.concat(*parts, dim=1).asnumpy()
    batches = list(_batches(X, batch_size, ctx))
    per_sample = []
    with autograd.pause():
        for _ in range(num_samples):
            with use_weights(net, posterior, _draw_weights(posterior, ctx), ctx):
                per_sample.append(mx.nd.concat(*[_probs(net(xb), likelihood)
                                                 for xb in batches], dim=0))
    return mx.nd.stack(*per_sample).asnumpy()


def error_rate(probs, y):
    """Fraction of examples whose most probable class is not the label."""
    y = np.asarray(y).reshape(-1)
    return float(np.mean(np.argmax(probs, axis=1) != y))


def _dropout_samples(net, X, num_samples, batch_size, ctx, likelihood):
    """(S, N, C) probabilities of a deterministic net under S dropout masks (MC dropout)."""
    batches = list(_batches(X, batch_size, ctx))
    per_sample = []
    with autograd.pause(), autograd.train_mode():
        for _ in range(num_samples):
            per_sample.append(mx.nd.concat(*[_probs(net(xb), likelihood) for xb in batches],
                                           dim=0))
    # One transfer to the host for all samples.
    return mx.nd.stack(*per_sample).asnumpy()


# A user's entry point: every keyword is documented with its default.
def uncertainty(net, posterior, X, num_samples, batch_size=1000, ctx=None,
                likelihood="softmax", mc_dropout=False, keep_samples=True):
    """Monte-Carlo predictive and its uncertainty measures for ``X``.

    Parameters
    ----------
    net : gluon.Block
    posterior : Posterior or None
        With a posterior, the samples are weight samples (:func:`predict_samples`).
        ``None`` with ``mc_dropout=True``: dropout masks at test time (MC dropout).
        ``None`` without it: one deterministic prediction (S = 1, mutual information 0).
    X : ndarray, shape (N, D)
    num_samples : int
        S >= 1 (ignored for a deterministic prediction).
    batch_size : int, default 1000
    ctx : Context, optional
    likelihood : {"softmax", "bernoulli"}, default "softmax"
    mc_dropout : bool, default False

    Returns
    -------
    dict of ndarray
        ``"probs"`` (N, C): the predictive mean; ``"predictive_entropy"``,
        ``"expected_entropy"``, ``"mutual_information"`` (N,) in nats; ``"std"`` (N, C):
        per-class standard deviation over samples; ``"sample_probs"`` (S, N, C), unless
        ``keep_samples=False``: then memory stays bounded by the pass size
        (``PASS_EXAMPLES``) times S, whatever N is.
    """
    X = _check_inputs(X)
    check_int(num_samples, "num_samples", 1)
    parts = [_uncertainty(net, posterior, part, num_samples, batch_size, ctx, likelihood,
                          mc_dropout, keep_samples) for part in _passes(X)]
    return {k: np.concatenate([p[k] for p in parts], axis=1 if k == "sample_probs" else 0)
            for k in parts[0]}


# uncertainty's parameters, handed on for one bounded pass.
def _uncertainty(net, posterior, X, num_samples, batch_size, ctx, likelihood, mc_dropout,
                 keep_samples):
    if posterior is not None:
        samples = predict_samples(net, posterior, X, num_samples, batch_size, ctx, likelihood)
    else:
        ctx = ctx or next(iter(net.collect_params().values())).list_ctx()[0]
        if mc_dropout:
            samples = _dropout_samples(net, X, num_samples, batch_size, ctx, likelihood)
        else:
            samples = predict_proba(net, X, None, 0, batch_size, ctx, likelihood)[None]
    samples = samples.astype(np.float64)
    out = {"probs": samples.mean(axis=0),
           "predictive_entropy": predictive_entropy(samples),
           "expected_entropy": expected_entropy(samples),
           "mutual_information": mutual_information(samples),
           "std": class_std(samples)}
    if keep_samples:
        out["sample_probs"] = samples
    return out
