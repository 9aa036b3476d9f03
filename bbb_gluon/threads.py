"""How many cores MXNet's CPU operators use, chosen per phase of the work.

MXNet 1.9.1 runs a device's operators on an engine thread of its own, and that thread's
OpenMP thread count decides how many cores a matrix product (oneDNN) or one of the fused
kernels uses. ``OMP_NUM_THREADS`` fixes it once, when MXNet starts, and MXNet's own
``MXSetNumOMPThreads`` sets it only for the calling Python thread, which runs no
operators (apache/mxnet#9744). The fused library therefore has an operator,
``bbb_threads``, that sets it on the engine thread itself, queued like any other
operator; :func:`set_threads` and :func:`using_threads` wrap it.

The count may go down but never back up. oneDNN sizes a primitive's per-thread buffers
for the thread count at the moment it is created, and MXNet keeps the primitives it
created (keyed by shapes, not by thread count) for the life of the engine thread: run one
with more threads than it was made for and it writes past its buffers (a pooling layer
made at one thread and run at two crashed the process; oneDNN issue #1201 says the count
must be set before any primitive is created). So each CPU engine thread has a ceiling,
the most threads it may use from now on:

- at ``import bbb_gluon`` the engine thread of ``mx.cpu()`` is raised to the larger of
  the two phases' counts below, if that thread was started by this very call (nothing
  has run on it yet); if an operator ran on ``mx.cpu()`` before ``bbb_gluon`` was
  imported, its count stays where MXNet put it (one thread on these 2-core machines,
  unless ``OMP_NUM_THREADS`` says otherwise);
- another CPU context gets the same treatment the first time ``bbb_gluon`` sets its count;
- setting a count lowers the ceiling to it, and a later, larger request gets the ceiling.

``fit`` trains with :func:`train_threads` and evaluates with :func:`predict_threads`, and
``predict_proba`` / ``predict_samples`` predict with the latter; both default to every
core, which measured fastest for both phases on an otherwise idle machine
(``benchmarks/bench_threads.py``, docs/benchmarks.md), and then nothing changes after
the import. On a machine whose cores are busy with other work, several OpenMP threads
wait for each other and run many times slower: set ``OMP_NUM_THREADS=1`` there (both
phases follow it), or each phase on its own with :func:`configure` or
``BBB_GLUON_TRAIN_THREADS`` / ``BBB_GLUON_PREDICT_THREADS`` (a phase with fewer threads
than the other lowers the ceiling for both, from the first time it runs). Without the
fused kernels (no compiler, ``BBB_GLUON_FUSED=0``) nothing is changed and
``OMP_NUM_THREADS`` decides, as in MXNet.
"""

import contextlib
import os
import threading

import mxnet as mx

from . import fused

__all__ = ["cores", "train_threads", "predict_threads", "configure", "per_context", "current",
           "set_threads", "using_threads"]

_settings = {"train": None, "predict": None}
_ceilings = {}  # CPU dev_id -> the most OpenMP threads its engine thread may use from now on
_lock = threading.RLock()


def cores():
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _from_env(name):
    text = os.environ.get(name)
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{name} must be a positive number of threads, got {text!r}")
    return value


def train_threads():
    """Threads of the training steps: :func:`configure`'s, else
    ``$BBB_GLUON_TRAIN_THREADS``, else ``$OMP_NUM_THREADS``, else every core."""
    return (_settings["train"] or _from_env("BBB_GLUON_TRAIN_THREADS")
            or _from_env("OMP_NUM_THREADS") or cores())


def predict_threads():
    """Threads of prediction and evaluation: :func:`configure`'s, else
    ``$BBB_GLUON_PREDICT_THREADS``, else ``$OMP_NUM_THREADS``, else every core."""
    return (_settings["predict"] or _from_env("BBB_GLUON_PREDICT_THREADS")
            or _from_env("OMP_NUM_THREADS") or cores())


