"""Error bars of a regression in one call: the predictive mean, the spread the weights
cause and the spread the noise causes, and central intervals, on the targets' own scale.

The Monte-Carlo predictive of a Gaussian likelihood is a mixture over weight samples
:math:`w_s`: :math:`\\frac1S \\sum_s \\mathcal N(y; f(x; w_s), s(x; w_s)^2)`, with one
learned noise scale :math:`s` (:class:`~bbb_gluon.GaussianNLLLoss`) or one the network
predicts per input (:class:`~bbb_gluon.HeteroscedasticGaussianNLLLoss`). Its variance
splits into the variance of the means over the samples (the weights' spread, which grows
where the data are few) and the mean of the noise variances (which no amount of data
removes).
"""

from dataclasses import dataclass

import numpy as np

from .core.likelihood import likelihood_of
from .metrics import gaussian_scores, mixture_intervals
from .prediction import predict_proba, predict_samples

__all__ = ["Intervals", "predict_intervals"]


@dataclass
class Intervals:
    """What :func:`predict_intervals` returns, each ``(N, D)`` for ``D`` targets, on the
    targets' own scale: ``mean`` (the predictive's), ``weights_std`` (the spread of the
    means over weight samples), ``noise_std`` (the root mean noise variance), ``std``
    (the predictive's, the two combined), ``intervals`` (``{level: (lower, upper)}``,
    the mixture's central intervals), ``samples`` (the weight samples drawn), and the
    mixture itself: ``sample_means`` and ``sample_stds``, ``(samples, N, D)``."""

    mean: np.ndarray
    weights_std: np.ndarray
    noise_std: np.ndarray
    std: np.ndarray
    intervals: dict
    samples: int
    sample_means: np.ndarray
    sample_stds: np.ndarray
    noise: object = None  # the likelihood's noise per unit scale (None: the normal)

    def scores(self, y, level=0.95):
        """The predictive scored against targets ``y`` (``(N, D)`` or ``(N,)``, on the
        same scale): ``{"rmse", "log_likelihood", "coverage", "level"}`` as
        :func:`bbb_gluon.metrics.gaussian_scores` gives them (over every target)."""
        y = np.asarray(y, dtype=np.float64).reshape(len(self.mean), -1)
        n, d = y.shape
        f = self.sample_means.reshape(self.samples, n * d)
        s = self.sample_stds.reshape(self.samples, n * d)
        return gaussian_scores(f, y.reshape(-1), s, level=level, noise=self.noise)


def predict_intervals(net, posterior, X, loss, samples=100, levels=(0.5, 0.9, 0.95),
                      y_mean=0.0, y_std=1.0, batch_size=1000, ctx=None):
    """The predictive mean, the weights' and the noise's spread, and central intervals.

    Parameters
    ----------
    net : gluon.Block
    posterior : Posterior or None
        None for a network without one (then the weights' spread is 0).
    X : ndarray, shape (N, ...)
    loss : a regression's likelihood (GaussianNLLLoss, HeteroscedasticGaussianNLLLoss) or
        a BBBLoss of one. The likelihood the network trained with: it says what the outputs
        are and gives the noise (a learned or fixed scale, or the network's second half of
        outputs).
    samples : int, default 100
        Weight samples of the Monte-Carlo predictive.
    levels : float or sequence of float in (0, 1), default (0.5, 0.9, 0.95)
    y_mean, y_std : float or array_like broadcastable to (N, D), default 0 and 1
        How the targets were standardised (``y = (target - y_mean) / y_std``): the
        results are put back on the targets' scale.

    Returns
    -------
    Intervals
    """
    loss = getattr(loss, "likelihood", loss)  # a BBBLoss: its likelihood's
    try:
        likelihood = likelihood_of(loss)
    except ValueError:
        likelihood = None
    noise = likelihood.noise_of(loss) if likelihood is not None else None
    if noise is None:
        raise TypeError(f"predict_intervals needs the likelihood the network trained with, "
                        f"one that gives the noise (GaussianNLLLoss or "
                        f"HeteroscedasticGaussianNLLLoss, say), got {type(loss).__name__}")
    y_std = np.asarray(y_std, dtype=np.float64)
    if not (np.isfinite(y_std).all() and np.all(y_std > 0)):
        raise ValueError(f"y_std must be finite and > 0, got {y_std.tolist()}")
    y_mean = np.asarray(y_mean, dtype=np.float64)
    if not np.isfinite(y_mean).all():
        raise ValueError("y_mean must be finite")
    if posterior is None:
        out = predict_proba(net, None, X, 0, batch_size, ctx, likelihood)[None]
    else:
        out = predict_samples(net, posterior, X, samples, batch_size, ctx, likelihood)
    out = out.astype(np.float64)
    if out.ndim == 2:  # one target without a trailing axis
        out = out[..., None]
    f, s = likelihood.locations_scales(out, loss)
    f, s = f * y_std + y_mean, s * y_std
    weights_var = f.var(axis=0)
    noise_var = (s**2).mean(axis=0) * noise.variance
    bands = mixture_intervals(f, s, levels, noise=noise)
    return Intervals(mean=f.mean(axis=0), weights_std=np.sqrt(weights_var),
                     noise_std=np.sqrt(noise_var), std=np.sqrt(weights_var + noise_var),
                     intervals=bands, samples=f.shape[0], sample_means=f, sample_stds=s,
                     noise=noise)
