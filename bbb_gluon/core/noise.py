"""Standard normal noise for the weights, drawn by NumPy in a background thread.

``nd.random.normal`` costs about 15 ms for the 478,410 weights of a 784-400-400-10 net
on these CPUs, more than three plain training steps. NumPy's ziggurat draws the same in
about 5 ms, releases the GIL while it does, and so runs on the second core while MXNet
computes the previous step. Each block of noise is a pure function of
``(seed, stream, counter)``, so a run resumed from a checkpoint draws exactly the noise
the uninterrupted run would have drawn, whatever was prefetched when it stopped.
"""

import threading
import weakref
from concurrent.futures import CancelledError, ThreadPoolExecutor

import mxnet as mx
import numpy as np

__all__ = ["NoiseSource"]


def _draw(seed, stream, counter, size):
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, stream, counter])))
    return rng.standard_normal(size, dtype=np.float32)


class NoiseSource:
    """Blocks of ``size`` i.i.d. N(0, 1) float32 numbers, one counter per stream.

    Parameters
    ----------
    size : int
        Numbers per block (the posterior's parameter count).
    seed : int, default 0
        With the stream index and the block counter, fixes every number.
    prefetch : bool, default True
        Draw the next block of a stream in a background thread as soon as one is taken.
        The thread starts with the first block drawn (the fused kernels draw their own
        noise and never start it) and ends with the source or at :meth:`close`.

    A stream is one per device in data-parallel training (``stream`` = the device's
    index in the context list), so devices draw independent noise. Across the workers of
    a distributed run, ``stream_offset`` (rank x devices per worker) keeps the streams
    apart; the counters (and the saved state) stay keyed by the local index, so every
    worker resumes from the same checkpoint.
    """

    def __init__(self, size, seed=0, prefetch=True):
        self.size = int(size)
        self.seed = int(seed)
        self._counters = {}
        self._pending = {}
        self._lock = threading.Lock()
        self._prefetch = bool(prefetch)
        self._pool = None
        self.stream_offset = 0

    def global_stream(self, stream):
        """The stream number the numbers are drawn from: ``stream_offset + stream``."""
        return self.stream_offset + int(stream)

    def _submit(self, stream, counter):
        if self._pool is None and self._prefetch:
            self._pool = ThreadPoolExecutor(max_workers=1)
            # The thread ends with its source (or at close()), not with the process.
            self._finalizer = weakref.finalize(self, self._pool.shutdown, wait=False,
                                               cancel_futures=True)
        if self._pool is None:
            return None
        return self._pool.submit(_draw, self.seed, self.global_stream(stream), counter,
                                 self.size)

    def next_numpy(self, stream=0):
        """The next block of ``stream`` as a NumPy float32 array of shape ``(size,)``."""
        with self._lock:
            counter = self._counters.get(stream, 0)
            self._counters[stream] = counter + 1
            pending = self._pending.pop(stream, None)
            future = pending[1] if pending is not None and pending[0] == counter else None
            self._pending[stream] = (counter + 1, self._submit(stream, counter + 1))
        try:
            if future is not None:
                try:
                    return future.result()
                except CancelledError:  # close() ran meanwhile: draw the block here
                    pass
            return _draw(self.seed, self.global_stream(stream), counter, self.size)
        except BaseException:
            # Ctrl-C while waiting, in a loop of the user's own: give the block back, so
            # the sequence goes on where it was.
            with self._lock:
                if self._counters.get(stream) == counter + 1:
                    self._counters[stream] = counter
                    self._pending[stream] = (counter, future)
            raise

    def advance(self, stream=0):
        """Take the next counter of ``stream`` without drawing (the fused kernels draw the
        noise themselves from the same ``(seed, stream, counter)``)."""
        with self._lock:
            counter = self._counters.get(stream, 0)
            self._counters[stream] = counter + 1
            return counter

    def last_counter(self, stream=0):
        """The counter of the block ``stream`` handed out last (-1 before the first)."""
        with self._lock:
            return self._counters.get(stream, 0) - 1

    def extra(self, stream, counter, tag, shape, signs=False):
        """Noise beside the weights' block ``counter`` of ``stream``: N(0, 1) numbers, or
        random signs (+1/-1) with ``signs``, of any ``shape``, as a NumPy float32 array; a
        pure function of ``(seed, stream, counter, tag)`` like the blocks, so a resumed
        run draws the same. ``tag`` (>= 0) tells apart the arrays one step needs (the
        estimators' per-example noise, :mod:`bbb_gluon.core.estimators`)."""
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(
            [self.seed, self.global_stream(stream), int(counter), 1 + int(tag)])))
        if signs:
            return (rng.integers(0, 2, size=shape, dtype=np.int8) * 2 - 1).astype(np.float32)
        return rng.standard_normal(shape, dtype=np.float32)

    def next(self, ctx, stream=0):
        """The next block of ``stream`` as an NDArray of shape ``(size,)`` on ``ctx``."""
        return mx.nd.array(self.next_numpy(stream), ctx=ctx, dtype=np.float32)

    def state_dict(self):
        """Counters of every stream: all that is needed to continue the sequence."""
        return {"seed": self.seed, "counters": {str(k): v for k, v in self._counters.items()}}

    def load_state_dict(self, state):
        with self._lock:
            self.seed = int(state["seed"])
            self._counters = {int(k): int(v) for k, v in state["counters"].items()}
            self._pending = {}

    def close(self):
        """End the prefetching thread; later blocks are drawn in the calling thread."""
        with self._lock:
            pool, self._pool, self._pending = self._pool, None, {}
            self._prefetch = False
        if pool is not None:
            self._finalizer()
