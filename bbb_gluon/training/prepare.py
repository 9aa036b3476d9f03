"""What ``fit`` sets up before its first step, and what a checkpoint gives back.

``prepare`` checks everything the user gave (configuration, arrays, run folder) before any
work starts, then builds the network, posterior, step and Trainers into one ``_Run``;
``resume`` reads the latest checkpoint into them and returns where training stood
(``Progress``).
"""

import json
import os
from dataclasses import dataclass, field

import mxnet as mx
import numpy as np
from mxnet import gluon

from .._checks import as_array, check_class_labels
from .._files import atomic_write_text
from .._kernels.machine import differences
from .._kernels.private import loader_examples
from ..core.likelihood import likelihood_of
from ..core.posterior import Posterior, PosteriorMismatchError
from ..data import ArrayLoader
from ..distributed import WorkerGroup
from ..methods import StepParts
from .checkpoint import (
    CHECKPOINT_FORMAT,
    CheckpointError,
    announce_fallback,
    check_resume_config,
    check_resume_setup,
    load_trainer_states,
    resume_checkpoint,
    run_paths,
    set_trained_arrays,
)
from .config import TrainConfig
from .network import MLP, Network, as_network, build_network, check_user_network, classes_of


@dataclass
class _Run:
    """Everything that stays fixed for a whole run."""

    config: TrainConfig
    mlp: MLP | None  # the package's MLP it builds, or None for a network of the user's
    net: gluon.Block
    posterior: Posterior | None
    loss: gluon.loss.Loss | None  # the user's own loss (None: the configured likelihood)
    loss_fn: gluon.loss.Loss
    step: object  # the method's (Method.make_step): BBBStep, PlainStep, IVONRunStep
    trainers: list  # one Trainer over everything the run trains
    group: WorkerGroup
    ctxs: list
    epoch_batches: object  # epoch -> iterator of (x, y) batches on ctxs[0]
    num_batches: int
    pi_sum: float  # the complexity weights summed over an epoch's batches
    valid: tuple  # (X, y), or (None, None)
    test: tuple
    run_dir: str | None
    latest_path: str | None
    best_path: str | None
    setup: dict  # engine, contexts, network, workers: checked again on resume
    record: dict  # the configuration as the run folder holds it: what applies to the run
    masks: bool = False  # the network has Dropout layers: mx.random seeded per batch
    # The OpenMP threads per device of training and evaluation ({"train", "predict"}), or
    # None without the fused kernels: set by fit once a resume has read the recorded ones.
    threads: dict | None = None

    @property
    def writer(self):
        """Whether this process writes the run folder (rank 0 of a run with one)."""
        return self.run_dir is not None and self.group.rank == 0

    @property
    def metric(self):
        return "valid_error" if self.loss is None else "valid_loss"


@dataclass
class Progress:
    """Where training stands: what a checkpoint saves and ``resume`` restores."""

    history: list = field(default_factory=list)
    epoch: int = 0  # epochs finished
    batch: int = 0  # batches finished of the next epoch (a stop inside it)
    partial: dict | None = None  # that epoch's running sums
    best: dict = field(default_factory=lambda: {"epoch": None, "error": None})
    # Where the run trained: one machine record (CPU, kernels' build, threads) per stretch
    # of it, a new one only where a resume ran on another (machine.differences).
    machines: list = field(default_factory=list)

    def meta(self, run, epoch, batch, partial):
        """A checkpoint's metadata at ``epoch`` (finished) and ``batch`` of the next."""
        noise = run.posterior.noise.state_dict() if run.posterior is not None else None
        return {"format": CHECKPOINT_FORMAT, "config": run.record,
                "mlp": run.mlp.to_dict() if run.mlp is not None else None, "epoch": epoch,
                "batch": batch, "partial": partial, "history": self.history,
                "best": self.best, "noise": noise, "threads": run.threads,
                "machines": self.machines, **run.setup}

    def recorded_threads(self):
        """The thread counts the run last trained with (None: a new run, or a checkpoint
        written before they were recorded)."""
        return self.machines[-1].get("threads") if self.machines else None

    def add_machine(self, record):
        """Note where the run goes on from here; return what differs from where it last
        trained (empty: the continuation replays bit for bit)."""
        here = {"from_epoch": self.epoch, "from_batch": self.batch, **record}
        if not self.machines:
            self.machines.append(here)
            return []
        changed = differences(self.machines[-1], here)
        if changed:
            self.machines.append(here)
        return changed


