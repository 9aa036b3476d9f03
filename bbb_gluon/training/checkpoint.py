"""Checkpoints of a run folder: the network's and the posterior's arrays, the optimiser
states and where training stood, written atomically and read back with clear errors;
``load_run`` rebuilds a trained network from its folder.
"""

import filecmp
import os
import shutil
import sys
import tempfile

import mxnet as mx

from .._files import (
    array_bytes,
    array_json,
    atomic_nd_save,
    atomic_write,
    bytes_array,
    json_array,
    read_nd_file,
)
from ..core.likelihood import likelihood_of
from ..core.posterior import Posterior, PosteriorMismatchError
from ..core.selection import structural_params
from .config import ARCH_FIELDS, FREE_FIELDS, TrainConfig, split_record
from .network import MLP, build_network

__all__ = ["load_run", "CheckpointError", "UnreadableCheckpointError"]


CHECKPOINT_FORMAT = "bbb_gluon.checkpoint/2"
# Format 1 named the posterior's arrays "<key>|mu"; it is still read.
_FORMATS_READ = (CHECKPOINT_FORMAT,)


class CheckpointError(ValueError):
    """A run folder or checkpoint that cannot be used (missing, corrupt, or another model)."""


class UnreadableCheckpointError(CheckpointError):
    """A checkpoint file that is missing, truncated or corrupt, or not a bbb_gluon
    checkpoint at all (not one of another version or model): a resumed run may continue
    from the best one instead. ``except CheckpointError`` catches it too."""


# Prefixes of the posterior's and the loss's own parameters in checkpoints: each under the
# names its save_parameters writes ("posterior:0.weight_mu", "loss:noise_rho"), beside the
# network's other parameters under theirs ("0.weight" where it has no posterior).
_POSTERIOR = "posterior:"
_LOSS = "loss:"


def trained_arrays(net, posterior, loss=None):
    """Every array that defines the trained network: the posterior's mu and rho, the network's other
    parameters, BatchNorm statistics included, and the parameters of a loss that has some
    (a learned noise scale)."""
    out = {}
    for prefix, block in ((_LOSS, loss), (_POSTERIOR, posterior)):
        if block is not None:
            out.update({prefix + k: p.data(p.list_ctx()[0])
                        for k, p in structural_params(block).items()})
    covered = _covered(net, posterior)
    for k, p in structural_params(net).items():
        if id(p) not in covered:
            out[k] = p.data(p.list_ctx()[0])
    return out


def _covered(net, posterior):
    """The ids of ``net``'s Parameters the posterior stands for: by the Parameter, not its
    name, so that every name of a Parameter layers share (weight tying) is covered."""
    return {id(p) for p in posterior.check_net(net).values()} if posterior is not None \
        else set()


def set_trained_arrays(arrays, net, posterior, path, loss=None):
    targets = {}
    if loss is None:  # reading a run back without its loss: its parameters are not needed
        arrays = {k: v for k, v in arrays.items() if not k.startswith(_LOSS)}
    for prefix, block in ((_LOSS, loss), (_POSTERIOR, posterior)):
        if block is not None:
            targets.update({prefix + k: p for k, p in structural_params(block).items()})
    covered = _covered(net, posterior)
    targets.update({k: p for k, p in structural_params(net).items() if id(p) not in covered})
    if set(targets) != set(arrays):
        raise CheckpointError(f"{path} holds parameters of another architecture")
    for name, param in targets.items():
        if tuple(arrays[name].shape) != tuple(param.shape):
            raise CheckpointError(f"{path}: {name} has shape {arrays[name].shape}, "
                                  f"this model needs {param.shape}")
        param.set_data(arrays[name])


def save_checkpoint(path, net, posterior, trainers, meta, loss=None):
    """``trainers``: None (a weights-only checkpoint) or the run's trainers, whose optimiser
    states are stored as ``__trainer__``, ``__trainer1__``, ..."""
    arrays = dict(trained_arrays(net, posterior, loss))
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


def read_checkpoint(path, states=True):
    """``(arrays, meta)``; with ``states``, ``meta`` carries the optimiser states' bytes
    (``trainer_states``, ``other_trainer_states``) for a resume, else only their size
    (``optimizer_state_bytes``): several MB that no one reading the run needs."""
    try:
        arrays = read_nd_file(path)
        meta = array_json(arrays.pop("__meta__"))
        blobs = [arrays.pop("__trainer__", None)]
        while f"__trainer{len(blobs)}__" in arrays:
            blobs.append(arrays.pop(f"__trainer{len(blobs)}__"))
    except FileNotFoundError:
        raise UnreadableCheckpointError(f"no checkpoint at {path}") from None
    except (ValueError, KeyError, UnicodeDecodeError):
        raise UnreadableCheckpointError(
            f"{path} is corrupt or not a bbb_gluon checkpoint") from None
    if meta.get("format") not in _FORMATS_READ:
        if str(meta.get("format", "")).startswith("bbb_gluon.checkpoint/"):
            raise CheckpointError(f"{path} was written by an earlier bbb_gluon in "
                                  f"{meta['format']}, which this version does not read")
        raise UnreadableCheckpointError(f"{path} is not a bbb_gluon checkpoint")
    if not states:
        meta["optimizer_state_bytes"] = sum(b.size for b in blobs if b is not None)
        return arrays, meta
    meta["trainer_states"] = None if blobs[0] is None else array_bytes(blobs[0])
    meta["other_trainer_states"] = [array_bytes(b) for b in blobs[1:]]
    return arrays, meta


