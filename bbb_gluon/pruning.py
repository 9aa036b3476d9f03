r"""Pruning a trained posterior: zero the weights it is least sure of, predict with the means.

Blundell et al. (2015, Table 2) [1]_ rank every weight by its signal-to-noise ratio
:math:`|\mu| / \sigma`, set the lowest fraction of them to zero, and predict with the
means of the rest; a bimodal signal-to-noise density lets them remove 95% with little
loss. Ranking by :math:`|\mu|` alone (magnitude pruning) is the baseline.

What is pruned: the *weights* of the posterior, every array named ``weight`` that it
covers (by default those of every Dense and convolution layer, a convolution's kernel of
any dimension; with a last-layer posterior only that layer's), ranked together across
layers with one global threshold. Biases are never pruned, never ranked
and not counted in ``weights_left``: the paper counts and prunes weights, and a bias is
shared by every input of its unit, so zeroing one shifts the unit for every example.
The means of the biases stay as they are, and so does everything outside the posterior
(BatchNorm, layers left out).

A fraction :math:`f` of the :math:`n` weights removes :math:`k = \mathrm{round}(fn)` of
them: the threshold is the :math:`(k+1)`-th smallest score, and a weight is kept when its
score is at least that (so :math:`f = 0` keeps all, :math:`f = 1` removes all). Weights
tied with the threshold are all kept, so with tied scores slightly fewer than :math:`k`
may be removed; ``weights_left`` reports the count actually kept.

A pruned network can be exported (:func:`export_pruned`, with ``net=`` the whole network)
with its weights in MXNet's compressed sparse row storage (``tostype("csr")``, a
convolution's kernel as one row per output channel): 4 bytes of value plus 8 of column
index per non-zero, plus 8 per row, against 4 per entry dense, so it is smaller once more
than about two thirds of a matrix is zero. :func:`load_pruned` reads it into an ordinary
network of the same architecture.

References
----------
.. [1] C. Blundell et al. "Weight Uncertainty in Neural Networks". ICML 2015.
"""

import math
import os
import tempfile

import mxnet as mx
import numpy as np

from ._files import array_json, atomic_nd_save, json_array, read_nd_file
from .core.posterior import PosteriorMismatchError
from .core.sampling import use_weights
from .core.selection import structural_params
from .prediction import error_rate, predict_proba

__all__ = ["SCORES", "prunable_keys", "pruning_scores", "weight_statistics", "thresholds",
           "prune_masks",
           "pruned_weights", "evaluate_pruning", "export_pruned", "load_pruned"]

SCORES = ("snr", "abs_mu")
_FORMAT = "bbb_gluon.pruned/2"
# Format 1 held the posterior's arrays only, its weights 2-D; it is still read.
_FORMATS_READ = ("bbb_gluon.pruned/1", _FORMAT)


def prunable_keys(posterior):
    """Keys of the arrays that pruning ranks and zeroes: every ``weight`` the posterior
    covers (Dense and convolution layers, 2-D to 5-D), no bias."""
    return [k for k in posterior.keys if k.rsplit(".", 1)[-1] == "weight"]


def pruning_scores(posterior, by="snr", ctx=None):
    r"""The score each weight is ranked by, per weight array.

    Parameters
    ----------
    posterior : Posterior
    by : {"snr", "abs_mu"}, default "snr"
        ``"snr"``: :math:`|\mu| / \sigma` (``posterior.signal_to_noise()``);
        ``"abs_mu"``: :math:`|\mu|`.
    ctx : Context, optional

    Returns
    -------
    dict
        ``{key: ndarray}`` for the keys of :func:`prunable_keys`, each of the weight's
        shape, float32; higher means more worth keeping.
    """
    if by not in SCORES:
        raise ValueError(f"by must be one of {SCORES}, got {by!r}")
    keys = prunable_keys(posterior)
    if by == "snr":
        snr = posterior.signal_to_noise(ctx)
        return {k: snr[k].asnumpy() for k in keys}
    mus = dict(zip(posterior.keys, posterior.mu(ctx), strict=True))
    return {k: np.abs(mus[k].asnumpy()) for k in keys}


