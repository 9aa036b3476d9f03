"""Reading finished (or running) run folders: one summary row per run, and their weights.

A run folder is what ``bbb-gluon train --out`` writes: ``config.json``, ``history.csv``
(one row per finished epoch, rewritten atomically each epoch, so a run still training can
be read), ``metrics.json`` once training has finished, and ``checkpoints/``. The results
committed under ``results/`` are the same folders without their checkpoints, so
:func:`summarize_run` reads both; :func:`run_weights` needs the checkpoint.

These are what a hyperparameter search and ``docs/RESULTS.md`` are built from
(``bbb-gluon compare`` and ``bbb-gluon weights``); :mod:`bbb_gluon.reports` writes into
the folders.
"""

import csv
import json
import os

import numpy as np

from .core.priors import make_prior, prior_kinds
from .methods import learns_posterior

__all__ = ["RunFolderError", "SUMMARY_COLUMNS", "read_run_config", "read_history",
           "summarize_run", "errors_at", "curve_column", "run_weights", "output_path",
           "load_test_split", "default_ood"]

# Each prior's own columns (Prior.summary_columns), in the order the priors are defined.
PRIOR_COLUMNS = tuple(dict.fromkeys(
    column for cls in prior_kinds().values() for column in cls.summary_columns()))

SUMMARY_COLUMNS = (
    "run", "dataset", "transform", "model", "hidden", "prior", *PRIOR_COLUMNS, "prior_label",
    "weighting", "rho_init", "optimizer", "loss_reduction", "lr",
    "samples", "epochs_run", "epochs_planned", "best_epoch", "best_valid_error",
    "last_valid_error", "median_seconds_per_epoch", "test_error_means", "test_error_mc",
    "test_samples", "end_test_error_means", "end_test_error_mc", "last10_test_error")


class RunFolderError(ValueError):
    """A folder that is not a readable run (no or corrupt config.json / history.csv)."""


def _read_json(path):
    try:
        with open(path) as f:
            stored = json.load(f)
        if not isinstance(stored, dict):
            raise ValueError
    except ValueError:
        raise RunFolderError(f"{path} is corrupt (not a JSON object)") from None
    return stored


def read_run_config(run_dir):
    """A run folder's ``config.json``: ``{"train": {...}, "data": {...}}``.

    Raises
    ------
    RunFolderError
        No ``config.json``, or one that is not JSON or lacks the two sections (a hand-edited
        file must give a one-line error in the commands, not a traceback).
    """
    path = os.path.join(run_dir, "config.json")
    if not os.path.isfile(path):
        raise RunFolderError(f"{run_dir} is not a run folder (no config.json)")
    try:
        stored = _read_json(path)
    except RunFolderError:
        stored = None
    if not (stored and isinstance(stored.get("train"), dict)
            and isinstance(stored.get("data"), dict)):
        raise RunFolderError(f"{path} is corrupt or not a bbb_gluon run configuration")
    return stored


def _number(text):
    return float(text) if text not in ("", None) else None


def read_history(run_dir):
    """The rows of ``history.csv`` as dicts of floats (``None`` where a column is empty).

    Raises
    ------
    RunFolderError
        No ``history.csv`` (no epoch finished yet), or one that cannot be read.
    """
    path = os.path.join(run_dir, "history.csv")
    if not os.path.isfile(path):
        raise RunFolderError(f"{run_dir} has no history.csv (not a run, or no epoch finished)")
    try:
        with open(path, newline="") as f:
            rows = [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(f)]
        if not rows or any(r.get("epoch") is None for r in rows):
            raise ValueError
    except (ValueError, TypeError):
        raise RunFolderError(f"{path} is corrupt (expected a header and numeric rows)") from None
    return rows


def curve_column(history):
    """The error a run's learning curve shows: ``"valid_error"`` where it has a validation
    split, else ``"test_error"`` (recorded with ``--monitor-test``), else None."""
    for column in ("valid_error", "test_error"):
        if any(r.get(column) is not None for r in history):
            return column
    return None


def errors_at(history, epochs, column):
    """``column`` of ``history`` at each of ``epochs`` (1-based; None where not reached)."""
    by_epoch = {int(r["epoch"]): r.get(column) for r in history}
    return [by_epoch.get(int(e)) for e in epochs]


def _stored_prior(run_dir, train):
    """The Prior of a run's stored settings (``None`` where it stored none)."""
    stored = train.get("prior")
    if not stored:
        return None
    try:
        return make_prior(**stored)
    except (TypeError, ValueError) as e:
        raise RunFolderError(f"{run_dir}/config.json: its prior {stored!r} is not one this "
                             f"version knows ({e})") from None


