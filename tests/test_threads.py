"""Tests for ``bbb_gluon.threads``: the engine thread's OpenMP count, set per phase.

Whether more threads are faster is a benchmark's question (benchmarks/bench_threads.py);
these check that the count is set where the operators run, restored, and chosen as
documented.
"""

import mxnet as mx
import numpy as np
import pytest

import bbb_gluon.prediction
import bbb_gluon.training
from bbb_gluon import fused, threads
from bbb_gluon.training import TrainConfig, build_mlp, fit

needs_kernels = pytest.mark.skipif(not fused.available(), reason="fused kernels unavailable")


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    for name in ("BBB_GLUON_TRAIN_THREADS", "BBB_GLUON_PREDICT_THREADS", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    threads.configure()
    yield
    threads.configure()


@needs_kernels
def test_the_count_stays_on_the_engine_thread_until_changed():
    start = threads.set_threads(2)  # the value read back is the engine thread's own
    assert threads.set_threads(1) == [2]
    assert threads.set_threads(1) == [1]
    with threads.using_threads(2):
        assert threads.set_threads(2) == [2]
    assert threads.set_threads(start[0]) == [1]  # restored after the block


@needs_kernels
def test_each_cpu_context_has_its_own_engine_thread():
    two = [mx.cpu(0), mx.cpu(1)]
    start = threads.set_threads(1, two)
    threads.set_threads(2, mx.cpu(1))
    assert threads.set_threads(1, two) == [1, 2]
    with threads.using_threads(2, two):
        assert threads.set_threads(2, two) == [2, 2]
    assert threads.set_threads(start[0], two) == [1, 1]


def test_gpu_contexts_are_left_alone():
    assert threads.set_threads(2, mx.gpu(0)) is None
    with threads.using_threads(2, [mx.gpu(0)]):
        pass


def test_defaults_and_overrides(monkeypatch):
    assert threads.train_threads() == threads.cores() == threads.predict_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # both phases follow it
    assert threads.train_threads() == 1 and threads.predict_threads() == 1
    monkeypatch.setenv("BBB_GLUON_PREDICT_THREADS", "3")
    assert threads.train_threads() == 1 and threads.predict_threads() == 3
    threads.configure(train=2, predict=4)
    assert threads.train_threads() == 2 and threads.predict_threads() == 4
    threads.configure()
    assert threads.predict_threads() == 3


@pytest.mark.parametrize("call", [
    lambda: threads.configure(train=0), lambda: threads.configure(predict=1.5),
    lambda: threads.set_threads(0), lambda: threads.set_threads(True),
])
def test_bad_counts(call):
    with pytest.raises(ValueError, match="threads"):
        call()


def test_a_bad_environment_variable_is_named(monkeypatch):
    monkeypatch.setenv("BBB_GLUON_TRAIN_THREADS", "many")
    with pytest.raises(ValueError, match="BBB_GLUON_TRAIN_THREADS"):
        threads.train_threads()


def _record(monkeypatch, module):
    seen = []
    real = threads.using_threads

    def spy(n, ctx=None):
        seen.append(n)
        return real(n, ctx)

    monkeypatch.setattr(module, "using_threads", spy)
    return seen


def test_prediction_runs_with_the_predict_count(monkeypatch):
    seen = _record(monkeypatch, bbb_gluon.prediction)
    threads.configure(predict=2)
    net = build_mlp((8,), 3, num_inputs=4)
    net.initialize(mx.init.Xavier())
    X = np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32)
    probs = bbb_gluon.prediction.predict_proba(net, X)
    assert probs.shape == (20, 3) and seen == [2]


def test_fit_trains_and_evaluates_with_their_counts(monkeypatch):
    seen = _record(monkeypatch, bbb_gluon.training)
    threads.configure(train=1, predict=2)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(64, 784)).astype(np.float32)
    y = rng.integers(0, 10, 64)
    fit(TrainConfig(hidden=(8,), epochs=2, batch_size=32, eval_samples=0), (X, y), (X, y),
        progress=False)
    assert seen == [1, 2, 2]  # the training loop once, then the evaluation of each epoch