def resume_checkpoint(run_dir, which=True):
    """The checkpoint a resumed run continues from: ``(arrays, meta, path, broken)``,
    ``broken`` the error that made the latest one unusable (or None).

    ``which=True``: the latest; if that is missing or corrupt, the best one when it holds
    the optimiser states (so the run continues exactly from that epoch), else a
    :class:`CheckpointError` that names the command which would continue.
    ``which="best"``: the best one, also without optimiser states (they start afresh),
    only when the latest cannot be read.
    """
    _, latest_path, best_path = run_paths(run_dir)
    try:
        arrays, meta = read_checkpoint(latest_path)
    except UnreadableCheckpointError as e:
        broken = e
    else:
        if which == "best":
            raise CheckpointError(
                f"{latest_path} is intact ({_where(meta)}): continue it with --resume "
                "(resume=True); going back to the best checkpoint would overwrite it")
        return arrays, meta, latest_path, None
    try:
        arrays, meta = read_checkpoint(best_path)
    except CheckpointError as e:
        raise CheckpointError(f"{broken}, and {e}: the run cannot continue") from None
    if meta["trainer_states"] is None and which != "best":
        raise CheckpointError(
            f"{broken}; {best_path} ({_where(meta)}) is intact but holds no optimiser "
            "state, so the run would not continue exactly: to continue from it with a "
            f"fresh optimiser, run: bbb-gluon train --out {run_dir} --resume best "
            "(in Python: fit(..., resume=\"best\")); nothing was changed")
    return arrays, meta, best_path, broken


def announce_fallback(broken, path, meta, writer):
    """The one-line notice of a resume from ``path`` instead of the unreadable latest
    checkpoint. The ``writer`` first copies that aside and puts ``path`` in its place, so
    that the latest checkpoint is where the run stands again."""
    if not writer:
        return
    latest_path = run_paths(os.path.dirname(os.path.dirname(path)))[1]
    kept = _keep_corrupt(latest_path) if os.path.exists(latest_path) else None
    atomic_write(latest_path, lambda tmp: shutil.copyfile(path, tmp))
    print(f"bbb_gluon: {broken}" + (f" (a copy is kept as {kept})" if kept else "")
          + f"; resuming from {path}, {_where(meta)}"
          + ("; the optimiser starts afresh" if meta["trainer_states"] is None else ""),
          file=sys.stderr, flush=True)


def _where(meta):
    """Where a checkpoint's run stood, in words."""
    epoch, batch = meta.get("epoch", 0), meta.get("batch") or 0
    if batch:
        return f"in epoch {epoch + 1} after {batch} minibatches"
    return f"after epoch {epoch}" if epoch else "before the first epoch"


def _keep_corrupt(path):
    """Copy an unreadable checkpoint to ``<path>.corrupt`` (``.corrupt.1`` ... if that
    exists and differs), before the resumed run replaces it; return the copy's path."""
    for i in range(100):
        copy = f"{path}.corrupt" + (f".{i}" if i else "")
        if not os.path.exists(copy):
            atomic_write(copy, lambda tmp: shutil.copyfile(path, tmp))
            return copy
        if filecmp.cmp(path, copy, shallow=False):
            return copy
    raise CheckpointError(f"{path} is corrupt, and so are the 100 copies beside it")


