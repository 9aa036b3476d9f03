"""Tests for bbb_gluon.training: the fit loop, its run folder, resuming, data parallelism.

All runs use small real-MNIST subsets and small networks so that the file runs in well
under two minutes on two cores. Resumed and uninterrupted runs are compared exactly for
the errors and within float32 accumulation tolerance (rel 1e-5) for the costs.
"""

import csv
import dataclasses
import json
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon
from mxnet.gluon import nn

import bbb_gluon as bbb
from bbb_gluon import MLP, Network, RunOptions
from bbb_gluon._kernels import threads
from bbb_gluon.core.engines import ReferenceBBBStep, forward_with
from bbb_gluon.core.loss import BBBLoss, complexity_cost
from bbb_gluon.core.posterior import Posterior
from bbb_gluon.core.priors import make_prior
from bbb_gluon.data import load_dataset
from bbb_gluon.prediction import error_rate, predict_proba
from bbb_gluon.reports import write_report
from bbb_gluon.training import (
    CheckpointError,
    TrainConfig,
    TrainingDiverged,
    TrainingInterrupted,
    build_mlp,
    fit,
    load_run,
)

DOCUMENTED_KEYS = ("cost", "complexity_cost", "likelihood_cost", "valid_error",
                   "valid_error_mc", "seconds")
COST_KEYS = ("cost", "complexity_cost", "likelihood_cost", "nll_per_example")
EXACT_KEYS = ("epoch", "valid_error", "valid_error_mc")

# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def mnist_2000(data_root):
    """2000 train / 2000 validation real MNIST images."""
    return load_dataset("mnist", root=data_root, subset=2000)


@pytest.fixture(scope="module")
def mnist_300(data_root):
    """300 train / 300 validation images: about 0.1 s per epoch for a 32-unit net."""
    return load_dataset("mnist", root=data_root, subset=300, num_valid=300)


# The tests' network unless one says otherwise: about 0.1 s per epoch on 300 images.
SMALL = MLP(hidden=(32,))


def tiny(model="bbb", **kw):
    base = dict(model=model, epochs=2, batch_size=64, eval_samples=2, seed=0)
    base.update(kw)
    return TrainConfig(**base)


def snapshot(folder):
    """Every file under ``folder``: its bytes and modification time."""
    folder = Path(folder)
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_same_history(actual, expected):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        for key in EXACT_KEYS:
            assert a.get(key) == e.get(key), (key, a, e)
        for key in COST_KEYS:
            assert a[key] == pytest.approx(e[key], rel=1e-5, abs=1e-6), (key, a, e)


def net_arrays(result):
    """The trained parameters (posterior mu and rho, or the network's weights)."""
    if result.posterior is not None:
        return [a.asnumpy() for a in result.posterior.mu() + result.posterior.rho()]
    return [p.data(p.list_ctx()[0]).asnumpy()
            for p in result.net._collect_params_with_prefix().values()]


def assert_same_params(a, b, rtol=1e-5, atol=1e-7):
    arrays_a, arrays_b = net_arrays(a), net_arrays(b)
    assert len(arrays_a) == len(arrays_b)
    for x, y in zip(arrays_a, arrays_b, strict=True):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


def no_temp_files(run_dir):
    return [p.name for p in Path(run_dir).rglob(".tmp-*")]


# --------------------------------------------------------------------------- a real run


