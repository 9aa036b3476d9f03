"""``fit``: the training loop for Bayes by Backprop and its plain and dropout baselines.

One loop trains all three models on the same data path, so every comparison in this
project is made in one codebase. It keeps a history (CSV and JSON, rewritten after every
epoch), the best checkpoint by validation error apart from the latest one, and resumes
exactly: the optimiser state, the epoch and batch position, and the noise counters are in
the checkpoint, and the data order and weight noise are pure functions of
``(seed, epoch)`` and ``(seed, device, step)``, so an interrupted run ends with the same
history as an uninterrupted one.

Data parallelism follows Gluon: a list of contexts, ``split_and_load`` for the batch, and
the Trainer's kvstore to sum gradients. Each device draws its own weight sample for its
slice of the batch (noise stream = the device's index), so two devices average two
independent estimates of the gradient; given the same noise they give exactly the
single-device step.
"""

import math
import signal
import sys
import time
from dataclasses import dataclass, field

import mxnet as mx
import numpy as np
from mxnet import gluon
from tqdm.auto import tqdm

from .._kernels.machine import describe as describe_machine
from .._kernels.threads import (
    per_context,
    predict_threads,
    run_counts,
    train_threads,
    using_threads,
)
from ..core.estimators import asks_per_example
from ..core.posterior import Posterior
from ..signals import stop_requests
from .checkpoint import read_checkpoint, save_checkpoint, set_trained_arrays, trained_arrays
from .config import TrainConfig
from .guards import (
    TrainingInterrupted,
    check_parameters,
    first_nonfinite,
    raise_if_diverged,
    reduce_costs,
    warn_if_cost_grew,
)
from .history import epoch_row, write_history
from .network import MLP
from .options import RunOptions, refuse_moved_keywords
from .prepare import Progress, prepare, write_config
from .prepare import resume as resume_run
from .progress import progress_mode, say_epoch, say_estimators, say_resume

__all__ = ["TrainResult", "fit"]


@dataclass
class TrainResult:
    """What :func:`fit` returns: the trained objects and the per-epoch history."""

    net: gluon.Block
    posterior: Posterior | None
    history: list
    config: TrainConfig
    run_dir: str | None
    best_epoch: int | None
    interrupted: bool = False
    mlp: MLP | None = None  # the package's MLP it trained (None: a network of your own)
    # A network of your own: the loss it trained with (yours, or the one a regression's
    # likelihood built: bbb.predict_intervals takes it); None for the package's MLP.
    loss: gluon.loss.Loss | None = None


