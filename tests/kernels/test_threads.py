"""Tests for ``bbb_gluon._kernels.threads``: the engine thread's OpenMP count, set per phase.

Whether more threads are faster is a benchmark's question (benchmarks/bench_threads.py);
these check that the count is set where the operators run, restored, and chosen as
documented.
"""

import os
import subprocess
import sys
import textwrap

import mxnet as mx
import numpy as np
import pytest

import bbb_gluon.prediction
import bbb_gluon.training.loop
from bbb_gluon._kernels import fused, threads
from bbb_gluon.training import MLP, TrainConfig, build_mlp, fit

needs_kernels = pytest.mark.skipif(not fused.available(), reason="fused kernels unavailable")


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    for name in ("BBB_GLUON_TRAIN_THREADS", "BBB_GLUON_PREDICT_THREADS", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    threads.configure()
    yield
    threads.configure()


@needs_kernels
def test_the_count_goes_down_and_never_back_up():
    ctx = mx.cpu(7)  # a context no other test uses: its engine thread starts here
    top = threads.current(ctx)[0]
    assert top == threads.cores()  # both phases default to every core
    assert threads.set_threads(1, ctx) == [top]  # the value read back is the thread's own
    assert threads.current(ctx) == [1]
    assert threads.set_threads(top + 1, ctx) == [1]
    assert threads.current(ctx) == [1]  # oneDNN may have made primitives at one thread
    with threads.using_threads(top + 1, ctx):
        assert threads.current(ctx) == [1]
    assert threads.current(ctx) == [1]


@needs_kernels
def test_each_cpu_context_has_its_own_engine_thread():
    a, b = mx.cpu(5), mx.cpu(6)
    top = threads.current([a, b])
    assert top[0] == top[1]
    threads.set_threads(1, b)
    assert threads.current([a, b]) == [top[0], 1]
    with threads.using_threads(1, [a, b]):
        assert threads.current([a, b]) == [1, 1]


def _run(script, **env):
    """Run ``script`` in a fresh Python with ``env`` in place of the thread variables."""
    full = {k: v for k, v in os.environ.items()
            if k not in ("OMP_NUM_THREADS", "BBB_GLUON_TRAIN_THREADS",
                         "BBB_GLUON_PREDICT_THREADS")}
    full.update(env)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=full,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()


@needs_kernels
def test_claim_raises_the_count_only_before_anything_ran():
    env = dict(OMP_NUM_THREADS="1", BBB_GLUON_TRAIN_THREADS="3")  # MXNet starts at one
    fresh = """
        import mxnet as mx
        import bbb_gluon.threads
        bbb_gluon.threads.claim()
        print(*bbb_gluon.threads.current())
    """
    used = """
        import mxnet as mx
        import bbb_gluon.threads
        mx.nd.ones((2, 2)).asnumpy()  # an operator before the claim: the count stays
        bbb_gluon.threads.claim()
        print(*bbb_gluon.threads.current())
    """
    assert _run(fresh, **env) == ["3"]
    assert _run(used, **env) == ["1"]


@pytest.mark.slow
@needs_kernels
def test_claim_says_when_it_cannot_have_the_threads():
    used = """
        import warnings
        import mxnet as mx
        import bbb_gluon.threads
        mx.nd.ones((2, 2)).asnumpy()
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            bbb_gluon.threads.claim()
        print(len(seen), "OMP_NUM_THREADS=3" in str(seen[0].message))
    """
    assert _run(used, OMP_NUM_THREADS="1", BBB_GLUON_TRAIN_THREADS="3") == ["1", "True"]
    fresh = used.replace("mx.nd.ones((2, 2)).asnumpy()", "pass")
    out = _run(fresh.replace(', "OMP_NUM_THREADS=3" in str(seen[0].message)', ""),
               OMP_NUM_THREADS="1", BBB_GLUON_TRAIN_THREADS="3")
    assert out == ["0"]
    # Asking for one thread, one is what it has: nothing to say.
    assert _run(used.replace(', "OMP_NUM_THREADS=3" in str(seen[0].message)', ""),
                OMP_NUM_THREADS="1") == ["0"]


_CNN = """
        from mxnet.gluon import nn
        net = nn.HybridSequential()
        net.add(nn.Conv2D(6, 5, in_channels=1, activation="relu"),
                nn.BatchNorm(in_channels=6), nn.MaxPool2D(), nn.Flatten(),
                nn.Dense(10, in_units=6 * 12 * 12))
        net.initialize()
        net.hybridize()
"""  # indented as the scripts it goes into


@needs_kernels
def test_engine_threads_restarted_by_a_fork_keep_their_count():
    # MXNet stops and restarts its engine threads in the parent too: the new ones have
    # MXNet's count, and oneDNN primitives made on them at it must not run at more.
    script = """
        import os
        import mxnet as mx
        import bbb_gluon.threads
        bbb_gluon.threads.claim()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    """ + _CNN + """
        x = mx.nd.ones((128, 1, 28, 28))
        net(x).wait_to_read()
        start = bbb_gluon._kernels.threads.current()[0]
        bbb_gluon._kernels.threads.set_threads(2)
        net(x).wait_to_read()
        print(start, *bbb_gluon._kernels.threads.current())
    """
    assert _run(script, OMP_NUM_THREADS="1", BBB_GLUON_TRAIN_THREADS="2") == ["1", "1"]


@needs_kernels
def test_a_cnn_trained_with_fewer_threads_than_it_predicts_with_does_not_crash():
    # The CI failure of 2026-11-23: pooling and batch-norm primitives made at one thread,
    # then run at two, wrote past their buffers (munmap_chunk(): invalid pointer).
    script = """
        import mxnet as mx, numpy as np
        import bbb_gluon as bbb
        import bbb_gluon.threads
        bbb.threads.claim()
    """ + _CNN + """
        posterior = bbb.Posterior(net, rho_init=-3.0, seed=0)
        rng = np.random.default_rng(0)
        X = rng.uniform(size=(256, 1, 28, 28)).astype(np.float32)
        y = np.arange(256) % 10
        config = bbb.TrainConfig(model="bbb", epochs=2, batch_size=128, eval_samples=2)
        bbb.fit(config, (X, y), (X, y), net=bbb.Network(net, posterior), progress=False)
        probs = bbb.predict_proba(net, posterior, X, samples=2, batch_size=128)
        print(int(np.isfinite(probs).all()), *bbb.threads.current())
    """
    assert _run(script, BBB_GLUON_TRAIN_THREADS="1", BBB_GLUON_PREDICT_THREADS="2") \
        == ["1", "1"]


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
    probs = bbb_gluon.prediction.predict_proba(net, None, X)
    assert probs.shape == (20, 3) and seen == [2]


def test_fit_trains_and_evaluates_with_their_counts(monkeypatch):
    seen = _record(monkeypatch, bbb_gluon.training.loop)
    threads.configure(train=1, predict=2)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(64, 784)).astype(np.float32)
    y = rng.integers(0, 10, 64)
    result = fit(TrainConfig(epochs=2, batch_size=32, eval_samples=0), (X, y), (X, y),
                 net=MLP(hidden=(8,)), progress=False)
    # The training loop once, then the evaluation of each epoch. With the kernels both
    # phases take the smaller count: training lowers the ceiling to its count, so the
    # evaluation could not have more (and the other way round after the first epoch).
    assert seen == ([1, 1, 1] if fused.available() else [1, 2, 2])
    assert result.history and len(seen) == 3


