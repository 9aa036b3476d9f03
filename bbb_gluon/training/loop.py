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

import json
import os
import signal
import time
from dataclasses import dataclass

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from tqdm.auto import tqdm

from .._files import (
    atomic_write_text,
)
from .._kernels.threads import per_context, predict_threads, train_threads, using_threads
from ..core.posterior import Posterior, PosteriorMismatchError
from ..core.priors import make_prior
from ..core.step import BBBStep
from ..data import ArrayLoader
from ..distributed import WorkerGroup
from ..signals import stop_requests
from .checkpoint import (
    _FORMAT,
    CheckpointError,
    _check_resume_config,
    _check_resume_setup,
    _load_trainer_states,
    _model_arrays,
    _read_checkpoint,
    _run_paths,
    _save_checkpoint,
    _set_model_arrays,
)
from .config import TrainConfig
from .guards import (
    TrainingInterrupted,
    _check_parameters,
    _raise_if_diverged,
    _reduce_costs,
    _track_nonfinite,
)
from .history import _epoch_row, _write_history
from .model import _build, _check_user_model, _num_classes

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


def _gather(values, ctx):
    total = values[0].as_in_context(ctx)
    for v in values[1:]:
        total = total + v.as_in_context(ctx)
    return total.reshape((1,))


def _plain_step(net, loss_fn, trainer, X, y, ctxs, step_size):
    Xs = gluon.utils.split_and_load(X, ctxs, even_split=False)
    ys = gluon.utils.split_and_load(y, ctxs, even_split=False)
    with autograd.record():
        losses = [loss_fn(net(xb), yb) for xb, yb in zip(Xs, ys, strict=True)]
    autograd.backward(losses)
    trainer.step(step_size)
    return _gather([l.sum() for l in losses], ctxs[0])


def _check_arrays(name, X, y, config, task=None):
    """``task``: None for the package's MLP; for a user's network ``("classes", C)`` (integer
    labels below C) or ``("targets", None)`` (real-valued targets of any shape)."""
    X = np.asarray(X)
    y = np.asarray(y)
    if task is None and (X.ndim != 2 or X.shape[1] != config.num_inputs):
        raise ValueError(f"{name} inputs must have shape (N, {config.num_inputs}), got {X.shape}")
    if X.ndim < 2:
        raise ValueError(f"{name} inputs must have an examples axis and the input's axes, "
                         f"(N, ...), got {X.shape}")
    if name == "training" and X.shape[0] == 0:
        raise ValueError(f"the training inputs hold no examples (shape {X.shape})")
    if not np.isfinite(X).all():
        raise ValueError(f"{name} inputs contain NaN or infinity")
    if task is not None and task[0] == "targets":
        if y.ndim < 1 or len(y) != len(X) or not np.isfinite(y).all():
            raise ValueError(f"{name} targets must be finite numbers, one row per input "
                             f"({len(X)}), got shape {y.shape}")
        return X.astype(np.float32, copy=False), y.astype(np.float32, copy=False)
    if y.shape != (X.shape[0],):
        raise ValueError(f"{name} labels must have shape ({X.shape[0]},), got {y.shape}")
    classes = task[1] if task is not None else (
        2 if config.likelihood == "bernoulli" else config.num_outputs)
    if not np.isfinite(y).all() or np.any(y != np.round(y)) or y.min() < 0 \
            or y.max() > classes - 1:
        raise ValueError(f"{name} labels must be integers in [0, {classes - 1}], "
                         f"got values in [{y.min()}, {y.max()}]")
    return X.astype(np.float32, copy=False), y.astype(np.int32, copy=False)


def _make_trainer(config, params, ctxs, group=None, kvstore=None):
    opt = {"learning_rate": config.lr}
    if group is not None and group.distributed:
        kv = group.kvstore
    elif len(ctxs) > 1:
        kv = kvstore or "device"
    else:
        kv = None
    # The optimiser runs on the workers (not on the servers), so its state can be saved
    # and a resumed run is exact.
    return gluon.Trainer(params, config.optimizer, opt, kvstore=kv, update_on_kvstore=False
                         if kv else None)


