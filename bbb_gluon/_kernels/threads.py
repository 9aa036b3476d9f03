"""How many cores MXNet's CPU operators use, chosen per phase of the work.

MXNet 1.9.1 runs a device's operators on an engine thread of its own, and that thread's
OpenMP thread count decides how many cores a matrix product (oneDNN) or one of the fused
kernels uses. ``OMP_NUM_THREADS`` fixes it once, when MXNet starts, and MXNet's own
``MXSetNumOMPThreads`` sets it only for the calling Python thread, which runs no
operators (apache/mxnet#9744). The fused library therefore has an operator,
``bbb_threads``, that sets it on the engine thread itself, queued like any other
operator; :func:`set_threads` and :func:`using_threads` wrap it.

The count may go down but never back up. oneDNN sizes a primitive's per-thread buffers
for the thread count at the moment it is made, and MXNet keeps the primitives it made
(keyed by shapes, not by thread count) for the life of the engine thread: run one with
more threads than it was made for and it writes past its buffers (a pooling layer made at
one thread and run at two crashed the process; oneDNN issue #1201 says the count must be
set before any primitive is made). So ``bbb_threads`` keeps a ceiling per engine thread,
the most threads it may use from then on:

- the first time it runs on an engine thread, it raises the thread to the larger of the
  two phase counts below only if the thread is new, started by this very call (its id was
  not among the process's threads just before); otherwise the ceiling is the count the
  thread has, MXNet's own (``OMP_NUM_THREADS``, else half the logical cores);
- :func:`claim` does this for ``mx.cpu()``: call it before running any MXNet operator
  (creating an array or ``mx.random.seed`` count too) and from the main thread (the
  command line does); another CPU context gets it the first time ``bbb_gluon`` sets its
  count; without a claim, the ceiling is MXNet's own count;
- setting a count lowers the ceiling to it, and a larger request gets the ceiling;
- new engine threads (MXNet restarts them in both processes around ``os.fork``, e.g. for
  a ``DataLoader`` with workers) start unknown, so they keep MXNet's count.

A count that cannot be had falls back silently to the ceiling; :func:`current` says what
an engine thread has.

``fit`` trains with :func:`train_threads` and evaluates with :func:`predict_threads`, and
``predict_proba`` / ``predict_samples`` predict with the latter; both default to every
core, which measured fastest for both phases on an otherwise idle machine
(``benchmarks/bench_threads.py``, docs/benchmarks.md). ``fit`` on several CPU contexts
gives each its share (:func:`per_context`), which lowers their ceilings. On a machine
whose cores are busy with other work, several OpenMP threads wait for each other and run
many times slower: set ``OMP_NUM_THREADS=1`` there (both
phases follow it), or each phase on its own with :func:`configure` or
``BBB_GLUON_TRAIN_THREADS`` / ``BBB_GLUON_PREDICT_THREADS`` (a phase with fewer threads
than the other lowers the ceiling for both, from the first time it runs). Without the
fused kernels (no compiler, ``BBB_GLUON_FUSED=0``) nothing is changed and
``OMP_NUM_THREADS`` decides, as in MXNet.
"""

import contextlib
import os
import time
import warnings

import mxnet as mx

from . import cores, fused

__all__ = ["claim", "cores", "train_threads", "predict_threads", "configure", "per_context",
           "current", "set_threads", "using_threads", "run_counts"]

_settings = {"train": None, "predict": None, "claim": None}


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