@pytest.mark.parametrize("model, bound, extra", [
    pytest.param("bbb", 0.35, {}, id="bbb"),
    pytest.param("bbb", 0.35, {"engine": "reference"}, id="bbb-reference-engine"),
    pytest.param("plain", 0.25, {}, id="plain"),
    pytest.param("dropout", 0.35, {}, id="dropout"),
])
def test_two_epochs_on_mnist_subset(mnist_2000, tmp_path, model, bound, extra):
    config = TrainConfig(model=model, epochs=2, batch_size=32, lr=3e-3,
                         eval_samples=2, seed=0, **extra)
    run_dir = tmp_path / "run"
    result = fit(config, mnist_2000.train, mnist_2000.valid, net=MLP(hidden=(64,)),
                 run_dir=run_dir, progress=False)
    history = result.history

    assert [row["epoch"] for row in history] == [1, 2]
    for row in history:
        assert set(DOCUMENTED_KEYS) <= set(row)
        for key in COST_KEYS + ("seconds",):
            assert math.isfinite(row[key]), (key, row)
        assert row["cost"] == pytest.approx(row["complexity_cost"] + row["likelihood_cost"],
                                            rel=1e-6)
        assert row["nll_per_example"] == pytest.approx(row["likelihood_cost"] / 2000, rel=1e-6)
        assert 0 <= row["valid_error"] <= 1
        if model == "bbb":
            assert row["complexity_cost"] > 0
            assert 0 <= row["valid_error_mc"] <= 1
        else:
            assert row["complexity_cost"] == 0
            assert row["valid_error_mc"] is None
    # It learnt something: MNIST chance error is 0.9.
    assert history[-1]["valid_error"] < bound
    assert history[-1]["likelihood_cost"] < history[0]["likelihood_cost"]
    if model == "bbb":
        assert history[-1]["valid_error_mc"] < bound

    # The run folder.
    assert result.run_dir == os.fspath(run_dir)
    assert (run_dir / "checkpoints" / "best.params").is_file()
    assert (run_dir / "checkpoints" / "latest.params").is_file()
    assert no_temp_files(run_dir) == []
    stored = json.loads((run_dir / "config.json").read_text())
    assert stored["train"] == config.to_dict()
    assert stored["mlp"] == {"hidden": [64], "activation": "relu", "num_inputs": 784,
                             "num_outputs": 10, "dropout": 0.5}
    assert result.mlp == MLP(hidden=(64,))
    assert json.loads((run_dir / "history.json").read_text()) == history
    with open(run_dir / "history.csv", newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == list(history[0])
        rows = list(reader)
    assert len(rows) == len(history)
    for csv_row, row in zip(rows, history, strict=True):
        for key, value in row.items():
            if value is None:
                assert csv_row[key] == ""
            else:
                assert float(csv_row[key]) == pytest.approx(value, rel=1e-12), key

    # best.params holds the epoch with the lowest validation error, and reproduces it.
    errors = [row["valid_error"] for row in history]
    assert result.best_epoch == int(np.argmin(errors)) + 1
    net, posterior, loaded_config, meta = load_run(run_dir, "best")
    assert loaded_config.to_dict() == config.to_dict()
    assert meta["best"]["epoch"] == result.best_epoch
    Xv, yv = mnist_2000.valid
    probs = predict_proba(net, posterior, Xv, 0)
    assert error_rate(probs, yv) == errors[result.best_epoch - 1]
    assert (posterior is None) == (model != "bbb")


def test_history_complexity_cost_is_the_weighted_complexity(mnist_300):
    """With the uniform weighting (pi_i = 1/M, summing to 1 over an epoch) the epoch's
    complexity cost sum_i pi_i C_i is about C of the posterior at the end of the epoch
    (C changes by a few percent per epoch in this run)."""
    config = tiny("bbb", batch_size=32, epochs=2, eval_samples=0)
    result = fit(config, mnist_300.train, mnist_300.valid, net=SMALL, progress=False)
    prior = config.prior
    post = result.posterior
    estimates = [float(complexity_cost(post.sample(), prior, "mc").asscalar())
                 for _ in range(5)]
    assert result.history[-1]["complexity_cost"] == pytest.approx(np.mean(estimates), rel=0.1)


def test_fit_without_run_dir_or_validation(mnist_300):
    result = fit(tiny("plain", epochs=1), mnist_300.train, net=SMALL, progress=False)
    assert result.run_dir is None
    assert len(result.history) == 1
    assert "valid_error" not in result.history[0]
    assert result.best_epoch == 1
    assert not result.interrupted


# --------------------------------------------------------------------------- resuming


def test_progress_bars_only_where_watched_and_a_line_per_epoch(mnist_300, capsys,
                                                                monkeypatch):
    import io

    from bbb_gluon.training import progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    for stream, bar in ((Terminal(), True), (io.StringIO(), False)):
        monkeypatch.setattr(sys, "stderr", stream)
        assert progress.progress_mode(True) == (bar, True)
        result = fit(tiny("bbb", eval_samples=2), mnist_300.train, mnist_300.valid, net=SMALL,
                     progress=True)
        assert ("epoch 1/2" in stream.getvalue()) == bar  # tqdm's bar, on stderr
        lines = capsys.readouterr().out.splitlines()
        assert [line.split(":")[0] for line in lines] == ["epoch 1/2", "epoch 2/2"]
        for line, row in zip(lines, result.history, strict=True):
            assert (f"validation error {100 * row['valid_error']:.2f}% with the means, "
                    f"{100 * row['valid_error_mc']:.2f}% with 2 samples") in line
    assert progress.progress_mode("lines") == (False, True)
    assert progress.progress_mode(False) == (False, False)
    fit(tiny("plain", epochs=1), mnist_300.train, net=SMALL, progress=False)
    assert capsys.readouterr().out == ""
    with pytest.raises(ValueError, match="progress must be"):
        fit(tiny("plain", epochs=1), mnist_300.train, net=SMALL, progress="bar")


@pytest.mark.parametrize("model", ["bbb", "ivon", "dropout"])
def test_resume_after_an_epoch_matches_uninterrupted_run(mnist_300, tmp_path, model):
    full = fit(tiny(model), mnist_300.train, mnist_300.valid, net=SMALL, run_dir=tmp_path / "a",
               progress=False)
    first = fit(tiny(model, epochs=1), mnist_300.train, mnist_300.valid, net=SMALL,
                run_dir=tmp_path / "b", progress=False)
    assert len(first.history) == 1
    resumed = fit(tiny(model), mnist_300.train, mnist_300.valid, net=SMALL, run_dir=tmp_path / "b",
                  resume=True, progress=False)
    assert_same_history(resumed.history, full.history)
    assert_same_history(json.loads((tmp_path / "b" / "history.json").read_text()),
                        full.history)
    assert_same_params(resumed, full)


def test_a_checkpoint_of_an_earlier_format_is_refused_saying_so(mnist_300, tmp_path):
    from bbb_gluon._files import array_json, json_array

    fit(tiny("bbb", epochs=1), mnist_300.train, mnist_300.valid, net=SMALL, run_dir=tmp_path,
        progress=False)
    path = tmp_path / "checkpoints" / "latest.params"
    arrays = mx.nd.load(str(path))
    meta = array_json(arrays["__meta__"])
    meta["format"] = "bbb_gluon.checkpoint/1"
    arrays["__meta__"] = json_array(meta)
    mx.nd.save(str(path), arrays)
    before = path.read_bytes()
    with pytest.raises(CheckpointError, match="earlier bbb_gluon in bbb_gluon.checkpoint/1"):
        fit(tiny("bbb"), mnist_300.train, mnist_300.valid, net=SMALL, run_dir=tmp_path,
            resume=True, progress=False)
    assert path.read_bytes() == before  # nothing overwritten


def test_a_run_written_when_trainconfig_held_the_mlp_still_loads_and_resumes(mnist_300,
                                                                           tmp_path):
    from bbb_gluon._files import array_json, json_array

    fit(tiny("bbb", epochs=1), mnist_300.train, mnist_300.valid, net=SMALL, run_dir=tmp_path,
        progress=False)
    # as fit wrote them then: the MLP's settings inside the "train" record, no "mlp" entry
    for name in ("latest.params", "best.params"):
        path = tmp_path / "checkpoints" / name
        arrays = mx.nd.load(str(path))
        meta = array_json(arrays["__meta__"])
        meta["config"].update(meta.pop("mlp"))
        arrays["__meta__"] = json_array(meta)
        mx.nd.save(str(path), arrays)
    stored = json.loads((tmp_path / "config.json").read_text())
    stored["train"].update(stored.pop("mlp"))
    (tmp_path / "config.json").write_text(json.dumps(stored))
    net, _, config, meta = load_run(tmp_path, "latest")
    assert config == tiny("bbb", epochs=1) and meta["mlp"]["hidden"] == [32]
    assert net[0].weight.shape == (32, 784)
    with pytest.raises(CheckpointError, match="hidden is \\[32\\] there, \\[16\\] here"):
        fit(tiny("bbb"), mnist_300.train, mnist_300.valid, net=MLP(hidden=(16,)),
            run_dir=tmp_path, resume=True, progress=False)
    resumed = fit(tiny("bbb"), mnist_300.train, mnist_300.valid, net=SMALL, run_dir=tmp_path,
                  resume=True, progress=False)
    assert [row["epoch"] for row in resumed.history] == [1, 2]


@pytest.mark.parametrize("model", ["bbb", "dropout"])
@pytest.mark.parametrize("stop", [3, 5, 7], ids=["mid-epoch1", "end-epoch1", "mid-epoch2"])
def test_stop_after_batches_saves_a_checkpoint(mnist_300, tmp_path, model, stop):
    run_dir = tmp_path / "run"
    num_batches = 5  # 300 examples, batches of 64
    with pytest.raises(TrainingInterrupted) as info:
        fit(tiny(model), mnist_300.train, mnist_300.valid, net=SMALL, run_dir=run_dir,
            progress=False, options=RunOptions(stop_after_batches=stop))
    result = info.value.result
    assert result.interrupted
    assert str(run_dir) in str(info.value)
    assert len(result.history) == stop // num_batches
    assert (run_dir / "checkpoints" / "latest.params").is_file()
    if result.history:
        assert json.loads((run_dir / "history.json").read_text()) == result.history
    assert no_temp_files(run_dir) == []




def _stop_cases():
    cases = []
    for model, engine in (("bbb", "auto"), ("bbb", "reference"), ("ivon", "auto"),
                          ("ivon", "reference"), ("dropout", "auto")):
        for stop, name in ((3, "mid-epoch1"), (5, "end-epoch1"), (7, "mid-epoch2")):
            cases.append(pytest.param(model, engine, stop, id=f"{name}-{model}-{engine}"))
    return cases


@pytest.mark.parametrize("model, engine, stop", _stop_cases())
def test_resume_after_stop_after_batches_matches_uninterrupted_run(mnist_300, tmp_path,
                                                                   model, engine, stop):
    config = tiny(model, engine=engine)
    full = fit(config, mnist_300.train, mnist_300.valid, net=SMALL, progress=False)
    run_dir = tmp_path / "run"
    with pytest.raises(TrainingInterrupted):
        fit(config, mnist_300.train, mnist_300.valid, net=SMALL, run_dir=run_dir, progress=False,
            options=RunOptions(stop_after_batches=stop))
    resumed = fit(config, mnist_300.train, mnist_300.valid, net=SMALL, run_dir=run_dir,
                  resume=True, progress=False)
    assert not resumed.interrupted
    assert_same_history(resumed.history, full.history)
    assert_same_params(resumed, full)


# A training process killed with SIGKILL at a chosen point: the script wraps one internal
# function so that the kill lands exactly there (a real kill, no hook in the package).
_KILL_SCRIPT = """
import json, os, signal, sys
import bbb_gluon._kernels.fused, bbb_gluon.training.loop
from bbb_gluon.data import load_dataset
from bbb_gluon.training import MLP, TrainConfig, fit
root, run_dir, config, where = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
die = lambda: os.kill(os.getpid(), signal.SIGKILL)
calls = {"n": 0}
if where == "mid-epoch":  # during the 3rd step of epoch 2 (5 steps an epoch)
    step = bbb_gluon.core.engines.FusedBBBStep.__call__
    def killing_step(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == 8:
            die()
        return step(self, *a, **k)
    bbb_gluon.core.engines.FusedBBBStep.__call__ = killing_step
elif where == "between-epochs":  # once epoch 2's checkpoint and history are written
    write = bbb_gluon.training.loop.write_history
    def killing_write(run_dir, history):
        write(run_dir, history)
        if len(history) == 2:
            die()
    bbb_gluon.training.loop.write_history = killing_write
elif where == "during-checkpoint":  # epoch 2's latest.params written but not yet renamed
    replace = os.replace
    def killing_replace(src, dst):
        if str(dst).endswith("latest.params"):
            calls["n"] += 1
            if calls["n"] == 2:
                die()
        replace(src, dst)
    os.replace = killing_replace
splits = load_dataset("mnist", root=root, subset=300, num_valid=300)
fit(TrainConfig(**config), splits.train, splits.valid, net=MLP(hidden=(32,)), run_dir=run_dir,
    progress=False)
"""


def _this_threads_env():
    """The environment with this process's engine-thread count, so that a child sums in
    the same order (a count can only go down, so this process's may be lower than a
    fresh one's)."""
    env = dict(os.environ)
    count = threads.current()
    if count is not None:
        env.update(BBB_GLUON_TRAIN_THREADS=str(count[0]), BBB_GLUON_PREDICT_THREADS=str(count[0]))
    return env


def _trainer_states(run_dir):
    """The optimiser state stored in a run's latest checkpoint, as NumPy arrays."""
    import pickle

    from bbb_gluon.training.checkpoint import read_checkpoint

    _, meta = read_checkpoint(Path(run_dir) / "checkpoints" / "latest.params")
    states, _ = pickle.loads(meta["trainer_states"])
    return {k: [a.asnumpy() for a in (v if isinstance(v, tuple | list) else [v])]
            for k, v in states.items()}


@pytest.mark.parametrize("where, saved_epoch", [("mid-epoch", 1), ("between-epochs", 2),
                                                ("during-checkpoint", 1)])
def test_sigkill_then_resume_matches_uninterrupted_run(data_root, mnist_300, tmp_path,
                                                       where, saved_epoch):
    config = tiny("bbb", epochs=4, engine="fused")
    full_dir, run_dir = tmp_path / "full", tmp_path / "run"
    full = fit(config, mnist_300.train, mnist_300.valid, net=SMALL, run_dir=full_dir,
               progress=False)
    proc = subprocess.run([sys.executable, "-c", _KILL_SCRIPT, str(data_root), str(run_dir),
                           json.dumps(config.to_dict()), where], capture_output=True,
                          text=True, timeout=300, env=_this_threads_env())
    assert proc.returncode == -signal.SIGKILL, proc.stderr  # killed, not finished

    _, _, stored, meta = load_run(run_dir, "latest")
    assert stored.to_dict() == config.to_dict()
    assert (meta["epoch"], meta["batch"]) == (saved_epoch, 0)
    history = json.loads((run_dir / "history.json").read_text())
    assert [row["epoch"] for row in history] == list(range(1, saved_epoch + 1))

    resumed = fit(config, mnist_300.train, mnist_300.valid, net=SMALL, run_dir=run_dir,
                  resume=True, progress=False)
    assert_same_history(resumed.history, full.history)
    assert_same_params(resumed, full)
    resumed_states, full_states = _trainer_states(run_dir), _trainer_states(full_dir)
    assert resumed_states.keys() == full_states.keys() and len(full_states) == 8
    for key, arrays in full_states.items():
        for a, b in zip(resumed_states[key], arrays, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-8)


# --------------------------------------------------------------------------- bad run folders


@pytest.fixture
def finished_run(mnist_300, tmp_path):
    run_dir = tmp_path / "run"
    fit(tiny("plain", epochs=1), mnist_300.train, mnist_300.valid, net=SMALL, run_dir=run_dir,
        progress=False)
    return run_dir


def _corrupt_random(path):
    path.write_bytes(np.random.default_rng(0).bytes(4096))


def _corrupt_truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _corrupt_empty(path):
    path.write_bytes(b"")


def _corrupt_other_params(path):
    net = build_mlp((32,))
    net.initialize()
    net.save_parameters(str(path))


CORRUPTIONS = pytest.mark.parametrize(
    "corrupt", [_corrupt_random, _corrupt_truncate, _corrupt_empty, _corrupt_other_params],
    ids=["random-bytes", "truncated", "empty", "plain-params-file"])


@CORRUPTIONS
def test_a_corrupt_latest_checkpoint_resumes_from_the_best_one(mnist_300, tmp_path, capfd,
                                                               corrupt):
    """The best checkpoint holds the optimiser states: a run whose latest one is corrupt
    continues from it exactly (here it is an epoch older), says so in one line, and keeps
    the corrupt file."""
    full = fit(tiny("bbb", epochs=3), mnist_300.train, net=SMALL, run_dir=tmp_path / "full",
               progress=False)
    run_dir = tmp_path / "run"
    fit(tiny("bbb", epochs=1), mnist_300.train, net=SMALL, run_dir=run_dir, progress=False)
    best = run_dir / "checkpoints" / "best.params"
    after_one = best.read_bytes()
    fit(tiny("bbb", epochs=2), mnist_300.train, net=SMALL, run_dir=run_dir, resume=True,
        progress=False)
    best.write_bytes(after_one)  # the best epoch was the first (no validation split here)
    latest = run_dir / "checkpoints" / "latest.params"
    corrupt(latest)
    broken = latest.read_bytes()
    capfd.readouterr()
    resumed = fit(tiny("bbb", epochs=3), mnist_300.train, net=SMALL, run_dir=run_dir, resume=True,
                  progress=False)
    notice = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    assert len(notice) == 1, notice
    assert str(latest) in notice[0] and "corrupt" in notice[0]
    assert f"resuming from {best}, after epoch 1" in notice[0]
    assert (run_dir / "checkpoints" / "latest.params.corrupt").read_bytes() == broken
    assert_same_history(resumed.history, full.history)
    assert_same_params(resumed, full)


def _without_optimiser_states(path):
    """Rewrite a checkpoint as best.params was written before it held the optimiser
    states."""
    arrays = mx.nd.load(str(path))
    mx.nd.save(str(path), {k: v for k, v in arrays.items() if not k.startswith("__trainer")})


@CORRUPTIONS
def test_a_corrupt_latest_checkpoint_beside_an_old_best_one_is_refused_with_the_command(
        mnist_300, finished_run, capfd, corrupt):
    """A best checkpoint without optimiser states would not continue the run exactly: fit
    refuses, naming the command that continues anyway, and changes nothing; that command
    (resume="best") continues from it with a fresh optimiser."""
    latest = finished_run / "checkpoints" / "latest.params"
    corrupt(latest)
    _without_optimiser_states(finished_run / "checkpoints" / "best.params")
    before = snapshot(finished_run)
    with pytest.raises(CheckpointError, match=re.escape(str(latest))) as info:
        fit(tiny("plain", epochs=2), mnist_300.train, mnist_300.valid, net=SMALL,
            run_dir=finished_run, resume=True, progress=False)
    assert f"bbb-gluon train --out {finished_run} --resume best" in str(info.value)
    assert 'resume="best"' in str(info.value)
    with pytest.raises(CheckpointError, match=re.escape(str(latest))):
        load_run(finished_run, "latest")
    assert snapshot(finished_run) == before  # the corrupt file is kept, nothing written
    capfd.readouterr()
    resumed = fit(tiny("plain", epochs=2), mnist_300.train, mnist_300.valid, net=SMALL,
                  run_dir=finished_run, resume="best", progress=False)
    assert [row["epoch"] for row in resumed.history] == [1, 2]
    err = capfd.readouterr().err
    assert "after epoch 1; the optimiser starts afresh" in err
    assert (finished_run / "checkpoints" / "latest.params.corrupt").read_bytes() == \
        before["checkpoints/latest.params"][0]


def test_resume_from_the_best_checkpoint_only_when_the_latest_is_lost(mnist_300,
                                                                      finished_run):
    before = snapshot(finished_run)
    with pytest.raises(CheckpointError, match="intact .after epoch 1.: continue it with "
                                              "--resume"):
        fit(tiny("plain", epochs=2), mnist_300.train, mnist_300.valid, net=SMALL,
            run_dir=finished_run, resume="best", progress=False)
    with pytest.raises(ValueError, match="resume must be"):
        fit(tiny("plain", epochs=2), mnist_300.train, mnist_300.valid, net=SMALL,
            run_dir=finished_run, resume="latest", progress=False)
    assert snapshot(finished_run) == before


def test_a_run_whose_checkpoints_are_both_corrupt_is_refused(mnist_300, finished_run):
    for name in ("latest.params", "best.params"):
        _corrupt_random(finished_run / "checkpoints" / name)
    before = snapshot(finished_run)
    for resume in (True, "best"):
        with pytest.raises(CheckpointError, match="cannot continue"):
            fit(tiny("plain", epochs=2), mnist_300.train, mnist_300.valid, net=SMALL,
                run_dir=finished_run, resume=resume, progress=False)
    assert snapshot(finished_run) == before


@pytest.mark.parametrize("change, mlp, field", [
    ({}, {"hidden": (16,)}, "hidden"),
    ({}, {"hidden": (32, 32)}, "hidden"),
    ({"model": "bbb"}, {}, "model"),
    ({}, {"activation": "tanh"}, "activation"),
])
def test_resume_with_another_architecture(mnist_300, finished_run, change, mlp, field):
    before = snapshot(finished_run)
    with pytest.raises(CheckpointError, match=field):
        fit(tiny(**{"model": "plain", "epochs": 2, **change}), mnist_300.train, mnist_300.valid,
            net=dataclasses.replace(SMALL, **mlp), run_dir=finished_run, resume=True,
            progress=False)
    with pytest.raises(CheckpointError, match="package MLP, not of a network of your own"):
        fit(tiny("plain", epochs=2), images(mnist_300.train), net=small_cnn(),
            run_dir=finished_run, resume=True, progress=False)
    assert snapshot(finished_run) == before


def test_fit_into_an_existing_run_without_resume(mnist_300, finished_run):
    before = snapshot(finished_run)
    assert "checkpoints/latest.params" in before
    for config, net in ((tiny("plain", epochs=1), SMALL), (tiny("bbb"), MLP(hidden=(8,)))):
        with pytest.raises(CheckpointError, match="already holds a run"):
            fit(config, mnist_300.train, mnist_300.valid, net=net, run_dir=finished_run,
                progress=False)
    assert snapshot(finished_run) == before


def test_resume_needs_a_run(mnist_300, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CheckpointError, match="not a run folder"):
        fit(tiny("plain"), mnist_300.train, net=SMALL, run_dir=empty, resume=True, progress=False)
    assert list(empty.iterdir()) == []
    with pytest.raises(CheckpointError):
        fit(tiny("plain"), mnist_300.train, net=SMALL, run_dir=tmp_path / "missing", resume=True,
            progress=False)
    assert not (tmp_path / "missing").exists()
    with pytest.raises(ValueError, match="run_dir"):
        fit(tiny("plain"), mnist_300.train, net=SMALL, resume=True, progress=False)


def test_load_run_on_something_that_is_not_a_run(finished_run, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CheckpointError, match="not a run folder"):
        load_run(empty)
    with pytest.raises(CheckpointError):
        load_run(tmp_path / "missing")
    (empty / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match="no best checkpoint"):
        load_run(empty, "best")
    with pytest.raises(ValueError, match="which"):
        load_run(finished_run, "newest")
    net, posterior, config, meta = load_run(finished_run, "best")
    assert posterior is None and config.model == "plain" and meta["best"]["epoch"] == 1


# --------------------------------------------------------------------------- two devices


def test_plain_two_cpu_contexts_match_one(mnist_300):
    # 300 examples in batches of 45: uneven device slices, last batch of 30.
    config = tiny("plain", epochs=1, batch_size=45)
    one = fit(config, mnist_300.train, net=dataclasses.replace(SMALL, ctx=mx.cpu(0)),
              progress=False)
    two = fit(config, mnist_300.train, net=dataclasses.replace(SMALL, ctx=[mx.cpu(0), mx.cpu(1)]),
              progress=False)
    params_one = one.net._collect_params_with_prefix()
    params_two = two.net._collect_params_with_prefix()
    assert list(params_one) == list(params_two) == ["0.weight", "0.bias", "1.weight",
                                                    "1.bias"]
    for key, p1 in params_one.items():
        p2 = params_two[key]
        w1 = p1.data(mx.cpu(0)).asnumpy()
        np.testing.assert_allclose(p2.data(mx.cpu(0)).asnumpy(), w1, rtol=1e-4, atol=1e-6)
        np.testing.assert_array_equal(p2.data(mx.cpu(1)).asnumpy(),
                                      p2.data(mx.cpu(0)).asnumpy())
    assert two.history[0]["cost"] == pytest.approx(one.history[0]["cost"], rel=1e-5)
    # The runs did train: the weights left their (seeded Xavier) starting point.
    initial = build_mlp((32,))
    mx.random.seed(config.seed)
    initial.initialize(mx.init.Xavier())
    start = initial._collect_params_with_prefix()["0.weight"].data().asnumpy()
    assert not np.allclose(params_one["0.weight"].data(mx.cpu(0)).asnumpy(), start)


def _bbb_setup(ctxs, num_batches=4):
    net = build_mlp((16,), num_outputs=10)
    mx.random.seed(0)
    net.initialize(mx.init.Xavier(), ctx=ctxs)
    posterior = Posterior(net, seed=0)
    prior = make_prior(kind="scale_mixture", pi=0.5, sigma1=1.0, sigma2=math.exp(-6))
    loss_fn = BBBLoss(prior, num_batches=num_batches)
    kv = "device" if len(ctxs) > 1 else None
    trainer = gluon.Trainer(posterior.params, "adam", {"learning_rate": 1e-2}, kvstore=kv,
                            update_on_kvstore=False if kv else None)
    return net, posterior, loss_fn, trainer


def _reference(net, posterior, loss_fn, trainer):
    return ReferenceBBBStep(forward_with(net, posterior, fused=False), posterior, trainer,
                            loss_fn)


def test_bbb_step_two_devices_with_the_same_noise_equal_one_device(mnist_300):
    one_ctx, two_ctx = [mx.cpu(0)], [mx.cpu(0), mx.cpu(1)]
    one, two = _bbb_setup(one_ctx), _bbb_setup(two_ctx)
    start = [a.asnumpy() for a in one[1].mu()]
    for a, b in zip(one[1].mu() + one[1].rho(), two[1].mu(mx.cpu(1)) + two[1].rho(mx.cpu(1)),
                    strict=True):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())
    X, y = mnist_300.train
    rng = np.random.default_rng(1)
    for step in range(3):
        xb = mx.nd.array(X[step * 33:(step + 1) * 33])  # 33: uneven slices (17 + 16)
        yb = mx.nd.array(y[step * 33:(step + 1) * 33])
        e = mx.nd.array(rng.standard_normal(one[1].num_weights).astype(np.float32))
        out_one = _reference(*one)(xb, yb, step, eps=[[e]])
        out_two = _reference(*two)(xb, yb, step, eps=[[e], [e]])
        assert len(out_one) == len(out_two) == 2
        for v1, v2 in zip(out_one, out_two, strict=True):
            assert (v1 is None) == (v2 is None)
            if v1 is not None:
                assert v2.shape == (1,) and v2.context == mx.cpu(0)
                assert float(v2.asscalar()) == pytest.approx(float(v1.asscalar()), rel=1e-5)
        for ctx in two_ctx:
            for a, b in zip(one[1].mu() + one[1].rho(), two[1].mu(ctx) + two[1].rho(ctx),
                            strict=True):
                np.testing.assert_allclose(b.asnumpy(), a.asnumpy(), rtol=1e-4, atol=1e-6)
    assert not np.allclose(one[1].mu()[0].asnumpy(), start[0])  # the steps did move mu


