"""Tests for bbb_gluon.core.noise.NoiseSource: determinism, streams, resuming, statistics."""

import json
import math

import mxnet as mx
import numpy as np
import pytest

from bbb_gluon.core.noise import NoiseSource

CONTEXTS = [mx.cpu(0), mx.cpu(1)]
CTX_IDS = ["cpu0", "cpu1"]


@pytest.fixture
def sources():
    made = []

    def make(*args, **kwargs):
        src = NoiseSource(*args, **kwargs)
        made.append(src)
        return src

    yield make
    for src in made:
        src.close()


def take(src, n, stream=0):
    return [src.next_numpy(stream) for _ in range(n)]


@pytest.mark.parametrize("prefetch", [True, False])
def test_deterministic_by_seed(sources, prefetch):
    a = take(sources(1000, seed=3, prefetch=prefetch), 4)
    b = take(sources(1000, seed=3, prefetch=True), 4)
    c = take(sources(1000, seed=3, prefetch=False), 4)
    for x, y, z in zip(a, b, c, strict=True):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x, z)
    # consecutive blocks differ, and another seed gives other numbers
    assert not np.array_equal(a[0], a[1])
    d = take(sources(1000, seed=4, prefetch=prefetch), 1)
    assert not np.array_equal(a[0], d[0])


def test_a_block_is_a_function_of_seed_stream_counter(sources):
    """Documented: each block is a pure function of (seed, stream, counter)."""
    src = sources(257, seed=11)
    blocks = take(src, 3, stream=2)
    for counter, block in enumerate(blocks):
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([11, 2, counter])))
        np.testing.assert_array_equal(block, rng.standard_normal(257, dtype=np.float32))


def test_streams_are_independent_and_differ(sources):
    one = sources(500, seed=0)
    s0 = take(one, 3, stream=0)
    # interleaving draws from other streams does not change stream 0's sequence
    other = sources(500, seed=0)
    mixed = []
    for _ in range(3):
        other.next_numpy(1)
        mixed.append(other.next_numpy(0))
        other.next_numpy(5)
    for x, y in zip(s0, mixed, strict=True):
        np.testing.assert_array_equal(x, y)
    s1 = take(sources(500, seed=0), 3, stream=1)
    for x, y in zip(s0, s1, strict=True):
        assert not np.array_equal(x, y)
        # not merely shifted or sign-flipped copies: essentially uncorrelated
        assert abs(np.corrcoef(x, y)[0, 1]) < 5 / math.sqrt(500)