# The user's one call to train: what to train on what, where to keep it, and how to show
# it; the training's own settings are TrainConfig's, the network's MLP's or Network's, and
# the rarer settings RunOptions'.
@refuse_moved_keywords
def fit(config, train, valid=None, *, net=None, run_dir=None, resume=False, progress=True,
        options=None):
    """Train a network as ``config`` says: the package's MLP, or your own.

    Parameters
    ----------
    config : TrainConfig
        How to train: ``model`` says whether the network gets a posterior ("bbb") or is
        trained as it is ("plain", "dropout"); the likelihood, prior, optimiser, epochs.
    train : (X, y) or gluon.data.DataLoader
        NumPy arrays (or NDArrays): ``X`` of shape ``(N, num_inputs)`` for the package's
        MLP, or any ``(N, ...)`` your network takes (images ``(N, 1, 28, 28)``); ``y``
        integer labels ``(N,)``, or real-valued targets ``(N, ...)`` with a loss of
        your own. Arrays are checked up front and shuffled each epoch by a permutation of
        ``(seed, epoch)``. With your own network, a Gluon ``DataLoader`` of ``(X, y)``
        batches also works; its data are not checked up front (only that the network
        takes its first batch), and a run resumed inside an epoch replays the loader from
        the epoch's start, skipping the batches done: exact only if the loader yields the
        same batches each time (no shuffling, or a sampler of its own that depends on the
        epoch alone).
    valid : (X, y), optional
        Validation split; the best checkpoint is chosen by its error with the means.
    net : MLP, gluon.Block or Network, optional
        What to train: ``bbb.MLP(hidden=..., ctx=...)`` (the default, ``MLP()``: 784-400-
        400-10), your own initialised Block (trained on the contexts its parameters live
        on; a posterior over every Dense and convolution layer for ``model="bbb"``), or
        ``bbb.Network(block, posterior, loss)`` to give its posterior (which layers are
        Bayesian) or its loss (regression). Parameters the posterior does not cover
        (BatchNorm, layers left out) are trained by the same Trainer; all of them, and
        BatchNorm's statistics, go into the checkpoints.
    run_dir : str, optional
        Folder for ``config.json``, ``history.csv``/``.json`` and ``checkpoints/``.
    resume : bool or "best"
        Continue from ``run_dir/checkpoints/latest.params``; if that file is corrupt,
        from ``best.params`` (it holds the optimiser states too, so the run continues
        exactly from its epoch), with a one-line notice on stderr. ``"best"``: from
        ``best.params`` of a run whose latest checkpoint is corrupt, also one written
        without optimiser states (they start afresh). The corrupt file is copied to
        ``latest.params.corrupt``, and the checkpoint resumed from takes its place.
    progress : bool or "lines"
        True: a tqdm bar per epoch on a terminal or in a notebook (never into a file or a
        pipe), and after each epoch one line on stdout with its costs and validation error
        (where ``resume`` continues, too); "lines": those lines only; False: nothing.
    options : RunOptions, optional
        A test set to watch, a distributed kvstore (``dist_sync``), more ``config.json``
        entries, a stop after some batches: :class:`~bbb_gluon.RunOptions`.

    Raises
    ------
    TrainingDiverged
        As soon as a batch's cost (or, at an epoch's end, a parameter) is NaN or infinite;
        the run folder keeps the last good epoch.

    Notes
    -----
    ``fit`` draws everything from NumPy generators keyed by ``config.seed`` and leaves
    MXNet's global random state alone, except where the network has Dropout layers (the
    dropout baseline, or a network of your own): their masks come from MXNet's generator,
    seeded per batch so that a resumed run draws the same ones.

    Returns
    -------
    TrainResult
    """
    options = RunOptions() if options is None else options
    if not isinstance(options, RunOptions):
        raise TypeError(f"options must be a bbb_gluon.RunOptions, got {type(options).__name__}")
    bar, lines = progress_mode(progress)
    run = prepare(config, train, valid, net, run_dir, resume, options)
    done = resume_run(run, resume) if resume else Progress()
    lines = lines and run.group.rank == 0  # the others have no errors to show
    if resume and lines:
        say_resume(run.run_dir, config.epochs, done, run.num_batches)
    _choose_threads(run, done, resume)
    if lines and asks_per_example(config.estimator):
        say_estimators(run.step)
    run.group.prepare(run.trainers)
    if run.writer:
        write_config(run, options.record, done.machines)
    stop = _Stop(run.group, options.stop_after_batches)
    interrupted, best_arrays = False, None
    with stop_requests() as sig, using_threads(_threads(run, "train"), run.ctxs):
        stop.signals = sig
        for epoch in range(done.epoch, config.epochs):
            sums = _train_epoch(run, done, epoch, stop, bar)
            if sums.stopped_at is not None and sums.stopped_at < run.num_batches:
                _save_partial(run, done, epoch, sums)
                interrupted = True
                break
            best_arrays = _end_epoch(run, done, epoch, sums, config.restore_best) \
                or best_arrays
            if lines:
                say_epoch(done.history[-1], config)
            if stop.requested() or (stop.spent() and epoch + 1 < config.epochs):
                interrupted = True
                break
    if config.restore_best and not interrupted:
        _restore_best(run, done, best_arrays)
    result = TrainResult(run.net, run.posterior, done.history, config, run.run_dir,
                         done.best["epoch"], interrupted, run.mlp, run.loss)
    if interrupted:
        exc = TrainingInterrupted(f"training stopped; checkpoint in {run.run_dir}"
                                  if run.run_dir else "training stopped")
        exc.result, exc.signum = result, sig.signum or signal.SIGINT
        raise exc
    return result


def _choose_threads(run, done, resume):
    """The run's thread counts (a resumed run's recorded ones: ``run_counts``), and where
    it trains from here in ``done.machines``; a resume that will not replay bit for bit
    says why on stderr (rank 0)."""
    run.threads, note = run_counts(run.ctxs, done.recorded_threads())
    changed = done.add_machine(describe_machine(run.threads, run.setup["engine"]))
    if resume and run.group.rank == 0:
        if note is None and changed:
            note = ("this machine differs from where the run trained (" + "; ".join(changed)
                    + "): the continuation replays statistically, not bit for bit")
        if note is not None:
            print(f"bbb_gluon: {note}", file=sys.stderr, flush=True)


def _threads(run, phase):
    """The OpenMP threads per device of ``phase``: the run's counts, or (without the
    fused kernels, where nothing is set) the phase's default."""
    if run.threads is not None:
        return run.threads[phase]
    return (per_context(train_threads(), run.ctxs) if phase == "train"
            else per_context(predict_threads(), run.ctxs[0]))