def test_bbb_fit_on_two_cpu_contexts_keeps_replicas_in_sync(mnist_300):
    result = fit(tiny("bbb", epochs=3, lr=0.01), mnist_300.train, mnist_300.valid,
                 net=dataclasses.replace(SMALL, ctx=[mx.cpu(0), mx.cpu(1)]), progress=False)
    post = result.posterior
    for a, b in zip(post.mu(mx.cpu(0)) + post.rho(mx.cpu(0)),
                    post.mu(mx.cpu(1)) + post.rho(mx.cpu(1)), strict=True):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())
    row = result.history[-1]
    # Three epochs on 300 images: chance is 90%, and the run must have learnt something.
    assert math.isfinite(row["cost"]) and row["valid_error"] < 0.5


# --------------------------------------------------------------------------- bad input


BAD_SETTINGS = [
    ({"model": "bayes"}, "unknown model"),
    ({"epochs": -1}, "epochs must be an integer >= 1"),
    ({"epochs": 0}, "epochs must be an integer >= 1"),
    ({"epochs": 2.5}, "epochs"),
    ({"lr": 0.0}, "lr must be a finite number > 0"),
    ({"lr": -1e-3}, "lr must be a finite number > 0"),
    ({"lr": float("nan")}, "lr must be a finite number > 0"),
    ({"lr": float("inf")}, "lr must be a finite number > 0"),
    ({"batch_size": 0}, "batch_size must be an integer >= 1"),
    ({"samples": 0}, "samples"),
    ({"eval_samples": -1}, "eval_samples"),
    ({"optimizer": "rmsprop"}, "optimizer"),
    ({"weighting": "geometric"}, "weighting"),
    ({"weighting": -0.5}, "weighting"),
    ({"prior": {"kind": "scale_mixture", "pi": 0.5, "sigma1": 0.1, "sigma2": 0.1}},
     "sigma1 must be larger than sigma2"),
    ({"prior": {"kind": "scale_mixture", "pi": 0.5, "sigma1": 0.01, "sigma2": 1.0}},
     "sigma1 must be larger than sigma2"),
    ({"prior": {"kind": "scale_mixture", "pi": 1.5, "sigma1": 1.0, "sigma2": 0.1}}, "pi"),
    ({"prior": {"kind": "gaussian", "sigma": 0.0}}, "sigma"),
    ({"prior": {"kind": "cauchy"}}, "unknown prior"),
    ({"complexity": "kl"}, "has no closed-form KL"),
]