def configure(train=None, predict=None):
    """Set the thread counts of the two phases for this process (None: back to the
    environment's or the default)."""
    for name, value in (("train", train), ("predict", predict)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise ValueError(f"{name} threads must be a positive integer or None, "
                             f"got {value!r}")
    _settings.update(train=train, predict=predict)


def per_context(threads, ctx):
    """``threads`` shared out over the CPU contexts of ``ctx`` (each runs its own engine
    thread, so each gets its part; at least one)."""
    return max(1, threads // max(1, len(_cpu_contexts(ctx))))


def _cpu_contexts(ctx):
    ctxs = [mx.cpu()] if ctx is None else list(ctx) if isinstance(ctx, list | tuple) \
        else [ctx]
    return [c for c in ctxs if c.device_type == "cpu"]


def _query(ctx, threads=0):
    """The engine thread's count before the call; ``threads`` > 0 also sets it."""
    return int(mx.nd.bbb_threads(mx.nd.zeros((1,), ctx=ctx), threads=threads).asscalar())


def _live_threads():
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:  # not Linux: a new engine thread cannot be told from an old one
        return None


def _ceiling(ctx):
    """The ceiling of ``ctx``'s engine thread, found the first time it is asked for.

    MXNet starts a context's engine thread when the first operator is queued to it. If
    the query below is what started it (the process gained threads), no oneDNN primitive
    exists on it yet and it may take the larger phase count once; otherwise operators may
    have run on it, and the count it has is the most it may use.
    """
    with _lock:
        if ctx.device_id not in _ceilings:
            before = _live_threads()
            count = _query(ctx)
            after = _live_threads()
            if before is not None and after > before:
                try:
                    wanted = max(train_threads(), predict_threads())
                except ValueError:  # a bad variable is reported where the phase starts
                    wanted = count
                if wanted != count:
                    _query(ctx, wanted)
                count = wanted
            _ceilings[ctx.device_id] = count
        return _ceilings[ctx.device_id]


def _claim():
    """At import: let ``mx.cpu()``'s engine thread take the phase count before anything
    runs on it (see the module's notes)."""
    if fused.available():
        _ceiling(mx.cpu())


def _forget_after_fork():
    # MXNet restarts its engine threads in a forked child: new threads, nothing cached.
    _ceilings.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


def current(ctx=None):
    """The OpenMP thread counts of the engine thread(s) of the CPU context(s) ``ctx``
    (default ``mx.cpu()``), or None where the fused kernels are unavailable."""
    ctxs = _cpu_contexts(ctx)
    if not ctxs or not fused.available():
        return None
    with _lock:
        for c in ctxs:
            _ceiling(c)
        return [_query(c) for c in ctxs]


def set_threads(threads, ctx=None):
    """Set the OpenMP threads of the engine thread(s) running operators on the CPU
    context(s) ``ctx`` (default ``mx.cpu()``); GPU contexts are left alone.

    A context gets at most its ceiling (the module's notes say why the count cannot go
    back up), and the ceiling becomes the count set. Returns the previous counts, one per
    CPU context, or None where the fused kernels are unavailable (then nothing changes).
    The count is a property of the engine thread (one per CPU context with MXNet's
    default engine, ``MXNET_CPU_WORKER_NTHREADS=1``); an operator queued before the call
    may still run after it, with the new count.
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    ctxs = _cpu_contexts(ctx)
    if not ctxs or not fused.available():
        return None
    before = []
    with _lock:
        for c in ctxs:
            count = min(threads, _ceiling(c))
            _ceilings[c.device_id] = count
            before.append(_query(c, count))
    return before


@contextlib.contextmanager
def using_threads(threads, ctx=None):
    """Run the block with ``threads`` OpenMP threads (at most the ceiling) on the CPU
    context(s) ``ctx``, and restore the previous counts after it, where the ceiling
    allows."""
    ctxs = _cpu_contexts(ctx)
    before = set_threads(threads, ctxs) if ctxs else None
    try:
        yield
    finally:
        if before is not None:
            for c, n in zip(ctxs, before, strict=True):
                if n != threads:
                    set_threads(n, c)
