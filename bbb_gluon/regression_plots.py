"""The regression figures: predictive intervals against the truth, coverage against the
nominal level, bands over a 1-D input. Like every figure of :mod:`bbb_gluon.plotting`
(whose names they keep), they take arrays, return the Figure and save it as PNG when given a
path."""

import matplotlib.pyplot as plt
import numpy as np

from .plotting import save

__all__ = ["plot_predictive_intervals", "plot_regression_bands", "plot_interval_coverage"]


def _laid_out(fig, path):
    fig.tight_layout()
    return save(fig, path, crop=False)


def plot_predictive_intervals(y, mean, lower, upper, path=None,
                              title="Predictive mean and interval against the truth",
                              label="predictive"):
    """Each point's predictive mean, its interval ``[lower, upper]`` as a bar, against its
    true value ``y`` (all ``(N,)``, on one scale); points whose interval misses the truth
    in red, the diagonal a perfect prediction. Returns the Figure (one axis)."""
    y, mean, lower, upper = (np.asarray(a, dtype=np.float64).reshape(-1)
                             for a in (y, mean, lower, upper))
    missed = (y < lower) | (y > upper)
    fig, ax = plt.subplots(figsize=(4.8, 4.4))
    for mask, colour, text in ((~missed, "tab:blue", "interval covers the truth"),
                               (missed, "tab:red", "interval misses it")):
        ax.errorbar(y[mask], mean[mask], yerr=[mean[mask] - lower[mask],
                                               upper[mask] - mean[mask]],
                    fmt="o", markersize=3, color=colour, ecolor=colour, alpha=0.6,
                    elinewidth=0.8, label=f"{label}: {text} ({mask.sum()})")
    ends = [min(y.min(), lower.min()), max(y.max(), upper.max())]
    ax.plot(ends, ends, "k--", linewidth=0.8)
    return _against_diagonal(fig, ax, "true value", "predictive mean", title, path)


def plot_regression_bands(x, y, grid, mean, bands, truth=None, path=None,
                          title="Predictive mean and intervals"):
    """A 1-D regression: the data ``(x, y)`` as points, the predictive ``mean`` over
    ``grid`` as a line, and each band of ``bands`` (``{label: (lower, upper)}`` over
    ``grid``, widest first, as :func:`bbb_gluon.predict_intervals` gives them) shaded;
    ``truth``, the function without noise over ``grid``, dashed. Returns the Figure (one
    axis)."""
    grid, mean = (np.asarray(a, dtype=np.float64).reshape(-1) for a in (grid, mean))
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    alphas = np.linspace(0.2, 0.6, len(bands)) if len(bands) > 1 else [0.3]
    for alpha, (label, (lower, upper)) in zip(alphas, bands.items(), strict=True):
        ax.fill_between(grid, np.asarray(lower).reshape(-1), np.asarray(upper).reshape(-1),
                        color="tab:blue", alpha=alpha, linewidth=0, label=label)
    ax.plot(grid, mean, color="tab:blue", linewidth=1.5, label="predictive mean")
    if truth is not None:
        ax.plot(grid, np.asarray(truth).reshape(-1), "k--", linewidth=1, label="truth")
    ax.plot(np.asarray(x).reshape(-1), np.asarray(y).reshape(-1), "o", color="tab:red",
            markersize=2.5, alpha=0.7, label="data")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="lower left", ncol=2)
    ax.grid(alpha=0.3)
    return _laid_out(fig, path)


def plot_interval_coverage(levels, coverages, path=None, title="Interval coverage"):
    """Observed coverage of central predictive intervals against their nominal ``levels``;
    ``coverages``: ``{label: one coverage per level}``, as
    :func:`bbb_gluon.metrics.interval_coverage` gives them. A calibrated predictive lies on
    the diagonal, an over-confident one below it. Returns the Figure (one axis)."""
    levels = np.asarray(levels, dtype=np.float64)
    fig, ax = plt.subplots(figsize=(4.4, 4.2))
    for label, observed in coverages.items():
        ax.plot(levels, np.asarray(observed, dtype=np.float64), "o-", markersize=4,
                label=label)
    ax.plot([0, 1], [0, 1], "k--", linewidth=0.8, label="calibrated")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    return _against_diagonal(fig, ax, "nominal level of the central interval",
                             "share of test points inside", title, path)


def _against_diagonal(fig, ax, xlabel, ylabel, title, path):
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left")
    return _laid_out(fig, path)