def weight_statistics(posterior, ctx=None):
    r"""How :math:`\sigma` relates to :math:`|\mu|`, per weight array: what decides whether
    ranking by :math:`|\mu|/\sigma` differs from ranking by :math:`|\mu|`.

    If :math:`\sigma` grows with :math:`|\mu|` (positive correlation), dividing by it
    flattens the ranking and signal-to-noise pruning removes weights that magnitude
    pruning keeps; the paper's bimodal signal-to-noise density needs the opposite,
    unimportant weights with :math:`\sigma` large against :math:`|\mu|`.

    Returns
    -------
    list of dict, one per key of :func:`prunable_keys`: ``key``, ``count``,
    ``median_abs_mu``, ``median_sigma``, ``sigma_q10``, ``sigma_q90`` and
    ``corr_abs_mu_sigma`` (Pearson; ``nan`` if either is constant).
    """
    mus = dict(zip(posterior.keys, posterior.mu(ctx), strict=True))
    sigmas = dict(zip(posterior.keys, posterior.sigma(ctx), strict=True))
    rows = []
    for key in prunable_keys(posterior):
        mu = np.abs(mus[key].asnumpy().reshape(-1)).astype(np.float64)
        sigma = sigmas[key].asnumpy().reshape(-1).astype(np.float64)
        if mu.std() > 0 and sigma.std() > 0:
            corr = float(np.corrcoef(mu, sigma)[0, 1])
        else:
            corr = float("nan")
        q10, q90 = np.quantile(sigma, [0.1, 0.9])
        rows.append({"key": key, "count": int(mu.size), "median_abs_mu": float(np.median(mu)),
                     "median_sigma": float(np.median(sigma)), "sigma_q10": float(q10),
                     "sigma_q90": float(q90), "corr_abs_mu_sigma": corr})
    return rows


def check_fractions(fractions):
    """``fractions`` as a float array, or ValueError unless all lie in [0, 1]."""
    values = np.asarray(fractions, dtype=np.float64).reshape(-1)
    if values.size == 0:
        raise ValueError("give at least one fraction")
    if not np.all((values >= 0) & (values <= 1)):  # also rejects NaN
        raise ValueError(f"fractions must lie in [0, 1], got {list(map(float, values))}")
    return values


def thresholds(scores, fractions):
    """Global score thresholds that remove each fraction of the weights.

    Parameters
    ----------
    scores : dict of ndarray or list of ndarray
        Scores of every weight (:func:`pruning_scores`).
    fractions : sequence of float
        Fractions in [0, 1] of the weights to remove.

    Returns
    -------
    ndarray of shape (len(fractions),), float64
        Keep a weight when its score is ``>= threshold``: ``-inf`` for fraction 0,
        ``+inf`` for fraction 1, otherwise the ``(k+1)``-th smallest score with
        ``k = round(fraction * n)``.
    """
    values = check_fractions(fractions)
    arrays = scores.values() if isinstance(scores, dict) else scores
    flat = np.concatenate([np.asarray(s).reshape(-1) for s in arrays])
    n = flat.size
    # Round half up, the same on every platform (Python's round() goes to even).
    ks = np.floor(values * n + 0.5).astype(np.int64)
    inner = sorted({int(k) for k in ks if 0 < k < n})
    # One partial sort places every needed order statistic at once.
    ordered = np.partition(flat, inner) if inner else flat
    out = np.empty(len(ks), dtype=np.float64)
    for j, k in enumerate(ks):
        out[j] = -np.inf if k == 0 else np.inf if k >= n else ordered[k]
    return out