# fit's own parameters, handed on as they came, so that every check reads the user's input.
def prepare(config, train, valid, net, run_dir, resume, options):
    """Check the user's input, then build a ``_Run`` (see :func:`~bbb_gluon.training.fit`
    for the arguments). Every check of the input comes before anything is written (the
    run folder is created only then) or built."""
    if not isinstance(config, TrainConfig):
        raise TypeError("config must be a TrainConfig")
    mlp, own = as_network(net)
    own = _regression_network(config, own)
    task = check_user_network(config, own)
    if mlp is not None:
        mlp.check(config)
    kvstore, test = options.kvstore, options.test
    from_loader = isinstance(train, gluon.data.DataLoader)
    if from_loader and own is None:
        raise ValueError("a DataLoader needs a network of your own (net=): the package's "
                         "MLP trains from arrays")
    if from_loader and kvstore in ("dist_sync", "dist_sync_device") or (
            from_loader and isinstance(kvstore, mx.kvstore.KVStore)):
        raise ValueError("distributed training takes arrays, not a DataLoader: every worker "
                         "must cut its shard from the same permutation of the same data")
    ctxs = (mlp or own).contexts()
    group = WorkerGroup(kvstore)
    config.method.check_run(ctxs, group.distributed)
    user_net = own.net if own is not None else None
    if from_loader:  # its data are read batch by batch, not checked up front: its first
        # batch goes through the network (it takes the batches, or says so)
        classes_of(user_net, next(iter(train))[0], ctxs[0], config.likelihood,
                   "the DataLoader's inputs")
    else:
        train = _check_arrays("training", *train, config, mlp, task, user_net, ctxs[0])
        if group.distributed:
            group.check_batches(len(train[0]), config.batch_size, len(ctxs))
    have_valid = valid is not None and len(valid[0])
    valid = _check_arrays("validation", *valid, config, mlp, task, user_net, ctxs[0]) \
        if have_valid else (None, None)
    test = _check_arrays("test", *test, config, mlp, task, user_net, ctxs[0]) \
        if test is not None else (None, None)
    run_dir, latest_path, best_path = _run_folder(run_dir, resume, group.rank == 0)
    epoch_batches, num_batches = _batches(train, config, ctxs[0])
    examples = loader_examples(train) if from_loader else len(train[0])

    record = config.record(own_posterior=own is not None and own.posterior is not None)
    loss = own.loss if own is not None else _mlp_loss(config, ctxs)
    net, posterior, loss_fn, step, trainers, pi_sum = _network(
        config, mlp, own, ctxs, group, kvstore, loss, (num_batches, examples))
    setup = {"engine": step.engine,
             "contexts": [str(c) for c in ctxs],
             "network": "mlp" if task is None else "user",
             "workers": group.num_workers}
    return _Run(config, mlp, net, posterior, loss, loss_fn, step, trainers, group, ctxs,
                epoch_batches, num_batches, pi_sum, valid, test, run_dir, latest_path,
                best_path, setup, record, masks=_draws_masks(net))


def _mlp_loss(config, ctxs):
    """The loss of a regression on the package's MLP (its noise scale learned, trained
    and checkpointed with the network); None for a classifier."""
    kind = likelihood_of(config.likelihood)
    if kind.classifies:
        return None
    loss = kind.loss(noise_sigma=None)
    loss.initialize(ctx=ctxs)
    return loss


def _regression_network(config, own):
    """A regression's network of the user's with its loss: theirs, or the one the
    likelihood's name builds (its noise scale learned, so trained and checkpointed)."""
    kind = likelihood_of(config.likelihood)
    if kind.classifies or own is None:
        return own
    if own.loss is None:
        loss = kind.loss(noise_sigma=None)
        loss.initialize(ctx=own.contexts())
        return Network(own.net, own.posterior, loss)
    if likelihood_of(own.loss).name != kind.name:
        raise ValueError(f"config.likelihood is {config.likelihood!r} but the network's loss "
                         f"is a {type(own.loss).__name__} ({likelihood_of(own.loss).name!r})")
    return own


