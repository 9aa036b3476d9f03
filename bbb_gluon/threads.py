"""How many cores MXNet's CPU operators use, chosen per phase of the work.

MXNet 1.9.1 runs a device's operators on an engine thread of its own, and that thread's
OpenMP thread count decides how many cores a matrix product (oneDNN) or one of the fused
kernels uses. ``OMP_NUM_THREADS`` fixes it once, when MXNet starts, and MXNet's own
``MXSetNumOMPThreads`` sets it only for the calling Python thread, which runs no
operators (apache/mxnet#9744). The fused library therefore has an operator,
``bbb_threads``, that sets it on the engine thread itself, queued like any other
operator; :func:`set_threads` and :func:`using_threads` wrap it.

MXNet leaves that thread at one OpenMP thread unless ``OMP_NUM_THREADS`` says otherwise.
``fit`` trains with :func:`train_threads` and evaluates with :func:`predict_threads`, and
``predict_proba`` / ``predict_samples`` predict with the latter; both default to every
core, which measured fastest for both phases on an otherwise idle machine
(``benchmarks/bench_threads.py``, docs/benchmarks.md). On a machine whose cores are busy
with other work, several OpenMP threads wait for each other and run many times slower:
set ``OMP_NUM_THREADS=1`` there (both phases follow it), or each phase on its own with
:func:`configure` or ``BBB_GLUON_TRAIN_THREADS`` / ``BBB_GLUON_PREDICT_THREADS``. Without
the fused kernels (no compiler, ``BBB_GLUON_FUSED=0``) nothing is changed and
``OMP_NUM_THREADS`` decides, as in MXNet.
"""

import contextlib
import os

import mxnet as mx

from . import fused

__all__ = ["cores", "train_threads", "predict_threads", "configure", "per_context", "set_threads",
           "using_threads"]

_settings = {"train": None, "predict": None}


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


def set_threads(threads, ctx=None):
    """Set the OpenMP threads of the engine thread(s) running operators on the CPU
    context(s) ``ctx`` (default ``mx.cpu()``); GPU contexts are left alone.

    Returns the previous counts, one per CPU context, or None where the fused kernels are
    unavailable (then nothing changes). The count is a property of the engine thread (one
    per CPU context with MXNet's default engine, ``MXNET_CPU_WORKER_NTHREADS=1``); an
    operator queued before the call may still run after it, with the new count.
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    ctxs = _cpu_contexts(ctx)
    if not ctxs or not fused.available():
        return None
    before = [mx.nd.bbb_threads(mx.nd.zeros((1,), ctx=c), threads=threads) for c in ctxs]
    return [int(b.asscalar()) for b in before]


@contextlib.contextmanager
def using_threads(threads, ctx=None):
    """Run the block with ``threads`` OpenMP threads on the CPU context(s) ``ctx``, and
    restore the previous counts after it."""
    ctxs = _cpu_contexts(ctx)
    before = set_threads(threads, ctxs) if ctxs else None
    try:
        yield
    finally:
        if before is not None:
            for c, n in zip(ctxs, before, strict=True):
                if n != threads:
                    set_threads(n, c)