def prune_masks(posterior, fraction, by="snr", ctx=None):
    """Boolean keep-masks of the weights for one fraction.

    Parameters
    ----------
    posterior : Posterior
    fraction : float
        In [0, 1], share of the weights to remove.
    by : {"snr", "abs_mu"}, default "snr"
    ctx : Context, optional

    Returns
    -------
    dict
        ``{key: bool ndarray}`` for the keys of :func:`prunable_keys`; True = kept.
    """
    scores = pruning_scores(posterior, by, ctx)
    threshold = thresholds(scores, [fraction])[0]
    return {k: s >= threshold for k, s in scores.items()}


def _apply(posterior, masks, ctx, mus_host=None):
    """The means with ``masks`` applied, as NDArrays on ``ctx`` (``mus_host``: the means
    already copied to the host, to copy them once for many masks)."""
    ctx = ctx or posterior.contexts[0]
    mus = posterior.mu(ctx)
    out = []
    for i, key in enumerate(posterior.keys):
        if key in masks:
            mu = mus_host[i] if mus_host is not None else mus[i].asnumpy()
            out.append(mx.nd.array(np.where(masks[key], mu, np.float32(0)), ctx=ctx,
                                   dtype="float32"))
        else:
            out.append(mus[i])
    return out


def pruned_weights(posterior, fraction, by="snr", ctx=None):
    """The posterior means with the lowest-scoring ``fraction`` of the weights set to zero.

    Parameters
    ----------
    posterior : Posterior
    fraction : float
        In [0, 1].
    by : {"snr", "abs_mu"}, default "snr"
    ctx : Context, optional

    Returns
    -------
    list of NDArray
        One array per ``posterior.keys`` entry on ``ctx`` (biases unchanged), ready for
        :func:`bbb_gluon.use_weights`.
    """
    return _apply(posterior, prune_masks(posterior, fraction, by, ctx), ctx)


def evaluate_pruning(net, posterior, X, y, fractions, batch_size=1000, ctx=None,
                     likelihood="softmax"):
    """Error rate with the pruned means at each fraction, ranked by |μ|/σ and by |μ|.

    Each ranking's scores are concatenated and partially sorted once for all fractions;
    each fraction then costs one comparison per weight array and one pass over ``X``.

    Parameters
    ----------
    net : gluon.Block
    posterior : Posterior
    X : ndarray, shape (N, ...)
        Any input the network takes: ``(N, D)`` vectors, ``(N, C, H, W)`` images, ...
    y : ndarray of int, shape (N,)
    fractions : sequence of float
        Fractions in [0, 1] of the weights to remove.
    batch_size : int, default 1000
    ctx : Context, optional
    likelihood : {"softmax", "bernoulli"}, default "softmax"

    Returns
    -------
    list of dict
        One row per fraction, in the order given: ``fraction``; ``weights_left`` (weights
        kept by the signal-to-noise ranking, biases not counted); ``error_by_snr`` and
        ``error_by_abs_mu`` (fractions of ``X`` misclassified).
    """
    values = check_fractions(fractions)
    ctx = ctx or posterior.contexts[0]
    rows = [{"fraction": float(f)} for f in values]
    mus_host = [m.asnumpy() for m in posterior.mu(ctx)]
    for by, column in (("snr", "error_by_snr"), ("abs_mu", "error_by_abs_mu")):
        scores = pruning_scores(posterior, by, ctx)
        for row, threshold in zip(rows, thresholds(scores, values), strict=True):
            masks = {k: s >= threshold for k, s in scores.items()}
            with use_weights(net, posterior, _apply(posterior, masks, ctx, mus_host), ctx):
                probs = predict_proba(net, None, X, 0, batch_size, ctx, likelihood)
            row[column] = error_rate(probs, y)
            if by == "snr":
                row["weights_left"] = int(sum(int(m.sum()) for m in masks.values()))
    order = ("fraction", "weights_left", "error_by_snr", "error_by_abs_mu")
    return [{k: row[k] for k in order} for row in rows]


