"""Figures. Every function takes arrays (never models), returns the matplotlib Figure, and
saves it as PNG when given a path."""

import matplotlib.pyplot as plt
import numpy as np

from . import _files

# The regression figures live in regression_plots (this module's size); they keep their
# names here, loaded on first use (regression_plots imports save from here).
_MOVED = ("plot_predictive_intervals", "plot_regression_bands", "plot_interval_coverage")
__all__ = ["plot_learning_curve", "plot_validation_curves", "plot_grid_map", "save",
           "plot_weight_density",
           "plot_snr_histogram", "plot_snr_cdf", "plot_least_certain",
           "plot_reliability_diagram", "plot_entropy_histograms", "plot_cumulative_regret",
           *_MOVED]


def save(fig, path, crop=True):
    """Save ``fig`` as PNG at ``path`` (if given; atomically, like every file the package
    writes) and return it.

    ``crop``: trim the margins to what is drawn (matplotlib's ``bbox_inches="tight"``, an
    extra drawing pass), so that nothing outside the axes is cut off. The figures of this
    module are laid out to fit (``tight_layout``, or margins that fit the learning curve's
    labels) and save without it.
    """
    if path is not None:
        _files.atomic_write(path, lambda tmp: fig.savefig(
            tmp, format="png", dpi=110, bbox_inches="tight" if crop else None), suffix=".png")
    return fig


def _laid_out(fig, path):
    # Each figure here ends so: laid out to fit its labels, titles and legends, saved.
    fig.tight_layout()
    return save(fig, path, crop=False)


def plot_learning_curve(history, path=None, title=None):
    """Costs and validation errors per epoch, from a training history (list of dicts).

    Left: likelihood and complexity cost per epoch (log scale). Right: validation error
    (%) with the means and, if present, with the Monte-Carlo predictive.
    """
    epochs = [row["epoch"] for row in history]
    fig, (ax_cost, ax_err) = plt.subplots(1, 2, figsize=(10, 3.8))
    ax_cost.plot(epochs, [row["likelihood_cost"] for row in history], label="likelihood cost")
    if any(row.get("complexity_cost") for row in history):
        ax_cost.plot(epochs, [row["complexity_cost"] for row in history],
                     label="complexity cost")
    ax_cost.set_yscale("log")
    ax_cost.set_xlabel("epoch")
    ax_cost.set_ylabel("nats per epoch")
    ax_cost.legend()
    if any(row.get("valid_error") is not None for row in history):
        ax_err.plot(epochs, [100 * row["valid_error"] for row in history], label="means")
        if any(row.get("valid_error_mc") is not None for row in history):
            ax_err.plot(epochs, [100 * row["valid_error_mc"] for row in history],
                        label="Monte-Carlo predictive")
        ax_err.legend()
    ax_err.set_xlabel("epoch")
    ax_err.set_ylabel("validation error (%)")
    if title:
        fig.suptitle(title)
    # Margins that fit this figure's labels (costs on a log scale, errors up to 100%) instead
    # of tight_layout's measuring pass: every training run's report draws this figure, in
    # half the time so (0.33 against 0.66 CPU-s with its PNG, time.process_time over six
    # figures each, alternating, AMD EPYC; tests/test_plotting.py checks the fit).
    fig.subplots_adjust(left=0.075, right=0.985, bottom=0.13, top=0.88 if title else 0.95,
                        wspace=0.22)
    return save(fig, path, crop=False)


def plot_validation_curves(curves, path=None, title="Validation error", ylim=None):
    """Validation error (%) over epochs of several runs on one axis, for comparing settings.

    Parameters
    ----------
    curves : dict
        ``{label: (epochs, errors)}``, errors as fractions.
    path : str, optional
    title : str
    ylim : (low, high) in percent, optional
        Default: from the lowest error to a little above the median of the runs' final
        errors, so early epochs (several times the final error) do not squash the rest.
    """
    if not curves:
        raise ValueError("give at least one curve")
    fig, ax = plt.subplots(figsize=(7.2, 4.2))
    lows, finals = [], []
    for label, (epochs, errors) in curves.items():
        errors = 100 * np.asarray(errors, dtype=np.float64)
        if len(errors) == 0 or len(errors) != len(epochs):
            raise ValueError(f"curve {label!r}: epochs and errors must be non-empty and of "
                             "equal length")
        ax.plot(epochs, errors, linewidth=1.0, label=label)
        lows.append(np.nanmin(errors))
        finals.append(errors[-1])
    if ylim is None:
        low = min(lows)
        ylim = (0.95 * low, max(low * 1.05, 1.5 * float(np.median(finals))))
    ax.set_ylim(*ylim)
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation error (%)")
    ax.legend(fontsize=7, loc="upper right")
    ax.set_title(title)
    return _laid_out(fig, path)