@pytest.mark.parametrize("change, message", BAD_SETTINGS,
                         ids=[f"{k}={v!r}" for (c, _) in BAD_SETTINGS for k, v in c.items()])
def test_bad_settings_raise_value_error_before_any_work(mnist_300, tmp_path, change, message):
    with pytest.raises(ValueError, match=message):
        tiny(**{"model": "bbb", **change})
    # A configuration is frozen: a bad setting cannot be put into a checked one, and a
    # changed copy is checked again.
    config = tiny("bbb")
    for key, value in change.items():
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(config, key, value)
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(config, **change)


def test_gaussian_prior_with_kl_is_accepted():
    config = tiny("bbb", complexity="kl", prior={"kind": "gaussian", "sigma": 1.0})
    assert config.complexity == "kl"


def _with_nan(X, y):
    X = X.copy()
    X[3, 100] = np.nan
    return X, y


def _with_inf(X, y):
    X = X.copy()
    X[0, 0] = np.inf
    return X, y


def _label_too_large(X, y):
    y = y.copy()
    y[5] = 10
    return X, y


def _label_negative(X, y):
    y = y.copy()
    y[5] = -1
    return X, y


def _label_fractional(X, y):
    return X, y.astype(np.float32) + 0.5


def _wrong_width(X, y):
    return X[:, :700], y


def _images_not_flat(X, y):
    return X.reshape(-1, 28, 28), y


def _label_count(X, y):
    return X, y[:-1]


def _label_nan(X, y):
    y = y.astype(np.float32)
    y[5] = np.nan
    return X, y


def _empty(X, y):
    return X[:0], y[:0]


def _as_ndarrays(X, y):  # accepted, as BBBStep accepts them: spoiled after the conversion
    X = X.copy()
    X[0, 0] = np.nan
    return mx.nd.array(X), mx.nd.array(y)


BAD_DATA = [(_with_nan, "NaN"), (_with_inf, "NaN or infinity"),
            (_label_too_large, r"must lie in 0\.\.9 for 10 classes, got labels from 0 to 10"),
            (_label_negative, r"must lie in 0\.\.9 for 10 classes, got labels from -1 to"),
            (_label_fractional, r"whole numbers \(class indices 0\.\.9\), got \d\.5"),
            (_label_nan, "labels contain NaN or infinity"),
            (_wrong_width, r"shape \(N, 784\)"), (_images_not_flat, r"shape \(N, 784\)"),
            (_label_count, "labels must have shape"), (_empty, "hold no examples"),
            (_as_ndarrays, "inputs contain NaN or infinity")]


@pytest.mark.parametrize("split", ["training", "validation"])
@pytest.mark.parametrize("spoil, message", BAD_DATA, ids=[f.__name__[1:] for f, _ in BAD_DATA])
def test_bad_data_raises_value_error_before_any_work(mnist_300, tmp_path, split, spoil,
                                                     message):
    train, valid = mnist_300.train, mnist_300.valid
    if spoil is _empty and split == "validation":
        valid = spoil(*valid)  # no validation examples: trained without validation
        assert "valid_error" not in fit(tiny("bbb", epochs=1), train, valid, net=SMALL,
                                        progress=False).history[0]
        return
    if split == "training":
        train = spoil(*train)
    else:
        valid = spoil(*valid)
    run_dir = tmp_path / "run"
    with pytest.raises(ValueError, match=message) as info:
        fit(tiny("bbb"), train, valid, net=SMALL, run_dir=run_dir, progress=False)
    assert split in str(info.value)
    assert not run_dir.exists()


def test_fit_needs_a_train_config(mnist_300):
    with pytest.raises(TypeError, match="TrainConfig"):
        fit(tiny("plain").to_dict(), mnist_300.train, net=SMALL, progress=False)


def test_config_round_trips_and_rejects_unknown_keys():
    config = tiny("bbb", weighting=0.25, restore_best=True)
    assert TrainConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(ValueError, match="unknown configuration keys"):
        TrainConfig.from_dict({**config.to_dict(), "learning_rate": 0.1})
    mlp = MLP(hidden=[20, 10], activation="tanh", num_inputs=5, num_outputs=1, dropout=0.2)
    assert mlp.hidden == (20, 10) and "hidden" not in config.to_dict()
    assert MLP.from_dict(json.loads(json.dumps(mlp.to_dict()))) == mlp
    # a record written when TrainConfig held the MLP's settings still reads
    old = {**config.to_dict(), **mlp.to_dict()}
    assert TrainConfig.from_dict(old) == config


@pytest.mark.parametrize("bad, match", [
    (dict(hidden=()), "hidden must be a non-empty list"),
    (dict(hidden=(8, 0)), "hidden must be a non-empty list"),
    (dict(activation="swish"), "unknown activation 'swish'"),
    (dict(num_inputs=0), "num_inputs"),
    (dict(dropout=1.0), r"dropout must lie in \[0, 1\)"),
    (dict(hidden=(50_000,), num_inputs=50_000), "makes a weight array of 2,500,000,000"),
])
def test_a_bad_mlp_is_refused_when_made(bad, match):
    with pytest.raises(ValueError, match=match):
        MLP(**bad)


def test_old_keywords_are_refused_naming_the_new_form():
    with pytest.raises(TypeError, match=r"TrainConfig\(\) takes no hidden, dropout: .*"
                                        r"net=bbb.MLP\(hidden=\(8,\), dropout=0.1\)"):
        TrainConfig(hidden=(8,), dropout=0.1)
    for old, new in (("ctx", r"the network's: net=bbb.MLP\(..., ctx=...\)"),
                     ("posterior", r"net=bbb.Network\(net, posterior=posterior\)"),
                     ("loss", r"net=bbb.Network\(net, loss=loss\)"),
                     ("test", r"options=bbb.RunOptions\(test=\(X, y\)\)"),
                     ("kvstore", r"options=bbb.RunOptions\(kvstore=...\)"),
                     ("extra_config", r"options=bbb.RunOptions\(record=\{...\}\)"),
                     ("stop_after_batches",
                      r"options=bbb.RunOptions\(stop_after_batches=N\)"),
                     ("restore_best", r"TrainConfig\(restore_best=True\)")):
        with pytest.raises(TypeError, match=rf"fit\(\) takes no {old}= any more: {old}= is {new}"):
            fit(tiny(), (None, None), **{old: None})
    with pytest.raises(TypeError, match="net must be a bbb_gluon.MLP, a gluon Block or"):
        fit(tiny(), (np.zeros((4, 784)), np.zeros(4)), net="400,400", progress=False)
    with pytest.raises(TypeError, match="options must be a bbb_gluon.RunOptions"):
        fit(tiny(), (np.zeros((4, 784)), np.zeros(4)), options={"test": None})
    with pytest.raises(ValueError, match=r"record may not hold \['train'\]"):
        RunOptions(record={"train": {}})


def test_the_likelihood_must_suit_the_mlps_outputs(mnist_300):
    with pytest.raises(ValueError, match=r"bernoulli likelihood needs num_outputs.*"
                                         r"MLP\(num_outputs=10\)"):
        fit(tiny(likelihood="bernoulli"), mnist_300.train, net=SMALL, progress=False)


# --------------------------------------------------------------------------- baselines, options


def test_dropout_baseline_trains_and_differs_from_plain(mnist_300):
    settings = dict(epochs=2, batch_size=32, lr=3e-3)
    plain = fit(tiny("plain", **settings), mnist_300.train, mnist_300.valid, net=SMALL,
                progress=False)
    dropout = fit(tiny("dropout", **settings), mnist_300.train, mnist_300.valid, net=SMALL,
                  progress=False)
    again = fit(tiny("dropout", **settings), mnist_300.train, mnist_300.valid, net=SMALL,
                progress=False)
    assert any(isinstance(block, nn.Dropout) for block in dropout.net._children.values())
    assert not any(isinstance(block, nn.Dropout) for block in plain.net._children.values())
    assert dropout.posterior is None
    # Same seed, data and initial weights: only the masks make the difference.
    assert dropout.history[0]["cost"] != pytest.approx(plain.history[0]["cost"], rel=1e-4)
    assert not all(np.allclose(a, b) for a, b in zip(net_arrays(dropout), net_arrays(plain),
                                                     strict=True))
    # It learns, and its masks are a function of the seed (what resuming relies on).
    assert dropout.history[-1]["likelihood_cost"] < dropout.history[0]["likelihood_cost"]
    assert dropout.history[-1]["valid_error"] < 0.6
    assert_same_history(again.history, dropout.history)


def test_blundell_weighting_and_two_samples_run(mnist_300):
    runs = {}
    for name, kw in [("uniform", {}), ("blundell", {"weighting": "blundell"}),
                     ("samples2", {"samples": 2}), ("zero", {"weighting": 0.0}),
                     ("kl", {"complexity": "kl", "prior": {"kind": "gaussian", "sigma": 1.0}})]:
        result = fit(tiny("bbb", epochs=1, batch_size=32, **kw), mnist_300.train, mnist_300.valid,
                     net=SMALL, progress=False)
        assert len(result.history) == 1
        row = result.history[0]
        for key in COST_KEYS:
            assert math.isfinite(row[key]), (name, key, row)
        assert 0 <= row["valid_error"] <= 1 and 0 <= row["valid_error_mc"] <= 1
        runs[name] = row
    for name in ("blundell", "samples2", "kl"):
        assert runs[name]["complexity_cost"] > 0
        assert runs[name]["cost"] != runs["uniform"]["cost"], name
    # A zero complexity weight leaves only the likelihood.
    assert runs["zero"]["complexity_cost"] == 0
    assert runs["zero"]["cost"] == runs["zero"]["likelihood_cost"]