def _cpu_times():
    """(idle, total) jiffies of all CPUs from /proc/stat, or None where it cannot be read."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return fields[3] + (fields[4] if len(fields) > 4 else 0), sum(fields)


def idle_cores(window=0.25):
    """How many of this process's cores other programs left idle over ``window`` seconds
    (at least 1): the machine's idle share times :func:`cores`, this process asleep
    meanwhile. Every core where it cannot be read (not Linux)."""
    first = _cpu_times()
    if first is None:
        return cores()
    time.sleep(window)
    second = _cpu_times()
    idle, total = second[0] - first[0], second[1] - first[1]
    if total <= 0:
        return cores()
    return max(1, min(cores(), round(cores() * idle / total)))


def _explicit():
    """Whether a thread count was asked for (:func:`configure` or the environment)."""
    return any(_settings.values()) or any(
        _from_env(name) for name in ("BBB_GLUON_TRAIN_THREADS", "BBB_GLUON_PREDICT_THREADS",
                                     "OMP_NUM_THREADS"))


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
    environment's or the default); forgets the idle cores a :func:`claim` measured."""
    for name, value in (("train", train), ("predict", predict)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise ValueError(f"{name} threads must be a positive integer or None, "
                             f"got {value!r}")
    _settings.update(train=train, predict=predict, claim=None)


def per_context(threads, ctx):
    """``threads`` shared out over the CPU contexts of ``ctx`` (each runs its own engine
    thread, so each gets its part; at least one)."""
    return max(1, threads // max(1, len(_cpu_contexts(ctx))))


def _cpu_contexts(ctx):
    ctxs = [mx.cpu()] if ctx is None else list(ctx) if isinstance(ctx, list | tuple) \
        else [ctx]
    return [c for c in ctxs if c.device_type == "cpu"]


def _thread_ids():
    """The ids of the process's threads, or None where they cannot be listed."""
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return None


def _call(ctx, threads=0):
    """Run ``bbb_threads`` on ``ctx``'s engine thread: (count before, count after).

    The operator keeps the thread's ceiling; it may raise a thread it sees for the first
    time to the larger phase count only if that thread is not among the ids listed just
    before the call, that is, if this call's own operators are the first it runs.
    """
    known = _thread_ids()
    claim = 0
    if known is not None:  # without the list a new thread cannot be told from an old one
        try:
            claim = _settings["claim"] or max(train_threads(), predict_threads())
        except ValueError:  # a bad variable is reported where the phase starts
            claim = 0
    known = (known or []) + [-1]  # never empty
    out = mx.nd.bbb_threads(mx.nd.array(known, ctx=ctx), threads=threads, claim=claim)
    out = out.asnumpy()
    return int(out[0]), int(out[2])


def claim(warn=True, threads=None):
    """Let ``mx.cpu()``'s engine thread take the larger phase count before anything runs on
    it (see the module's notes), and say once if it could not (unless ``warn`` is False):
    call it before the process's first MXNet operator. Builds the kernels if needed;
    without them it does nothing.

    With no count asked for (:func:`configure`, ``BBB_GLUON_TRAIN_THREADS`` /
    ``_PREDICT_THREADS``, ``OMP_NUM_THREADS``), it takes ``threads`` where given (a
    resumed run's recorded count: the same count gives the same numbers, :func:`run_counts`),
    else the cores other programs leave idle (:func:`idle_cores`) rather than every core:
    OpenMP threads that wait for a core another program holds make each parallel region
    many times slower, and the count cannot go back up later, so a busy machine gets what
    it has free now.
    """
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
    if not fused.available():
        return
    try:
        explicit = _explicit()
    except ValueError:  # a bad variable is reported where the phase starts
        explicit = True
    if not explicit:
        _settings["claim"] = threads or idle_cores()
    _, have = _call(mx.cpu())
    if _thread_ids() is None:  # no claim was made (new threads cannot be told apart)
        return
    try:
        want = _settings["claim"] or max(train_threads(), predict_threads())
    except ValueError:  # a bad variable is reported where the phase starts
        return
    if have < want and warn:
        warnings.warn(
            f"bbb_gluon: MXNet ran an operator before bbb_gluon.threads.claim(), so training "
            f"and prediction on mx.cpu() use {have} of the {want} threads they want (the "
            f"count cannot go up once MXNet has used it). Call it before creating any "
            f"NDArray, or start Python with OMP_NUM_THREADS={want}.", RuntimeWarning,
            stacklevel=2)


def current(ctx=None):
    """The OpenMP thread counts of the engine thread(s) of the CPU context(s) ``ctx``
    (default ``mx.cpu()``), or None where the fused kernels are unavailable."""
    ctxs = _cpu_contexts(ctx)
    if not ctxs or not fused.available():
        return None
    return [_call(c)[1] for c in ctxs]


def set_threads(threads, ctx=None):
    """Set the OpenMP threads of the engine thread(s) running operators on the CPU
    context(s) ``ctx`` (default ``mx.cpu()``); GPU contexts are left alone.

    A context gets at most its ceiling (the module's notes say why the count cannot go
    back up), and the ceiling becomes the count set. Returns the previous counts, one per
    CPU context, or None where the fused kernels are unavailable (then nothing changes).
    The count is a property of the engine thread (one per CPU context with MXNet's
    default engine, ``MXNET_CPU_WORKER_NTHREADS=1``; with a pool, each pool thread keeps
    its own and only the one that runs this call changes); an operator queued before the
    call may still run after it, with the new count.
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    ctxs = _cpu_contexts(ctx)
    if not ctxs or not fused.available():
        return None
    return [_call(c, threads)[0] for c in ctxs]


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


def _asked(phase):
    """The count asked for ``phase`` ("train" or "predict"): :func:`configure`'s, else its
    variable, else ``OMP_NUM_THREADS``; None where none was asked."""
    return (_settings[phase] or _from_env(f"BBB_GLUON_{phase.upper()}_THREADS")
            or _from_env("OMP_NUM_THREADS"))


def run_counts(ctxs, recorded=None):
    """The OpenMP thread counts per CPU context a run trains and evaluates with,
    ``{"train": n, "predict": n}``, and a note where a resumed run will not continue with
    the counts it recorded (None where it will, or where nothing could be set).

    oneDNN's matrix products give other last bits with another thread count, so a run
    that continues with other counts than it started with is not bit-identical to one
    never interrupted. A new run takes the phases' counts (:func:`train_threads` shared
    out over ``ctxs``, :func:`predict_threads`), at most the ceiling; a resumed run takes
    ``recorded`` (what it recorded), unless a count was asked for (:func:`configure` or the
    environment) that differs: the user's wins, with a note. Both phases get the smaller
    of the two: evaluating lowers the ceiling (the module's notes), so the epochs after
    the first would train with the evaluation's count anyway. None for both where the
    fused kernels are unavailable (MXNet's ``OMP_NUM_THREADS`` decides, unrecorded).
    """
    here = current(ctxs)
    if here is None:
        return None, None
    ceiling = min(here)
    wanted = {"train": per_context(train_threads(), ctxs), "predict": predict_threads()}
    note = None
    if recorded and recorded.get("train"):
        asked = {"train": _asked("train"), "predict": _asked("predict")}
        wanted = {"train": per_context(asked["train"], ctxs) if asked["train"]
                  else recorded["train"],
                  "predict": asked["predict"] or recorded["predict"]}
        count = min(wanted.values())
        if count != recorded["train"] and any(asked.values()):
            note = (f"the run trained with {recorded['train']} thread(s) per device; "
                    f"{_source()} asks for {count}: the continuation will not be "
                    f"bit-identical to a run never interrupted")
        elif count > ceiling:
            note = (f"the run trained with {recorded['train']} thread(s) per device, and "
                    f"this process can use only {ceiling} (MXNet ran an operator before "
                    f"bbb_gluon.threads.claim()): the continuation will not be "
                    f"bit-identical to a run never interrupted; start Python with "
                    f"OMP_NUM_THREADS={recorded['train']} for an exact one")
    count = min(ceiling, *wanted.values())
    return {"train": count, "predict": count}, note


def _source():
    """Where the asked count comes from, in words."""
    if _settings["train"] or _settings["predict"]:
        return "bbb_gluon.threads.configure()"
    names = [n for n in ("BBB_GLUON_TRAIN_THREADS", "BBB_GLUON_PREDICT_THREADS",
                         "OMP_NUM_THREADS") if os.environ.get(n)]
    return " and ".join(f"{n}={os.environ[n]}" for n in names)
