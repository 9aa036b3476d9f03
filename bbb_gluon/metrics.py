r"""How good predicted probabilities are: NLL, Brier score, calibration, and OOD detection;
for regression, the scores of a Monte-Carlo Gaussian predictive (:func:`gaussian_scores`).

Pure NumPy, for any model: give it the class probabilities of a Bayes-by-Backprop
predictive, of MC dropout, or of a plain softmax (``predict_proba`` returns all three).
The Brier score is Brier's [2]_, the calibration error Guo et al.'s [1]_. Everything is
computed in float64.

Calibration uses the confidence :math:`\hat p_i = \max_c p_{ic}` and the predicted class
:math:`\hat y_i = \arg\max_c p_{ic}`. With :math:`B` equal-width bins
:math:`I_b = (\frac{b-1}B, \frac bB]` (the first bin also holds 0) and :math:`n_b`
examples in bin :math:`b`,

.. math::
    \mathrm{ECE} = \sum_b \frac{n_b}{N} \left| \mathrm{acc}_b - \mathrm{conf}_b \right|,

where :math:`\mathrm{acc}_b` is the fraction of correct predictions in the bin and
:math:`\mathrm{conf}_b` their mean confidence (empty bins contribute 0).

References
----------
.. [1] C. Guo, G. Pleiss, Y. Sun, K. Q. Weinberger. "On Calibration of Modern Neural
   Networks". ICML 2017.
.. [2] G. W. Brier. "Verification of forecasts expressed in terms of probability".
   Monthly Weather Review 78, 1950.
"""

import math

import numpy as np

from ._checks import check_int

__all__ = ["nll", "brier_score", "expected_calibration_error", "reliability_data", "auroc",
           "calibration_summary", "DEFAULT_BINS", "gaussian_scores", "interval_coverage",
           "mixture_intervals"]

DEFAULT_BINS = 15
# log(0) for a class given probability 0 (a float32 softmax that underflowed) would make
# the NLL infinite; floor the probability at the smallest positive float32 instead
# (log = -103.3), so one such example costs a lot but finitely.
_TINY = float(np.finfo(np.float32).tiny)


def _check(probs, y):
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] == 0 or p.shape[1] < 2:
        raise ValueError(f"probs must have shape (N, C) with N >= 1 and C >= 2, "
                         f"got {p.shape}")
    if not np.isfinite(p).all():
        raise ValueError("probs contain NaN or infinity")
    labels = np.asarray(y)
    if labels.shape != (p.shape[0],):
        raise ValueError(f"labels must have shape ({p.shape[0]},), got {labels.shape}")
    if not np.all(labels == np.round(labels)) or labels.min() < 0 \
            or labels.max() >= p.shape[1]:
        raise ValueError(f"labels must be integers in [0, {p.shape[1] - 1}]")
    return p, labels.astype(np.int64)


def nll(probs, y):
    r"""Mean negative log-likelihood of the labels, :math:`-\frac1N \sum_i \log p_{i y_i}`.

    Parameters
    ----------
    probs : array_like, shape (N, C)
        Class probabilities (rows sum to 1).
    y : array_like of int, shape (N,)
        Labels in ``0 .. C-1``.

    Returns
    -------
    float
        Nats per example. Probabilities below the smallest positive float32 count as it.
    """
    p, labels = _check(probs, y)
    return float(-np.mean(np.log(np.maximum(p[np.arange(len(labels)), labels], _TINY))))


def brier_score(probs, y):
    r"""Multi-class Brier score, :math:`\frac1N \sum_i \sum_c (p_{ic} - [y_i = c])^2`.

    Parameters
    ----------
    probs : array_like, shape (N, C)
    y : array_like of int, shape (N,)

    Returns
    -------
    float
        In :math:`[0, 2]`: 0 for certain and right, 2 for certain and wrong.
    """
    p, labels = _check(probs, y)
    onehot = np.zeros_like(p)
    onehot[np.arange(len(labels)), labels] = 1.0
    return float(np.mean(np.sum((p - onehot) ** 2, axis=1)))


