"""Figures. Every function takes arrays (never models), returns the matplotlib Figure, and
saves it as PNG when given a path."""

import matplotlib.pyplot as plt
import numpy as np

__all__ = ["plot_learning_curve", "plot_grid_map", "save"]


def save(fig, path):
    """Save ``fig`` as PNG at ``path`` (if given) and return it."""
    if path is not None:
        fig.savefig(path, dpi=110, bbox_inches="tight")
    return fig


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
    fig.tight_layout()
    return save(fig, path)


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
    fig.tight_layout()
    return save(fig, path)
