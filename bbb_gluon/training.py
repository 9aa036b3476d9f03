"""Training: the fit loop for Bayes by Backprop and its plain and dropout baselines.

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

import contextlib
import json
import math
import numbers
import os
import signal
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from mxnet.gluon import nn
from tqdm.auto import tqdm

from ._checks import check_int, check_positive
from ._files import (
    array_bytes,
    array_json,
    atomic_nd_save,
    atomic_write_text,
    bytes_array,
    json_array,
    read_nd_file,
)
from .data import ArrayLoader
from .distributed import WorkerGroup
from .posterior import Posterior, PosteriorMismatchError, _structural_params, check_rho_init
from .prediction import error_rate, predict_proba
from .priors import make_prior
from .sampling import use_means
from .signals import stop_requests
from .step import BBBStep, first_not_finite
from .threads import per_context, predict_threads, train_threads, using_threads

__all__ = ["TrainConfig", "TrainResult", "fit", "build_mlp", "load_run",
           "CheckpointError", "TrainingInterrupted", "TrainingDiverged", "MODELS"]

MODELS = ("bbb", "plain", "dropout")
_ARCH_FIELDS = ("model", "hidden", "activation", "num_inputs", "num_outputs", "likelihood")
# Settings a resumed run may change: they decide how long it runs and what it reports,
# not the path its parameters take.
_FREE_FIELDS = ("epochs", "log_every", "eval_samples")
_FORMAT = "bbb_gluon.checkpoint/1"
# MXNet 1.9.1's wheels index arrays with int32 (built without USE_INT64_TENSOR_SIZE), and
# optimisers take their rates as float32.
_MAX_ARRAY = 2**31 - 1
_FLOAT32_MAX = float(np.finfo(np.float32).max)


class CheckpointError(ValueError):
    """A run folder or checkpoint that cannot be used (missing, corrupt, or another model)."""


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during :func:`fit`: a checkpoint was saved;
    ``fit(..., resume=True)`` continues. ``signum`` is the signal (SIGINT also for
    ``stop_after_batches``), ``exit_status`` the shell's status for it (130, 143)."""

    signum = signal.SIGINT

    @property
    def exit_status(self):
        return 128 + int(self.signum)


class TrainingDiverged(RuntimeError):
    """A cost or parameter became NaN or infinite during :func:`fit`.

    Nothing of the epoch it happened in was saved: the run folder holds the last good
    epoch's checkpoint and history. Attributes ``epoch`` and ``batch`` (1-based; ``batch``
    is None when only a parameter was found non-finite at the epoch's end) say where.
    """

    def __init__(self, message, epoch, batch):
        super().__init__(message)
        self.epoch, self.batch = epoch, batch