def _layout(posterior, fraction, by, weights_left, dense_shapes, whole):
    return {"format": _FORMAT, "keys": posterior.keys,
            "shapes": [list(s) for s in posterior.shapes], "fraction": float(fraction),
            "by": by, "weights_left": int(weights_left),
            "num_weights": int(sum(math.prod(s) for k, s in zip(posterior.keys,
                                                                 posterior.shapes, strict=True)
                                   if k in prunable_keys(posterior))),
            "whole_network": whole, "dense_shapes": dense_shapes}


def _network_arrays(net, posterior, weights):
    """Every array of ``net`` by structural name: the posterior's from ``weights``, the
    others (BatchNorm's, layers outside the posterior) as ``net`` holds them now. By the
    Parameter, not its name, so every name of a tied weight gets its pruned mean."""
    pruned = {id(p): w for p, w in zip(posterior.check_net(net).values(), weights,
                                       strict=True)}
    out = {}
    for name, param in structural_params(net).items():
        if id(param) in pruned:
            out[name] = pruned[id(param)]
            continue
        try:
            out[name] = param.data(param.list_ctx()[0])
        except Exception:
            raise ValueError(f"the network is not initialised (parameter {name!r} has no "
                             "value yet)") from None
    return out


def export_pruned(path, posterior, fraction, by="snr", ctx=None, net=None):
    """Save the pruned means, and with ``net`` the rest of the network, for
    :func:`load_pruned`; the weights in sparse CSR storage (``mx.nd.save``).

    Parameters
    ----------
    path : str or os.PathLike
        File to write (atomically).
    posterior : Posterior
    fraction : float
        In [0, 1], share of the weights removed.
    by : {"snr", "abs_mu"}, default "snr"
    ctx : Context, optional
    net : gluon.Block, optional
        The trained network. Give it whenever the network has parameters the posterior
        does not cover (BatchNorm's gamma, beta and running statistics; the layers
        outside a last-layer posterior): the file then holds every array the network
        predicts with, so that at ``fraction=0`` the loaded network predicts exactly as
        ``use_means(net, posterior)``. Without it the file holds the posterior's arrays
        only, which is the whole network only when the posterior covers all of it.

    Returns
    -------
    dict
        ``path``; ``bytes``: the file's size; ``dense_bytes``: the size of the same
        arrays saved dense (measured by writing them to a temporary file beside
        ``path``); ``weights_left``, ``num_weights``, ``fraction``, ``by``;
        ``whole_network``: whether ``net`` was given.

    Raises
    ------
    PosteriorMismatchError
        If ``net`` does not fit the posterior (checked before anything is computed).

    Notes
    -----
    The file holds one array per parameter under its structural name (``"0.weight"``
    as CSR, a convolution's weight as CSR of shape ``(out_channels, rest)``, ``"0.bias"``
    and everything outside the posterior dense) and a ``"__layout__"`` entry.
    """
    if net is not None:
        posterior.check_net(net)
    masks = prune_masks(posterior, fraction, by, ctx)
    weights = [w.as_in_context(mx.cpu()) for w in _apply(posterior, masks, ctx)]
    weights_left = sum(int(m.sum()) for m in masks.values())
    dense = (_network_arrays(net, posterior, weights) if net is not None
             else dict(zip(posterior.keys, weights, strict=True)))
    pruned = {id(w) for key, w in zip(posterior.keys, weights, strict=True) if key in masks}
    sparse, dense_shapes = {}, {}
    for key, w in dense.items():
        if id(w) in pruned and w.ndim >= 2:
            # CSR holds matrices: a convolution's kernel goes as one row per output channel.
            sparse[key] = w.reshape((w.shape[0], -1)).tostype("csr")
            dense_shapes[key] = list(w.shape)
        else:
            sparse[key] = dense[key] = w.as_in_context(mx.cpu())
    layout = _layout(posterior, fraction, by, weights_left, dense_shapes, net is not None)
    sparse["__layout__"] = dense["__layout__"] = json_array(layout)
    path = os.fspath(path)
    atomic_nd_save(path, sparse)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-dense-", suffix=".params",
                               dir=os.path.dirname(os.path.abspath(path)))
    os.close(fd)
    try:
        mx.nd.save(tmp, dense)
        dense_bytes = os.path.getsize(tmp)
    finally:
        os.remove(tmp)
    return {"path": path, "bytes": os.path.getsize(path), "dense_bytes": dense_bytes,
            "weights_left": weights_left, "num_weights": layout["num_weights"],
            "fraction": float(fraction), "by": by, "whole_network": net is not None}