def _draws_masks(net):
    """Whether the network has Dropout layers (they draw from MXNet's generator)."""
    found = []
    net.apply(lambda b: found.append(b) if isinstance(b, gluon.nn.Dropout) else None)
    return bool(found)


def _batches(train, config, ctx):
    """A function of the epoch that yields its batches on ``ctx``, and their number."""
    if isinstance(train, gluon.data.DataLoader):
        def epoch_batches(epoch):
            for xb, yb in train:
                yield xb.as_in_context(ctx), yb.as_in_context(ctx)
        return epoch_batches, len(train)
    loader = ArrayLoader(*train, config.batch_size, shuffle=True, seed=config.seed, ctx=ctx)
    return loader.epoch, len(loader)


def _run_folder(run_dir, resume, writer):
    """The checkpoint paths of ``run_dir``, refusing to start over a run or to resume none
    (nothing is changed then); rank 0 creates the folder."""
    if run_dir is None:
        if resume:
            raise ValueError("resume=True needs a run_dir")
        return None, None, None
    run_dir = os.fspath(run_dir)
    ckpt_dir, latest_path, best_path = run_paths(run_dir)
    if resume not in (False, True, "best"):
        raise ValueError(f"resume must be True, False or 'best', got {resume!r}")
    if resume:
        if not os.path.isfile(latest_path) and not os.path.isfile(best_path):
            raise CheckpointError(f"{run_dir} is not a run folder with a checkpoint "
                                  f"(no {latest_path})")
    elif os.path.exists(latest_path):
        raise CheckpointError(f"{run_dir} already holds a run; resume it or choose "
                              "another folder (nothing was changed)")
    if writer:
        os.makedirs(ckpt_dir, exist_ok=True)
    return run_dir, latest_path, best_path


def _network(config, mlp, own, ctxs, group, kvstore, loss, sizes):
    """The network and posterior (the MLP built, or the user's), the likelihood (``loss``,
    or the classifier's its name gives), and the method's step and optimiser states
    (:meth:`~bbb_gluon.methods.Method.make_step`); ``sizes``: an epoch's batches and the
    training examples."""
    if own is None:
        net, posterior = build_network(config, mlp, ctxs)
    else:
        net, posterior = own.net, own.posterior
    if own is not None and posterior is None:
        posterior = config.method.make_posterior(net, config)
    if posterior is not None:
        posterior.noise.stream_offset = group.rank * len(ctxs)
    loss_fn = likelihood_of(config.likelihood).loss() if loss is None else loss

    def trainer_for(params, lr):
        return _make_trainer(config, params, ctxs, group, kvstore, lr)

    parts = StepParts(net, posterior, loss_fn, ctxs, trainer_for, *sizes)
    step, trainers, pi_sum = config.method.make_step(config, parts)
    return net, posterior, loss_fn, step, trainers, pi_sum


def _make_trainer(config, params, ctxs, group=None, kvstore=None, lr=None):
    opt = {"learning_rate": config.lr if lr is None else lr}
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


def resume(run, which=True):
    """Load ``run``'s latest checkpoint (``which``: see ``resume_checkpoint``) into its
    network, posterior, Trainers and noise; return where training stood."""
    arrays, meta, path, broken = resume_checkpoint(run.run_dir, which)
    config = run.config
    check_resume_config(meta, run.record, run.mlp, path)
    if config.epochs < meta["epoch"]:
        raise CheckpointError(f"{run.run_dir} has already finished {meta['epoch']} epochs; "
                              f"resume with epochs >= {meta['epoch']} (equal: end the run "
                              f"there, dropping a partly trained epoch), not {config.epochs}")
    try:
        set_trained_arrays(arrays, run.net, run.posterior, path, run.loss)
    except PosteriorMismatchError as e:
        raise CheckpointError(str(e)) from None
    if meta["trainer_states"] is not None:
        load_trainer_states(run.trainers[0], meta["trainer_states"])
    if meta["other_trainer_states"]:
        raise CheckpointError(f"{path} holds the optimiser states of two Trainers "
                              "(written before one Trainer trained everything): it loads "
                              "with load_run, but cannot resume exactly; start the run anew")
    if run.posterior is not None:
        run.posterior.noise.load_state_dict(meta["noise"])
    check_resume_setup(meta, run.setup, path)
    if broken is not None:
        announce_fallback(broken, path, meta, run.writer)
    return Progress(meta["history"], meta["epoch"], meta["batch"], meta.get("partial"),
                     meta["best"], list(meta.get("machines") or []))