def reliability_data(probs, y, num_bins=DEFAULT_BINS):
    """Per-bin statistics of a reliability diagram (equal-width confidence bins).

    Parameters
    ----------
    probs : array_like, shape (N, C)
    y : array_like of int, shape (N,)
    num_bins : int, default 15
        Number of equal-width bins on [0, 1]; bin ``b`` holds confidences in
        ``(edges[b], edges[b + 1]]`` (bin 0 also holds 0).

    Returns
    -------
    dict
        ``"edges"`` (num_bins + 1,); ``"count"`` (num_bins,) int; ``"confidence"`` and
        ``"accuracy"`` (num_bins,): mean confidence and fraction correct per bin, NaN for
        an empty bin; ``"num_examples"`` int.
    """
    p, labels = _check(probs, y)
    num_bins = check_int(num_bins, "num_bins", 1)
    edges = np.linspace(0.0, 1.0, num_bins + 1)
    confidence = p.max(axis=1)
    correct = (p.argmax(axis=1) == labels).astype(np.float64)
    # Bins against the very edges returned, so a confidence equal to an edge lands where
    # the edges say it should even when k/B is not exact in binary.
    index = np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, num_bins - 1)
    count = np.bincount(index, minlength=num_bins)
    conf_sum = np.bincount(index, weights=confidence, minlength=num_bins)
    correct_sum = np.bincount(index, weights=correct, minlength=num_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_conf = np.where(count > 0, conf_sum / count, np.nan)
        accuracy = np.where(count > 0, correct_sum / count, np.nan)
    return {"edges": edges, "count": count, "confidence": mean_conf, "accuracy": accuracy,
            "num_examples": int(len(labels))}


def expected_calibration_error(probs, y, num_bins=DEFAULT_BINS):
    r"""Expected calibration error with equal-width bins (see the module docstring).

    Parameters
    ----------
    probs : array_like, shape (N, C)
    y : array_like of int, shape (N,)
    num_bins : int, default 15

    Returns
    -------
    float
        In [0, 1]; :math:`\sum_b (n_b / N) |\mathrm{acc}_b - \mathrm{conf}_b|`.
    """
    rel = reliability_data(probs, y, num_bins)
    full = rel["count"] > 0
    gaps = np.abs(rel["accuracy"][full] - rel["confidence"][full])
    return float(np.sum(rel["count"][full] / rel["num_examples"] * gaps))


def auroc(scores_in, scores_out):
    r"""Area under the ROC curve of a score that should be higher out of distribution.

    The out-of-distribution examples are the positive class. The area is the
    Mann-Whitney statistic: the probability that a random out-of-distribution example
    scores higher than a random in-distribution one, ties counting one half,

    .. math:: \mathrm{AUROC} = \frac{1}{n_\mathrm{in} n_\mathrm{out}} \sum_{i,j}
        \left([s^\mathrm{out}_j > s^\mathrm{in}_i] + \tfrac12 [s^\mathrm{out}_j
        = s^\mathrm{in}_i]\right),

    computed from average ranks in :math:`O(n \log n)`.

    Parameters
    ----------
    scores_in : array_like, shape (n_in,)
        Scores of in-distribution examples (e.g. predictive entropy).
    scores_out : array_like, shape (n_out,)
        Scores of out-of-distribution examples.

    Returns
    -------
    float
        In [0, 1]: 1 separates perfectly, 0.5 is chance (and every-score-tied).
    """
    s_in = np.asarray(scores_in, dtype=np.float64).reshape(-1)
    s_out = np.asarray(scores_out, dtype=np.float64).reshape(-1)
    if s_in.size == 0 or s_out.size == 0:
        raise ValueError("auroc needs at least one in- and one out-of-distribution score")
    if not (np.isfinite(s_in).all() and np.isfinite(s_out).all()):
        raise ValueError("scores contain NaN or infinity")
    scores = np.concatenate([s_in, s_out])
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    # Ranks 1..n; a group of tied scores gets the mean of the ranks it spans.
    average_rank = np.cumsum(counts) - (counts - 1) / 2.0
    rank_sum_out = average_rank[inverse[s_in.size:]].sum()
    n_in, n_out = s_in.size, s_out.size
    return float((rank_sum_out - n_out * (n_out + 1) / 2.0) / (n_in * n_out))


def calibration_summary(probs, y, num_bins=DEFAULT_BINS):
    """Error, NLL, Brier score and ECE of one set of predictions, as a dict of floats.

    Parameters
    ----------
    probs : array_like, shape (N, C)
    y : array_like of int, shape (N,)
    num_bins : int, default 15

    Returns
    -------
    dict
        ``"error"``, ``"nll"``, ``"brier"``, ``"ece"``, ``"num_bins"``.
    """
    p, labels = _check(probs, y)
    return {"error": float(np.mean(p.argmax(axis=1) != labels)), "nll": nll(p, labels),
            "brier": brier_score(p, labels),
            "ece": expected_calibration_error(p, labels, num_bins), "num_bins": int(num_bins)}


_erf = np.vectorize(math.erf, otypes=[np.float64])  # NumPy has none; MXNet's is float32


def _gaussian_samples(means, y, noise_sigma):
    f = np.asarray(means, dtype=np.float64)
    if f.ndim == 1:
        f = f[None]
    if f.ndim != 2:
        raise ValueError(f"means must be (samples, N) or (N,), got shape {f.shape}")
    t = np.asarray(y, dtype=np.float64).reshape(-1)
    if not np.isfinite(t).all():
        raise ValueError(f"y holds {int((~np.isfinite(t)).sum())} NaN or infinite target(s): "
                         "drop those rows before scoring")
    if t.shape[0] != f.shape[1]:
        raise ValueError(f"y must hold one target per column of means: {t.shape[0]} "
                         f"targets for means of shape {f.shape}")
    s = np.broadcast_to(np.asarray(noise_sigma, dtype=np.float64), f.shape)
    if not np.all(s > 0):
        raise ValueError("noise_sigma must be > 0 everywhere")
    return f, t, s


def _check_levels(levels):
    levels = np.atleast_1d(np.asarray(levels, dtype=np.float64))
    if not np.all((levels > 0) & (levels < 1)):
        raise ValueError(f"interval levels must lie in (0, 1), got {levels.tolist()}")
    return levels


def _noise(noise):
    """The noise per unit scale: the standard normal where none is given (imported here,
    so that the classifiers' metrics load without MXNet)."""
    if noise is not None:
        return noise
    from .core.likelihood.families import NORMAL
    return NORMAL


def _pit(f, t, s, noise):
    # the predictive mixture's CDF at each target (the probability integral transform)
    if _noise(noise) is _noise(None):  # the normal: math.erf, exact to float64 (the
        # intervals' vectorised CDF is to 1.2e-7)
        return (0.5 * (1.0 + _erf((t - f) / (s * math.sqrt(2.0))))).mean(axis=0)
    return noise.cdf((t - f) / s).mean(axis=0)


def mixture_intervals(means, sigmas, levels, noise=None):
    """Central intervals of the equal-weight mixture of ``N(means[s], sigmas[s]**2)`` over
    samples ``s``, per point: ``{level: (lower, upper)}``, each of the points' shape.

    The Monte-Carlo predictive of a Gaussian likelihood is such a mixture; its quantiles
    have no closed form, so each is found by bisection on the mixture's CDF (to a
    millionth of the range the samples span, some 1e-5 in probability).

    Parameters
    ----------
    means : array_like, shape (samples, ...)
    sigmas : array_like broadcastable to ``means``, > 0
    levels : float or array_like of float in (0, 1)
    noise : the noise per unit scale, default None: the standard normal
        Another likelihood's (``likelihood_of(loss).noise_of(loss)``): the mixture is then of its
        noise at those locations and scales.
    """
    levels = _check_levels(levels)
    f = np.asarray(means, dtype=np.float64)
    if f.ndim < 1 or f.shape[0] < 1:
        raise ValueError(f"means must have a samples axis first, got shape {f.shape}")
    s = np.broadcast_to(np.asarray(sigmas, dtype=np.float64), f.shape)
    if not (np.isfinite(f).all() and np.isfinite(s).all()):
        raise ValueError("means and sigmas must be finite")
    if not np.all(s > 0):
        raise ValueError("sigmas must be > 0 everywhere")
    noise = _noise(noise)
    reach = noise.bracket(float(levels.max()))  # each component's widest quantile, in scales
    lo0 = (f - reach * s).min(axis=0)
    hi0 = (f + reach * s).max(axis=0)
    tol = 1e-6 * (hi0 - lo0)

    def quantile(q):
        lo, hi = lo0.copy(), hi0.copy()
        while np.any(hi - lo > tol):
            mid = 0.5 * (lo + hi)
            below = noise.cdf((mid - f) / s).mean(axis=0) < q
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        return 0.5 * (lo + hi)

    return {float(level): (quantile(0.5 - level / 2), quantile(0.5 + level / 2))
            for level in levels}


def interval_coverage(means, y, noise_sigma, levels, noise=None):
    """The fraction of targets inside the central interval of each nominal level.

    The predictive is the mixture of ``N(means[s], noise_sigma[s]**2)`` over samples ``s``
    (one sample: a plain Gaussian). A target lies in its central ``level`` interval when
    the mixture's CDF at it is within ``(1 - level)/2`` of a half; a calibrated predictive
    covers a fraction ``level`` of the targets at every level.

    Parameters
    ----------
    means : array_like, shape (samples, N) or (N,)
    y : array_like, shape (N,) or (N, 1)
    noise_sigma : float or array_like broadcastable to ``means``
    levels : array_like of float in (0, 1)
    noise : the noise per unit scale, default None: the standard normal (as for
        :func:`mixture_intervals`)

    Returns
    -------
    numpy.ndarray of float, one coverage per level.
    """
    levels = _check_levels(levels)
    f, t, s = _gaussian_samples(means, y, noise_sigma)
    distance = np.abs(_pit(f, t, s, noise) - 0.5)
    return np.array([float(np.mean(distance <= level / 2.0)) for level in levels])


def gaussian_scores(means, y, noise_sigma, scale=1.0, level=0.95, noise=None):
    r"""RMSE, log-likelihood and interval coverage of a Monte-Carlo Gaussian predictive
    (of another likelihood's with its ``noise``: ``likelihood_of(loss).noise_of(loss)``).

    With S samples of the network's output :math:`f_s` and noise :math:`\sigma_s`, the
    predictive is :math:`\frac1S\sum_s \mathcal N(y; f_s, \sigma_s^2)`; the UCI
    benchmark reports the RMSE of its mean and the average over points of its log density
    (a log-sum-exp over samples, so no density underflows).

    Parameters
    ----------
    means : array_like, shape (samples, N) or (N,)
        The outputs, on the scale of ``y`` (standardised targets, say).
    y : array_like, shape (N,) or (N, 1)
    noise_sigma : float or array_like broadcastable to ``means``
        The likelihood's standard deviation (one learned scale, or one per output).
    scale : float, default 1.0
        ``y``'s standard deviation when ``y`` is standardised: RMSE is multiplied by it
        and ``log(scale)`` taken from the log-likelihood, so both are on the original
        scale (a shift of the targets changes neither).
    level : float, default 0.95
        The central interval whose coverage is reported.
    noise : the noise per unit scale, default None: the standard normal (as for
        :func:`mixture_intervals`)

    Returns
    -------
    dict
        ``"rmse"``, ``"log_likelihood"`` (mean per point), ``"coverage"`` (at ``level``),
        ``"level"``.
    """
    _check_levels(level)
    f, t, s = _gaussian_samples(means, y, noise_sigma)
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale!r}")
    log_dens = _noise(noise).log_density((t - f) / s) - np.log(s)
    top = log_dens.max(axis=0)
    ll = top + np.log(np.exp(log_dens - top).mean(axis=0))
    rmse = math.sqrt(float(np.mean((f.mean(axis=0) - t) ** 2)))
    covered = float(np.mean(np.abs(_pit(f, t, s, noise) - 0.5) <= level / 2.0))
    return {"rmse": rmse * scale, "log_likelihood": float(ll.mean()) - math.log(scale),
            "coverage": covered, "level": float(level)}