@pytest.mark.parametrize("model", ["plain", "bbb"])
def test_restore_best_ends_with_the_best_validation_epoch(data_root, model):
    # A learning rate high enough that the validation error goes up and down.
    splits = load_dataset("mnist", subset=1500)
    config = TrainConfig(model=model, epochs=8, lr=0.03, batch_size=32, eval_samples=0,
                         seed=0, restore_best=True)
    result = fit(config, splits.train, splits.valid, net=SMALL, progress=False)
    errors = [row["valid_error"] for row in result.history]
    assert result.best_epoch == int(np.argmin(errors)) + 1
    got = error_rate(predict_proba(result.net, result.posterior, splits.valid[0]),
                     splits.valid[1])
    assert got == pytest.approx(min(errors))
    if result.best_epoch != len(errors):  # the test only bites when best is not last
        assert got != pytest.approx(errors[-1])


def test_run_files_get_ordinary_permissions(mnist_300, tmp_path):
    # Files are written to a temporary name and renamed; mkstemp would leave them 0600.
    fit(tiny("plain"), mnist_300.train, mnist_300.valid, net=SMALL, run_dir=tmp_path / "run",
        progress=False)
    umask = os.umask(0)
    os.umask(umask)
    for name in ("config.json", "history.csv", "history.json", "checkpoints/latest.params",
                 "checkpoints/best.params"):
        mode = (tmp_path / "run" / name).stat().st_mode & 0o777
        assert mode == 0o666 & ~umask, (name, oct(mode))


# --------------------------------------------------------------------------- the paper's recipe


def test_lr_at_follows_the_step_decay():
    config = tiny("bbb", lr=0.5, lr_decay_epochs=(300, 450), lr_decay_factor=0.1)
    assert [config.lr_at(e) for e in (0, 299, 300, 449, 450, 599)] == pytest.approx(
        [0.5, 0.5, 0.05, 0.05, 0.005, 0.005])
    assert tiny("bbb", lr=0.5).lr_at(10_000) == 0.5


@pytest.mark.parametrize("change, message", [
    ({"loss_reduction": "batch"}, "loss_reduction"),
    ({"lr_decay_epochs": (0,)}, "lr_decay_epochs"),
    ({"lr_decay_epochs": (300, 200)}, "lr_decay_epochs"),
    ({"lr_decay_epochs": (2.5,)}, "lr_decay_epochs"),
    ({"lr_decay_factor": 0.0}, "lr_decay_factor"),
    ({"rho_init": (-3.0, -3.5)}, "rho_init"),
    ({"rho_init": (-3.0, float("nan"))}, "rho_init"),
    ({"rho_init": (-3.0, -2.0, -1.0)}, "rho_init"),
    ({"mu_init": "laplace"}, "mu_init"),
    ({"rho_lr_mult": 0.0}, "rho_lr_mult"),
    ({"rho_lr_mult": float("inf")}, "rho_lr_mult"),
])
def test_bad_recipe_settings(change, message):
    with pytest.raises(ValueError, match=message):
        tiny("bbb", **change)


@pytest.mark.parametrize("model, engine", [("bbb", "auto"), ("bbb", "reference"),
                                           ("plain", "auto")])
