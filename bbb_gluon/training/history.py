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


def _write_history(run_dir, history):
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


def _epoch_row(epoch, nll, complexity, num_examples, seconds, net, posterior, config,
               Xv, yv, ctx, Xt=None, yt=None, loss=None):
    row = {"epoch": epoch + 1, "cost": nll + complexity, "complexity_cost": complexity,
           "likelihood_cost": nll, "nll_per_example": nll / num_examples,
           "seconds": seconds}
    for name, X, y in (("valid", Xv, yv), ("test", Xt, yt)):
        if X is None:
            continue
        t0 = time.perf_counter()
        if loss is not None:  # a loss of the user's: its mean per example, with the means
            row[f"{name}_loss"] = _mean_loss(net, posterior, loss, X, y, ctx)
            row[f"{name}_eval_seconds" if name == "test" else "eval_seconds"] = \
                time.perf_counter() - t0
            continue
        probs = predict_proba(net, X, posterior, 0, ctx=ctx, likelihood=config.likelihood)
        row[f"{name}_error"] = error_rate(probs, y)
        if posterior is not None and config.eval_samples > 0:
            probs = predict_proba(net, X, posterior, config.eval_samples, ctx=ctx,
                                  likelihood=config.likelihood)
            row[f"{name}_error_mc"] = error_rate(probs, y)
        else:
            row[f"{name}_error_mc"] = None
        row[f"{name}_eval_seconds" if name == "test" else "eval_seconds"] = \
            time.perf_counter() - t0
    return row


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
