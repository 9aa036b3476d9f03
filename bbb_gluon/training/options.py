"""``RunOptions``: what a few runs of ``fit`` need beside the configuration, the data and
the network (a test set to watch, a distributed kvstore, entries of the command line's
own for ``config.json``, a stop for tests of interruption), built once by the caller."""

import functools
from dataclasses import dataclass

from .._checks import check_int

__all__ = ["RunOptions"]

# fit's keywords before it took net=, RunOptions and TrainConfig.restore_best, and the
# form that replaced each.
MOVED = {
    "ctx": "the network's: net=bbb.MLP(..., ctx=...), or your Block initialised there",
    "posterior": "net=bbb.Network(net, posterior=posterior)",
    "loss": "net=bbb.Network(net, loss=loss)",
    "test": "options=bbb.RunOptions(test=(X, y))",
    "kvstore": "options=bbb.RunOptions(kvstore=...)",
    "extra_config": "options=bbb.RunOptions(record={...})",
    "stop_after_batches": "options=bbb.RunOptions(stop_after_batches=N)",
    "restore_best": "TrainConfig(restore_best=True)",
}


@dataclass(frozen=True, eq=False)
class RunOptions:
    """The rarer settings of one ``fit`` call: ``fit(..., options=RunOptions(...))``.

    Parameters
    ----------
    test : (X, y), optional
        A held-out set whose error is recorded after every epoch (history columns
        ``test_error`` and ``test_error_mc``) and used for nothing else: it lets a run
        that trains on all the data, with no validation split, show its learning curve.
    kvstore : str or mx.kvstore.KVStore, optional
        "device" (the default with several devices) or "local" for one process;
        "dist_sync" or "dist_sync_device" (or such a KVStore) to train as one worker of
        several processes on MXNet's parameter server (start them with ``bbb-gluon
        launch``; see :mod:`bbb_gluon.distributed`). Training data must be arrays: every
        worker walks the same batches and takes its own shard of each (the learning rate
        applies to the whole batch), draws its own weight noise, and keeps the
        optimiser's state itself, so a resumed run is exact. Rank 0 alone evaluates and
        writes ``run_dir``; every worker reads it on ``resume`` (use a folder all of them
        see). Progress is shown by rank 0, and Ctrl-C stops every worker together at the
        next report (``config.log_every``). One ``fit`` per distributed kvstore: a second
        one in the same processes would initialise its keys again, which the servers
        take for a push and wait on.
    record : dict, optional
        More entries for the run folder's ``config.json`` beside ``"train"``, ``"mlp"``
        and ``"machines"`` (the command line stores its data and evaluation settings).
    stop_after_batches : int, optional
        Stop (as on Ctrl-C: checkpoint, then :class:`TrainingInterrupted`) after this
        many batches in total; for tests of interruption.
    """

    test: tuple | None = None
    kvstore: object = None
    record: dict | None = None
    stop_after_batches: int | None = None

    def __post_init__(self):
        if self.test is not None and (not isinstance(self.test, tuple | list)
                                      or len(self.test) != 2):
            raise TypeError("test must be a pair (X, y)")
        if self.record is not None:
            if not isinstance(self.record, dict):
                raise TypeError(f"record must be a dict, got {type(self.record).__name__}")
            taken = {"train", "mlp", "machines"} & set(self.record)
            if taken:
                raise ValueError(f"record may not hold {sorted(taken)}: fit writes them")
        if self.stop_after_batches is not None:
            check_int(self.stop_after_batches, "stop_after_batches", 1)


def refuse_moved_keywords(fit):
    """``fit`` refuses a keyword it no longer takes by naming the form that replaced it."""
    @functools.wraps(fit)
    def checked(*args, **kwargs):
        moved = [name for name in MOVED if name in kwargs]
        if moved:
            raise TypeError(f"fit() takes no {', '.join(m + '=' for m in moved)} any more: "
                            + "; ".join(f"{name}= is {MOVED[name]}" for name in moved))
        return fit(*args, **kwargs)
    return checked