@dataclass
class TrainConfig:
    """Everything that defines a training run (stored as ``config.json`` in the run folder).

    Parameters
    ----------
    model : {"bbb", "plain", "dropout"}
    hidden : tuple of int, default (400, 400)
        Units per hidden layer.
    activation : str, default "relu"
        Any ``nn.Dense`` activation ("relu", "tanh", "sigmoid", "softrelu").
    num_inputs, num_outputs : int, default 784, 10
    likelihood : {"softmax", "bernoulli"}, default "softmax"
        "bernoulli" uses one output unit (``num_outputs`` must be 1).
    epochs : int, default 10
    optimizer : {"adam", "sgd"}, default "adam"
        "sgd" is plain gradient descent (no momentum), the paper's update.
    lr : float, default 1e-3
        Learning rate, applied to the gradient of the batch cost that ``loss_reduction``
        names.
    loss_reduction : {"mean", "sum"}, default "mean"
        What the optimiser differentiates: the batch's mean cost (Gluon's convention,
        ``trainer.step(batch_size)``) or its summed cost, the paper's minibatch cost
        :math:`f_i` of eq. (8) (``trainer.step(1)``). For SGD, lr 1e-3 with "sum" is lr
        0.128 with "mean" at batch 128; Adam is nearly indifferent to the scale.
    lr_decay_epochs : tuple of int, default ()
        Epochs after which the learning rate is multiplied by ``lr_decay_factor``
        (``(300,)``: epochs 301 onwards run at ``lr * lr_decay_factor``).
    lr_decay_factor : float, default 0.1
    rho_lr_mult : float, default 1.0
        Multiplier of the learning rate for the :math:`\\rho` parameters (Gluon's
        ``Parameter.lr_mult``). Under plain SGD the complexity cost moves each
        :math:`\\rho` by only about ``lr / batches`` per epoch; a multiplier above 1 lets
        :math:`\\sigma` leave its start without changing the step of :math:`\\mu`.
    batch_size : int, default 128
    samples : int, default 1
        Weight samples per step (bbb).
    weighting : "uniform", "blundell" or float, default "uniform"
        Complexity-cost weighting :math:`\\pi_i` across the minibatches of an epoch.
    complexity : {"mc", "kl"}, default "mc"
    prior : dict, default scale mixture pi=0.5, sigma1=1, sigma2=e^-6
        As :func:`bbb_gluon.make_prior` takes it.
    mu_init, mu_scale, rho_init : see :class:`bbb_gluon.Posterior` (``rho_init`` may be a
        pair ``[low, high]`` drawing every rho uniformly in that range).
    dropout : float, default 0.5
        Drop probability of the dropout baseline (before every Dense layer but the first).
    eval_samples : int, default 10
        Weight samples of the Monte-Carlo validation error (0: means only).
    seed : int, default 0
    log_every : int, default 50
        Batches between progress-bar updates (the only host syncs inside an epoch).
    engine : {"auto", "fused", "reference"}, default "auto"
        How a bbb step is computed: "fused" uses the compiled CPU kernels of
        :mod:`bbb_gluon.fused`, "reference" MXNet operators with autograd through
        :class:`BBBLoss` (same estimator, slower); "auto" takes "fused" on CPUs where the
        kernels build. The weight noise differs between the two (each is reproducible).
    """

    model: str = "bbb"
    hidden: tuple = (400, 400)
    activation: str = "relu"
    num_inputs: int = 784
    num_outputs: int = 10
    likelihood: str = "softmax"
    epochs: int = 10
    optimizer: str = "adam"
    lr: float = 1e-3
    loss_reduction: str = "mean"
    lr_decay_epochs: tuple = ()
    lr_decay_factor: float = 0.1
    rho_lr_mult: float = 1.0
    batch_size: int = 128
    samples: int = 1
    weighting: object = "uniform"
    complexity: str = "mc"
    prior: dict = field(default_factory=lambda: {"kind": "scale_mixture", "pi": 0.5,
                                                 "sigma1": 1.0, "sigma2": math.exp(-6)})
    mu_init: str = "normal"
    mu_scale: float = 0.1
    rho_init: float = -3.0
    dropout: float = 0.5
    eval_samples: int = 10
    seed: int = 0
    log_every: int = 50
    engine: str = "auto"

    def __post_init__(self):
        self.hidden = tuple(self.hidden)
        self.lr_decay_epochs = tuple(self.lr_decay_epochs)
        if isinstance(self.rho_init, list | tuple):
            self.rho_init = tuple(self.rho_init)
        self.validate()

    def validate(self):
        """Raise ``ValueError`` naming the first impossible setting."""
        def positive_int(name, minimum=1):
            check_int(getattr(self, name), name, minimum)

        def positive_float(name):
            check_positive(getattr(self, name), name)

        if self.model not in MODELS:
            raise ValueError(f"unknown model {self.model!r}; choose one of {MODELS}")
        if not self.hidden or any(isinstance(h, bool) or not isinstance(h, numbers.Integral)
                                  or h < 1 for h in self.hidden):
            raise ValueError(f"hidden must be a non-empty list of positive unit counts, "
                             f"got {self.hidden!r}")
        if self.activation not in ("relu", "tanh", "sigmoid", "softrelu"):
            raise ValueError(f"unknown activation {self.activation!r}")
        if self.likelihood not in ("softmax", "bernoulli"):
            raise ValueError(f"likelihood must be 'softmax' or 'bernoulli' for training, "
                             f"got {self.likelihood!r}")
        for name in ("num_inputs", "num_outputs", "epochs", "batch_size", "samples",
                     "log_every"):
            positive_int(name)
        positive_int("eval_samples", 0)
        positive_int("seed", 0)
        if self.likelihood == "bernoulli" and self.num_outputs != 1:
            raise ValueError("the bernoulli likelihood needs num_outputs=1")
        if self.likelihood == "softmax" and self.num_outputs < 2:
            raise ValueError("the softmax likelihood needs num_outputs >= 2")
        positive_float("lr")
        positive_float("mu_scale")
        if self.engine not in ("auto", "fused", "reference"):
            raise ValueError(f"engine must be 'auto', 'fused' or 'reference', "
                             f"got {self.engine!r}")
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"unknown optimizer {self.optimizer!r}; choose 'adam' or 'sgd'")
        check_rho_init(self.rho_init)
        if self.loss_reduction not in ("mean", "sum"):
            raise ValueError(f"loss_reduction must be 'mean' or 'sum', "
                             f"got {self.loss_reduction!r}")
        decay = self.lr_decay_epochs
        if any(isinstance(e, bool) or not isinstance(e, numbers.Integral) or e < 1
               for e in decay) or list(decay) != sorted(set(decay)):
            raise ValueError(f"lr_decay_epochs must be increasing positive epoch numbers, "
                             f"got {list(decay)!r}")
        positive_float("lr_decay_factor")
        positive_float("rho_lr_mult")
        # After the type checks: these read several fields.
        widths = (self.num_inputs, *self.hidden, self.num_outputs)
        largest = max(a * b for a, b in zip(widths, widths[1:], strict=False))
        if largest >= _MAX_ARRAY:
            raise ValueError(f"hidden {list(self.hidden)!r} makes a weight array of {largest:,} "
                             f"elements; MXNet 1.9.1's builds hold at most {_MAX_ARRAY - 1:,}")
        if self.lr * max(self.rho_lr_mult, 1.0) > _FLOAT32_MAX:
            raise ValueError(f"lr must fit in float32 (at most {_FLOAT32_MAX:.3g}, with "
                             f"rho_lr_mult), got {self.lr!r}")
        if not (isinstance(self.dropout, numbers.Real) and 0 <= self.dropout < 1):
            raise ValueError(f"dropout must lie in [0, 1), got {self.dropout!r}")
        if self.mu_init not in ("normal", "uniform", "copy"):
            raise ValueError(f"mu_init must be 'normal', 'uniform' or 'copy', "
                             f"got {self.mu_init!r}")
        if self.complexity not in ("mc", "kl"):
            raise ValueError(f"complexity must be 'mc' or 'kl', got {self.complexity!r}")
        prior = make_prior(**self.prior)  # raises for bad hyperparameters
        if self.complexity == "kl" and not prior.has_closed_form_kl:
            raise ValueError(f"complexity='kl' needs a Gaussian prior, got {prior!r}")
        if isinstance(self.weighting, str):
            if self.weighting not in ("uniform", "blundell"):
                raise ValueError(f"unknown weighting {self.weighting!r}; "
                                 "choose 'uniform', 'blundell' or a number")
        elif isinstance(self.weighting, bool) or not isinstance(self.weighting, numbers.Real) \
                or not (math.isfinite(self.weighting) and self.weighting >= 0):
            raise ValueError(f"a constant weighting must be a finite number >= 0, "
                             f"got {self.weighting!r}")

    def to_dict(self):
        d = asdict(self)
        d["hidden"] = list(self.hidden)
        d["lr_decay_epochs"] = list(self.lr_decay_epochs)
        if isinstance(self.rho_init, tuple):
            d["rho_init"] = list(self.rho_init)
        return d

    def lr_at(self, epoch):
        """The learning rate of 0-based ``epoch`` under the decay schedule."""
        drops = sum(1 for e in self.lr_decay_epochs if epoch >= e)
        return self.lr * self.lr_decay_factor ** drops

    def step_size(self, batch_size):
        """What ``trainer.step`` is given: the batch size for a mean cost, 1 for a sum."""
        return batch_size if self.loss_reduction == "mean" else 1

    @classmethod
    def from_dict(cls, d):
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown configuration keys {sorted(unknown)}")
        return cls(**d)


