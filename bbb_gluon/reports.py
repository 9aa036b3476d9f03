"""Writing reports into run folders: a finished run's test errors and learning curve
(:func:`write_report`, after ``fit``), and the evaluation and pruning reports with their
figures (:func:`evaluate_run`, :func:`prune_run`). :mod:`bbb_gluon.runs` reads run folders;
this module writes into them.

The command line's ``train`` calls :func:`write_report` after ``fit``; a notebook that
trains with a ``run_dir`` can call it the same way to get the same files.
"""

import json
import math
import os

import numpy as np

from ._files import FileWriteError, atomic_write_text
from .methods import learns_posterior, method_of
from .prediction import error_rate, predict_proba
from .runs import RunFolderError, load_test_split, output_path, read_run_config
from .training import load_run

__all__ = ["write_report", "EVALUATION_PLOTS", "evaluation_files", "evaluate_run",
           "pruning_files", "prune_run"]


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
    from . import plotting

    run_dir, history, config = result.run_dir, result.history, result.config
    hidden = list(result.mlp.hidden) if result.mlp is not None else None
    has_valid = bool(history) and history[-1].get("valid_error") is not None
    best = _test_errors(run_dir, "best", test, test_samples, ctx)
    end = _test_errors(run_dir, "latest", test, test_samples, ctx) if has_valid else dict(best)
    best_epoch = best.pop("epoch")
    metrics = {"dataset": name, "model": config.model, "hidden": hidden,
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
                                          title=f"{name} {config.model} {_shape(hidden)}")
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


EVALUATION_PLOTS = ("reliability.png", "least_certain.png")


def evaluation_files(run_dir, which="best", ood=None):
    """Every file :func:`evaluate_run` writes, to check before it starts."""
    names = ("evaluation.json", *EVALUATION_PLOTS) + (
        ("entropy_histograms.png",) if ood else ())
    return [output_path(run_dir, name, which) for name in names]


def evaluate_run(run_dir, which="best", samples=100, ood=None, bins=15, ctx=None,
                 data_dir=None):
    """Test error, calibration and out-of-distribution detection of a run's checkpoint.

    Writes ``evaluation.json`` (the returned report) and its figures (reliability diagram,
    least certain test images and, with ``ood``, entropy histograms) into ``run_dir``,
    named by :func:`output_path`; returns the report (the file holds null where the report
    has NaN: an empty reliability bin).

    Parameters
    ----------
    which : {"best", "latest"}
    samples : int
        Weight samples (or dropout masks) of the predictive.
    ood : str, optional
        A dataset of :data:`bbb_gluon.data.DATASETS` other than the run's own, whose test
        images (as many as the run's test images, through its transform) are the
        out-of-distribution inputs.
    bins : int
        Bins of the calibration error and the reliability diagram.
    """
    import time

    from . import data
    from .evaluation import evaluate_model

    dataset = read_run_config(run_dir)["data"].get("dataset")
    if ood is not None and ood not in data.DATASETS:
        raise ValueError(f"unknown out-of-distribution dataset {ood!r}; choose one of "
                         f"{data.DATASETS}")
    if ood is not None and ood == dataset:
        raise ValueError(f"the out-of-distribution dataset {ood} is the run's own dataset")
    net, posterior, config, meta = load_run(run_dir, which, ctx=ctx)
    splits = load_test_split(run_dir, config.seed, data_dir)
    Xt, yt = splits.test
    X_ood = None
    if ood is not None:
        images, _ = data.load_raw(ood, train=False, root=data_dir if data_dir is not None
                                  else read_run_config(run_dir)["data"].get("data_dir"))
        # As many OOD images as in-distribution ones (a --subset run has fewer), through
        # the run's own transform: the network sees them as it would see its own data.
        X_ood = splits.transform(images[:len(yt)])

    kind = config.model
    hidden = meta["mlp"]["hidden"] if meta.get("mlp") else None
    t0 = time.perf_counter()
    evaluation = evaluate_model(net, posterior, Xt, yt, kind, samples, X_ood, bins,
                                ctx=ctx, likelihood=config.likelihood)
    report = {"run_dir": os.path.abspath(run_dir), "dataset": splits.name, "model": kind,
              "hidden": hidden, "checkpoint": which,
              "epoch": meta.get("epoch"), "batch": meta.get("batch") or 0,
              "best_epoch": meta.get("best", {}).get("epoch"), **evaluation.summary,
              "seconds": time.perf_counter() - t0}
    if report["ood"] is not None:
        report["ood"] = {"dataset": ood, **report["ood"]}

    try:
        _write_evaluation(report, evaluation, run_dir, which, ood, Xt, yt,
                          f"{splits.name} {kind} {_shape(hidden)}")
    except FileWriteError as e:
        e.report = report  # what was computed, for a caller to show all the same
        raise
    return report