def test_sum_reduction_is_the_mean_reduction_at_batch_size_times_the_rate(mnist_300, model,
                                                                          engine):
    # 300 images in batches of 60: every batch is full, so "sum" at lr is "mean" at 60 lr.
    common = dict(optimizer="sgd", batch_size=60, engine=engine, eval_samples=0)
    summed = fit(tiny(model, loss_reduction="sum", lr=1e-3, **common), mnist_300.train, net=SMALL,
                 progress=False)
    mean = fit(tiny(model, loss_reduction="mean", lr=0.06, **common), mnist_300.train, net=SMALL,
               progress=False)
    other = fit(tiny(model, loss_reduction="mean", lr=1e-3, **common), mnist_300.train, net=SMALL,
                progress=False)
    assert_same_params(summed, mean, rtol=1e-4, atol=1e-6)
    with pytest.raises(AssertionError):
        assert_same_params(summed, other, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("engine", ["auto", "reference"])
def test_lr_decay_takes_effect_at_the_given_epoch(mnist_300, engine):
    # A decay by 1e-20 after epoch 1 freezes the network: two epochs end where one did.
    common = dict(optimizer="sgd", lr=0.05, engine=engine, eval_samples=0)
    one = fit(tiny("bbb", epochs=1, **common), mnist_300.train, net=SMALL, progress=False)
    frozen = fit(tiny("bbb", epochs=2, lr_decay_epochs=(1,), lr_decay_factor=1e-20,
                      **common),
                 mnist_300.train, net=SMALL, progress=False)
    moving = fit(tiny("bbb", epochs=2, **common), mnist_300.train, net=SMALL, progress=False)
    assert_same_params(frozen, one, rtol=1e-6, atol=1e-7)
    with pytest.raises(AssertionError):
        assert_same_params(moving, one, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_resume_across_a_decay_matches_uninterrupted_run(mnist_300, tmp_path, optimizer):
    config = tiny("bbb", epochs=3, optimizer=optimizer, lr=0.02, lr_decay_epochs=(1, 2),
                  lr_decay_factor=0.3)
    full = fit(config, mnist_300.train, mnist_300.valid, net=SMALL, progress=False)
    run_dir = tmp_path / "run"
    with pytest.raises(TrainingInterrupted):
        fit(config, mnist_300.train, mnist_300.valid, net=SMALL, run_dir=run_dir, progress=False,
            options=RunOptions(stop_after_batches=7))  # inside epoch 2, after the first decay
    resumed = fit(config, mnist_300.train, mnist_300.valid, net=SMALL, run_dir=run_dir,
                  resume=True, progress=False)
    assert_same_history(resumed.history, full.history)
    assert_same_params(resumed, full)


@pytest.mark.parametrize("engine", ["auto", "reference"])
def test_rho_lr_mult_scales_the_step_of_rho_only(mnist_300, engine):
    # One SGD step (one batch of 300): the same noise and gradients in all three runs, so
    # rho moves 4x as far with rho_lr_mult=4 and mu exactly as far.
    common = dict(optimizer="sgd", batch_size=300, epochs=1, engine=engine, eval_samples=0)
    start = fit(tiny("bbb", lr=1e-30, **common), mnist_300.train, net=SMALL, progress=False)
    one = fit(tiny("bbb", lr=0.05, **common), mnist_300.train, net=SMALL, progress=False)
    four = fit(tiny("bbb", lr=0.05, rho_lr_mult=4.0, **common), mnist_300.train, net=SMALL,
               progress=False)
    p = start.posterior
    for a, b, c in zip(p.mu(), one.posterior.mu(), four.posterior.mu(), strict=True):
        np.testing.assert_allclose(c.asnumpy(), b.asnumpy(), rtol=1e-6, atol=1e-8)
        assert np.abs(b.asnumpy() - a.asnumpy()).max() > 1e-5
    for a, b, c in zip(p.rho(), one.posterior.rho(), four.posterior.rho(), strict=True):
        step_one, step_four = b.asnumpy() - a.asnumpy(), c.asnumpy() - a.asnumpy()
        assert np.abs(step_one).max() > 1e-6
        np.testing.assert_allclose(step_four, 4 * step_one, rtol=1e-3, atol=1e-6)


def test_uniform_starts_for_mu_and_rho(mnist_300):
    result = fit(tiny("bbb", epochs=1, mu_init="uniform", mu_scale=0.03,
                      rho_init=(-3.5, -3.0), lr=1e-12, optimizer="sgd", eval_samples=0),
                 mnist_300.train, net=SMALL, progress=False)
    mu = np.concatenate([m.asnumpy().ravel() for m in result.posterior.mu()])
    rho = np.concatenate([r.asnumpy().ravel() for r in result.posterior.rho()])
    assert -0.03 <= mu.min() < -0.029 and 0.029 < mu.max() <= 0.03
    assert -3.5 <= rho.min() < -3.49 and -3.01 < rho.max() <= -3.0
    assert np.std(rho) == pytest.approx(0.5 / math.sqrt(12), rel=0.05)


def test_test_monitor_records_the_test_error_of_every_epoch(mnist_300):
    Xt, yt = mnist_300.valid
    result = fit(tiny("bbb", epochs=2, eval_samples=3), mnist_300.train, net=SMALL, progress=False,
                 options=RunOptions(test=(Xt, yt)))
    for row in result.history:
        assert "valid_error" not in row
        assert 0 <= row["test_error"] <= 1 and 0 <= row["test_error_mc"] <= 1
    last = result.history[-1]["test_error"]
    assert last == error_rate(predict_proba(result.net, result.posterior, Xt, 0), yt)
    assert result.history[0]["test_error"] != last  # it is measured, not copied


# --------------------------------------------------------------------------- divergence


@pytest.mark.parametrize("model, engine", [("bbb", "auto"), ("bbb", "reference"),
                                           ("plain", "auto")])
def test_divergence_stops_training_and_keeps_the_last_good_epoch(mnist_300, tmp_path,
                                                                 model, engine):
    # Epoch 1 trains normally; a decay *factor* of 1e12 then blows epoch 2 up.
    config = tiny(model, epochs=3, optimizer="sgd", lr=0.05, lr_decay_epochs=(1,),
                  lr_decay_factor=1e12, engine=engine)
    run_dir = tmp_path / "run"
    with pytest.raises(TrainingDiverged) as info:
        fit(config, mnist_300.train, mnist_300.valid, net=SMALL, run_dir=run_dir, progress=False)
    assert info.value.epoch == 2 and 1 <= info.value.batch <= 5
    assert f"epoch 2, batch {info.value.batch}" in str(info.value)
    history = json.loads((run_dir / "history.json").read_text())  # valid JSON, no NaN
    assert [row["epoch"] for row in history] == [1]
    assert all(math.isfinite(v) for row in history for v in row.values()
               if isinstance(v, float))
    net, posterior, _, meta = load_run(run_dir, "latest")
    assert meta["epoch"] == 1
    arrays = posterior.mu() + posterior.rho() if posterior else \
        [p.data() for p in net.collect_params().values()]
    assert all(np.isfinite(a.asnumpy()).all() for a in arrays)
    assert no_temp_files(run_dir) == []


def test_divergence_in_the_first_epoch_writes_no_checkpoint(mnist_300, tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(TrainingDiverged, match="no epoch had finished") as info:
        fit(tiny("bbb", optimizer="sgd", lr=1e9), mnist_300.train, mnist_300.valid, net=SMALL,
            run_dir=run_dir, progress=False)
    assert info.value.epoch == 1
    assert not (run_dir / "checkpoints" / "latest.params").exists()
    assert not (run_dir / "history.json").exists()


def test_a_non_finite_parameter_is_named(mnist_300):
    from bbb_gluon.training.guards import check_parameters

    result = fit(tiny("bbb", epochs=1, eval_samples=0), mnist_300.train, net=SMALL, progress=False)
    check_parameters(result.net, result.posterior, 0, None)  # finite: no error
    rho = result.posterior.rho()[1].copy()
    rho[0] = float("nan")
    result.posterior.params["posterior_" + result.posterior.keys[1] + "_rho"].set_data(rho)
    name = f"posterior:{result.posterior.keys[1]}_rho"  # as the checkpoint names it
    with pytest.raises(TrainingDiverged, match=re.escape(name)):
        check_parameters(result.net, result.posterior, 0, None)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["auto", "reference"])
def test_bernoulli_likelihood_trains_on_two_moons(engine):
    from bbb_gluon.data import two_moons

    X, y = two_moons(600, noise=0.2, seed=3)
    config = TrainConfig(model="bbb", likelihood="bernoulli", epochs=40, lr=0.01,
                         batch_size=50, prior={"kind": "gaussian", "sigma": 1.0},
                         mu_scale=0.5, eval_samples=5, seed=0, engine=engine)
    mlp = MLP(hidden=(16, 16), activation="tanh", num_inputs=2, num_outputs=1)
    result = fit(config, (X[:400], y[:400]), (X[400:], y[400:]), net=mlp, progress=False)
    first, last = result.history[0], result.history[-1]
    assert math.isfinite(last["cost"]) and last["likelihood_cost"] < first["likelihood_cost"]
    # Chance is 50%; a 2-D decision boundary this smooth is learnt to well under 15%.
    assert last["valid_error"] < 0.15 and last["valid_error_mc"] < 0.15
    probs = predict_proba(result.net, result.posterior, X[400:], 0, likelihood="bernoulli")
    assert error_rate(probs, y[400:]) == last["valid_error"]


@pytest.mark.parametrize("change, field", [
    ({"engine": "reference"}, "engine"),      # the fused run resumed on the reference engine
    ({"lr": 0.5}, "lr"),
    ({"batch_size": 32}, "batch_size"),
    ({"seed": 1}, "seed"),
    ({"optimizer": "sgd"}, "optimizer"),
    ({"prior": {"kind": "gaussian", "sigma": 1.0}}, "prior"),
    ({"rho_init": -4.0}, "rho_init"),
    ({"estimator": "flipout"}, "estimator"),
])
def test_resume_with_another_trajectory_setting_is_refused(mnist_300, tmp_path, change, field):
    run_dir = tmp_path / "run"
    fit(tiny("bbb", epochs=1, engine="auto"), mnist_300.train, mnist_300.valid, net=SMALL,
        run_dir=run_dir, progress=False)
    before = snapshot(run_dir)
    with pytest.raises(CheckpointError, match=field):
        fit(tiny("bbb", epochs=2, **change), mnist_300.train, mnist_300.valid, net=SMALL,
            run_dir=run_dir, resume=True, progress=False)
    assert snapshot(run_dir) == before
    # What only decides how long it runs and what it reports may change.
    resumed = fit(tiny("bbb", epochs=2, eval_samples=0, log_every=3), mnist_300.train,
                  mnist_300.valid, net=SMALL, run_dir=run_dir, resume=True, progress=False)
    assert len(resumed.history) == 2


def test_resume_on_other_devices_is_refused(mnist_300, tmp_path):
    run_dir = tmp_path / "run"
    fit(tiny("bbb", epochs=1), mnist_300.train, mnist_300.valid, net=SMALL, run_dir=run_dir,
        progress=False)
    with pytest.raises(CheckpointError, match="contexts"):
        fit(tiny("bbb", epochs=2), mnist_300.train, mnist_300.valid,
            net=dataclasses.replace(SMALL, ctx=[mx.cpu(0), mx.cpu(1)]), run_dir=run_dir,
            resume=True, progress=False)


def test_resume_where_the_kernels_are_missing_is_refused(mnist_300, tmp_path, monkeypatch):
    import bbb_gluon._kernels.fused

    run_dir = tmp_path / "run"
    fit(tiny("bbb", epochs=1, engine="auto"), mnist_300.train, mnist_300.valid, net=SMALL,
        run_dir=run_dir, progress=False)
    monkeypatch.setattr(bbb_gluon._kernels.fused, "available", lambda: False)
    with pytest.raises(CheckpointError, match="engine 'fused'.*compiler"):
        fit(tiny("bbb", epochs=2, engine="auto"), mnist_300.train, mnist_300.valid, net=SMALL,
            run_dir=run_dir, resume=True, progress=False)


# --------------------------------------------------------------------------- your own network


def small_cnn(ctx=None):
    net = nn.HybridSequential()
    net.add(nn.Conv2D(4, 5, strides=2, in_channels=1, activation="relu"),
            nn.BatchNorm(in_channels=4), nn.MaxPool2D(), nn.Flatten(),
            nn.Dense(32, activation="relu", in_units=4 * 6 * 6), nn.Dense(10, in_units=32))
    mx.random.seed(0)
    net.initialize(mx.init.Xavier(), ctx=ctx or mx.cpu())
    net.hybridize()
    return net


def images(split):
    X, y = split
    return X.reshape(-1, 1, 28, 28), y


def test_fit_trains_a_cnn_with_batchnorm(mnist_300, tmp_path):
    config = tiny("bbb", epochs=3, lr=0.01, rho_init=-5.0, eval_samples=2)
    run_dir = tmp_path / "cnn"
    result = fit(config, images(mnist_300.train), images(mnist_300.valid), net=small_cnn(),
                 run_dir=run_dir, progress=False)
    assert result.posterior.keys == ["0.weight", "0.bias", "4.weight", "4.bias", "5.weight",
                                     "5.bias"]
    assert result.history[-1]["valid_error"] < 0.6  # chance: 0.9
    # BatchNorm's gamma/beta were trained alongside, its statistics kept, all checkpointed.
    gamma = result.net[1].gamma.data().asnumpy()
    assert not np.allclose(gamma, 1.0)
    net, posterior, _, meta = load_run(run_dir, "latest", net=small_cnn())
    np.testing.assert_array_equal(net[1].gamma.data().asnumpy(), gamma)
    np.testing.assert_array_equal(net[1].running_mean.data().asnumpy(),
                                  result.net[1].running_mean.data().asnumpy())
    Xv, yv = images(mnist_300.valid)
    assert error_rate(predict_proba(net, posterior, Xv, 0), yv) == \
        result.history[-1]["valid_error"]
    with pytest.raises(CheckpointError, match="pass an instance of that network"):
        load_run(run_dir, "latest")


@pytest.mark.parametrize(("stop", "estimator"), [(3, "reparam"), (7, "reparam"), (5, "local")])
def test_a_cnn_run_resumes_exactly(mnist_300, tmp_path, stop, estimator):
    # "local": Flipout on the convolutions, the local reparameterisation on the Dense
    # layers, their signs and noise drawn beside the weights' (the same on resume)
    config = tiny("bbb", epochs=2, lr=0.01, eval_samples=0, estimator=estimator)
    full = fit(config, images(mnist_300.train), images(mnist_300.valid), net=small_cnn(),
               progress=False, run_dir=tmp_path / "full")
    run_dir = tmp_path / "run"
    with pytest.raises(TrainingInterrupted):
        fit(config, images(mnist_300.train), images(mnist_300.valid), net=small_cnn(),
            run_dir=run_dir, progress=False, options=RunOptions(stop_after_batches=stop))
    resumed = fit(config, images(mnist_300.train), images(mnist_300.valid), net=small_cnn(),
                  run_dir=run_dir, resume=True, progress=False)
    assert_same_history(resumed.history, full.history)
    assert_same_params(resumed, full)
    # the run folder records what applies to a network of one's own: no MLP settings
    record = json.loads((run_dir / "config.json").read_text())
    stored = record["train"]
    assert not {"hidden", "num_inputs", "num_outputs", "activation", "dropout"} & set(stored)
    assert "mlp" not in record and resumed.mlp is None and "hidden" not in repr(resumed.config)
    assert stored["model"] == "bbb" and stored["rho_init"] == config.rho_init
    for a, b in zip(resumed.net.collect_params().values(), full.net.collect_params().values(),
                    strict=True):  # BatchNorm's statistics and trained gamma, beta too
        np.testing.assert_allclose(a.data().asnumpy(), b.data().asnumpy(), rtol=1e-5,
                                   atol=1e-7)
    assert len(_trainer_states_all(run_dir)) == 1  # one Trainer: mu, rho and BatchNorm's


def test_fit_says_what_each_layer_runs_under_an_estimator(mnist_300, capsys):
    fit(tiny("bbb", epochs=1, eval_samples=0, estimator="local"), images(mnist_300.train),
        images(mnist_300.valid), net=small_cnn(), progress="lines")
    out = capsys.readouterr().out
    assert ("estimator local: 0 Conv2D flipout (a convolution: one weight at every "
            "position); 4 Dense local; 5 Dense local") in out
    fit(tiny("bbb", epochs=1, eval_samples=0), mnist_300.train, mnist_300.valid, net=SMALL,
        progress="lines")
    assert "estimator" not in capsys.readouterr().out  # the shared sample: nothing to say


def _trainer_states_all(run_dir):
    arrays = mx.nd.load(str(Path(run_dir) / "checkpoints" / "latest.params"))
    return [k for k in arrays if k.startswith("__trainer")]


def test_fit_with_a_last_layer_posterior(mnist_300):
    net = build_mlp((32,), 10)
    net.initialize(mx.init.Xavier())
    first = net[0].weight.data().asnumpy().copy()
    posterior = Posterior(net, seed=0, select=[net[-1]])
    result = fit(tiny("bbb", epochs=2, lr=0.01), mnist_300.train, mnist_300.valid,
                 net=Network(net, posterior=posterior), progress=False)
    assert result.posterior is posterior and posterior.keys == ["1.weight", "1.bias"]
    assert not np.allclose(net[0].weight.data().asnumpy(), first)  # trained, deterministic
    assert result.history[-1]["valid_error"] < 0.6


def test_fit_a_regression_with_a_loss_of_ones_own():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 3)).astype(np.float32)
    y = (X @ np.array([[1.0], [-2.0], [0.5]]) + 0.1 * rng.normal(size=(400, 1)))
    net = nn.HybridSequential()
    net.add(nn.Dense(16, activation="tanh", in_units=3), nn.Dense(1, in_units=16))
    net.initialize(mx.init.Xavier())
    config = tiny("bbb", epochs=15, lr=0.02, batch_size=50, rho_init=-5.0,
                  prior={"kind": "gaussian", "sigma": 1.0})
    result = fit(config, (X[:300], y[:300]), (X[300:], y[300:]),
                 net=Network(net, loss=gluon.loss.L2Loss()), progress=False)
    losses = [row["valid_loss"] for row in result.history]
    assert "valid_error" not in result.history[0]
    assert losses[-1] < losses[0] / 5  # a constant predictor: 0.5 * Var(y) ~ 2.6
    assert result.best_epoch == 1 + losses.index(min(losses))
    # the same mean loss, recomputed with the means
    from bbb_gluon import use_means

    with use_means(net, result.posterior):
        pred = net(mx.nd.array(X[300:])).asnumpy()
    assert losses[-1] == pytest.approx(np.mean(0.5 * (pred - y[300:]) ** 2), rel=1e-4)