def write_config(run, record, machines):
    """config.json: the training settings, the MLP's, the caller's ``record`` and where
    the run trained (``machines``: see ``Progress.machines``)."""
    mlp = {"mlp": run.mlp.to_dict()} if run.mlp is not None else {}
    atomic_write_text(os.path.join(run.run_dir, "config.json"),
                      json.dumps({"train": run.record, **mlp, **(record or {}),
                                  "machines": machines}, indent=1))


def _mlp_targets(name, y, X, mlp, kind):
    """An MLP regression's targets as float32 ``(N, D)``: D the outputs' means (a
    heteroscedastic likelihood's outputs are the means, then the scales); ``(N,)`` is
    taken for one target."""
    width = kind.targets(mlp.num_outputs)
    if y.ndim == 1 and width == 1:
        y = y.reshape(-1, 1)
    if y.shape != (len(X), width):
        raise ValueError(f"{name} targets must have shape ({len(X)}, {width}) for "
                         f"MLP(num_outputs={mlp.num_outputs}) under the {kind.name} "
                         f"likelihood, got {y.shape}")
    if not np.isfinite(y).all():
        raise ValueError(f"{name} targets contain NaN or infinity")
    return y.astype(np.float32, copy=False)


# prepare's view of the user's input, handed on as it came.
def _check_arrays(name, X, y, config, mlp, task=None, net=None, ctx=None):
    """``task``: None for the package's ``mlp``; for a user's ``net`` "classes" (integer
    labels below its output's width, or 2 for one Bernoulli logit) or "targets"
    (real-valued targets of any shape). A user's network takes the
    first example on ``ctx``, or the inputs are refused naming ``name``."""
    X = as_array(X, f"the {name} inputs")
    y = as_array(y, f"the {name} labels")
    if task is None and (X.ndim != 2 or X.shape[1] != mlp.num_inputs):
        raise ValueError(f"{name} inputs must have shape (N, {mlp.num_inputs}) for "
                         f"MLP(num_inputs={mlp.num_inputs}), got {X.shape}")
    if X.ndim < 2:
        raise ValueError(f"{name} inputs must have an examples axis and the input's axes, "
                         f"(N, ...), got {X.shape}")
    if X.shape[0] == 0:
        raise ValueError(f"the {name} inputs hold no examples (shape {X.shape})")
    if not np.isfinite(X).all():
        raise ValueError(f"{name} inputs contain NaN or infinity")
    kind = likelihood_of(config.likelihood)
    if task is None and not kind.classifies:  # the MLP's regression
        return X.astype(np.float32, copy=False), _mlp_targets(name, y, X, mlp, kind)
    if task is None:
        classes = kind.num_classes(mlp.num_outputs)
    else:
        classes = classes_of(net, X, ctx, config.likelihood, f"the {name} inputs")
    if task == "targets":
        if y.ndim < 1 or len(y) != len(X):
            raise ValueError(f"{name} targets must have one row per input ({len(X)}), got "
                             f"shape {y.shape}")
        if not np.isfinite(y).all():
            raise ValueError(f"{name} targets contain NaN or infinity")
        return X.astype(np.float32, copy=False), y.astype(np.float32, copy=False)
    if y.shape != (X.shape[0],):
        raise ValueError(f"{name} labels must have shape ({X.shape[0]},), got {y.shape}")
    check_class_labels(y, classes, f"{name} labels")
    return X.astype(np.float32, copy=False), y.astype(np.int32, copy=False)