@needs_kernels
def test_a_resumed_run_continues_with_the_counts_it_recorded():
    ctx = [mx.cpu(4)]  # its own engine thread: its ceiling is the claim's (every core)
    counts, note = threads.run_counts(ctx, {"train": 1, "predict": 1})
    assert counts == {"train": 1, "predict": 1} and note is None
    # A count asked for on resume wins, and says the continuation is not bit-identical.
    threads.configure(train=2, predict=2)
    counts, note = threads.run_counts(ctx, {"train": 1, "predict": 1})
    assert counts["train"] == min(2, threads.current(ctx)[0])
    assert "configure()" in note and "not be bit-identical" in note
    threads.configure()
    # More than this process can have: said, with the variable that gives them.
    counts, note = threads.run_counts(ctx, {"train": 64, "predict": 64})
    assert counts["train"] <= threads.current(ctx)[0] < 64
    assert "can use only" in note and "OMP_NUM_THREADS=64" in note
    # A new run: the phases' counts, the smaller for both.
    threads.configure(train=1, predict=2)
    assert threads.run_counts(ctx) == ({"train": 1, "predict": 1}, None)


@pytest.mark.slow
@needs_kernels
def test_claim_takes_a_resumed_runs_count_over_the_idle_cores():
    script = """
        import bbb_gluon._kernels.threads as t
        t.idle_cores = lambda window=0.25: 1
        t.claim(threads=THREADS)
        print(*t.current())
    """
    assert _run(script.replace("THREADS", "2")) == ["2"]
    assert _run(script.replace("THREADS", "None")) == ["1"]
    # A count the user asks for still wins.
    assert _run(script.replace("THREADS", "2"), OMP_NUM_THREADS="1") == ["1"]


def test_idle_cores_reads_what_other_programs_leave(monkeypatch):
    monkeypatch.setattr(threads, "cores", lambda: 4)
    monkeypatch.setattr(threads.time, "sleep", lambda s: None)
    for idle, expected in ((0, 1), (30, 1), (50, 2), (100, 4)):
        samples = iter([(1000, 5000), (1000 + idle, 5100)])
        monkeypatch.setattr(threads, "_cpu_times", samples.__next__)
        assert threads.idle_cores() == expected, idle
    monkeypatch.setattr(threads, "_cpu_times", lambda: None)  # not Linux
    assert threads.idle_cores() == 4


@pytest.mark.slow
@needs_kernels
def test_claim_takes_the_idle_cores_unless_a_count_is_asked_for():
    script = """
        import bbb_gluon._kernels.threads as t
        t.idle_cores = lambda window=0.25: IDLE
        t.claim()
        print(*t.current())
    """
    # MXNet's own count here is one (half of two cores): the claim raises it only to the
    # cores that are idle
    assert _run(script.replace("IDLE", "2")) == ["2"]
    assert _run(script.replace("IDLE", "1")) == ["1"]
    assert _run(script.replace("IDLE", "1"), BBB_GLUON_TRAIN_THREADS="2") == ["2"]