@pytest.mark.parametrize("engine", ["auto", "reference"])
def test_fit_a_regression_whose_noise_the_network_predicts(tmp_path, engine):
    """A heteroscedastic likelihood through fit: trained on both engines, checkpointed and
    resumed exactly, and its noise follows the input."""
    from bbb_gluon import HeteroscedasticGaussianNLLLoss, predict_intervals

    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(400, 1)).astype(np.float32)
    y = (np.sin(3 * X) + (0.05 + 0.125 * (X + 1)) * rng.normal(size=X.shape)).astype(
        np.float32)

    def run(epochs, resume=False):
        mx.random.seed(0)
        net = nn.HybridSequential()
        net.add(nn.Dense(32, activation="tanh", in_units=1), nn.Dense(2, in_units=32))
        net.initialize(mx.init.Xavier())
        loss = HeteroscedasticGaussianNLLLoss()
        config = tiny("bbb", epochs=epochs, lr=0.01, batch_size=50, rho_init=-5.0,
                      mu_init="copy", engine=engine, prior={"kind": "gaussian", "sigma": 1.0})
        return fit(config, (X[:300], y[:300]), (X[300:], y[300:]), net=Network(net, loss=loss),
                   run_dir=tmp_path / engine, resume=resume, progress=False), loss

    run(20)
    result, loss = run(40, resume=True)
    losses = [row["valid_loss"] for row in result.history]
    assert len(losses) == 40 and losses[-1] < losses[0]
    r = predict_intervals(result.net, result.posterior, X, loss, samples=20)
    assert r.noise_std[X > 0.5].mean() > r.noise_std[X < -0.5].mean()
    import shutil

    shutil.rmtree(tmp_path / engine)
    whole, _ = run(40)
    assert [row["valid_loss"] for row in whole.history] == losses  # resumed exactly


@pytest.mark.parametrize("make, error, match", [
    (lambda: Network(small_cnn(), loss="l2"), TypeError, "loss must be a gluon.loss.Loss"),
    (lambda: Network("lenet"), TypeError, "net must be a gluon Block"),
    (lambda: "lenet", TypeError, "net must be a bbb_gluon.MLP, a gluon Block or"),
])
def test_user_model_argument_errors(mnist_300, make, error, match):
    with pytest.raises(error, match=match):
        fit(tiny("bbb"), images(mnist_300.train), net=make(), progress=False)


def test_user_model_mismatches(mnist_300):
    net = small_cnn()
    with pytest.raises(ValueError, match="model='bbb'"):
        fit(tiny("plain"), images(mnist_300.train),
            net=Network(net, posterior=Posterior(net, seed=0)), progress=False)
    five = nn.HybridSequential()
    five.add(nn.Dense(5, in_units=784))
    five.initialize()
    with pytest.raises(ValueError, match=r"must lie in 0\.\.4 for 5 classes"):
        fit(tiny("bbb"), mnist_300.train, net=five, progress=False)


@pytest.mark.parametrize("model, engine", [("bbb", "auto"), ("bbb", "reference"),
                                           ("plain", "auto")])
def test_fit_leaves_mxnet_global_random_state_alone(mnist_300, model, engine):
    mx.random.seed(123)
    expected = mx.nd.random.uniform(shape=(5,)).asnumpy()
    mx.random.seed(123)
    fit(tiny(model, epochs=1, engine=engine), mnist_300.train, mnist_300.valid, net=SMALL,
        progress=False)
    np.testing.assert_array_equal(mx.nd.random.uniform(shape=(5,)).asnumpy(), expected)


def test_baseline_weights_are_xavier_uniform_from_the_seed():
    from bbb_gluon.training.network import build_network

    net_a, _ = build_network(tiny("plain"), MLP(hidden=(300,)), [mx.cpu()])
    net_b, _ = build_network(tiny("plain"), MLP(hidden=(300,)), [mx.cpu()])
    w = net_a[0].weight.data().asnumpy()
    np.testing.assert_array_equal(w, net_b[0].weight.data().asnumpy())  # same seed
    scale = math.sqrt(3.0 / ((784 + 300) / 2))
    assert np.abs(w).max() <= scale and w.std() == pytest.approx(scale / math.sqrt(3),
                                                                 rel=0.02)
    assert (net_a[0].bias.data().asnumpy() == 0).all()


def _loader(split, batch_size=64):
    X, y = images(split)
    dataset = gluon.data.ArrayDataset(mx.nd.array(X), mx.nd.array(y))
    return gluon.data.DataLoader(dataset, batch_size=batch_size, shuffle=False)


def test_fit_from_a_dataloader_trains_and_resumes_exactly(mnist_300, tmp_path):
    config = tiny("bbb", epochs=3, lr=0.01, eval_samples=0)
    full = fit(config, _loader(mnist_300.train), images(mnist_300.valid), net=small_cnn(),
               progress=False)
    errors = [row["valid_error"] for row in full.history]
    assert errors[-1] < 0.7 and all(math.isfinite(r["cost"]) for r in full.history)
    assert full.history[0]["nll_per_example"] == pytest.approx(
        full.history[0]["likelihood_cost"] / 300)
    run_dir = tmp_path / "run"
    with pytest.raises(TrainingInterrupted):
        fit(config, _loader(mnist_300.train), images(mnist_300.valid), net=small_cnn(),
            run_dir=run_dir, progress=False, options=RunOptions(stop_after_batches=7))
    resumed = fit(config, _loader(mnist_300.train), images(mnist_300.valid), net=small_cnn(),
                  run_dir=run_dir, resume=True, progress=False)
    assert_same_history(resumed.history, full.history)
    assert_same_params(resumed, full)


def test_a_dataloader_needs_a_network(mnist_300):
    with pytest.raises(ValueError, match=r"DataLoader needs a network of your own \(net=\)"):
        fit(tiny("bbb"), _loader(mnist_300.train), net=SMALL, progress=False)


class _LearnedNoiseNLL(gluon.loss.Loss):
    """-log N(y | pred, s^2) per example, with s = exp(log_s) learned."""

    def __init__(self, **kwargs):
        super().__init__(None, 0, **kwargs)
        with self.name_scope():
            self.log_s = self.params.get("log_s", shape=(1,), init=mx.init.Zero())

    def hybrid_forward(self, F, pred, label, log_s):
        sq = F.broadcast_mul(F.square(pred - label), F.exp(-2 * log_s)) * 0.5
        return F.broadcast_add(F.sum(sq, axis=-1), log_s)


def test_a_loss_with_its_own_parameters_is_trained_and_checkpointed(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 3)).astype(np.float32)
    y = (X @ np.array([[1.0], [-2.0], [0.5]]) + 0.3 * rng.normal(size=(400, 1)))

    def make():
        net = nn.HybridSequential()
        net.add(nn.Dense(16, activation="tanh", in_units=3), nn.Dense(1, in_units=16))
        mx.random.seed(0)
        net.initialize(mx.init.Xavier())
        loss = _LearnedNoiseNLL()
        loss.initialize()
        return net, loss

    config = tiny("bbb", epochs=4, lr=0.05, batch_size=50, rho_init=-5.0, eval_samples=0,
                  prior={"kind": "gaussian", "sigma": 1.0})
    net, loss = make()
    full = fit(config, (X[:300], y[:300]), (X[300:], y[300:]), net=Network(net, loss=loss),
               progress=False, run_dir=tmp_path / "full")
    log_s = loss.log_s.data().asscalar()
    assert math.isfinite(log_s) and abs(log_s) > 0.05  # trained: it started at 0
    net2, loss2 = make()
    with pytest.raises(TrainingInterrupted):
        fit(config, (X[:300], y[:300]), (X[300:], y[300:]), net=Network(net2, loss=loss2),
            progress=False, run_dir=tmp_path / "run", options=RunOptions(stop_after_batches=9))
    net3, loss3 = make()
    resumed = fit(config, (X[:300], y[:300]), (X[300:], y[300:]), net=Network(net3, loss=loss3),
                  progress=False, run_dir=tmp_path / "run", resume=True)
    assert_same_history(resumed.history, full.history)
    assert loss3.log_s.data().asscalar() == pytest.approx(log_s, rel=1e-5)
    # read back without the loss: its parameter is simply not needed
    _, posterior, _, _ = load_run(tmp_path / "full", "latest", net=make()[0])
    assert posterior.keys == ["0.weight", "0.bias", "1.weight", "1.bias"]
    with pytest.raises(ValueError, match="loss.initialize"):
        fit(config, (X, y), net=Network(make()[0], loss=_LearnedNoiseNLL()), progress=False)


# --------------------------------------------------------------------------- a failing disk


@pytest.mark.parametrize("target", ["latest.params", "best.params", "history.csv",
                                    "history.json"])
def test_a_failing_write_stops_fit_naming_the_file_and_resume_works(mnist_300, tmp_path,
                                                                    failing_disk, target):
    from bbb_gluon import FileWriteError

    full = fit(tiny(epochs=3), mnist_300.train, mnist_300.valid, net=SMALL, run_dir=tmp_path / "a",
               progress=False)
    run = tmp_path / "b"
    fit(tiny(epochs=1), mnist_300.train, mnist_300.valid, net=SMALL, run_dir=run, progress=False)
    kept = snapshot(run)
    failing_disk(target, nth=1)  # the next write of it: at the end of epoch 2
    with pytest.raises(FileWriteError, match=f"could not write .*{re.escape(target)}: "
                                             "No space left on device") as info:
        fit(tiny(epochs=3), mnist_300.train, mnist_300.valid, net=SMALL, run_dir=run, resume=True,
            progress=False)
    assert info.value.filename.endswith(target)
    assert no_temp_files(run) == []
    now = snapshot(run)
    # The file that failed is as it was, and so is everything written after it would be.
    failed = next(k for k in kept if k.endswith(target))
    assert now[failed] == kept[failed]
    assert load_run(run, "latest")[3]["epoch"] in (1, 2)
    resumed = fit(tiny(epochs=3), mnist_300.train, mnist_300.valid, net=SMALL, run_dir=run,
                  resume=True, progress=False)
    assert_same_history(resumed.history, full.history)
    assert_same_history(json.loads((run / "history.json").read_text()), full.history)
    assert_same_params(resumed, full)


def test_an_empty_training_set_is_refused_before_any_work(mnist_300, tmp_path):
    X, y = mnist_300.train
    with pytest.raises(ValueError, match="training inputs hold no examples"):
        fit(tiny("bbb"), (X[:0], y[:0]), mnist_300.valid, net=SMALL, run_dir=tmp_path / "run",
            progress=False)
    assert not (tmp_path / "run").exists()


def test_write_report_evaluates_the_best_and_the_last_checkpoint(mnist_300, tmp_path):
    run_dir = tmp_path / "run"
    result = fit(tiny("bbb", epochs=3), mnist_300.train, mnist_300.valid, net=SMALL,
                 run_dir=run_dir, progress=False)
    metrics = write_report(result, mnist_300.test, test_samples=4, name="mnist",
                           wall_seconds=1.5)
    assert json.loads((run_dir / "metrics.json").read_text()) == metrics
    assert (run_dir / "learning_curve.png").stat().st_size > 0
    valid_errors = [row["valid_error"] for row in result.history]
    assert metrics["best_epoch"] == 1 + int(np.argmin(valid_errors))
    assert metrics["best_valid_error"] == min(valid_errors)
    assert metrics["epochs"] == 3 and metrics["wall_seconds_this_invocation"] == 1.5
    X, y = mnist_300.test
    for which, errors in (("best", metrics), ("latest", metrics["end_of_training"])):
        net, posterior, _, _ = load_run(run_dir, which)
        assert errors["test_error_means"] == error_rate(predict_proba(net, posterior, X, 0), y)
        assert errors["test_samples"] == 4 and 0 <= errors["test_error_mc"] <= 1