def _write_evaluation(report, evaluation, run_dir, which, ood, Xt, yt, name):
    """evaluation.json and the figures of :func:`evaluate_run`'s ``report``."""
    import matplotlib.pyplot as plt

    from . import plotting

    kind, u_in, u_out = report["model"], evaluation.uncertainty_in, evaluation.uncertainty_out
    paths = dict(zip(("json", "reliability", "least_certain", "entropy_histograms"),
                     evaluation_files(run_dir, which, ood), strict=False))
    figs = [plotting.plot_reliability_diagram(evaluation.summary["reliability"],
                                              paths["reliability"],
                                              title=f"{name}: {report['predictive']}",
                                              ece=report["ece"]),
            plotting.plot_least_certain(Xt, evaluation.probs.argmax(axis=1),
                                        u_in["predictive_entropy"], labels=yt,
                                        path=paths["least_certain"],
                                        title=f"{name}: least certain test images")]
    if u_out is not None:
        with_mi = method_of(kind).samples
        figs.append(plotting.plot_entropy_histograms(
            u_in["predictive_entropy"], u_out["predictive_entropy"],
            u_in["mutual_information"] if with_mi else None,
            u_out["mutual_information"] if with_mi else None,
            path=paths["entropy_histograms"], labels=(f"{report['dataset']} (in)",
                                                       f"{ood} (out)"),
            title=name))
    for fig in figs:
        plt.close(fig)
    report["plots"] = {k: os.path.basename(v) for k, v in paths.items() if k != "json"}
    atomic_write_text(paths["json"], json.dumps(_json_safe(report), indent=1) + "\n")


def _json_safe(value):
    """NaN (an empty reliability bin) as null: json.dump would write invalid JSON."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [_json_safe(v) for v in (value.tolist() if isinstance(value, np.ndarray)
                                        else value)]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    return value


def pruning_files(run_dir, which="best", fractions=(0.95,)):
    """Every file :func:`prune_run` writes, to check before it starts."""
    names = ("pruning.csv", f"pruned_{max(fractions):g}.params", "weight_statistics.json",
             "snr_histogram.png", "snr_cdf.png")
    return [output_path(run_dir, name, which) for name in names]


def prune_run(run_dir, fractions, which="best", ctx=None, data_dir=None):
    """Signal-to-noise pruning of a Bayes-by-Backprop run's checkpoint (the paper's Table 2).

    Writes, named by :func:`output_path`: ``pruning.csv`` (the test error with the means
    after removing each fraction of the weights by |μ|/σ and by |μ|), the sparse export at
    the largest fraction, ``weight_statistics.json`` (σ against |μ| per array) and the
    signal-to-noise density and CDF. Returns ``{"table", "export", "statistics",
    "dataset", "num_test", "epoch", "batch"}``.
    """
    import matplotlib.pyplot as plt

    from . import plotting
    from ._files import atomic_write_text
    from .pruning import (
        check_fractions,
        evaluate_pruning,
        export_pruned,
        pruning_scores,
        thresholds,
        weight_statistics,
    )
    from .training import load_run

    check_fractions(fractions)
    model = read_run_config(run_dir)["train"].get("model")
    if not learns_posterior(model):
        raise RunFolderError(f"{run_dir} is a {model!r} run; pruning needs a bbb run (it "
                             "ranks weights by the posterior's signal-to-noise ratio)")
    csv_path, export_path, stats_path, hist_path, cdf_path = pruning_files(run_dir, which,
                                                                          fractions)
    net, posterior, config, meta = load_run(run_dir, which, ctx=ctx)
    splits = load_test_split(run_dir, config.seed, data_dir)
    Xt, yt = splits.test
    table = evaluate_pruning(net, posterior, Xt, yt, fractions, ctx=ctx,
                             likelihood=config.likelihood)
    lines = ["fraction,weights_left,error_by_snr,error_by_abs_mu"]
    lines += [f"{r['fraction']!r},{r['weights_left']},{r['error_by_snr']!r},"
              f"{r['error_by_abs_mu']!r}" for r in table]
    atomic_write_text(csv_path, "\n".join(lines) + "\n")
    export = export_pruned(export_path, posterior, max(fractions), "snr", ctx=ctx, net=net)
    stats = weight_statistics(posterior, ctx)
    atomic_write_text(stats_path, json.dumps(stats, indent=1) + "\n")
    scores = pruning_scores(posterior, "snr", ctx)
    cutoffs = dict(zip(fractions, thresholds(scores, fractions), strict=True))
    snr = np.concatenate([s.reshape(-1) for s in scores.values()])
    for fig in (plotting.plot_snr_histogram(snr, cutoffs, hist_path),
                plotting.plot_snr_cdf(snr, cutoffs, cdf_path)):
        plt.close(fig)
    return {"table": table, "export": export, "statistics": stats, "dataset": splits.name,
            "num_test": len(yt), "epoch": meta.get("epoch"), "batch": meta.get("batch") or 0}


def _shape(hidden):
    """The MLP's hidden layers as a title shows them ("400x400"), or "own network"."""
    return "x".join(map(str, hidden)) if hidden else "own network"
