"""``ArrayLoader``: mini-batches as MXNet NDArrays straight from in-memory arrays.
"""

from __future__ import annotations

from collections.abc import Iterator

import mxnet as mx
import numpy as np

from .._checks import check_int

__all__ = ["ArrayLoader"]


class ArrayLoader:
    """Mini-batches of in-memory arrays as MXNet NDArrays, with no per-example Python work.

    The arrays are copied to ``ctx`` once. Each epoch applies one permutation to the whole
    arrays with ``mx.nd.take`` and then yields contiguous slices (views) of the result.

    Parameters
    ----------
    X : numpy.ndarray
        Floating-point inputs, shape ``(N, D)`` or ``(N, ...)`` (images ``(N, 1, 28, 28)``);
        stored as ``float32``.
    y : numpy.ndarray
        Integer labels ``(N,)``, or real-valued targets ``(N,)`` / ``(N, ...)``; stored as
        ``float32`` (Gluon losses take float labels).
    batch_size : int
        Positive number of examples per batch.
    shuffle : bool, default False
        Whether to permute the examples each epoch. The order of epoch ``e`` is
        ``np.random.default_rng([seed, e]).permutation(N)``: a function of ``(seed, e)``
        only, whatever was iterated before.
    seed : int, default 0
        Non-negative shuffling seed.
    ctx : mxnet.Context, optional
        Where the batches live; default ``mx.current_context()`` at construction.
    last_batch : {"keep", "discard"}, default "keep"
        Whether a final batch smaller than ``batch_size`` is yielded or dropped.

    Attributes
    ----------
    num_examples, batch_size : int
    ctx : mxnet.Context
    shuffle : bool
    seed : int
    last_batch : str
    """

    def __init__(
        self,
        X: np.ndarray,
        y: np.ndarray,
        batch_size: int,
        shuffle: bool = False,
        seed: int = 0,
        ctx: mx.Context | None = None,
        last_batch: str = "keep",
    ):
        if not isinstance(X, np.ndarray) or X.ndim < 2 or \
                not np.issubdtype(X.dtype, np.floating):
            desc = f"{type(X).__name__} {getattr(X, 'dtype', '')} {getattr(X, 'shape', '')}"
            raise ValueError(f"X must be a floating-point NumPy array of at least 2 axes "
                             f"(N, D) or (N, ...), got {desc}")
        if not isinstance(y, np.ndarray) or y.ndim < 1 or not (
                np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.floating)):
            desc = f"{type(y).__name__} {getattr(y, 'dtype', '')} {getattr(y, 'shape', '')}"
            raise ValueError(f"y must be a NumPy array of integer labels (N,) or real targets "
                             f"(N, ...), got {desc}")
        if len(X) != len(y):
            raise ValueError(f"X and y differ in length: {len(X)} inputs but {len(y)} labels")
        self.batch_size = check_int(batch_size, "batch_size", 1)
        self.seed = check_int(seed, "seed", 0)
        if last_batch not in ("keep", "discard"):
            raise ValueError(f"last_batch must be 'keep' or 'discard', got {last_batch!r}")
        self.last_batch = last_batch
        self.shuffle = bool(shuffle)
        self.ctx = ctx or mx.current_context()
        self.num_examples = len(X)
        self._X = mx.nd.array(X, ctx=self.ctx, dtype=np.float32)
        self._y = mx.nd.array(y, ctx=self.ctx, dtype=np.float32)
        self._next_epoch = 0

    def __len__(self) -> int:
        """Number of batches per epoch."""
        if self.last_batch == "discard":
            return self.num_examples // self.batch_size
        return -(-self.num_examples // self.batch_size)

    def order(self, epoch: int) -> np.ndarray:
        """Example indices in the order epoch ``epoch`` visits them, ``int64`` ``(N,)``."""
        epoch = check_int(epoch, "epoch", 0)
        if not self.shuffle:
            return np.arange(self.num_examples)
        return np.random.default_rng([self.seed, epoch]).permutation(self.num_examples)

    def epoch(self, epoch: int) -> Iterator[tuple[mx.nd.NDArray, mx.nd.NDArray]]:
        """Batches of one epoch.

        Parameters
        ----------
        epoch : int
            Non-negative epoch number; selects the shuffle order.

        Returns
        -------
        iterator of (mxnet.nd.NDArray, mxnet.nd.NDArray)
            ``(X_batch float32 (B, ...), y_batch float32 (B, ...))`` on ``ctx``; B = ``batch_size``
            except possibly for the last batch.
        """
        order = self.order(epoch)
        X, y = self._X, self._y
        if self.shuffle and self.num_examples > 0:
            idx = mx.nd.array(order, ctx=self.ctx, dtype=np.int64)
            X, y = mx.nd.take(X, idx), mx.nd.take(y, idx)
        return self._batches(X, y)

    def _batches(self, X, y):
        bs = self.batch_size
        for b in range(len(self)):
            yield X[b * bs : (b + 1) * bs], y[b * bs : (b + 1) * bs]

    def __iter__(self) -> Iterator[tuple[mx.nd.NDArray, mx.nd.NDArray]]:
        """Batches of the next epoch: epoch 0 the first time, then 1, 2, ..."""
        it = self.epoch(self._next_epoch)
        self._next_epoch += 1
        return it

    def __repr__(self) -> str:
        return (
            f"ArrayLoader(num_examples={self.num_examples}, batch_size={self.batch_size}, "
            f"shuffle={self.shuffle}, seed={self.seed}, ctx={self.ctx}, "
            f"last_batch={self.last_batch!r})"
        )
