"""The small synthetic problems of the tutorials: a 2-D classification task and the 1-D
regression curve of Blundell et al. (2015).
"""

from __future__ import annotations

import math

import numpy as np

from .._checks import check_int

__all__ = ["regression_curve", "two_moons"]


def two_moons(n: int = 1000, noise: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two interleaved half-moons, a 2-D binary classification problem.

    Same geometry as ``sklearn.datasets.make_moons``: class 0 on the upper half of the unit
    circle ``(cos t, sin t)``, class 1 on ``(1 - cos t, 0.5 - sin t)``, ``t`` evenly spaced
    in ``[0, pi]`` (``n // 2`` points for class 0, the rest for class 1), shuffled, plus
    isotropic Gaussian noise.

    Parameters
    ----------
    n : int, default 1000
        Number of points (>= 2).
    noise : float, default 0.2
        Standard deviation of the Gaussian noise added to each coordinate (>= 0).
    seed : int, default 0
        Seed of ``np.random.default_rng``; the same seed gives the same data.

    Returns
    -------
    X : numpy.ndarray
        ``float32``, shape ``(n, 2)``.
    y : numpy.ndarray
        ``int32``, shape ``(n,)``, values 0 and 1.
    """
    n = check_int(n, "n", 2)
    seed = check_int(seed, "seed", 0)
    if not (noise >= 0 and math.isfinite(noise)):
        raise ValueError(f"noise must be a finite number >= 0, got {noise!r}")
    n_out = n // 2
    n_in = n - n_out
    t_out = np.linspace(0.0, np.pi, n_out)
    t_in = np.linspace(0.0, np.pi, n_in)
    X = np.concatenate(
        [
            np.stack([np.cos(t_out), np.sin(t_out)], axis=1),
            np.stack([1.0 - np.cos(t_in), 0.5 - np.sin(t_in)], axis=1),
        ]
    )
    y = np.concatenate([np.zeros(n_out, np.int32), np.ones(n_in, np.int32)])
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    X, y = X[perm], y[perm]
    X = X + rng.normal(0.0, noise, size=X.shape)
    return X.astype(np.float32), y


def regression_curve(
    n: int = 200, low: float = 0.0, high: float = 0.5, seed: int = 0,
    noise_std: float = math.sqrt(0.02),
) -> tuple[np.ndarray, np.ndarray]:
    """Noisy samples of the 1-D regression curve of Blundell et al. (2015), section 5.2.

    ``y = x + 0.3 sin(2 pi (x + eps)) + 0.3 sin(4 pi (x + eps)) + eps`` with
    ``eps ~ N(0, 0.02)``. The paper writes ``N(0, 0.02)`` without saying whether 0.02 is
    the variance or the standard deviation; we follow the usual ``N(mean, variance)``
    convention, i.e. ``eps`` has standard deviation ``sqrt(0.02) ~= 0.141`` by default.
    Because ``eps`` also shifts the phase of the sines, that makes a wide band; the
    paper's figure looks more like ``noise_std=0.02``.

    Parameters
    ----------
    n : int, default 200
        Number of points (>= 1).
    low, high : float, default 0.0 and 0.5
        ``x`` is drawn uniformly from ``[low, high)``; requires ``low < high``.
    seed : int, default 0
        Seed of ``np.random.default_rng``.
    noise_std : float, default sqrt(0.02)
        Standard deviation of ``eps`` (>= 0).

    Returns
    -------
    x : numpy.ndarray
        ``float32``, shape ``(n, 1)``.
    y : numpy.ndarray
        ``float32``, shape ``(n, 1)``.
    """
    n = check_int(n, "n", 1)
    seed = check_int(seed, "seed", 0)
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"need finite low < high, got low={low!r}, high={high!r}")
    if not (math.isfinite(noise_std) and noise_std >= 0):
        raise ValueError(f"noise_std must be a finite number >= 0, got {noise_std!r}")
    rng = np.random.default_rng(seed)
    x = rng.uniform(low, high, size=n)
    eps = rng.normal(0.0, noise_std, size=n)
    y = x + 0.3 * np.sin(2 * np.pi * (x + eps)) + 0.3 * np.sin(4 * np.pi * (x + eps)) + eps
    return x.astype(np.float32)[:, None], y.astype(np.float32)[:, None]
