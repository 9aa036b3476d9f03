"""The run's history: one row per epoch (losses, errors, seconds, σ statistics), written as
CSV and JSON after every epoch.
"""

import contextlib
import json
import os
import time

import mxnet as mx
from mxnet import autograd

from .._files import (
    atomic_write_text,
)
from ..core.sampling import use_means
from ..prediction import error_rate, predict_proba


def write_history(run_dir, history):
    atomic_write_text(os.path.join(run_dir, "history.json"), json.dumps(history, indent=1))
    if not history:
        return
    cols = list(history[0])
    lines = [",".join(cols)] + [",".join(_fmt(row.get(c)) for c in cols) for row in history]
    atomic_write_text(os.path.join(run_dir, "history.csv"), "\n".join(lines) + "\n")


def _fmt(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


def epoch_row(run, epoch, nll, complexity, sums, evaluate):
    """One row of the history: the epoch's costs and time and, when ``evaluate`` (rank 0
    of a distributed run), the validation and test errors, or the user's loss."""
    row = {"epoch": epoch + 1, "cost": nll + complexity, "complexity_cost": complexity,
           "likelihood_cost": nll, "nll_per_example": nll / sums.examples,
           "seconds": sums.seconds}
    for name, (X, y) in (("valid", run.valid), ("test", run.test)):
        if evaluate and X is not None:
            row.update(_scores(run, name, X, y))
    return row


def _scores(run, name, X, y):
    """The errors with the means and (``eval_samples``) averaged over samples, or the mean
    of a loss of the user's with the means; and the seconds they took."""
    t0 = time.perf_counter()
    net, posterior, config, ctx = run.net, run.posterior, run.config, run.ctxs[0]
    if run.loss is not None:
        scores = {f"{name}_loss": _mean_loss(net, posterior, run.loss, X, y, ctx)}
    else:
        probs = predict_proba(net, posterior, X, 0, ctx=ctx, likelihood=config.likelihood)
        scores = {f"{name}_error": error_rate(probs, y), f"{name}_error_mc": None}
        if posterior is not None and config.eval_samples > 0:
            probs = predict_proba(net, posterior, X, config.eval_samples, ctx=ctx,
                                  likelihood=config.likelihood)
            scores[f"{name}_error_mc"] = error_rate(probs, y)
    scores["test_eval_seconds" if name == "test" else "eval_seconds"] = \
        time.perf_counter() - t0
    return scores


def _mean_loss(net, posterior, loss, X, y, ctx, batch_size=1000):
    """Mean per example of ``loss`` over ``(X, y)``, predicting with the means."""
    total = mx.nd.zeros((1,), ctx=ctx)
    with autograd.predict_mode(), contextlib.ExitStack() as stack:
        if posterior is not None:
            stack.enter_context(use_means(net, posterior, ctx))
        for start in range(0, len(X), batch_size):
            xb = mx.nd.array(X[start:start + batch_size], ctx=ctx)
            yb = mx.nd.array(y[start:start + batch_size], ctx=ctx)
            total += loss(net(xb), yb).sum()
    return float(total.asscalar()) / len(X)