def summarize_run(run_dir):
    """One row describing a run: its settings, how far it got and its errors.

    The best epoch is the one with the lowest validation error (the first of ties, as
    :func:`~bbb_gluon.training.fit` keeps it), read from ``history.csv``, so a run still
    training is summarised as far as it got. Test errors come from ``metrics.json`` and
    are ``None`` until training has finished.

    Returns
    -------
    dict with the keys of :data:`SUMMARY_COLUMNS` (settings that do not apply, e.g. the
    prior of a plain network, are ``None``).
    """
    run_dir = os.fspath(run_dir)
    stored = read_run_config(run_dir)
    train, data = stored["train"], stored["data"]
    history = read_history(run_dir)
    metrics_path = os.path.join(run_dir, "metrics.json")
    metrics = _read_json(metrics_path) if os.path.isfile(metrics_path) else {}

    valid = [(r["valid_error"], int(r["epoch"])) for r in history
             if r.get("valid_error") is not None]
    best_error, best_epoch = min(valid) if valid else (None, None)  # ties: the earliest
    seconds = [r["seconds"] for r in history if r.get("seconds") is not None]
    end = metrics.get("end_of_training") or {}
    monitored = [r["test_error"] for r in history if r.get("test_error") is not None]
    bbb = learns_posterior(train.get("model"))
    prior = _stored_prior(run_dir, train) if bbb else None
    prior_columns = dict.fromkeys(PRIOR_COLUMNS)
    if prior is not None:
        prior_columns.update(prior.summary())

    return {
        "run": os.path.basename(os.path.normpath(run_dir)),
        "dataset": data.get("dataset"),
        "transform": data.get("transform"),
        "model": train.get("model"),
        # the MLP's own entry; a config.json written before it had one keeps it in "train"
        "hidden": "x".join(str(h) for h in (stored.get("mlp") or train).get("hidden", [])),
        "prior": prior.kind if prior is not None else None,
        **prior_columns,
        "prior_label": prior.label() if prior is not None else None,
        "weighting": train.get("weighting") if bbb else None,
        "rho_init": train.get("rho_init") if bbb else None,
        "optimizer": train.get("optimizer"),
        "loss_reduction": train.get("loss_reduction", "mean"),
        "lr": train.get("lr"),
        "samples": train.get("samples") if bbb else None,
        "epochs_run": int(history[-1]["epoch"]),
        "epochs_planned": train.get("epochs"),
        "best_epoch": best_epoch,
        "best_valid_error": best_error,
        "last_valid_error": history[-1].get("valid_error"),
        "median_seconds_per_epoch": float(np.median(seconds)) if seconds else None,
        "test_error_means": metrics.get("test_error_means"),
        "test_error_mc": metrics.get("test_error_mc"),
        "test_samples": metrics.get("test_samples"),
        "end_test_error_means": end.get("test_error_means"),
        "end_test_error_mc": end.get("test_error_mc"),
        # The measure of the reproduction that reported 1.31%: the mean over the last ten
        # epochs of the test error recorded during training (means).
        "last10_test_error": float(np.mean(monitored[-10:])) if len(monitored) >= 10
        else None,
    }


def run_weights(run_dir, which="best", draw="sample", seed=0, ctx=None):
    """Every Dense weight of a run's checkpoint (biases left out), flattened into one array.

    Parameters
    ----------
    run_dir : str
    which : {"best", "latest"}
    draw : {"sample", "means"}
        For a Bayes-by-Backprop run, one draw :math:`w = \\mu + \\sigma\\epsilon` from the
        posterior (what the paper's histogram of weights shows) or the means :math:`\\mu`.
        Plain and dropout runs have one set of weights and ignore it.
    seed : int
        Seed of the draw (NumPy's generator, independent of training's noise).
    ctx : Context, optional

    Returns
    -------
    numpy.ndarray, float32, 1-D.
    """
    from .core.posterior import bayesian_parameters
    from .pruning import prunable_keys
    from .training import load_run

    if draw not in ("sample", "means"):
        raise ValueError(f"draw must be 'sample' or 'means', got {draw!r}")
    net, posterior, _, _ = load_run(run_dir, which, ctx=ctx)
    if posterior is None:
        return np.concatenate([p.data().asnumpy().reshape(-1)
                               for key, p in bayesian_parameters(net).items()
                               if key.rsplit(".", 1)[-1] == "weight"]).astype(np.float32)
    keys = prunable_keys(posterior)
    mus = dict(zip(posterior.keys, posterior.mu(ctx), strict=True))
    sigmas = dict(zip(posterior.keys, posterior.sigma(ctx), strict=True))
    rng = np.random.default_rng(seed)
    parts = []
    for k in keys:
        mu = mus[k].asnumpy().reshape(-1)
        if draw == "sample":
            mu = mu + sigmas[k].asnumpy().reshape(-1) * rng.standard_normal(mu.size)
        parts.append(mu)
    return np.concatenate(parts).astype(np.float32)


def output_path(run_dir, name, which="best"):
    """The path of a file a command writes about one checkpoint: ``name`` for the best,
    ``stem_latest.ext`` for the latest, so the two sets of results sit side by side."""
    if which == "latest":
        stem, ext = os.path.splitext(name)
        name = f"{stem}_latest{ext}"
    return os.path.join(run_dir, name)


def load_test_split(run_dir, seed, data_dir=None):
    """The run's dataset as it was trained (its splits and pixel transform), from the data
    settings in its ``config.json``; ``data_dir`` defaults to the one stored there."""
    from . import data

    stored = read_run_config(run_dir)
    if stored["data"].get("uci") or stored["data"].get("csv"):
        raise RunFolderError(f"{run_dir} is a regression run (bbb-gluon regress): its "
                             f"metrics.json holds its test scores; evaluate and prune read "
                             f"image classifiers")
    try:
        settings = {k: stored["data"][k] for k in ("dataset", "transform", "num_valid",
                                                   "subset")}
    except KeyError:
        raise RunFolderError(f"{run_dir}/config.json has no usable data settings (dataset, "
                             "transform, num_valid, subset)") from None
    if data_dir is None:
        data_dir = stored["data"].get("data_dir")
    try:
        return data.load_dataset(settings["dataset"], root=data_dir,
                                 transform=settings["transform"],
                                 num_valid=settings["num_valid"], seed=seed,
                                 subset=settings["subset"])
    except (data.DataFileError, data.DatasetNotFoundError):
        raise
    except ValueError as e:  # the stored settings (a hand-edited config.json)
        raise RunFolderError(f"{run_dir}/config.json: {e}") from None


def default_ood(run_dir):
    """The out-of-distribution dataset ``evaluate_run`` uses unless told: the other one."""
    from . import data

    dataset = read_run_config(run_dir)["data"].get("dataset")
    others = [d for d in data.DATASETS if d != dataset]
    return others[0] if others else None