def load_trainer_states(trainer, blob):
    fd, tmp = tempfile.mkstemp(prefix=".tmp-states-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        trainer.load_states(tmp)
    finally:
        os.remove(tmp)


def run_paths(run_dir):
    ckpt = os.path.join(run_dir, "checkpoints")
    return ckpt, os.path.join(ckpt, "latest.params"), os.path.join(ckpt, "best.params")


def stored_mlp(meta):
    """The MLP's record in a checkpoint's metadata or a config.json (``"mlp"``), or in its
    ``"train"``/``"config"`` record where it was written before it had its own entry;
    None for a run of the user's own network."""
    if meta.get("mlp") is not None:
        return meta["mlp"]
    return split_record(meta.get("config") or meta.get("train") or {})[1]


def check_resume_config(meta, here, mlp, path):
    """``here``: the resumed run's configuration as its run folder would hold it (what
    applies to the run; :meth:`TrainConfig.record`); ``mlp`` its MLP or None."""
    stored, _ = split_record(meta["config"])
    was, now = stored_mlp(meta), mlp.to_dict() if mlp is not None else None
    if (was is None) != (now is None):
        raise CheckpointError(f"{path} is a checkpoint of "
                              + ("a network of its user" if was is None else "the package MLP")
                              + (", not of the package MLP" if was is None
                                 else ", not of a network of your own"))
    defaults = MLP().to_dict()
    for name in now or ():
        a, b = was.get(name, defaults[name]), now[name]
        if a != b:
            raise CheckpointError(f"{path} is a checkpoint of another model: {name} is "
                                  f"{a!r} there, {b!r} here")
    for name in ARCH_FIELDS:
        a, b = stored.get(name), here.get(name)
        if a != b:
            raise CheckpointError(
                f"{path} is a checkpoint of another model: {name} is {a!r} there, {b!r} here")
    # A checkpoint written before a setting existed holds its default.
    defaults = TrainConfig().to_dict()
    for name, b in here.items():
        a = stored.get(name, defaults[name])
        if name not in FREE_FIELDS and a != b:
            raise CheckpointError(
                f"{path} was trained with {name}={a!r}; resuming with {name}={b!r} would "
                "not continue the same run (only epochs, log_every, eval_samples and "
                "restore_best may change)")


def check_resume_setup(meta, setup, path):
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
    net : gluon.Block
    posterior : Posterior or None
        None for a run without one (``model="plain"`` or ``"dropout"``).
    config : TrainConfig
    meta : dict
        Where the run stood when the checkpoint was written, all of it small: ``epoch``
        (epochs finished), ``batch`` (minibatches finished of the next epoch, 0 between
        epochs) and ``partial`` (that epoch's running sums, or None); ``history`` (one
        dict per finished epoch, as ``fit`` returns it); ``best`` (``{"epoch", "error"}``
        of the best validation error so far); ``config`` (the run's settings as the run
        folder records them); ``noise`` (the weight noise's seed and counters);
        ``engine``, ``contexts``, ``network`` (``"mlp"`` or ``"user"``) and ``workers``;
        ``mlp`` (the package MLP's settings, as :meth:`MLP.to_dict`, or None);
        ``format``; and ``optimizer_state_bytes``, the size of the optimiser states the
        checkpoint holds (0 for none). The states themselves stay in the file, where a
        resumed run reads them. ``loss``: a regression's likelihood with its learned noise
        scale, as ``TrainConfig(likelihood="gaussian")`` built it (for
        :func:`bbb_gluon.predict_intervals`), else None.

    Raises
    ------
    UnreadableCheckpointError
        If the checkpoint file is truncated, corrupt or not a bbb_gluon checkpoint.
    CheckpointError
        If ``run_dir`` is not a run folder, has no such checkpoint, or holds another
        model (its subclass above included).
    """
    if which not in ("best", "latest"):
        raise ValueError(f"which must be 'best' or 'latest', got {which!r}")
    run_dir = os.fspath(run_dir)
    _, latest_path, best_path = run_paths(run_dir)
    if not os.path.isfile(os.path.join(run_dir, "config.json")):
        raise CheckpointError(f"{run_dir} is not a run folder (no config.json)")
    if not os.path.isfile(best_path if which == "best" else latest_path):
        raise CheckpointError(f"{run_dir} has no {which} checkpoint")
    path = best_path if which == "best" else latest_path
    arrays, meta = read_checkpoint(path, states=False)
    config = TrainConfig.from_dict(meta["config"])
    meta["mlp"] = stored_mlp(meta)
    user = meta.get("network") == "user"
    if user != (net is not None):
        raise CheckpointError(
            f"{path} is a run of {'a network of its user' if user else 'the package MLP'}: "
            + ("pass an instance of that network as net=" if user else "do not pass net="))
    if net is None:
        net, posterior = build_network(config, MLP.from_dict(meta["mlp"]),
                                     [ctx or mx.current_context()])
    else:
        covered = {k[len(_POSTERIOR):-3] for k in arrays
                   if k.startswith(_POSTERIOR) and k.endswith("_mu")}
        posterior = Posterior(net, seed=config.seed, select=lambda key, _: key in covered) \
            if covered else None
    loss = _stored_loss(config, arrays, net)
    try:
        set_trained_arrays(arrays, net, posterior, path, loss)
    except PosteriorMismatchError as e:
        raise CheckpointError(str(e)) from None
    meta["loss"] = loss
    return net, posterior, config, meta


def _stored_loss(config, arrays, net):
    """A regression's loss with its learned noise, as the run built it from the
    likelihood's name (None for anything else: a classifier, a loss of the user's)."""
    kind = likelihood_of(config.likelihood)
    if kind.classifies:
        return None
    loss = kind.loss(noise_sigma=None)
    stored = any(k.startswith(_LOSS) for k in arrays)
    if bool(list(loss.collect_params().values())) != stored:
        return None  # the user's own loss (a fixed noise scale, say): theirs to give
    loss.initialize(ctx=next(iter(net.collect_params().values())).list_ctx())
    return loss