def test_state_dict_resumes_after_prefetch(sources):
    src = sources(300, seed=5, prefetch=True)
    take(src, 3)
    take(src, 2, stream=1)
    state = src.state_dict()
    assert state == {"seed": 5, "counters": {"0": 3, "1": 2}}
    state = json.loads(json.dumps(state))  # survives a JSON checkpoint
    # the uninterrupted run; by now a block for counter 3 (and 4, ...) was prefetched
    expected0, expected1 = take(src, 3), take(src, 1, stream=1)

    # a source with another seed that has prefetched a block for the very counter the
    # state resumes at (3): that block is of the wrong seed and must not be handed out
    resumed = sources(300, seed=99, prefetch=True)
    take(resumed, 3)
    resumed.load_state_dict(state)
    for x, y in zip(take(resumed, 3), expected0, strict=True):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(resumed.next_numpy(1), expected1[0])

    # rewinding the same instance, whose pending prefetch is for a later counter
    src.load_state_dict(state)
    for x, y in zip(take(src, 3), expected0, strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("prefetch", [True, False])
def test_advance_skips_one_block(sources, prefetch):
    ref = take(sources(64, seed=8, prefetch=prefetch), 4)
    src = sources(64, seed=8, prefetch=prefetch)
    np.testing.assert_array_equal(src.next_numpy(), ref[0])
    assert src.advance() == 1
    np.testing.assert_array_equal(src.next_numpy(), ref[2])
    assert src.advance(stream=0) == 3
    assert src.state_dict()["counters"] == {"0": 4}
    assert src.advance(stream=2) == 0


def test_fresh_stream_after_load_starts_at_zero(sources):
    src = sources(50, seed=1)
    first = src.next_numpy(3)
    src.load_state_dict({"seed": 1, "counters": {"0": 7}})
    np.testing.assert_array_equal(src.next_numpy(3), first)


@pytest.mark.parametrize("ctx", CONTEXTS, ids=CTX_IDS)
@pytest.mark.parametrize("size", [1, 17, 4096])
def test_next_gives_ndarray_on_ctx(sources, ctx, size):
    src = sources(size, seed=2)
    twin = sources(size, seed=2)
    block = src.next(ctx)
    assert isinstance(block, mx.nd.NDArray)
    assert block.context == ctx
    assert block.shape == (size,)
    assert block.dtype == np.float32
    np.testing.assert_array_equal(block.asnumpy(), twin.next_numpy())
    numpy_block = src.next_numpy()
    assert numpy_block.dtype == np.float32 and numpy_block.shape == (size,)


def test_standard_normal_statistics(sources):
    n = 200_000
    x = sources(n, seed=0).next_numpy().astype(np.float64)
    assert np.all(np.isfinite(x))
    assert abs(x.mean()) < 5 / math.sqrt(n)
    assert abs(x.std() - 1) < 5 / math.sqrt(2 * n)
    # tails of a normal, not a uniform or a clipped distribution
    assert abs(np.mean(np.abs(x) > 1.96) - 0.05) < 0.003
    assert abs(np.mean(x**4) - 3) < 0.1


def test_size_and_seed_are_ints(sources):
    src = sources(np.int64(10), seed=np.int64(3))
    assert src.size == 10 and isinstance(src.size, int)
    assert src.seed == 3 and isinstance(src.seed, int)
    assert src.next_numpy().shape == (10,)


def test_an_interrupted_wait_gives_the_block_back(monkeypatch):
    import concurrent.futures

    whole = NoiseSource(1000, seed=5)
    expected = [whole.next_numpy(0) for _ in range(4)]
    cut = NoiseSource(1000, seed=5)
    first = cut.next_numpy(0)
    real = concurrent.futures.Future.result
    calls = {"n": 0}

    def interrupted(self, timeout=None):
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyboardInterrupt  # Ctrl-C while the prefetched block is awaited
        return real(self, timeout)

    monkeypatch.setattr(concurrent.futures.Future, "result", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cut.next_numpy(0)
    rest = [cut.next_numpy(0) for _ in range(3)]
    for a, b in zip([first, *rest], expected, strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_prefetching_thread_ends_with_close_and_with_the_source():
    import gc
    import threading

    def new_threads():
        return [t for t in threading.enumerate() if t not in before]

    before = set(threading.enumerate())
    source = NoiseSource(1000, seed=3)
    first = source.next_numpy()
    assert len(new_threads()) == 1
    source.close()
    new_threads()[0].join(timeout=30)
    assert new_threads() == []
    # Closed, it goes on with the same sequence, drawn in the caller.
    again = NoiseSource(1000, seed=3, prefetch=False)
    again.next_numpy()
    np.testing.assert_array_equal(source.next_numpy(), again.next_numpy())
    np.testing.assert_array_equal(first, NoiseSource(1000, seed=3, prefetch=False).next_numpy())
    dropped = NoiseSource(1000, seed=4)
    dropped.next_numpy()
    thread = new_threads()[0]
    del dropped
    gc.collect()
    thread.join(timeout=30)
    assert not thread.is_alive()


def test_a_prefetched_block_cancelled_by_close_is_drawn_in_the_caller():
    from concurrent.futures import Future

    source = NoiseSource(500, seed=5)
    source.next_numpy()
    cancelled = Future()
    cancelled.cancel()  # what close() does to a block still queued while a caller waits
    source._pending[0] = (1, cancelled)
    reference = NoiseSource(500, seed=5, prefetch=False)
    reference.next_numpy()
    np.testing.assert_array_equal(source.next_numpy(), reference.next_numpy())
    np.testing.assert_array_equal(source.next_numpy(), reference.next_numpy())
    source.close()


def test_the_prefetching_thread_starts_with_the_first_block_and_ends_at_close():
    import threading

    def noise_threads():
        return [t for t in threading.enumerate() if "ThreadPoolExecutor" in t.name]

    before = len(noise_threads())
    source = NoiseSource(10, seed=3)
    source.advance(0)  # the fused kernels' way: no thread
    assert len(noise_threads()) == before
    first = source.next_numpy(0)
    assert len(noise_threads()) == before + 1
    source.close()
    for t in noise_threads()[before:]:
        t.join(timeout=10)
    assert len(noise_threads()) == before
    again = NoiseSource(10, seed=3, prefetch=False)
    again.advance(0)
    np.testing.assert_array_equal(again.next_numpy(0), first)  # the same block, by counter
    np.testing.assert_array_equal(source.next_numpy(0), again.next_numpy(0))
