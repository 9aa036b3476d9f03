"""The worker's side of a ``dist_sync`` run: rank, shards, small all-reduces for the costs and
the stop and divergence flags, and the start-up that keeps the first step race-free.

MXNet's ``dist_sync`` kvstore sums the workers' gradients on one or more server processes
and hands every worker the sum. ``fit(..., options=RunOptions(kvstore="dist_sync"))`` uses
it as data-parallel training: every worker walks the same permutation of the data, takes
its own contiguous shard of every global batch, draws its own weight noise, and applies
the same update to the same parameters, so all workers hold equal parameters after every
step. Rank 0 alone writes the run folder.
"""

from __future__ import annotations

import mxnet as mx
import numpy as np

from .._kernels import private as _private
from .._kernels.trainer import start_kvstore

__all__ = ["WorkerGroup"]


# Kvstore keys of the group's own all-reduces: far above the 0..n-1 a Trainer uses.
_REDUCE_KEY = 1_000_003
_REDUCE_WIDTH = 8
DIST_TYPES = ("dist_sync", "dist_sync_device")


class WorkerGroup:
    """This process's place among the workers of a data-parallel run.

    Parameters
    ----------
    kvstore : None, str or mx.kvstore.KVStore
        None, "local" or "device": one process (rank 0 of 1). "dist_sync" or
        "dist_sync_device" (or a KVStore of those types): this process is one worker of
        the run the ``DMLC_*`` environment describes (``bbb-gluon launch`` sets it).

    Attributes
    ----------
    kvstore : KVStore or None
        The distributed kvstore, to be given to the Trainer; None for one process.
    rank, num_workers : int
        Assigned by MXNet's scheduler, not by the order the workers were started in.
    """

    def __init__(self, kvstore=None):
        if isinstance(kvstore, str):
            if kvstore in DIST_TYPES:
                kvstore = mx.kv.create(kvstore)
            elif kvstore in ("local", "device"):
                kvstore = None
            else:
                raise ValueError(f"kvstore must be 'local', 'device', 'dist_sync' or "
                                 f"'dist_sync_device', got {kvstore!r}")
        elif kvstore is not None and not isinstance(kvstore, mx.kvstore.KVStore):
            raise TypeError(f"kvstore must be a name or an mx.kvstore.KVStore, got "
                            f"{type(kvstore).__name__}")
        if kvstore is not None and kvstore.type not in DIST_TYPES:
            raise ValueError(f"a KVStore object must be of type {DIST_TYPES} (got "
                             f"{kvstore.type!r}); pass 'local' or 'device' by name")
        self.kvstore = kvstore
        self.rank = kvstore.rank if kvstore is not None else 0
        self.num_workers = kvstore.num_workers if kvstore is not None else 1
        self._ready = False

    @property
    def distributed(self):
        return self.kvstore is not None

    def __repr__(self):
        kind = self.kvstore.type if self.distributed else "one process"
        return f"WorkerGroup({kind}, rank {self.rank} of {self.num_workers})"

    def shard(self, n, rank=None):
        """The rows of a global batch of ``n`` that ``rank`` (default this worker) takes.

        Contiguous slices as ``gluon.utils.split_and_load(even_split=False)`` cuts them
        across devices, so W workers with one device each see what one process with W
        devices sees.
        """
        rank = self.rank if rank is None else rank
        if n < self.num_workers:
            raise ValueError(f"a batch of {n} examples cannot be shared by "
                             f"{self.num_workers} workers")
        each, extra = divmod(n, self.num_workers)  # the first `extra` take one more
        start = rank * each + min(rank, extra)
        return slice(start, start + each + (rank < extra))

    def check_batches(self, num_examples, batch_size, devices):
        """``ValueError`` before any work if some global batch (the last one, usually)
        has fewer examples than there are devices in the whole run."""
        parts = self.num_workers * devices
        last = num_examples % batch_size or batch_size
        smallest = min(batch_size, num_examples, last)
        if smallest < parts:
            raise ValueError(
                f"a batch of {smallest} examples (of {num_examples} in batches of "
                f"{batch_size}) cannot be split over {self.num_workers} workers x {devices} "
                "devices; use fewer workers, a larger batch or drop the last examples")

    def prepare(self, trainers):
        """Start the Trainers' kvstore and send rank 0's parameters to every worker, and
        wait for it, before the first step.

        The Trainer otherwise does this lazily inside its first ``step()``, where the
        copy of the initial weights can race with the first gradient exchange (in a
        loopback test, 14 of 31 two-worker runs ended with wrong weights).
        """
        if not self.distributed or self._ready:
            return
        for trainer in trainers:
            start_kvstore(trainer, init_params=True)
        self.kvstore.init(_REDUCE_KEY, mx.nd.zeros((_REDUCE_WIDTH,)))
        mx.nd.waitall()
        self.barrier()
        self._ready = True

    def allreduce(self, values):
        """The sum over the workers of a few numbers (at most 8), as a NumPy float64 array;
        the values themselves for one process. A host sync: call it between batches,
        not in every step."""
        values = np.asarray(values, dtype=np.float64).ravel()
        if not self.distributed:
            return values
        if values.size > _REDUCE_WIDTH:
            raise ValueError(f"allreduce takes at most {_REDUCE_WIDTH} numbers")
        if not self._ready:
            raise RuntimeError("WorkerGroup.prepare() must run before allreduce()")
        buf = np.zeros(_REDUCE_WIDTH, dtype=np.float64)
        buf[:values.size] = values
        # float64 does not go through the parameter server; a value and its rounding
        # error in float32 add up to it exactly enough for costs and flags.
        hi = buf.astype(np.float32)
        lo = (buf - hi).astype(np.float32)
        out = []
        for part in (hi, lo):
            arr = mx.nd.array(part)
            self.kvstore.pushpull(_REDUCE_KEY, arr)
            out.append(arr.asnumpy().astype(np.float64))
        return (out[0] + out[1])[:values.size]

    def barrier(self):
        if self.distributed:
            _private.barrier(self.kvstore)
