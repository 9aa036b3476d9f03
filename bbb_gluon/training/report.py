"""What a finished run reports: its test errors in ``metrics.json`` and its learning curve.

The command line's ``train`` calls :func:`write_report` after ``fit``; a notebook that
trains with a ``run_dir`` can call it the same way to get the same files.
"""

import json
import os

from .._files import atomic_write_text
from ..prediction import error_rate, predict_proba
from .checkpoint import load_run

__all__ = ["write_report"]


def write_report(result, test, test_samples=10, ctx=None, name="", wall_seconds=None):
    """Write ``metrics.json`` and ``learning_curve.png`` into a finished run's folder;
    return the metrics.

    The test error of the checkpoint chosen by the lowest validation error (or of the
    last epoch, without a validation split) with the means and, for Bayes by Backprop,
    averaged over ``test_samples`` weight samples; ``end_of_training`` holds the same for
    the last epoch.

    Parameters
    ----------
    result : TrainResult
        What ``fit(..., run_dir=...)`` returned: its folder's checkpoints are evaluated.
    test : (X, y)
        The test split.
    test_samples : int
        Weight samples of the Monte-Carlo predictive (0: the means only).
    ctx : Context, optional
        Where to predict.
    name : str
        The dataset's name, for ``metrics.json`` and the figure's title.
    wall_seconds : float, optional
        Recorded as ``wall_seconds_this_invocation``.
    """
    from .. import plotting

    run_dir, history, config = result.run_dir, result.history, result.config
    has_valid = bool(history) and history[-1].get("valid_error") is not None
    best = _test_errors(run_dir, "best", test, test_samples, ctx)
    end = _test_errors(run_dir, "latest", test, test_samples, ctx) if has_valid else dict(best)
    best_epoch = best.pop("epoch")
    metrics = {"dataset": name, "model": config.model, "hidden": list(config.hidden),
               "epochs": len(history), "best_epoch": best_epoch,
               "selected_by": ("lowest validation error (means)" if has_valid
                               else "end of training (no validation split)"),
               "seconds_per_epoch": sum(r["seconds"] for r in history) / max(len(history), 1),
               "wall_seconds_this_invocation": wall_seconds, **best,
               "end_of_training": end}
    if has_valid:
        metrics["best_valid_error"] = min(r["valid_error"] for r in history)
    atomic_write_text(os.path.join(run_dir, "metrics.json"), json.dumps(metrics, indent=1))
    figure = plotting.plot_learning_curve(history, os.path.join(run_dir, "learning_curve.png"),
                                          title=f"{name} {config.model} {config.hidden}")
    import matplotlib.pyplot as plt

    plt.close(figure)
    return metrics


def _test_errors(run_dir, which, test, test_samples, ctx):
    net, posterior, _, meta = load_run(run_dir, which, ctx=ctx)
    X, y = test
    errors = {"epoch": meta["epoch"],
              "test_error_means": error_rate(predict_proba(net, posterior, X, 0, ctx=ctx), y)}
    if posterior is not None and test_samples > 0:
        errors["test_samples"] = test_samples
        errors["test_error_mc"] = error_rate(
            predict_proba(net, posterior, X, test_samples, ctx=ctx), y)
    return errors