def fit(config, train, valid=None, run_dir=None, ctx=None, resume=False, progress=True,
        stop_after_batches=None, extra_config=None, restore_best=False, test=None,
        net=None, posterior=None, loss=None, kvstore=None):
    """Train a model as ``config`` says: the package's MLP, or your own network.

    Parameters
    ----------
    config : TrainConfig
        With ``net``, its architecture fields (hidden, activation, num_inputs,
        num_outputs, dropout) are not used; ``model`` says whether the network gets a
        posterior ("bbb") or is trained as it is ("plain", "dropout").
    train : (X, y) or gluon.data.DataLoader
        NumPy arrays: ``X`` of shape ``(N, num_inputs)`` for the package's MLP, or any
        ``(N, ...)`` the given ``net`` takes (images ``(N, 1, 28, 28)``); ``y`` integer
        labels ``(N,)``, or real-valued targets ``(N, ...)`` with a ``loss`` of your own.
        Arrays are checked up front and shuffled each epoch by a permutation of
        ``(seed, epoch)``. With ``net``, a Gluon ``DataLoader`` of ``(X, y)`` batches also
        works; its data are not checked up front, and a run resumed inside an epoch
        replays the loader from the epoch's start, skipping the batches done: exact only
        if the loader yields the same batches each time (no shuffling, or a sampler of
        its own that depends on the epoch alone).
    valid : (X, y), optional
        Validation split; the best checkpoint is chosen by its error with the means.
    run_dir : str, optional
        Folder for ``config.json``, ``history.csv``/``.json`` and ``checkpoints/``.
    ctx : Context or list of Context, optional
        Default ``mx.current_context()``; a list trains data-parallel.
    resume : bool
        Continue from ``run_dir/checkpoints/latest.params``.
    progress : bool
        Show a tqdm bar per epoch.
    stop_after_batches : int, optional
        Stop (as on Ctrl-C: checkpoint, then :class:`TrainingInterrupted`) after this
        many batches in total; for tests of interruption.
    extra_config : dict, optional
        More entries for ``config.json`` (the command line stores its data settings).
    restore_best : bool, default False
        End with the weights of the epoch with the lowest validation error (kept in
        memory) instead of the last epoch's; ``TrainResult.best_epoch`` says which.
    test : (X, y), optional
        A held-out set whose error is recorded after every epoch (history columns
        ``test_error`` and ``test_error_mc``) and used for nothing else: it lets a run
        that trains on all the data, with no validation split, show its learning curve.
    net : gluon.Block, optional
        Your own initialised network (any layers; run one batch through it first if
        shapes are deferred) instead of the package's MLP. Its contexts are the default
        ``ctx``. Parameters the posterior does not cover (BatchNorm, layers left out)
        are trained alongside by a second Trainer of the same optimiser; all of them, and
        BatchNorm's statistics, go into the checkpoints.
    posterior : Posterior, optional
        For ``net`` with ``model="bbb"``: the posterior to train (to choose which layers
        are Bayesian, or their initialisation); default ``Posterior(net, ...)`` over every
        Dense and convolution layer, initialised as ``config`` says.
    loss : gluon.loss.Loss, optional
        The likelihood cost, any Gluon loss with one value per example (``L2Loss`` for
        regression, say); default: the one ``config.likelihood`` names. With a loss of
        your own, the history records ``valid_loss`` (the mean per example, with the
        means) instead of error rates, and the best epoch is chosen by it. A loss with
        parameters of its own (an initialised learned noise scale, say) has them trained
        alongside the network's deterministic parameters and saved in the checkpoints.
    kvstore : str or mx.kvstore.KVStore, optional
        "device" (the default with several devices) or "local" for one process;
        "dist_sync" or "dist_sync_device" (or such a KVStore) to train as one worker of
        several processes on MXNet's parameter server (start them with ``bbb-gluon
        launch``; see :mod:`bbb_gluon.distributed`). Training data must be arrays: every
        worker walks the same batches and takes its own shard of each (the learning rate
        applies to the whole batch),
        draws its own weight noise, and keeps the optimiser's state itself, so a resumed
        run is exact. Rank 0 alone evaluates and writes ``run_dir``; every worker reads
        it on ``resume`` (use a folder all of them see). Progress is shown by rank 0, and
        Ctrl-C stops every worker together at the next report (``config.log_every``).
        One ``fit`` per distributed kvstore: a second one in the same processes would
        initialise its keys again, which the servers take for a push and wait on.

    Raises
    ------
    TrainingDiverged
        As soon as a batch's cost (or, at an epoch's end, a parameter) is NaN or infinite;
        the run folder keeps the last good epoch.

    Notes
    -----
    ``fit`` draws everything from NumPy generators keyed by ``config.seed`` and leaves
    MXNet's global random state alone, except for the dropout baseline: its masks come
    from MXNet's generator, seeded per batch so that a resumed run draws the same ones.

    Returns
    -------
    TrainResult
    """
    if not isinstance(config, TrainConfig):
        raise TypeError("config must be a TrainConfig")
    config.validate()
    task = _check_user_model(config, net, posterior, loss)
    from_loader = isinstance(train, gluon.data.DataLoader)
    if from_loader and net is None:
        raise ValueError("a DataLoader needs net=: the package's MLP trains from arrays")
    if from_loader and kvstore in ("dist_sync", "dist_sync_device") or (
            from_loader and isinstance(kvstore, mx.kvstore.KVStore)):
        raise ValueError("distributed training takes arrays, not a DataLoader: every worker "
                         "must cut its shard from the same permutation of the same data")
    if ctx is None and net is not None:
        ctx = next(iter(net.collect_params().values())).list_ctx()
    ctxs = ctx if isinstance(ctx, list | tuple) else [ctx or mx.current_context()]
    ctxs = list(ctxs)
    group = WorkerGroup(kvstore)
    writer = run_dir is not None and group.rank == 0
    if task is not None and task[0] == "classes":
        first = next(iter(train))[0].asnumpy() if from_loader else train[0]
        task = ("classes", _num_classes(net, first, ctxs[0], config.likelihood))
    if from_loader:
        X = y = None  # the loader's data are read batch by batch, not checked up front
    else:
        X, y = _check_arrays("training", *train, config, task)
        if group.distributed:
            group.check_batches(len(X), config.batch_size, len(ctxs))
    if valid is not None and len(valid[0]):
        Xv, yv = _check_arrays("validation", *valid, config, task)
    else:
        Xv = yv = None
    Xm, ym = _check_arrays("test", *test, config, task) if test is not None else (None, None)
    if run_dir is not None:
        run_dir = os.fspath(run_dir)
        ckpt_dir, latest_path, best_path = _run_paths(run_dir)
        if resume:
            if not os.path.isfile(latest_path):
                raise CheckpointError(f"{run_dir} is not a run folder with a checkpoint "
                                      f"(no {latest_path})")
        elif os.path.exists(latest_path):
            raise CheckpointError(f"{run_dir} already holds a run; resume it or choose "
                                  "another folder (nothing was changed)")
        if writer:
            os.makedirs(ckpt_dir, exist_ok=True)
    elif resume:
        raise ValueError("resume=True needs a run_dir")

    if from_loader:
        num_batches = len(train)

        def epoch_batches(epoch):
            for xb, yb in train:
                yield xb.as_in_context(ctxs[0]), yb.as_in_context(ctxs[0])
    else:
        loader = ArrayLoader(X, y, config.batch_size, shuffle=True, seed=config.seed,
                             ctx=ctxs[0])
        num_batches = len(loader)
        epoch_batches = loader.epoch
    if net is None:
        net, posterior = _build(config, ctxs)
    elif config.model == "bbb" and posterior is None:
        posterior = Posterior(net, mu_init=config.mu_init, mu_scale=config.mu_scale,
                              rho_init=config.rho_init, seed=config.seed)
    if posterior is not None:
        posterior.noise.stream_offset = group.rank * len(ctxs)
    if loss is None:
        loss_fn = (gluon.loss.SigmoidBCELoss() if config.likelihood == "bernoulli"
                   else gluon.loss.SoftmaxCrossEntropyLoss())
    else:
        loss_fn = loss
    step = None
    others = []  # trainers of the parameters the posterior does not cover
    if posterior is not None:
        for name, param in posterior.params.items():
            if name.endswith("_rho"):
                param.lr_mult = config.rho_lr_mult
        rest = posterior.deterministic_params(net)
        if loss is not None:
            rest.update(loss.collect_params())
        trained = posterior.params
        if group.distributed and list(rest.keys()):
            # One Trainer for everything: two would use the same kvstore keys.
            trained = gluon.ParameterDict()
            trained.update(posterior.params)
            trained.update(rest)
            rest = gluon.ParameterDict()
        trainer = _make_trainer(config, trained, ctxs, group, kvstore)
        step = BBBStep(net, posterior, make_prior(**config.prior),
                       config.likelihood if loss is None else loss, trainer,
                       num_batches=num_batches, weighting=config.weighting,
                       complexity=config.complexity, samples=config.samples,
                       engine=config.engine, loss_reduction=config.loss_reduction,
                       watch=False)  # the loop below watches the costs itself
        pi_sum = sum(step.loss.weight_of(i) for i in range(num_batches))
        if list(rest.keys()):
            others.append(_make_trainer(config, rest, ctxs, group, kvstore))
    else:
        params = net.collect_params()
        if loss is not None:
            params.update(loss.collect_params())
        trainer = _make_trainer(config, params, ctxs, group, kvstore)
        pi_sum = 0.0
    setup = {"engine": step.engine if step is not None else "plain",
             "contexts": [str(c) for c in ctxs],
             "network": "mlp" if task is None else "user",
             "workers": group.num_workers}
    metric = "valid_error" if loss is None else "valid_loss"

    history, start_epoch, start_batch, best = [], 0, 0, {"epoch": None, "error": None}
    partial = None
    if resume:
        arrays, meta = _read_checkpoint(latest_path)
        _check_resume_config(meta["config"], config, latest_path)
        if config.epochs < meta["epoch"]:
            raise CheckpointError(f"{run_dir} has already finished {meta['epoch']} epochs; resume "
                                  f"with epochs >= {meta['epoch']} (equal: end the run there, "
                                  f"dropping a partly trained epoch), not {config.epochs}")
        try:
            _set_model_arrays(arrays, net, posterior, latest_path, loss)
        except PosteriorMismatchError as e:
            raise CheckpointError(str(e)) from None
        if meta["trainer_states"] is not None:
            _load_trainer_states(trainer, meta["trainer_states"])
        for other, blob in zip(others, meta["other_trainer_states"], strict=False):
            _load_trainer_states(other, blob)
        if posterior is not None:
            posterior.noise.load_state_dict(meta["noise"])
        _check_resume_setup(meta, setup, latest_path)
        history, best = meta["history"], meta["best"]
        start_epoch, start_batch, partial = meta["epoch"], meta["batch"], meta.get("partial")
    group.prepare([trainer, *others])
    if writer:
        atomic_write_text(os.path.join(run_dir, "config.json"),
                           json.dumps({"train": config.to_dict(), **(extra_config or {})},
                                      indent=1))

    def meta_now(epoch, batch, partial_state):
        return {"format": _FORMAT, "config": config.to_dict(), "epoch": epoch, "batch": batch,
                "partial": partial_state, "history": history, "best": best,
                "noise": posterior.noise.state_dict() if posterior is not None else None,
                **setup}

    batches_done = 0
    all_stop = False  # distributed: a Ctrl-C seen by any worker at the last report
    interrupted = False
    best_arrays = None
    with stop_requests() as sig, using_threads(per_context(train_threads(), ctxs), ctxs):
        for epoch in range(start_epoch, config.epochs):
            skip = start_batch if epoch == start_epoch else 0
            # Running sums stay on the device; the host reads them every log_every batches.
            acc_nll = mx.nd.zeros((1,), ctx=ctxs[0])
            acc_cplx = mx.nd.zeros((1,), ctx=ctxs[0])
            measured, seconds = 0, 0.0
            if skip and partial:
                # The saved likelihood cost is already the sum over the workers: one of
                # them carries it on, or the epoch's sum would count it once per worker.
                acc_nll[:] = partial["nll"] if group.rank == 0 else 0.0
                acc_cplx[:] = partial["complexity_sum"]
                measured, seconds = partial["measured"], partial["seconds"]
            bar = tqdm(total=num_batches, initial=skip, desc=f"epoch {epoch + 1}/{config.epochs}",
                       disable=not progress or group.rank != 0, leave=True,
                       dynamic_ncols=True)
            # Set every epoch: loading optimizer states on resume brings back a stored rate.
            for t in [trainer, *others]:
                t.set_learning_rate(config.lr_at(epoch))
            # Index of the first batch whose cost was not finite, kept on the device and
            # read with the progress reports, so the check adds no host sync.
            first_bad = mx.nd.full((1,), -1.0, ctx=ctxs[0])
            t0 = time.perf_counter()
            stopped_at = None
            num_examples = 0
            for i, (xb, yb) in enumerate(epoch_batches(epoch)):
                num_examples += xb.shape[0]
                if i < skip:
                    continue
                report = (i + 1) % config.log_every == 0
                n = xb.shape[0]
                step_size = config.step_size(n)
                if group.distributed:
                    here = group.shard(n)
                    xb, yb = xb[here.start:here.stop], yb[here.start:here.stop]
                if config.model == "dropout":
                    # mx.random's state cannot be saved; a seed per batch makes the masks
                    # a function of the position, so resuming reproduces them.
                    mx.random.seed(_batch_seed(config.seed, epoch, i,
                                               group.rank if group.distributed else None))
                if step is not None:
                    # The complexity cost's value is only for reports: on the fused engine
                    # it is computed on the first batch and every log_every-th (its
                    # gradient on every batch).
                    nll, cplx = step(xb, yb, i, want_complexity=report or i == 0,
                                     batch_size=n)
                    for other in others:
                        other.step(step_size)
                else:
                    nll, cplx = _plain_step(net, loss_fn, trainer, xb, yb, ctxs,
                                            step_size), None
                acc_nll += nll
                if cplx is not None:
                    acc_cplx += cplx
                    measured += 1
                batches_done += 1
                first_bad = _track_nonfinite(first_bad, acc_nll + acc_cplx, i)
                if report or i + 1 == num_batches:
                    if group.distributed:
                        # Every worker stops, or fails, at the same batch: one that went
                        # on alone would wait for the others' gradients for ever.
                        bad, stop = group.allreduce([float(first_bad.asscalar()) >= 0,
                                                     sig.requested])
                        if bad:
                            _raise_if_diverged(first_bad, acc_nll, acc_cplx, epoch, run_dir,
                                               elsewhere=True)
                        all_stop = stop > 0
                    else:
                        _raise_if_diverged(first_bad, acc_nll, acc_cplx, epoch, run_dir)
                if report and progress:
                    n, k = float(acc_nll.asscalar()), float(acc_cplx.asscalar())
                    kl = pi_sum * k / measured if measured else 0.0
                    here = config.batch_size / group.num_workers  # this worker's share
                    bar.set_postfix(nll=f"{n / ((i + 1) * here):.4f}",
                                    complexity=f"{kl:.4g}", refresh=False)
                bar.update(1)
                stop_now = all_stop if group.distributed else sig.requested
                if stop_now or (stop_after_batches is not None
                                and batches_done >= stop_after_batches):
                    stopped_at = i + 1
                    break
            mx.nd.waitall()
            seconds += time.perf_counter() - t0
            bar.close()
            if stopped_at is not None and stopped_at < num_batches:
                interrupted = True
                nll_sum, cplx_sum = _reduce_costs(group, acc_nll, acc_cplx)
                if writer:
                    part = {"nll": nll_sum, "complexity_sum": cplx_sum,
                            "measured": measured, "seconds": seconds}
                    _save_checkpoint(latest_path, net, posterior, [trainer, *others],
                                     meta_now(epoch, stopped_at, part), loss)
                break
            _raise_if_diverged(first_bad, acc_nll, acc_cplx, epoch, run_dir)
            _check_parameters(net, posterior, epoch, run_dir, loss)
            nll_sum, cplx_sum = _reduce_costs(group, acc_nll, acc_cplx)
            complexity = (pi_sum * cplx_sum / measured
                          if posterior is not None and measured else 0.0)
            lead = group.rank == 0  # the others have nothing to record: rank 0 evaluates
            with using_threads(per_context(predict_threads(), ctxs[0]), ctxs[0]):
                row = _epoch_row(epoch, nll_sum, complexity, num_examples, seconds,
                                 net, posterior, config, Xv if lead else None, yv, ctxs[0],
                                 Xm if lead else None, ym, loss)
            history.append(row)
            improved = lead and Xv is not None and (best["error"] is None
                                                    or row[metric] < best["error"])
            if improved or (Xv is None):
                best = {"epoch": epoch + 1, "error": row.get(metric)}
                if restore_best and Xv is not None:
                    best_arrays = {k: v.copy()
                                   for k, v in _model_arrays(net, posterior, loss).items()}
            if writer:
                meta = meta_now(epoch + 1, 0, None)
                if improved or Xv is None:
                    _save_checkpoint(best_path, net, posterior, None, meta, loss)
                _save_checkpoint(latest_path, net, posterior, [trainer, *others], meta, loss)
                _write_history(run_dir, history)
            if (all_stop if group.distributed else sig.requested) or (
                    stop_after_batches is not None and batches_done >= stop_after_batches
                    and epoch + 1 < config.epochs):
                interrupted = True
                break
    if restore_best and not interrupted and best["epoch"] is not None and Xv is not None:
        if best_arrays is None and run_dir is not None:  # best epoch was before a resume
            best_arrays, _ = _read_checkpoint(best_path)
        if best_arrays is not None:
            _set_model_arrays(best_arrays, net, posterior, "best weights", loss)
    result = TrainResult(net, posterior, history, config, run_dir, best["epoch"], interrupted)
    if interrupted:
        exc = TrainingInterrupted(
            f"training stopped; checkpoint in {run_dir}" if run_dir else "training stopped")
        exc.result = result
        exc.signum = sig.signum or signal.SIGINT
        raise exc
    return result


def _batch_seed(seed, epoch, batch, rank=None):
    key = [seed, epoch, batch] + ([] if rank is None else [rank])
    return int(np.random.SeedSequence(key).generate_state(1)[0] % (2**31))
