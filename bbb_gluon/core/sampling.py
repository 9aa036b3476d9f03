"""Putting weights into an ordinary Gluon network, and taking them out again.

Inside ``with use_weights(net, posterior, sample.weights):`` a plain ``net(X)`` computes
with the given arrays instead of the network's own, hybridized or not, and because the
arrays were recorded by autograd from :math:`\\mu` and :math:`\\rho`, ``backward`` reaches
them. On leaving the block (also through an exception) the network holds its own arrays
again, untouched.

Threads: the swap changes the network object itself, so ``use_weights`` holds a lock per
network for the whole block. Two threads using one network through ``use_weights`` (or
``use_means``, or the package's prediction functions) therefore take turns instead of
corrupting each other's weights; but a plain ``net(X)`` in another thread during the
block computes with the swapped weights. Give each thread its own network (same
architecture, same posterior) to run them truly at once.
"""

import threading
import weakref
from contextlib import contextmanager

from .._kernels import private as _private
from .posterior import PosteriorMismatchError

__all__ = ["use_weights", "use_means"]


def _swap_data(param, index, array):
    """Make ``param.data(ctx)`` return ``array`` for the context at ``index``.

    The one place that touches MXNet internals: Gluon has no public way to let a
    Parameter hand out a different (autograd-recorded) array without copying into its
    own storage, and a copy would cut the gradient path to mu and rho. Both the
    imperative path (``HybridBlock.forward`` calls ``param.data(ctx)``) and the
    hybridized one (``_call_cached_op`` calls ``param.data()``) read ``param._data``,
    so swapping that list covers both; tests/core/test_sampling.py checks each.
    """
    saved = _private.parameter_arrays(param)
    if saved is None:
        raise PosteriorMismatchError(f"parameter {param.name!r} is not initialised")
    data = list(saved)
    data[index] = array
    _private.set_parameter_arrays(param, data)
    return saved


_LOCKS = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def _lock_of(net):
    with _LOCKS_GUARD:
        lock = _LOCKS.get(net)
        if lock is None:
            lock = _LOCKS[net] = threading.RLock()  # re-entrant: nested blocks are fine
        return lock


@contextmanager
def use_weights(net, posterior, weights, ctx=None):
    """Temporarily replace the parameters the posterior covers by ``weights``.

    Other threads that enter ``use_weights`` on the same network wait until this block
    ends (see the module docstring).

    Parameters
    ----------
    net : gluon.Block
        The network the posterior was built from (or any of the same architecture).
    posterior : Posterior
    weights : list of NDArray
        One array per ``posterior.keys`` entry, shapes ``posterior.shapes``, all on
        ``ctx`` (``WeightSample.weights`` or ``posterior.mu(ctx)``).
    ctx : Context, optional
        The context the arrays live on (default: that of the first array).

    Raises
    ------
    PosteriorMismatchError
        If ``net``'s Dense parameters differ from the posterior's, or ``weights`` does
        not fit them.
    """
    with _lock_of(net):
        with _swapped(net, posterior, weights, ctx):
            yield net


@contextmanager
def _swapped(net, posterior, weights, ctx):
    named = posterior.check_net(net)
    if len(weights) != len(posterior.keys):
        raise PosteriorMismatchError(
            f"expected {len(posterior.keys)} weight arrays, got {len(weights)}")
    ctx = ctx or weights[0].context
    saved = []
    try:
        for key, shape, w in zip(posterior.keys, posterior.shapes, weights, strict=True):
            param = named[key]
            if tuple(w.shape) != shape:
                raise PosteriorMismatchError(
                    f"weight {key!r} has shape {w.shape}, expected {shape}")
            if w.context != ctx:
                raise PosteriorMismatchError(f"weight {key!r} is on {w.context}, expected {ctx}")
            contexts = param.list_ctx()
            if ctx not in contexts:
                raise PosteriorMismatchError(f"the network has no copy of {key!r} on {ctx}")
            saved.append((param, _swap_data(param, contexts.index(ctx), w)))
        yield net
    finally:
        for param, data in reversed(saved):
            _private.set_parameter_arrays(param, data)


def swapper(net, posterior):
    """``swap(weights, ctx)``, a context manager that does what :func:`use_weights` does,
    for a caller that puts arrays of the posterior's own shapes into the same network on
    every call (a training step): the network is checked once, here, and each context's
    positions found once, instead of on every call (on a small network those checks
    were a good part of a step)."""
    params = [posterior.check_net(net)[k] for k in posterior.keys]
    lock = _lock_of(net)
    positions = {}

    @contextmanager
    def swap(weights, ctx):
        if ctx not in positions:
            if any(ctx not in p.list_ctx() for p in params):
                raise PosteriorMismatchError(f"the network has no copy of its parameters "
                                             f"on {ctx}")
            positions[ctx] = [p.list_ctx().index(ctx) for p in params]
        with lock:
            saved = []
            try:
                for param, index, w in zip(params, positions[ctx], weights, strict=True):
                    saved.append((param, _swap_data(param, index, w)))
                yield net
            finally:
                for param, data in reversed(saved):
                    _private.set_parameter_arrays(param, data)
    return swap


@contextmanager
def use_means(net, posterior, ctx=None):
    """Temporarily set the network's Dense parameters to the posterior means :math:`\\mu`."""
    ctx = ctx or posterior.contexts[0]
    with use_weights(net, posterior, posterior.mu(ctx), ctx=ctx):
        yield net