def _read_export(path):
    """The arrays of a pruned export (densified, in their shapes) and its layout."""
    arrays = read_nd_file(path)
    try:
        layout = array_json(arrays.pop("__layout__"))
        written = str(layout.get("format"))
    except (KeyError, ValueError, UnicodeDecodeError, AttributeError):
        written = ""
    if written.startswith("bbb_gluon.pruned/") and written not in _FORMATS_READ:
        raise ValueError(f"{os.fspath(path)} is a pruned network in {written}, which this "
                         f"version of bbb_gluon does not read (it reads {_FORMATS_READ})")
    if written not in _FORMATS_READ:
        raise ValueError(f"{os.fspath(path)} is not a bbb_gluon pruned-network file")
    shapes = layout.get("dense_shapes", {})  # format 1 stored 2-D weights only
    try:
        return {k: a.tostype("default").reshape(tuple(shapes.get(k, a.shape)))
                for k, a in arrays.items()}, layout
    except (mx.base.MXNetError, TypeError, ValueError):
        raise ValueError(f"{os.fspath(path)} is a corrupt pruned-network file (its arrays "
                         "do not have the shapes its layout gives)") from None


def load_pruned(path, net, allow_missing=False):
    """Set ``net``'s parameters to the (densified) arrays of an exported file.

    Parameters
    ----------
    path : str or os.PathLike
        A file written by :func:`export_pruned` (also by earlier versions).
    net : gluon.Block
        An initialised network of the same architecture; afterwards an ordinary network
        that predicts with the pruned means (``predict_proba(net, None, X)``).
    allow_missing : bool, default False
        Load a file that lacks some of ``net``'s parameters (one exported without
        ``net=``, from a posterior over part of the network), leaving those as ``net``
        holds them: right only when ``net`` holds the trained values already.

    Returns
    -------
    dict
        The file's layout (``fraction``, ``by``, ``weights_left``, ``num_weights``,
        ``whole_network``, ...).

    Raises
    ------
    ValueError
        If the file is missing, corrupt or not a pruned export.
    PosteriorMismatchError
        If its arrays do not fit ``net``, or (unless ``allow_missing``) it lacks some of
        ``net``'s parameters, named in the message. ``net`` is left unchanged.
    """
    arrays, layout = _read_export(path)
    named = structural_params(net)
    theirs = {k: tuple(a.shape) for k, a in arrays.items()}
    mine = {k: tuple(p.shape) for k, p in named.items() if k in theirs}
    if theirs != mine:
        raise PosteriorMismatchError(f"{os.fspath(path)} holds arrays {theirs}, the network "
                                     f"has {mine}")
    loaded = {id(named[k]) for k in arrays}
    lost = [k for k, p in named.items() if id(p) not in loaded]
    if lost and not allow_missing:
        shown = lost if len(lost) <= 8 else lost[:8] + [f"... ({len(lost)} in all)"]
        raise PosteriorMismatchError(
            f"{os.fspath(path)} holds the posterior's arrays only; the network's "
            f"{', '.join(shown)} are not in it and would keep the values they have now, so "
            "it would not predict as the trained network: export it with "
            "export_pruned(..., net=trained_net), or pass allow_missing=True if this network "
            "holds the trained values; nothing was changed")
    for key, array in arrays.items():
        named[key].set_data(array)
    return layout
