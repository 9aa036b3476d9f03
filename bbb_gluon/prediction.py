"""Predictions from a trained network: with the posterior means, or Monte-Carlo averaged.

The Monte-Carlo predictive :math:`p(y \\mid x) \\approx \\frac1S \\sum_s p(y \\mid x, w_s)`
draws each weight sample once and runs every batch through it; probabilities accumulate
on the device and reach the host once, at the end.

From the per-sample probabilities of :func:`predict_samples` (shape ``(S, N, C)``) the
uncertainty of each prediction splits into the predictive entropy (total), the expected
entropy (aleatoric) and their difference, the mutual information between label and
weights (epistemic); :func:`uncertainty` computes all of them in one call.
"""


import mxnet as mx
import numpy as np
from mxnet import autograd

from ._checks import as_array, check_int, check_network_takes, renamed_keywords
from ._kernels.threads import predict_threads, using_threads
from .core.likelihood import likelihood_of
from .core.posterior import Posterior
from .core.sampling import use_means, use_weights
from .entropies import class_std, entropy, expected_entropy, mutual_information, predictive_entropy
from .predictive_paths import (
    PREDICTION_STREAM,
    batched_plan,
    batched_probs,
    draw_weights,
    input_batches,
    mc_mean,
)

__all__ = ["predict_proba", "predict_samples", "error_rate", "PREDICTION_STREAM", "entropy",
           "predictive_entropy", "expected_entropy", "mutual_information", "class_std",
           "uncertainty"]

def check_posterior(posterior, function):
    """Refuse, in the user's words, anything but a Posterior or None where every function
    of the package that takes a network and its posterior expects the posterior: the
    second argument, ``(net, posterior, X, ...)``."""
    if posterior is not None and not isinstance(posterior, Posterior):
        raise TypeError(f"{function} takes (net, posterior, X, ...): its second argument is "
                        f"the Posterior, or None for a network without one; got "
                        f"{type(posterior).__name__}")


def _check_inputs(X, name="X"):
    X = as_array(X, name).astype(np.float32, copy=False)
    if X.ndim < 2:
        raise ValueError(f"{name} must have an examples axis first and the input's axes after "
                         f"it (N, features) or (N, channels, height, width), got shape {X.shape}")
    if X.shape[0] == 0:
        raise ValueError(f"{name} holds no examples (shape {X.shape})")
    # Checked a pass at a time: np.isfinite of all of X would be an N x D temporary.
    if not all(np.isfinite(part).all() for part in _passes(X)):
        raise ValueError(f"{name} contains NaN or infinity")
    return X


def checked_inputs(net, posterior, X, ctx, name="X"):
    """``X`` checked as ``_check_inputs`` does, the context to predict on (given, else the
    posterior's first or the network's) and the network's output for X's first example
    (not read back): a mis-shaped ``X`` is refused naming ``name`` before any work."""
    X = _check_inputs(X, name)
    if ctx is None:
        ctx = posterior.contexts[0] if posterior is not None else \
            next(iter(net.collect_params().values())).list_ctx()[0]
    return X, ctx, check_network_takes(net, X, name, ctx)


# Inputs are predicted in passes of at most this many examples: what a pass holds on the
# device (the inputs, the first layer's moments) is bounded by it, not by len(X). Up to
# it (the 10,000-image test sets) one pass gives exactly what predicting all at once
# gives; each further pass takes the next weight samples, so every example still gets
# ``samples`` independent draws.
PASS_EXAMPLES = 10_000


def _passes(X):
    for start in range(0, X.shape[0], PASS_EXAMPLES):
        yield X[start:start + PASS_EXAMPLES]


@renamed_keywords(num_samples="samples")
def predict_proba(net, posterior, X, samples=0, batch_size=1000, ctx=None,
                  likelihood="softmax", mc_dropout=False):
    """Class probabilities for ``X``.

    Parameters
    ----------
    net : gluon.Block
    posterior : Posterior or None
        ``None`` for a deterministic network (plain or dropout baseline).
    X : ndarray, shape (N, D)
    samples : int, default 0
        With a posterior: 0 predicts with the means :math:`\\mu`; ``S > 0`` averages the
        class probabilities over ``S`` weight samples. Without one: ``S > 0`` with
        ``mc_dropout=True`` averages over ``S`` dropout masks (MC dropout).
    batch_size : int, default 1000
    ctx : Context, optional
        Default: the posterior's (or the network's) first context.
    likelihood : {"softmax", "bernoulli", "gaussian"}, or the loss the network trained with
        (a ``BBBLoss`` or its Gluon likelihood, which says the same). How outputs map to
        probabilities (bernoulli: one logit, returned as two columns);
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
    check_posterior(posterior, "predict_proba")
    likelihood = likelihood_of(likelihood)
    check_int(samples, "samples", 0)
    X, ctx, _ = checked_inputs(net, posterior, X, ctx)
    with using_threads(predict_threads(), ctx):
        return np.concatenate([_predict_proba(net, posterior, part, samples, batch_size,
                                              ctx, likelihood, mc_dropout)
                               for part in _passes(X)])


def _predict_proba(net, posterior, X, samples, batch_size, ctx, likelihood, mc_dropout):
    chunks = []
    if posterior is None:
        repeats = samples if (mc_dropout and samples > 0) else 1
        for xb in input_batches(X, batch_size, ctx):
            acc = None
            for _ in range(repeats):
                with autograd.train_mode() if mc_dropout else autograd.predict_mode():
                    p = likelihood.predictive(net(xb))
                acc = p if acc is None else acc + p
            chunks.append(acc / repeats)
    elif samples == 0:
        with use_means(net, posterior, ctx):
            chunks = [likelihood.predictive(net(xb)) for xb in input_batches(X, batch_size, ctx)]
    else:
        chunks = mc_mean(net, posterior, X, samples, batch_size, ctx, likelihood)
    return mx.nd.concat(*chunks, dim=0).asnumpy()


@renamed_keywords(num_samples="samples")
def predict_samples(net, posterior, X, samples, batch_size=1000, ctx=None,
                    likelihood="softmax"):
    """Class probabilities under each of ``samples`` weight samples.

    Returns
    -------
    ndarray of shape (samples, N, C): its mean over axis 0 is the Monte-Carlo
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
    check_posterior(posterior, "predict_samples")
    if posterior is None:
        raise TypeError("predict_samples draws weight samples, so it needs the Posterior; "
                        "for MC dropout, uncertainty(net, None, X, S, mc_dropout=True)")
    likelihood = likelihood_of(likelihood)
    check_int(samples, "samples", 1)
    X, ctx, _ = checked_inputs(net, posterior, X, ctx)
    with using_threads(predict_threads(), ctx):
        # Each pass goes straight into the result: a list of passes to concatenate would
        # hold the (S, N, C) result twice.
        out, start = None, 0
        for part in _passes(X):
            probs = _predict_samples(net, posterior, part, samples, batch_size, ctx,
                                     likelihood)
            if out is None:
                if len(part) == len(X):
                    return probs
                out = np.empty((probs.shape[0], len(X), *probs.shape[2:]), probs.dtype)
            out[:, start:start + len(part)] = probs
            start += len(part)
        return out