class _Stop:
    """When to stop early: a Ctrl-C or SIGTERM (agreed by every worker of a distributed
    run at its reports), or ``stop_after_batches`` batches (for tests of interruption)."""

    def __init__(self, group, budget):
        self.group, self.budget = group, budget
        self.signals = None  # the stop_requests flag, once it listens
        self.agreed = False  # distributed: a request seen by any worker at the last report
        self.batches = 0

    def requested(self):
        return self.agreed if self.group.distributed else self.signals.requested

    def spent(self):
        return self.budget is not None and self.batches >= self.budget


@dataclass
class _EpochSums:
    """An epoch's running sums, on the device until a report reads them."""

    nll: mx.nd.NDArray
    complexity: mx.nd.NDArray
    first_bad: int = -1  # the first batch whose cost was not finite, or -1
    recent: list = field(default_factory=list)  # (batch, nll, complexity) since the last look
    first: tuple | None = None  # a fresh run's first batch (nll, examples), until compared
    measured: int = 0  # batches whose complexity cost was computed
    seconds: float = 0.0
    examples: int = 0
    stopped_at: int | None = None  # batches done when a stop came inside the epoch


def _train_epoch(run, done, epoch, stop, progress):
    """One epoch's steps (from the saved batch on, for the epoch a stop interrupted)."""
    config, group, ctx = run.config, run.group, run.ctxs[0]
    skip = done.batch if epoch == done.epoch else 0
    sums = _EpochSums(mx.nd.zeros((1,), ctx=ctx), mx.nd.zeros((1,), ctx=ctx))
    if skip and done.partial:
        # The saved likelihood cost is already the sum over the workers: one of them
        # carries it on, or the epoch's sum would count it once per worker.
        sums.nll[:] = done.partial["nll"] if group.rank == 0 else 0.0
        sums.complexity[:] = done.partial["complexity_sum"]
        sums.measured, sums.seconds = done.partial["measured"], done.partial["seconds"]
    bar = tqdm(total=run.num_batches, initial=skip, desc=f"epoch {epoch + 1}/{config.epochs}",
               disable=not progress or group.rank != 0, leave=False, dynamic_ncols=True)
    # Set every epoch: loading optimizer states on resume brings back a stored rate.
    for t in run.trainers:
        t.set_learning_rate(config.lr_at(epoch))
    config.method.start_epoch(run.step, config, epoch)
    t0 = time.perf_counter()
    for i, (xb, yb) in enumerate(run.epoch_batches(epoch)):
        sums.examples += xb.shape[0]
        if i < skip:
            continue
        report = (i + 1) % config.log_every == 0
        nll, cplx = _train_batch(run, xb, yb, epoch, i, report)
        sums.nll += nll
        if cplx is not None:
            sums.complexity += cplx
            sums.measured += 1
        stop.batches += 1
        sums.recent.append((i, nll, cplx))
        if i == 0 and epoch == 0 and group.rank == 0:
            sums.first = (nll, xb.shape[0])
        if report or i + 1 == run.num_batches:
            _check_costs(run, sums, epoch, stop)
            if sums.first is not None and i > 0:  # costs finite: compare at the first look
                warn_if_cost_grew(sums.first, (nll, xb.shape[0]), i + 1, config.lr)
            sums.first = None
        if report and progress:
            _show_costs(bar, run, sums, i)
        bar.update(1)
        if stop.requested() or stop.spent():
            sums.stopped_at = i + 1
            break
    mx.nd.waitall()
    sums.seconds += time.perf_counter() - t0
    bar.close()
    return sums


def _train_batch(run, xb, yb, epoch, i, report):
    """One step on batch ``i``: its likelihood cost, and its complexity cost if computed."""
    config, group = run.config, run.group
    n = xb.shape[0]
    if group.distributed:
        here = group.shard(n)
        xb, yb = xb[here.start:here.stop], yb[here.start:here.stop]
    if run.masks:
        # Dropout layers draw from mx.random, whose state cannot be saved; a seed per batch
        # makes the masks a function of the position, so resuming reproduces them.
        mx.random.seed(_batch_seed(config.seed, epoch, i,
                                   group.rank if group.distributed else None))
    # The complexity cost's value is only for reports: on the fused engine it is computed
    # on the first batch and every log_every-th (its gradient on every batch).
    costs = run.step(xb, yb, i, want_complexity=report or i == 0, batch_size=n)
    return costs.nll, costs.complexity