# A figure's options, as matplotlib's own functions take them: each documented with its default.
def plot_grid_map(xx, yy, values, X=None, y=None, title="", cmap="RdBu_r", label="",
                  path=None, vmin=None, vmax=None):
    """A filled contour of ``values`` (shape of ``xx``) over a 2-D grid, with the points
    ``X`` coloured by ``y`` on top (two-moons predictive mean or standard deviation)."""
    fig, ax = plt.subplots(figsize=(5.2, 4.4))
    cs = ax.contourf(xx, yy, values, levels=20, cmap=cmap, vmin=vmin, vmax=vmax)
    fig.colorbar(cs, ax=ax, label=label)
    if X is not None:
        y = np.asarray(y).reshape(-1)
        ax.scatter(X[y == 0, 0], X[y == 0, 1], s=6, c="tab:blue", edgecolors="k",
                   linewidths=0.2, label="class 0")
        ax.scatter(X[y == 1, 0], X[y == 1, 1], s=6, c="tab:red", edgecolors="k",
                   linewidths=0.2, label="class 1")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_title(title)
    ax.set_xlabel("$x_1$")
    ax.set_ylabel("$x_2$")
    return _laid_out(fig, path)


def _db(snr):
    """10·log10 of a signal-to-noise ratio; a mean of exactly 0 (ratio 0) is drawn at the
    smallest positive float32 instead of -inf, so it stays on the axes."""
    return 10.0 * np.log10(np.maximum(np.asarray(snr, dtype=np.float64).reshape(-1),
                                      np.finfo(np.float32).tiny))


def plot_weight_density(weights, path=None, bins=200, title="Density of the weights",
                        limit=None):
    """Histogram densities of the weights of several networks on one axis.

    Parameters
    ----------
    weights : dict
        ``{label: array}``, e.g. ``{"Bayes by Backprop": samples, "plain": w,
        "dropout": w}``; each array of any shape (flattened), e.g. all Dense weights of a
        net concatenated, or weights drawn from a posterior.
    path : str, optional
        Save the figure as PNG there.
    bins : int, default 200
    title : str
    limit : float, optional
        Show weights in ``[-limit, limit]``; default the largest 99.9th percentile of
        :math:`|w|` over the arrays (a few outliers would squash the rest).

    Returns
    -------
    matplotlib.figure.Figure with one axis.
    """
    flat = {label: np.asarray(w, dtype=np.float64).reshape(-1) for label, w in weights.items()}
    if not flat or any(w.size == 0 for w in flat.values()):
        raise ValueError("give at least one non-empty array of weights")
    if limit is None:
        limit = max(float(np.percentile(np.abs(w), 99.9)) for w in flat.values()) or 1.0
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    edges = np.linspace(-limit, limit, bins + 1)
    for label, w in flat.items():
        ax.hist(w, bins=edges, density=True, histtype="step", linewidth=1.4, label=label)
    ax.set_xlabel("weight")
    ax.set_ylabel("density")
    ax.set_xlim(-limit, limit)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(title)
    return _laid_out(fig, path)


def _mark_cutoffs(ax, cutoffs):
    for fraction, threshold in sorted((cutoffs or {}).items()):
        if np.isfinite(threshold) and 0 < fraction < 1:
            x = float(_db([threshold])[0])
            line = ax.axvline(x, color="k", linestyle="--", linewidth=0.8)
            ax.annotate(f"{100 * fraction:g}%", (x, 1.0), xycoords=("data", "axes fraction"),
                        rotation=90, va="top", ha="right", fontsize=7,
                        color=line.get_color())