def _predict_samples(net, posterior, X, samples, batch_size, ctx, likelihood):
    plan = batched_plan(net, posterior, X)
    if plan is not None:
        posterior.check_net(net)
        parts = batched_probs(plan, posterior, X, samples, batch_size, ctx, likelihood)
        return mx.nd.concat(*parts, dim=1).asnumpy()
    batches = list(input_batches(X, batch_size, ctx))
    per_sample = []
    with autograd.pause():
        for _ in range(samples):
            with use_weights(net, posterior, draw_weights(posterior, ctx), ctx):
                per_sample.append(mx.nd.concat(*[likelihood.predictive(net(xb))
                                                 for xb in batches], dim=0))
    return mx.nd.stack(*per_sample).asnumpy()


def error_rate(probs, y):
    """Fraction of examples whose most probable class is not the label."""
    probs, y = as_array(probs, "probs"), as_array(y, "y").reshape(-1)
    if probs.ndim != 2 or len(probs) != len(y):
        raise ValueError(f"error_rate takes probabilities (N, classes) and N labels, got "
                         f"probs of shape {probs.shape} and {len(y)} labels")
    return float(np.mean(np.argmax(probs, axis=1) != y))


def _dropout_samples(net, X, samples, batch_size, ctx, likelihood):
    """(S, N, C) probabilities of a deterministic net under S dropout masks (MC dropout)."""
    batches = list(input_batches(X, batch_size, ctx))
    per_sample = []
    with autograd.pause(), autograd.train_mode():
        for _ in range(samples):
            per_sample.append(mx.nd.concat(*[likelihood.predictive(net(xb)) for xb in batches],
                                           dim=0))
    # One transfer to the host for all samples.
    return mx.nd.stack(*per_sample).asnumpy()


# A user's entry point: every keyword is documented with its default.
@renamed_keywords(num_samples="samples")
def uncertainty(net, posterior, X, samples, batch_size=1000, ctx=None,
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
    samples : int
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
    check_posterior(posterior, "uncertainty")
    likelihood = likelihood_of(likelihood)
    if not likelihood.classifies:
        raise ValueError(f"uncertainty splits the entropy of class probabilities, so it takes "
                         f"likelihood='softmax' or 'bernoulli', got {likelihood.name!r}; for a "
                         f"regression, predict_samples gives the outputs per weight sample")
    check_int(samples, "samples", 1)
    X, ctx, _ = checked_inputs(net, posterior, X, ctx)
    parts = [_uncertainty(net, posterior, part, samples, batch_size, ctx, likelihood,
                          mc_dropout, keep_samples) for part in _passes(X)]
    return {k: np.concatenate([p[k] for p in parts], axis=1 if k == "sample_probs" else 0)
            for k in parts[0]}


# uncertainty's parameters, handed on for one bounded pass.
def _uncertainty(net, posterior, X, samples, batch_size, ctx, likelihood, mc_dropout,
                 keep_samples):
    if posterior is not None:
        drawn = predict_samples(net, posterior, X, samples, batch_size, ctx, likelihood)
    elif mc_dropout:
        drawn = _dropout_samples(net, X, samples, batch_size, ctx, likelihood)
    else:
        drawn = predict_proba(net, None, X, 0, batch_size, ctx, likelihood)[None]
    drawn = drawn.astype(np.float64)
    out = {"probs": drawn.mean(axis=0),
           "predictive_entropy": predictive_entropy(drawn),
           "expected_entropy": expected_entropy(drawn),
           "mutual_information": mutual_information(drawn),
           "std": class_std(drawn)}
    if keep_samples:
        out["sample_probs"] = drawn
    return out