def test_the_first_nonfinite_batch_is_found_from_the_running_sum():
    from bbb_gluon.training.guards import first_nonfinite

    nd, nan, inf = mx.nd, float("nan"), float("inf")
    recent = [(3, nd.array([1.0]), None), (4, nd.array([nan]), None),
              (5, nd.array([inf]), nd.array([1.0]))]
    assert first_nonfinite(nd.array([nan]), recent) == 4
    assert first_nonfinite(nd.array([2.0]), recent) == -1  # a finite sum: nothing is read
    assert first_nonfinite(nd.array([nan]), [(2, nd.array([1.0]), nd.array([nan]))]) == 2
    # every cost finite and their sum not: it overflowed by the last one
    assert first_nonfinite(nd.array([inf]), [(7, nd.array([3e38]), None),
                                              (8, nd.array([3e38]), None)]) == 8


@pytest.mark.parametrize("model", ["bbb", "plain"])
def test_a_stop_after_divergence_saves_nothing_and_says_diverged(mnist_300, tmp_path, model):
    """A stop inside the epoch that diverged (here after all five of its batches but the
    last, so the end-of-epoch check has not run) raises TrainingDiverged instead of saving
    the non-finite state as a checkpoint to resume from."""
    config = tiny(model, epochs=3, optimizer="sgd", lr=0.05, lr_decay_epochs=(1,),
                  lr_decay_factor=1e12)
    run_dir = tmp_path / "run"
    with pytest.raises(TrainingDiverged) as info:
        fit(config, mnist_300.train, mnist_300.valid, net=SMALL, run_dir=run_dir, progress=False,
            options=RunOptions(stop_after_batches=9))
    assert info.value.epoch == 2
    _, _, _, meta = load_run(run_dir, "latest")
    assert meta["epoch"] == 1 and not meta.get("partial")


def test_complexity_schedule_by_epoch():
    config = tiny("bbb", complexity_warmup=2, complexity_ramp=3)
    assert [config.complexity_scale_at(e) for e in range(7)] == \
        [0.0, 0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    assert tiny("bbb").complexity_scale_at(0) == 1.0  # none: the full cost from the start
    assert tiny("bbb", complexity_ramp=1).complexity_scale_at(0) == 0.5
    tempered = tiny("bbb", complexity_ramp=1, complexity_scale=0.1)
    assert [tempered.complexity_scale_at(e) for e in range(3)] == [0.05, 0.1, 0.1]
    for bad in ({"complexity_warmup": -1}, {"complexity_ramp": 1.5},
                {"complexity_warmup": True}, {"complexity_scale": 0.0},
                {"complexity_scale": 1.5}, {"complexity_scale": True}):
        with pytest.raises(ValueError, match="complexity_"):
            tiny("bbb", **bad)
    with pytest.raises(ValueError, match="setting of the bbb model, not of 'plain'"):
        tiny("plain", complexity_warmup=1)
    # config.json carries them, and one written before they existed still loads
    d = tiny("bbb", complexity_warmup=2).to_dict()
    assert d["complexity_warmup"] == 2 and TrainConfig.from_dict(d) == tiny(
        "bbb", complexity_warmup=2)
    del d["complexity_warmup"], d["complexity_ramp"], d["complexity_scale"]
    assert TrainConfig.from_dict(d).complexity_warmup == 0


@pytest.mark.parametrize("engine", ["fused", "reference"])
def test_a_warmup_trains_without_the_complexity_cost_then_ramps_it_in(mnist_300, engine):
    """Warm-up epochs are the epochs of a zero complexity weight, to the bit; the ramp's
    first epoch then differs from them."""
    def mu(**kw):
        result = fit(tiny("bbb", engine=engine, **kw), mnist_300.train, progress=False)
        return [a.asnumpy() for a in result.posterior.mu()], result

    warm, result = mu(complexity_warmup=2)
    zero, _ = mu(weighting=0.0)
    for a, b in zip(warm, zero, strict=True):
        np.testing.assert_array_equal(a, b)
    assert result.posterior is not None
    ramped, _ = mu(epochs=3, complexity_warmup=2)
    zero3, _ = mu(epochs=3, weighting=0.0)
    assert any(not np.array_equal(a, b) for a, b in zip(ramped, zero3, strict=True))


def test_a_regression_config_takes_the_regression_defaults_it_leaves_out():
    from bbb_gluon.training.config import REGRESSION_DEFAULTS

    c = TrainConfig(likelihood="gaussian", epochs=1500, batch_size=32)
    for name, value in REGRESSION_DEFAULTS.items():
        assert getattr(c, name) == value
    assert (c.complexity_warmup, c.complexity_ramp) == (300, 300)
    # what is given wins; a copy or a stored record changes nothing
    given = TrainConfig(likelihood="heteroscedastic", lr=1e-2, complexity_warmup=0)
    assert given.lr == 1e-2 and given.complexity_warmup == 0 and given.mu_init == "copy"
    assert dataclasses.replace(c, epochs=10).complexity_warmup == 300
    assert TrainConfig.from_dict(c.to_dict()) == c
    # classification, and the baselines, keep theirs
    assert TrainConfig().mu_init == "normal" and TrainConfig().complexity_scale == 1.0
    plain = TrainConfig(model="plain", likelihood="gaussian")
    assert plain.lr == 1e-3 and plain.complexity_warmup == 0


def _gap_set(n=200, seed=0, xmax=2.0):
    rng = np.random.default_rng(seed)
    x = (rng.uniform(0.5, xmax, size=n) * rng.choice([-1.0, 1.0], size=n)).astype(
        np.float32)[:, None]
    return x, (np.sin(3 * x) + 0.1 * rng.normal(size=x.shape)).astype(np.float32)


def _tanh_net(hidden=50, outputs=1):
    mx.random.seed(0)
    net = nn.HybridSequential()
    net.add(nn.Dense(hidden, activation="tanh", in_units=1),
            nn.Dense(hidden, activation="tanh", in_units=hidden),
            nn.Dense(outputs, in_units=hidden))
    net.initialize(mx.init.Xavier())
    return net


def test_a_regression_likelihood_builds_its_loss_for_a_network_of_ones_own(tmp_path):
    x, y = _gap_set(64)
    result = fit(TrainConfig(likelihood="gaussian", epochs=3, batch_size=32, eval_samples=0),
                 (x, y), (x, y), net=_tanh_net(8), run_dir=tmp_path / "run", progress=False)
    assert isinstance(result.loss, bbb.GaussianNLLLoss) and result.loss.noise_sigma is None
    assert result.loss.sigma() != 1.0  # its noise scale trained (it starts at 1)
    assert "valid_loss" in result.history[-1] and result.mlp is None
    stored = json.loads((tmp_path / "run" / "config.json").read_text())["train"]
    assert stored["likelihood"] == "gaussian" and stored["mu_init"] == "copy"
    het = fit(TrainConfig(likelihood="heteroscedastic", epochs=1, batch_size=32),
              (x, y), net=_tanh_net(8, outputs=2), progress=False)
    assert isinstance(het.loss, bbb.HeteroscedasticGaussianNLLLoss)
    with pytest.raises(ValueError, match="config.likelihood is 'heteroscedastic' but the "
                                         "network's loss is a GaussianNLLLoss"):
        loss = bbb.GaussianNLLLoss(0.1)
        fit(TrainConfig(likelihood="heteroscedastic", epochs=1), (x, y),
            net=Network(_tanh_net(8, outputs=2), loss=loss), progress=False)


@pytest.mark.parametrize("likelihood, outputs", [("gaussian", 1), ("heteroscedastic", 2)])
def test_the_packages_mlp_trains_a_regression_and_load_run_gives_its_noise(
        tmp_path, likelihood, outputs):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3)).astype(np.float32)
    y = (X @ np.array([1.0, -2.0, 0.5]) + 0.1 * rng.normal(size=300)).astype(np.float32)
    mlp = MLP(hidden=(16,), num_inputs=3, num_outputs=outputs)
    config = TrainConfig(likelihood=likelihood, epochs=4, batch_size=50, eval_samples=0)
    result = fit(config, (X[:250], y[:250]), (X[250:], y[250:]), net=mlp,
                 run_dir=tmp_path / "run", progress=False)
    assert result.mlp == mlp and "valid_loss" in result.history[-1]
    net, posterior, stored, meta = load_run(tmp_path / "run", which="latest")
    assert stored == config and type(meta["loss"]) is type(result.loss)
    with bbb.use_means(result.net, result.posterior):
        a = bbb.predict_intervals(result.net, None, X[250:], result.loss)
    with bbb.use_means(net, posterior):
        b = bbb.predict_intervals(net, None, X[250:], meta["loss"])
    np.testing.assert_array_equal(a.mean, b.mean)  # the same network back
    np.testing.assert_array_equal(a.noise_std, b.noise_std)  # and the same noise
    with pytest.raises(ValueError, match=r"training targets must have shape \(250, 1\)"):
        fit(config, (X[:250], np.stack([y[:250]] * 2, axis=1)), net=MLP(
            hidden=(16,), num_inputs=3, num_outputs=outputs), progress=False)
    if likelihood == "heteroscedastic":
        with pytest.raises(ValueError, match="num_outputs even"):
            fit(config, (X, y), net=MLP(hidden=(16,), num_inputs=3, num_outputs=3),
                progress=False)


@pytest.mark.slow
def test_a_small_set_with_a_gap_fits_with_the_regression_defaults():
    """Issue 58's set: 200 points of sin(3x) + 0.1 noise, a gap at |x| < 0.5, a 1-50-50-1
    tanh network, TrainConfig(likelihood="gaussian") with only the epochs and batch size
    given: the mean fits (RMSE within 1.5x the noise on the data), the noise is learned
    (within 50%), and the weights' spread in the gap is at least twice that on the data."""
    x, y = _gap_set()
    result = fit(TrainConfig(likelihood="gaussian", epochs=1500, batch_size=32,
                             eval_samples=0), (x, y), net=_tanh_net(), progress=False)
    grid = np.linspace(-2, 2, 201, dtype=np.float32)[:, None]
    bars = bbb.predict_intervals(result.net, result.posterior, grid, result.loss, samples=100)
    data, gap = np.abs(grid[:, 0]) >= 0.5, np.abs(grid[:, 0]) < 0.4
    rmse = np.sqrt(np.mean((bars.mean[data] - np.sin(3 * grid[data])) ** 2))
    assert rmse <= 0.15
    assert abs(result.loss.sigma() - 0.1) <= 0.05
    assert bars.weights_std[gap].mean() >= 2 * bars.weights_std[data].mean()