def build_mlp(hidden=(400, 400), num_outputs=10, activation="relu", num_inputs=784,
              dropout=0.0):
    """An initialised ``nn.HybridSequential`` MLP; ``dropout > 0`` adds Dropout before every
    Dense layer after the first (the baseline of the paper's Table 1)."""
    net = nn.HybridSequential()
    units_in = num_inputs
    with net.name_scope():
        for units in hidden:
            if dropout > 0 and units_in != num_inputs:
                net.add(nn.Dropout(dropout))
            net.add(nn.Dense(units, activation=activation, in_units=units_in))
            units_in = units
        if dropout > 0:
            net.add(nn.Dropout(dropout))
        net.add(nn.Dense(num_outputs, in_units=units_in))
    return net


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


def _write_history(run_dir, history):
    atomic_write_text(os.path.join(run_dir, "history.json"), json.dumps(history, indent=1))
    if not history:
        return
    cols = list(history[0])
    lines = [",".join(cols)] + [",".join(_fmt(row.get(c)) for c in cols) for row in history]
    atomic_write_text(os.path.join(run_dir, "history.csv"), "\n".join(lines) + "\n")


def _fmt(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


_LOSS = "loss:"  # prefix of a loss's own parameters (a learned noise scale) in checkpoints


def _model_arrays(net, posterior, loss=None):
    """Every array that defines the model: mu and rho of the posterior (``"<key>|mu"``),
    the network's other parameters, BatchNorm statistics included, under their names, and
    the parameters of a loss that has some (``"loss:<name>"``)."""
    out = {}
    if loss is not None:
        out.update({_LOSS + k: p.data(p.list_ctx()[0])
                    for k, p in _structural_params(loss).items()})
    covered = set(posterior.keys) if posterior is not None else set()
    if posterior is not None:
        for key, mu, rho in zip(posterior.keys, posterior.mu(), posterior.rho(), strict=True):
            out[f"{key}|mu"] = mu
            out[f"{key}|rho"] = rho
    for k, p in _structural_params(net).items():
        if k not in covered:
            out[k] = p.data(p.list_ctx()[0])
    return out


def _set_model_arrays(arrays, net, posterior, path, loss=None):
    targets = {}
    if loss is not None:
        targets.update({_LOSS + k: (p, p.shape) for k, p in _structural_params(loss).items()})
    else:  # reading a run back without its loss: its parameters are not needed
        arrays = {k: v for k, v in arrays.items() if not k.startswith(_LOSS)}
    covered = set(posterior.keys) if posterior is not None else set()
    if posterior is not None:
        for key, shape, mu, rho in zip(posterior.keys, posterior.shapes,
                                       posterior._mu, posterior._rho, strict=True):
            targets[f"{key}|mu"] = (mu, shape)
            targets[f"{key}|rho"] = (rho, shape)
    targets.update({k: (p, p.shape) for k, p in _structural_params(net).items()
                    if k not in covered})
    if set(targets) != set(arrays):
        raise CheckpointError(f"{path} holds parameters of another architecture")
    for name, (param, shape) in targets.items():
        if tuple(arrays[name].shape) != tuple(shape):
            raise CheckpointError(f"{path}: {name} has shape {arrays[name].shape}, "
                                  f"this model needs {shape}")
        param.set_data(arrays[name])


def _save_checkpoint(path, net, posterior, trainers, meta, loss=None):
    """``trainers``: None (a weights-only checkpoint) or the run's trainers, whose optimiser
    states are stored as ``__trainer__``, ``__trainer1__``, ..."""
    arrays = dict(_model_arrays(net, posterior, loss))
    arrays["__meta__"] = json_array(meta)
    for i, trainer in enumerate(trainers or []):
        fd, tmp = tempfile.mkstemp(prefix=".tmp-states-")
        os.close(fd)
        try:
            trainer.save_states(tmp)
            with open(tmp, "rb") as f:
                arrays["__trainer__" if i == 0 else f"__trainer{i}__"] = bytes_array(f.read())
        finally:
            os.remove(tmp)
    atomic_nd_save(path, arrays)


def _read_checkpoint(path):
    try:
        arrays = read_nd_file(path)
        meta = array_json(arrays.pop("__meta__"))
        trainer_blob = arrays.pop("__trainer__", None)
        extra_blobs, i = [], 1
        while f"__trainer{i}__" in arrays:
            extra_blobs.append(array_bytes(arrays.pop(f"__trainer{i}__")))
            i += 1
    except FileNotFoundError:
        raise CheckpointError(f"no checkpoint at {path}") from None
    except (ValueError, KeyError, UnicodeDecodeError):
        raise CheckpointError(f"{path} is corrupt or not a bbb_gluon checkpoint") from None
    if meta.get("format") != _FORMAT:
        raise CheckpointError(f"{path} is not a bbb_gluon checkpoint")
    meta["trainer_states"] = None if trainer_blob is None else array_bytes(trainer_blob)
    meta["other_trainer_states"] = extra_blobs
    return arrays, meta


def _load_trainer_states(trainer, blob):
    fd, tmp = tempfile.mkstemp(prefix=".tmp-states-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        trainer.load_states(tmp)
    finally:
        os.remove(tmp)


def _build(config, ctxs):
    net = build_mlp(config.hidden, config.num_outputs, config.activation, config.num_inputs,
                    config.dropout if config.model == "dropout" else 0.0)
    net.initialize(mx.init.Zero(), ctx=ctxs)
    # Xavier-uniform weights (MXNet's default Xavier: magnitude 3, fan average) drawn by
    # NumPy from the run's seed, so that fit neither depends on nor changes MXNet's
    # global random state; biases stay zero.
    rng = np.random.default_rng([config.seed, 3])
    for key, param in _structural_params(net).items():
        if key.endswith(".weight"):
            fan_out, fan_in = param.shape[0], int(np.prod(param.shape[1:]))
            scale = math.sqrt(3.0 / ((fan_in + fan_out) / 2.0))
            param.set_data(mx.nd.array(rng.uniform(-scale, scale, param.shape)
                                       .astype(np.float32)))
    net.hybridize(static_alloc=True, static_shape=True)
    posterior = None
    if config.model == "bbb":
        posterior = Posterior(net, mu_init=config.mu_init, mu_scale=config.mu_scale,
                              rho_init=config.rho_init, seed=config.seed)
    return net, posterior


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


def _run_paths(run_dir):
    ckpt = os.path.join(run_dir, "checkpoints")
    return ckpt, os.path.join(ckpt, "latest.params"), os.path.join(ckpt, "best.params")


def _check_resume_config(stored, config, path):
    here = config.to_dict()
    for name in _ARCH_FIELDS:
        a, b = stored.get(name), here.get(name)
        if a != b:
            raise CheckpointError(
                f"{path} is a checkpoint of another model: {name} is {a!r} there, {b!r} here")
    # A checkpoint written before a setting existed holds its default.
    defaults = TrainConfig().to_dict()
    for name, b in here.items():
        a = stored.get(name, defaults[name])
        if name not in _FREE_FIELDS and a != b:
            raise CheckpointError(
                f"{path} was trained with {name}={a!r}; resuming with {name}={b!r} would "
                "not continue the same run (only epochs, log_every and eval_samples may "
                "change)")


def _check_resume_setup(meta, setup, path):
    """The engine, the devices and the workers decide the noise a run draws: a resumed run
    keeps them."""
    for name, value in setup.items():
        stored = meta.get(name, 1 if name == "workers" else None)
        if stored is not None and stored != value:
            raise CheckpointError(
                f"{path} was trained with {name} {stored!r}; resuming with {value!r} would "
                f"draw other weight noise and not continue the same run"
                + (" (is the C++ compiler missing, or BBB_GLUON_FUSED=0 set?)"
                   if name == "engine" else ""))


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


def _reduce_costs(group, acc_nll, acc_cplx):
    """The epoch's summed likelihood cost over all workers' shards, and the complexity
    cost's running sum averaged over the workers (each measures it on its own noise)."""
    nll, cplx = float(acc_nll.asscalar()), float(acc_cplx.asscalar())
    if not group.distributed:
        return nll, cplx
    nll, cplx = group.allreduce([nll, cplx])
    return float(nll), float(cplx) / group.num_workers


def _track_nonfinite(first_bad, running_cost, batch):
    """``first_bad`` with ``batch`` put in if it is still -1 and the running cost is not
    finite (a NaN or infinity stays in a running sum, so the first one is caught)."""
    newly = (first_bad < 0) * (1 - mx.nd.contrib.isfinite(running_cost))
    return first_bad + newly * (batch + 1)


def _raise_if_diverged(first_bad, acc_nll, acc_cplx, epoch, run_dir, elsewhere=False):
    bad = int(first_bad.asscalar())
    if bad < 0 and elsewhere:
        raise TrainingDiverged(
            f"training diverged in epoch {epoch + 1}: the cost of another worker is not "
            f"finite; {_kept(epoch, run_dir)}. A smaller learning rate or a smaller initial "
            "sigma (rho_init) usually avoids it.", epoch + 1, None)
    if bad < 0:
        return
    raise TrainingDiverged(
        f"training diverged in epoch {epoch + 1}, batch {bad + 1}: the cost is not finite "
        f"(likelihood cost so far {float(acc_nll.asscalar())}, complexity "
        f"{float(acc_cplx.asscalar())}); {_kept(epoch, run_dir)}. A smaller learning rate "
        "or a smaller initial sigma (rho_init) usually avoids it.", epoch + 1, bad + 1)


def _kept(epoch, run_dir):
    if run_dir is None:
        return "nothing was saved"
    if epoch == 0:
        return "no epoch had finished, so no checkpoint was written"
    return (f"{run_dir} keeps the checkpoint and history of epoch {epoch}, the last "
            "good one")


def _check_parameters(net, posterior, epoch, run_dir, loss=None):
    """Raise :class:`TrainingDiverged` naming the first parameter with a NaN or infinity
    (one pass per array, once an epoch)."""
    name = first_not_finite(_model_arrays(net, posterior, loss).items())
    if name is not None:
        raise TrainingDiverged(
            f"training diverged in epoch {epoch + 1}: parameter {name} holds NaN or "
            f"infinite values; {_kept(epoch, run_dir)}.", epoch + 1, None)


def _epoch_row(epoch, nll, complexity, num_examples, seconds, net, posterior, config,
               Xv, yv, ctx, Xt=None, yt=None, loss=None):
    row = {"epoch": epoch + 1, "cost": nll + complexity, "complexity_cost": complexity,
           "likelihood_cost": nll, "nll_per_example": nll / num_examples,
           "seconds": seconds}
    for name, X, y in (("valid", Xv, yv), ("test", Xt, yt)):
        if X is None:
            continue
        t0 = time.perf_counter()
        if loss is not None:  # a loss of the user's: its mean per example, with the means
            row[f"{name}_loss"] = _mean_loss(net, posterior, loss, X, y, ctx)
            row[f"{name}_eval_seconds" if name == "test" else "eval_seconds"] = \
                time.perf_counter() - t0
            continue
        probs = predict_proba(net, X, posterior, 0, ctx=ctx, likelihood=config.likelihood)
        row[f"{name}_error"] = error_rate(probs, y)
        if posterior is not None and config.eval_samples > 0:
            probs = predict_proba(net, X, posterior, config.eval_samples, ctx=ctx,
                                  likelihood=config.likelihood)
            row[f"{name}_error_mc"] = error_rate(probs, y)
        else:
            row[f"{name}_error_mc"] = None
        row[f"{name}_eval_seconds" if name == "test" else "eval_seconds"] = \
            time.perf_counter() - t0
    return row


def _mean_loss(net, posterior, loss, X, y, ctx, batch_size=1000):
    """Mean per example of ``loss`` over ``(X, y)``, predicting with the means."""
    total = mx.nd.zeros((1,), ctx=ctx)
    with autograd.predict_mode(), contextlib.ExitStack() as stack:
        if posterior is not None:
            stack.enter_context(use_means(net, posterior, ctx))
        for start in range(0, len(X), batch_size):
            xb = mx.nd.array(X[start:start + batch_size], ctx=ctx)
            yb = mx.nd.array(y[start:start + batch_size], ctx=ctx)
            total += loss(net(xb), yb).sum()
    return float(total.asscalar()) / len(X)


def _check_user_model(config, net, posterior, loss):
    """What the labels must be for a user's network: None (the package's MLP), ("classes",
    None) for integer labels, ("targets", None) for real values; errors before any work."""
    if net is None:
        if posterior is not None:
            raise ValueError("posterior= needs net=: the package's MLP gets its own")
        if loss is not None:
            raise ValueError("loss= needs net=: the package's MLP trains with the likelihood "
                             "that config names")
        return None
    if not isinstance(net, gluon.Block):
        raise TypeError(f"net must be a gluon Block, got {type(net).__name__}")
    if posterior is not None:
        if config.model != "bbb":
            raise ValueError(f"a posterior was given but config.model is {config.model!r}; "
                             "use model='bbb'")
        posterior.check_net(net)
    if loss is not None and not isinstance(loss, gluon.loss.Loss):
        raise TypeError(f"loss must be a gluon.loss.Loss, got {type(loss).__name__}")
    for name, param in (loss.collect_params().items() if loss is not None else []):
        try:
            param.data(param.list_ctx()[0])
        except Exception:
            raise ValueError(f"the loss's parameter {name!r} has no value yet: call "
                             "loss.initialize() before fit") from None
    return ("classes", None) if loss is None else ("targets", None)


def _num_classes(net, X, ctx, likelihood):
    """Classes the user's network predicts: its output width (2 for one Bernoulli logit)."""
    if likelihood == "bernoulli":
        return 2
    with autograd.predict_mode():
        out = net(mx.nd.array(np.asarray(X[:1], dtype=np.float32), ctx=ctx))
    return int(out.shape[-1])


def load_run(run_dir, which="best", ctx=None, net=None):
    """Rebuild the network (and posterior) of a run folder from a checkpoint.

    Parameters
    ----------
    run_dir : str
    which : {"best", "latest"}
    ctx : Context, optional
    net : gluon.Block, optional
        For a run of your own network: an instance of the same architecture (initialised)
        to load the checkpoint into; its posterior is rebuilt over the parameters the
        checkpoint holds one for.

    Returns
    -------
    (net, posterior or None, TrainConfig, meta dict)
    """
    if which not in ("best", "latest"):
        raise ValueError(f"which must be 'best' or 'latest', got {which!r}")
    run_dir = os.fspath(run_dir)
    _, latest_path, best_path = _run_paths(run_dir)
    if not os.path.isfile(os.path.join(run_dir, "config.json")):
        raise CheckpointError(f"{run_dir} is not a run folder (no config.json)")
    if not os.path.isfile(best_path if which == "best" else latest_path):
        raise CheckpointError(f"{run_dir} has no {which} checkpoint")
    path = best_path if which == "best" else latest_path
    arrays, meta = _read_checkpoint(path)
    config = TrainConfig.from_dict(meta["config"])
    user = meta.get("network") == "user"
    if user != (net is not None):
        raise CheckpointError(
            f"{path} is a run of {'a network of its user' if user else 'the package MLP'}: "
            + ("pass an instance of that network as net=" if user else "do not pass net="))
    if net is None:
        net, posterior = _build(config, [ctx or mx.current_context()])
    else:
        covered = {k[:-3] for k in arrays if k.endswith("|mu")}
        posterior = Posterior(net, seed=config.seed, select=lambda key, _: key in covered) \
            if covered else None
    try:
        _set_model_arrays(arrays, net, posterior, path)
    except PosteriorMismatchError as e:
        raise CheckpointError(str(e)) from None
    return net, posterior, config, meta