def plot_snr_histogram(snr, cutoffs=None, path=None, bins=100,
                       title="Signal-to-noise ratio of the weights"):
    """Histogram of :math:`10 \\log_{10}(|\\mu|/\\sigma)` (dB), pruning cut-offs marked.

    Parameters
    ----------
    snr : array_like
        Signal-to-noise ratios of the weights (any shape, flattened; linear, not dB).
    cutoffs : dict, optional
        ``{fraction removed: threshold}`` with thresholds as ratios (linear), e.g. from
        :func:`bbb_gluon.pruning.thresholds`; a dashed line per fraction in (0, 1).
    path : str, optional
    bins : int, default 100
    title : str

    Returns
    -------
    matplotlib.figure.Figure with one axis.
    """
    db = _db(snr)
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.hist(db, bins=bins, density=True, color="tab:blue", alpha=0.8)
    _mark_cutoffs(ax, cutoffs)
    ax.set_xlabel("signal-to-noise ratio (dB)")
    ax.set_ylabel("density")
    ax.set_title(title)
    return _laid_out(fig, path)


def plot_snr_cdf(snr, cutoffs=None, path=None,
                 title="Cumulative distribution of the signal-to-noise ratio"):
    """Empirical cumulative distribution of :math:`10 \\log_{10}(|\\mu|/\\sigma)` (dB).

    Parameters
    ----------
    snr : array_like
        Signal-to-noise ratios (linear), flattened.
    cutoffs : dict, optional
        ``{fraction removed: threshold (linear)}``; marked as dashed lines.
    path : str, optional
    title : str

    Returns
    -------
    matplotlib.figure.Figure with one axis.
    """
    db = np.sort(_db(snr))
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.plot(db, np.arange(1, db.size + 1) / db.size, color="tab:blue")
    _mark_cutoffs(ax, cutoffs)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("signal-to-noise ratio (dB)")
    ax.set_ylabel("fraction of weights below")
    ax.set_title(title)
    return _laid_out(fig, path)