def _check_costs(run, sums, epoch, stop):
    """At a report: raise if a cost was not finite; in a distributed run, agree with the
    other workers on that and on a stop request, so that all stop at the same batch (one
    that went on alone would wait for the others' gradients for ever)."""
    _look_for_nonfinite(sums)
    if not run.group.distributed:
        raise_if_diverged(sums.first_bad, sums.nll, sums.complexity, epoch, run.run_dir)
        return
    bad, agreed = run.group.allreduce([sums.first_bad >= 0, stop.signals.requested])
    if bad:
        raise_if_diverged(sums.first_bad, sums.nll, sums.complexity, epoch, run.run_dir,
                           elsewhere=True)
    stop.agreed = agreed > 0


def _look_for_nonfinite(sums):
    """Note in ``sums`` the first batch since the last look whose cost was not finite
    (nothing to read when no batch ran since: the end of an epoch after its last report)."""
    if sums.first_bad < 0 and sums.recent:
        sums.first_bad = first_nonfinite(sums.nll + sums.complexity, sums.recent)
    sums.recent.clear()


def _show_costs(bar, run, sums, i):
    n, k = float(sums.nll.asscalar()), float(sums.complexity.asscalar())
    kl = run.pi_sum * k / sums.measured if sums.measured else 0.0
    here = run.config.batch_size / run.group.num_workers  # this worker's share
    bar.set_postfix(nll=f"{n / ((i + 1) * here):.4f}", complexity=f"{kl:.4g}", refresh=False)


def _save_partial(run, done, epoch, sums):
    """A stop inside ``epoch``: the latest checkpoint at its batch, with its running sums."""
    nll_sum, cplx_sum = reduce_costs(run.group, sums.nll, sums.complexity)
    if not math.isfinite(nll_sum + cplx_sum):  # the same sums on every worker
        _look_for_nonfinite(sums)
        raise_if_diverged(sums.first_bad, sums.nll, sums.complexity, epoch, run.run_dir,
                           elsewhere=sums.first_bad < 0)
    if run.writer:
        part = {"nll": nll_sum, "complexity_sum": cplx_sum, "measured": sums.measured,
                "seconds": sums.seconds}
        save_checkpoint(run.latest_path, run.net, run.posterior, run.trainers,
                         done.meta(run, epoch, sums.stopped_at, part), run.loss)


def _end_epoch(run, done, epoch, sums, restore_best):
    """Check and evaluate the finished epoch, record it, and save the checkpoints; return
    a copy of the weights when they are the best yet and ``restore_best`` wants them."""
    _look_for_nonfinite(sums)
    raise_if_diverged(sums.first_bad, sums.nll, sums.complexity, epoch, run.run_dir)
    check_parameters(run.net, run.posterior, epoch, run.run_dir, run.loss)
    nll_sum, cplx_sum = reduce_costs(run.group, sums.nll, sums.complexity)
    complexity = (run.pi_sum * cplx_sum / sums.measured
                  if run.posterior is not None and sums.measured else 0.0)
    lead = run.group.rank == 0  # the others have nothing to record: rank 0 evaluates
    with using_threads(_threads(run, "predict"), run.ctxs[0]):
        row = epoch_row(run, epoch, nll_sum, complexity, sums, evaluate=lead)
    done.history.append(row)
    Xv = run.valid[0]
    improved = lead and Xv is not None and (done.best["error"] is None
                                            or row[run.metric] < done.best["error"])
    best_arrays = None
    if improved or Xv is None:
        done.best = {"epoch": epoch + 1, "error": row.get(run.metric)}
        if restore_best and Xv is not None:
            best_arrays = {k: v.copy()
                           for k, v in trained_arrays(run.net, run.posterior, run.loss).items()}
    if run.writer:
        meta = done.meta(run, epoch + 1, 0, None)
        if improved or Xv is None:
            # With the optimiser states: a run whose latest checkpoint is lost
            # continues exactly from here.
            save_checkpoint(run.best_path, run.net, run.posterior, run.trainers, meta,
                             run.loss)
        save_checkpoint(run.latest_path, run.net, run.posterior, run.trainers, meta,
                         run.loss)
        write_history(run.run_dir, done.history)
    return best_arrays


def _restore_best(run, done, best_arrays):
    """Put back the weights of the epoch with the lowest validation error."""
    if done.best["epoch"] is None or run.valid[0] is None:
        return
    if best_arrays is None and run.run_dir is not None:  # best epoch was before a resume
        best_arrays, _ = read_checkpoint(run.best_path, states=False)
    if best_arrays is not None:
        set_trained_arrays(best_arrays, run.net, run.posterior, "best weights", run.loss)


def _batch_seed(seed, epoch, batch, rank=None):
    key = [seed, epoch, batch] + ([] if rank is None else [rank])
    return int(np.random.SeedSequence(key).generate_state(1)[0] % (2**31))
