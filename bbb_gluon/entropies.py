"""Uncertainty from per-sample probabilities: the predictive entropy (total), the expected
entropy (aleatoric), the mutual information between label and weights (epistemic) and the
per-class spread. :func:`bbb_gluon.prediction.uncertainty` computes them all from a network;
these take the arrays.
"""

import numpy as np

__all__ = ["entropy", "predictive_entropy", "expected_entropy", "mutual_information",
           "class_std"]


# --- uncertainty from per-sample probabilities --------------------------------------------
# These take the (S, N, C) array that predict_samples returns (S weight samples or dropout
# masks, N examples, C classes) and work in float64, so the difference of two entropies
# (the mutual information) is not lost to float32 rounding.


def _sample_probs(sample_probs):
    p = np.asarray(sample_probs, dtype=np.float64)
    if p.ndim != 3 or p.shape[0] < 1:
        raise ValueError(f"expected per-sample probabilities of shape (S, N, C) with S >= 1, "
                         f"got shape {p.shape}")
    return p


def entropy(probs, axis=-1):
    r"""Shannon entropy :math:`-\sum_c p_c \log p_c` in nats, along ``axis``.

    Parameters
    ----------
    probs : array_like, shape (..., C)
        Probabilities summing to 1 along ``axis``.
    axis : int, default -1

    Returns
    -------
    ndarray, float64, the shape of ``probs`` without ``axis``. Terms with :math:`p_c = 0`
    count as 0 (the limit of :math:`p \log p`).
    """
    p = np.asarray(probs, dtype=np.float64)
    # log(1) = 0 stands in for log(0): 0 * log 0 is taken as its limit 0, not NaN.
    return -np.sum(p * np.log(np.where(p > 0, p, 1.0)), axis=axis)


def predictive_entropy(sample_probs):
    r"""Entropy of the Monte-Carlo predictive, :math:`H[\frac1S \sum_s p_s]`, per example.

    Parameters
    ----------
    sample_probs : array_like, shape (S, N, C)
        Class probabilities under each of S weight samples (:func:`predict_samples`).

    Returns
    -------
    ndarray of shape (N,), float64, nats: the total uncertainty, in
    :math:`[0, \log C]`.
    """
    return entropy(_sample_probs(sample_probs).mean(axis=0))


def expected_entropy(sample_probs):
    r"""Mean over samples of each sample's entropy, :math:`\frac1S \sum_s H[p_s]`.

    The aleatoric part of the predictive entropy: what the network would be unsure of
    even if the weights were known.

    Parameters
    ----------
    sample_probs : array_like, shape (S, N, C)

    Returns
    -------
    ndarray of shape (N,), float64, nats.
    """
    return entropy(_sample_probs(sample_probs)).mean(axis=0)


def mutual_information(sample_probs):
    r"""Mutual information between the label and the weights, per example.

    .. math:: I = H\Big[\frac1S \sum_s p_s\Big] - \frac1S \sum_s H[p_s]

    the epistemic part of the predictive entropy: zero when every sample predicts the
    same distribution, large when confident samples disagree. Jensen's inequality makes
    it :math:`\ge 0`; rounding below zero is clipped to 0.

    Parameters
    ----------
    sample_probs : array_like, shape (S, N, C)

    Returns
    -------
    ndarray of shape (N,), float64, nats.
    """
    p = _sample_probs(sample_probs)
    return np.maximum(entropy(p.mean(axis=0)) - entropy(p).mean(axis=0), 0.0)


def class_std(sample_probs):
    """Standard deviation over samples of each class probability (``ddof=0``).

    Parameters
    ----------
    sample_probs : array_like, shape (S, N, C)

    Returns
    -------
    ndarray of shape (N, C), float64.
    """
    return _sample_probs(sample_probs).std(axis=0)