def plot_least_certain(images, predicted, entropy, num_images=16, labels=None, ncols=8,
                       path=None, title="Least certain predictions"):
    """The ``num_images`` images of highest predictive entropy, most uncertain first.

    Parameters
    ----------
    images : array_like, shape (N, 784) or (N, 28, 28)
    predicted : array_like of int, shape (N,)
        Predicted class of each image.
    entropy : array_like, shape (N,)
        Predictive entropy (nats) of each image.
    num_images : int, default 16
    labels : array_like of int, shape (N,), optional
        True classes, added to the titles.
    ncols : int, default 8
    path : str, optional
    title : str

    Returns
    -------
    matplotlib.figure.Figure with ``min(num_images, N)`` axes, titled with the predicted
    class and the entropy (and the label, if given).
    """
    images = np.asarray(images)
    n = images.shape[0]
    images = images.reshape(n, 28, 28)
    entropy = np.asarray(entropy, dtype=np.float64).reshape(-1)
    predicted = np.asarray(predicted).reshape(-1)
    if entropy.shape != (n,) or predicted.shape != (n,):
        raise ValueError(f"predicted and entropy must have shape ({n},)")
    order = np.argsort(-entropy, kind="stable")[:num_images]
    ncols = max(1, min(ncols, len(order)))
    nrows = max(1, -(-len(order) // ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(1.35 * ncols, 1.6 * nrows + 0.4),
                             squeeze=False)
    for ax in axes.flat[len(order):]:
        fig.delaxes(ax)
    for ax, i in zip(axes.flat, order, strict=False):
        ax.imshow(images[i], cmap="gray_r")
        text = f"pred {predicted[i]}" + (f" (y {labels[i]})" if labels is not None else "")
        ax.set_title(f"{text}\nH={entropy[i]:.2f}", fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(title)
    return _laid_out(fig, path)


def plot_reliability_diagram(reliability, path=None, title="Reliability diagram", ece=None):
    """Accuracy against confidence per bin, over a histogram of the confidences.

    Parameters
    ----------
    reliability : dict
        As :func:`bbb_gluon.metrics.reliability_data` returns it (``edges``, ``count``,
        ``confidence``, ``accuracy``).
    path : str, optional
    title : str
    ece : float, optional
        Shown in the title when given.

    Returns
    -------
    matplotlib.figure.Figure with two axes: the diagram (bars of accuracy, the gap to
    the mean confidence, the diagonal) and the share of examples per bin.
    """
    edges = np.asarray(reliability["edges"], dtype=np.float64)
    count = np.asarray(reliability["count"], dtype=np.float64)
    full = count > 0  # an empty bin has no accuracy or confidence to draw
    accuracy = np.asarray(reliability["accuracy"], dtype=np.float64)[full]
    confidence = np.asarray(reliability["confidence"], dtype=np.float64)[full]
    left, width = edges[:-1][full], np.diff(edges)[full]
    fig, (ax, ax_count) = plt.subplots(2, 1, figsize=(4.8, 6.0), sharex=True,
                                       gridspec_kw={"height_ratios": [3, 1]})
    ax.bar(left, accuracy, width=width, align="edge", color="tab:blue",
           edgecolor="k", linewidth=0.5, label="accuracy")
    # The gap spans accuracy to confidence either way (above the bar when over-confident,
    # inside it when under-confident); hatching keeps it readable over the bar.
    ax.bar(left, np.abs(confidence - accuracy), bottom=np.minimum(confidence, accuracy),
           width=width, align="edge", color="none", hatch="///", edgecolor="tab:red",
           linewidth=0.5, label="gap to mean confidence")
    ax.plot([0, 1], [0, 1], "k--", linewidth=0.8, label="perfect calibration")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy")
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(title if ece is None else f"{title} (ECE {100 * ece:.2f}%)")
    total = count.sum() or 1.0
    ax_count.bar(edges[:-1], count / total, width=np.diff(edges), align="edge",
                 color="tab:gray")
    ax_count.set_xlabel("confidence")
    ax_count.set_ylabel("share")
    return _laid_out(fig, path)


def plot_entropy_histograms(entropy_in, entropy_out, mi_in=None, mi_out=None, path=None,
                            labels=("in-distribution", "out-of-distribution"), bins=50,
                            title=None):
    """Histograms of the predictive entropy in and out of distribution.

    Parameters
    ----------
    entropy_in, entropy_out : array_like, shape (N_in,), (N_out,)
        Predictive entropies (nats).
    mi_in, mi_out : array_like, optional
        Mutual information (nats); when both are given a second axis shows them.
    path : str, optional
    labels : (str, str)
    bins : int, default 50
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure with one axis, or two with the mutual information.
    """
    panels = [("predictive entropy (nats)", entropy_in, entropy_out)]
    if mi_in is not None and mi_out is not None:
        panels.append(("mutual information (nats)", mi_in, mi_out))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.0 * len(panels), 3.8), squeeze=False)
    for ax, (xlabel, a, b) in zip(axes.flat, panels, strict=True):
        a = np.asarray(a, dtype=np.float64).reshape(-1)
        b = np.asarray(b, dtype=np.float64).reshape(-1)
        hi = max(float(np.max(a, initial=0.0)), float(np.max(b, initial=0.0))) or 1.0
        edges = np.linspace(0.0, hi, bins + 1)
        ax.hist(a, bins=edges, density=True, alpha=0.6, label=labels[0])
        ax.hist(b, bins=edges, density=True, alpha=0.6, label=labels[1])
        ax.set_xlabel(xlabel)
        ax.set_ylabel("density")
        ax.legend()
    if title:
        fig.suptitle(title)
    return _laid_out(fig, path)


def plot_cumulative_regret(curves, path=None, title="Cumulative regret", log=True):
    """Cumulative regret against the step, one line per agent: the mean over runs, with
    the range of the runs shaded.

    Parameters
    ----------
    curves : dict
        ``{agent name: array (runs, steps)}`` of cumulative regret.
    log : bool, default True
        A logarithmic regret axis, as in the paper's Figure 6 (values below 1 are drawn
        at 1: cumulative regret can dip near zero early, after lucky meals).
    """
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for name, runs in curves.items():
        runs = np.atleast_2d(np.asarray(runs, dtype=np.float64))
        steps = np.arange(1, runs.shape[1] + 1)
        lo, hi, mean = runs.min(0), runs.max(0), runs.mean(0)
        if log:
            lo, hi, mean = (np.maximum(v, 1.0) for v in (lo, hi, mean))
        (line,) = ax.plot(steps, mean, label=name)
        if runs.shape[0] > 1:
            ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.15, linewidth=0)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("step (mushrooms seen)")
    ax.set_ylabel("cumulative regret")
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    return _laid_out(fig, path)


def __getattr__(name):
    if name in _MOVED:
        from . import regression_plots

        return getattr(regression_plots, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
