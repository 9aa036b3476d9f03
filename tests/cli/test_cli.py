"""Tests for the ``bbb-gluon`` command line: ``train``, ``demo``, their errors and help.

Most commands run in-process through ``bbb_gluon.cli.main(argv)`` (fast, output through
capsys); the demo, a resume, Ctrl-C and some error paths run as real subprocesses to
check the exit status and that stderr holds no traceback.
"""

import argparse
import contextlib
import errno
import io
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mxnet as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bbb_gluon.training
from bbb_gluon._kernels import cores, fused
from bbb_gluon.cli import main
from bbb_gluon.data import load_dataset
from bbb_gluon.prediction import error_rate, predict_proba
from bbb_gluon.training import TrainingInterrupted, load_run

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TINY = ["--subset", "1000", "--hidden", "32", "--epochs", "2", "--eval-samples", "2",
        "--test-samples", "2", "--no-progress"]
QUICK = ["--subset", "200", "--hidden", "8", "--epochs", "1", "--eval-samples", "0",
         "--test-samples", "0", "--no-progress"]


def snapshot(folder):
    folder = Path(folder)
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def run_in_process(argv):
    """``main(argv)`` with stdout/stderr captured: (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as e:  # argparse: --help, usage errors
            status = e.code
    return status, out.getvalue(), err.getvalue()


def run_subprocess(argv, cwd, env=None, timeout=300):
    """``python -m bbb_gluon argv`` in ``cwd`` (a scratch folder, not the repository)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "bbb_gluon", *argv], capture_output=True,
                          text=True, env=full_env, cwd=cwd, timeout=timeout)


def assert_usage_error(status, stderr, message=None):
    """Exit status 2 and exactly one stderr line, 'bbb-gluon <command>: error: ...'."""
    assert status == 2, stderr
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    # the program, then the command by name (not the arguments it was given)
    assert re.match(r"bbb-gluon( [a-z]+)?: error: ", lines[0]), stderr
    if message is not None:
        assert re.search(message, lines[0]), lines[0]


@pytest.fixture(scope="module")
def trained_run(data_root, tmp_path_factory):
    """One finished ``train`` run (bbb, 1000 images, 2 epochs): (folder, status, stdout)."""
    out = tmp_path_factory.mktemp("cli") / "run"
    status, stdout, stderr = run_in_process(["train", *TINY, "--out", str(out)])
    assert status == 0, stderr
    return out, stdout


@pytest.fixture
def run_copy(trained_run, tmp_path):
    """A private copy of the finished run, free to be spoilt."""
    copy = tmp_path / "run"
    shutil.copytree(trained_run[0], copy)
    return copy


# --------------------------------------------------------------------------- train


def test_train_with_ivon_starts_from_its_settings_and_options_given_win(data_root,
                                                                        tmp_path):
    out = tmp_path / "ivon"
    status, stdout, stderr = run_in_process(["train", *QUICK, "--model", "ivon",
                                             "--beta2", "0.999", "--out", str(out)])
    assert status == 0, stderr
    train = json.loads((out / "config.json").read_text())["train"]
    assert (train["model"], train["lr"], train["mu_init"], train["beta2"]) == \
        ("ivon", 0.1, "copy", 0.999)
    assert train["prior"] == {"kind": "gaussian", "sigma": 1.0}
    assert "test error" in stdout
    status, _, stderr = run_in_process(["train", *QUICK, "--model", "ivon", "--lr", "0.05",
                                        "--prior-sigma", "0.5", "--out", str(tmp_path / "b")])
    assert status == 0, stderr
    train = json.loads((tmp_path / "b" / "config.json").read_text())["train"]
    assert train["lr"] == 0.05 and train["prior"] == {"kind": "gaussian", "sigma": 0.5}
    status, _, stderr = run_in_process(["train", *QUICK, "--model", "ivon", "--prior",
                                        "laplace", "--out", str(tmp_path / "c")])
    assert_usage_error(status, stderr, "the ivon model takes a Gaussian prior")
    assert not (tmp_path / "c").exists()


def test_train_writes_the_run_folder(trained_run, data_root):
    out, stdout = trained_run
    for name in ("config.json", "metrics.json", "history.csv", "history.json",
                 "learning_curve.png", "checkpoints/latest.params", "checkpoints/best.params"):
        assert (out / name).is_file(), name
    assert (out / "learning_curve.png").read_bytes().startswith(PNG_SIGNATURE)

    config = json.loads((out / "config.json").read_text())
    assert config["mlp"]["hidden"] == [32] and config["train"]["epochs"] == 2
    assert "hidden" not in config["train"]
    assert config["train"]["model"] == "bbb" and config["train"]["eval_samples"] == 2
    assert config["data"]["subset"] == 1000 and config["data"]["dataset"] == "mnist"

    metrics = json.loads((out / "metrics.json").read_text())
    for key in ("test_error_means", "test_error_mc", "epochs", "best_epoch",
                "seconds_per_epoch"):
        assert key in metrics, key
    assert metrics["epochs"] == 2
    # 1000 images, 2 epochs of a 32-unit net with the default prior: about 67%, below
    # chance (90%); checked below against the checkpoint itself.
    assert metrics["test_error_means"] < 0.8 and metrics["test_error_mc"] < 0.8

    history = json.loads((out / "history.json").read_text())
    errors = [row["valid_error"] for row in history]
    assert metrics["best_epoch"] == 1 + errors.index(min(errors))  # the first of ties
    assert metrics["seconds_per_epoch"] == pytest.approx(
        sum(row["seconds"] for row in history) / 2)
    assert all(row["seconds"] > 0 for row in history)
    assert [row["epoch"] for row in history] == [1, 2]
    assert len((out / "history.csv").read_text().splitlines()) == 3
    assert metrics["best_valid_error"] == min(row["valid_error"] for row in history)
    assert history[metrics["best_epoch"] - 1]["valid_error"] == metrics["best_valid_error"]

    # The printed lines say where everything went and what the test error is.
    assert f"run folder {out}" in stdout
    assert f"wrote {out}/config.json" in stdout and "metrics.json" in stdout
    assert f"test error {100 * metrics['test_error_means']:.2f}%" in stdout

    # metrics.json's test error is that of the best checkpoint on the (subset) test split.
    net, posterior, _, _ = load_run(out, "best")
    splits = load_dataset("mnist", root=data_root, subset=1000)
    Xt, yt = splits.test
    assert error_rate(predict_proba(net, posterior, Xt, 0), yt) == metrics["test_error_means"]


def test_train_plain_on_two_cpu_contexts(data_root, tmp_path, capsys):
    out = tmp_path / "run"
    status = main(["train", *QUICK, "--model", "plain", "--ctx", "cpu:0,cpu:1",
                   "--out", str(out)])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["model"] == "plain" and metrics["epochs"] == 1
    assert "test_error_mc" not in metrics


def test_resume_continues_to_more_epochs(run_copy):
    before = json.loads((run_copy / "history.json").read_text())
    done = run_subprocess(["train", "--out", str(run_copy), "--resume", "--epochs", "3",
                           "--no-progress"], cwd=run_copy.parent)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    metrics = json.loads((run_copy / "metrics.json").read_text())
    assert metrics["epochs"] == 3
    history = json.loads((run_copy / "history.json").read_text())
    assert [row["epoch"] for row in history] == [1, 2, 3]
    assert history[:2] == before
    assert json.loads((run_copy / "config.json").read_text())["train"]["epochs"] == 3


@pytest.mark.parametrize("how, epochs_args, expected", [
    pytest.param("argv", ["--epochs", "3"], 3, id="main(argv)"),
    pytest.param("sys.argv", ["--epochs=3"], 3, id="--epochs=3"),
    pytest.param("sys.argv", ["--epochs", "3"], 3, id="--epochs-3"),
    pytest.param("sys.argv", [], 2, id="stored-epochs"),
])
def test_resume_takes_epochs_from_the_command_line(run_copy, monkeypatch, how, epochs_args,
                                                   expected):
    seen = []

    def fake_fit(config, *args, **kwargs):
        seen.append((config.epochs, kwargs.get("resume")))
        raise TrainingInterrupted("stopped by the test")

    monkeypatch.setattr(bbb_gluon.training, "fit", fake_fit)
    argv = ["train", "--out", str(run_copy), "--resume", "--no-progress", *epochs_args]
    if how == "argv":
        status, _, stderr = run_in_process(argv)
    else:
        monkeypatch.setattr(sys, "argv", ["bbb-gluon", *argv])
        status, _, stderr = run_in_process(None)
    assert status == 130, stderr
    assert seen == [(expected, True)]


@pytest.mark.slow
def test_a_log_gets_one_line_per_epoch_and_where_a_resume_starts(data_root, tmp_path):
    """Output into a file or a pipe: no progress-bar frames, one line per epoch with its
    validation error (as the history holds it), and where a resumed run continues."""
    out = tmp_path / "run"
    done = run_subprocess(["train", *QUICK[:-1], "--epochs", "2", "--out", str(out)],
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr and "it/s" not in done.stderr, done.stderr
    history = json.loads((out / "history.json").read_text())
    lines = [line for line in done.stdout.splitlines() if line.startswith("epoch ")]
    assert [line.split(":")[0] for line in lines] == ["epoch 1/2", "epoch 2/2"]
    for line, row in zip(lines, history, strict=True):
        assert f"validation error {100 * row['valid_error']:.2f}%" in line, line
    done = run_subprocess(["train", "--out", str(out), "--resume", "--epochs", "3"],
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"resuming {out} after epoch 2, to 3 epochs" in done.stdout
    assert [line.split(":")[0] for line in done.stdout.splitlines()
            if line.startswith("epoch ")] == ["epoch 3/3"]
    assert "\r" not in done.stderr


# python -c: the command line with idle_cores() giving IDLE, as on a machine where other
# programs hold the rest of the cores.
_WITH_IDLE_CORES = """
import sys
import bbb_gluon._kernels.threads as t
t.idle_cores = lambda window=0.25: IDLE
sys.argv = ["bbb-gluon", *sys.argv[1:]]
from bbb_gluon.cli import main
sys.exit(main())
"""


def _with_idle_cores(idle, argv, cwd, env=None):
    full = {k: v for k, v in os.environ.items()
            if k not in ("OMP_NUM_THREADS", "BBB_GLUON_TRAIN_THREADS",
                         "BBB_GLUON_PREDICT_THREADS")}
    full.update(env or {})
    return subprocess.run([sys.executable, "-c", _WITH_IDLE_CORES.replace("IDLE", str(idle)),
                           *argv], capture_output=True, text=True, env=full, cwd=cwd,
                          timeout=300)


def _without_timings(history):
    return [{k: v for k, v in row.items() if "seconds" not in k} for row in history]


@pytest.mark.slow
@pytest.mark.skipif(cores() < 2 or not fused.available(),
                    reason="needs two cores and the fused kernels")
def test_a_resume_on_a_busier_machine_continues_with_the_recorded_threads(data_root,
                                                                          tmp_path):
    """A run started on two idle cores and resumed where only one is idle: the resume
    claims the two threads the run recorded, not the one idle core, and ends with the
    uninterrupted run's history; a count asked for on resume wins, with a note."""
    train = ["train", "--subset", "1000", "--hidden", "64", "--eval-samples", "2",
             "--test-samples", "0", "--no-progress"]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    done = _with_idle_cores(2, [*train, "--epochs", "2", "--out", str(whole)], tmp_path)
    assert done.returncode == 0, done.stderr
    done = _with_idle_cores(2, [*train, "--epochs", "1", "--out", str(cut)], tmp_path)
    assert done.returncode == 0, done.stderr
    asked = tmp_path / "asked"
    shutil.copytree(cut, asked)
    done = _with_idle_cores(1, ["train", "--out", str(cut), "--resume", "--epochs", "2",
                                "--no-progress"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "bbb_gluon:" not in done.stderr  # nothing to say: it replays bit for bit
    assert _without_timings(json.loads((cut / "history.json").read_text())) == \
        _without_timings(json.loads((whole / "history.json").read_text()))
    machines = json.loads((cut / "config.json").read_text())["machines"]
    assert len(machines) == 1 and machines[0]["threads"] == {"train": 2, "predict": 2}
    assert machines[0]["cpu"]["model"] and machines[0]["kernels"]["flags"]
    # OMP_NUM_THREADS=1 on resume: the user's count, said, and recorded from epoch 1 on.
    done = _with_idle_cores(2, ["train", "--out", str(asked), "--resume", "--epochs", "2",
                                "--no-progress"], tmp_path, env={"OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    assert "OMP_NUM_THREADS=1 asks for 1: the continuation will not be bit-identical" \
        in done.stderr
    machines = json.loads((asked / "config.json").read_text())["machines"]
    assert [(m["from_epoch"], m["threads"]["train"]) for m in machines] == [(0, 2), (1, 1)]


def test_the_bandit_draws_no_progress_bar_into_a_log(mushroom_root, tmp_path):
    out = tmp_path / "bandit"
    status, stdout, stderr = run_in_process(
        ["bandit", "--out", str(out), "--data-dir", str(mushroom_root), "--steps", "3",
         "--seeds", "1", "--updates", "2", "--hidden", "4"])
    assert status == 0, stderr
    assert "bandit steps" not in stderr and "\r" not in stderr
    assert "cumulative regret" in stdout


def test_resume_to_fewer_epochs_than_done_is_refused(run_copy):
    before = snapshot(run_copy)
    status, _, stderr = run_in_process(["train", "--out", str(run_copy), "--resume",
                                        "--epochs", "1", "--no-progress"])
    assert_usage_error(status, stderr, "already finished 2 epochs")
    assert snapshot(run_copy) == before


def test_resume_to_the_epochs_done_ends_the_run_there(run_copy):
    history = (run_copy / "history.csv").read_text()
    status, stdout, stderr = run_in_process(["train", "--out", str(run_copy), "--resume",
                                             "--epochs", "2", "--test-samples", "2",
                                             "--no-progress"])
    assert status == 0, stderr
    assert (run_copy / "history.csv").read_text() == history
    assert json.loads((run_copy / "metrics.json").read_text())["epochs"] == 2
    assert "of 2)" in stdout


def test_resume_evaluates_with_the_runs_own_test_samples(run_copy):
    # The run was made with --test-samples 2; a resume without the option keeps it, one
    # with it may change it (evaluation only), and a run from before the count was stored
    # gets the old default, 10.
    assert json.loads((run_copy / "config.json").read_text())["evaluation"] == {
        "test_samples": 2}
    status, stdout, stderr = run_in_process(["train", "--out", str(run_copy), "--resume",
                                             "--epochs", "2", "--no-progress"])
    assert status == 0, stderr
    assert json.loads((run_copy / "metrics.json").read_text())["test_samples"] == 2
    assert "with 2 weight samples" in stdout
    status, _, stderr = run_in_process(["train", "--out", str(run_copy), "--resume",
                                        "--epochs", "2", "--test-samples", "0",
                                        "--no-progress"])
    assert status == 0, stderr
    assert "test_error_mc" not in json.loads((run_copy / "metrics.json").read_text())
    assert json.loads((run_copy / "config.json").read_text())["evaluation"] == {
        "test_samples": 0}
    stored = json.loads((run_copy / "config.json").read_text())
    del stored["evaluation"]
    (run_copy / "config.json").write_text(json.dumps(stored))
    status, _, stderr = run_in_process(["train", "--out", str(run_copy), "--resume",
                                        "--epochs", "2", "--no-progress"])
    assert status == 0, stderr
    assert json.loads((run_copy / "metrics.json").read_text())["test_samples"] == 10


def test_resume_with_a_spoilt_stored_test_sample_count(run_copy):
    stored = json.loads((run_copy / "config.json").read_text())
    stored["evaluation"] = {"test_samples": "many"}
    (run_copy / "config.json").write_text(json.dumps(stored))
    before = snapshot(run_copy)
    status, _, stderr = run_in_process(["train", "--out", str(run_copy), "--resume",
                                        "--epochs", "2", "--no-progress"])
    assert_usage_error(status, stderr, "evaluation.test_samples")
    assert snapshot(run_copy) == before


def test_ctrl_c_saves_a_checkpoint_and_exits_130(data_root, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bbb_gluon", "train", "--subset", "2000", "--hidden", "32",
         "--epochs", "100", "--batch-size", "32", "--eval-samples", "1", "--no-progress",
         "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            if (out / "history.json").is_file():
                break
            time.sleep(0.02)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "interrupted: checkpoint saved" in stderr and "--resume" in stderr
    assert (out / "checkpoints" / "latest.params").is_file()
    assert not (out / "metrics.json").exists()


# --------------------------------------------------------------------------- demo


@pytest.mark.slow
def test_demo_separates_the_moons(tmp_path):
    out = tmp_path / "demo"
    # One OpenMP thread: beside other busy processes, MXNet's spinning threads made this
    # tiny network take over 300 s (about 12 s alone on one thread).
    done = run_subprocess(["demo", "--samples", "100", "--no-progress", "--out", str(out)],
                          cwd=tmp_path, env={"OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    match = re.search(r"test accuracy ([0-9.]+)%", done.stdout)
    assert match, done.stdout
    assert float(match.group(1)) >= 90.0
    for name in ("demo_predictive_mean.png", "demo_predictive_std.png"):
        assert (out / name).read_bytes().startswith(PNG_SIGNATURE), name
        assert str(out / name) in done.stdout


def test_demo_rejects_impossible_settings(tmp_path):
    for args in (["--epochs", "0"], ["--samples", "0"]):
        out = tmp_path / "demo"
        status, _, stderr = run_in_process(["demo", *args, "--no-progress", "--out", str(out)])
        assert_usage_error(status, stderr, "must be >= 1")
        assert not out.exists()


# --------------------------------------------------------------------------- errors


NEW_RUN_ERRORS = [
    (["--dataset", "cifar10"], "unknown dataset 'cifar10'"),
    (["--model", "bayes"], "unknown model 'bayes'"),
    (["--lr", "-1"], "lr must be a finite number > 0"),
    (["--lr", "nan"], "lr must be a finite number > 0"),
    (["--epochs", "0"], "epochs must be an integer >= 1"),
    (["--batch-size", "0"], "batch_size"),
    (["--samples", "0"], "samples"),
    (["--log-sigma1", "-6", "--log-sigma2", "0"], "sigma1 must be larger than sigma2"),
    (["--log-sigma2", "1"], "sigma1 must be larger than sigma2"),
    (["--pi", "1.5"], "pi is a mixture weight"),
    (["--pi", "0"], "pi is a mixture weight"),
    (["--prior", "gaussian", "--prior-sigma", "0"], "sigma"),
    (["--prior", "laplace", "--prior-scale", "0"], "--prior laplace (--prior-scale): scale"),
    (["--prior", "scale_mixture", "--log-sigma2", "-800"], "--log-sigma2 must give"),
    (["--complexity", "kl"], "has no closed-form KL"),
    (["--dropout", "1"], "dropout"),
    (["--test-samples", "-1"], "--test-samples"),
    (["--num-valid", "60000"], "num_valid"),
    (["--subset", "0"], "subset"),
    (["--ctx", "tpu"], "--ctx"),
    (["--ctx", "cpu:0,cpu:0"], "twice"),
    (["--resume"], "--resume needs --out"),
]


@pytest.mark.parametrize("args, message", NEW_RUN_ERRORS,
                         ids=[" ".join(a) for a, _ in NEW_RUN_ERRORS])
def test_train_errors_exit_2_and_create_nothing(data_root, tmp_path, monkeypatch, args,
                                                message):
    monkeypatch.chdir(tmp_path)  # a default --out would land here
    out = tmp_path / "new"
    argv = ["train", *QUICK, *args]
    if args != ["--resume"]:
        argv += ["--out", str(out)]
    status, _, stderr = run_in_process(argv)
    assert_usage_error(status, stderr, re.escape(message))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(mx.context.num_gpus() > 0, reason="this machine has a GPU")
def test_gpu_context_on_a_machine_without_gpu(data_root, tmp_path):
    out = tmp_path / "new"
    status, _, stderr = run_in_process(["train", *QUICK, "--ctx", "gpu", "--out", str(out)])
    assert_usage_error(status, stderr, "--ctx: gpu requested but this machine has 0 GPU")
    assert not out.exists()


def test_out_pointing_at_an_existing_run_without_resume(run_copy):
    before = snapshot(run_copy)
    for extra in ([], ["--model", "plain", "--hidden", "16"]):
        status, _, stderr = run_in_process(["train", *QUICK, *extra, "--out", str(run_copy)])
        assert_usage_error(status, stderr, "already holds a run")
    assert snapshot(run_copy) == before


def test_resume_of_a_folder_that_is_not_a_run(data_root, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("keep me")
    status, _, stderr = run_in_process(["train", "--out", str(empty), "--resume"])
    assert_usage_error(status, stderr, "is not a run folder")
    assert [p.name for p in empty.iterdir()] == ["notes.txt"]
    missing = tmp_path / "missing"
    status, _, stderr = run_in_process(["train", "--out", str(missing), "--resume"])
    assert_usage_error(status, stderr, "is not a run folder")
    assert not missing.exists()


def test_resume_with_an_unreadable_config(run_copy):
    (run_copy / "config.json").write_text("{not json")
    before = snapshot(run_copy)
    status, _, stderr = run_in_process(["train", "--out", str(run_copy), "--resume"])
    assert_usage_error(status, stderr, "corrupt or not a bbb_gluon run configuration")
    assert snapshot(run_copy) == before


def test_resume_of_a_checkpoint_from_another_architecture(run_copy):
    path = run_copy / "config.json"
    config = json.loads(path.read_text())
    config["mlp"]["hidden"] = [16]
    path.write_text(json.dumps(config))
    before = snapshot(run_copy)
    status, _, stderr = run_in_process(["train", "--out", str(run_copy), "--resume",
                                        "--no-progress"])
    assert_usage_error(status, stderr, r"another model: hidden is \[32\] there, \[16\] here")
    assert snapshot(run_copy) == before


def test_resume_of_a_corrupt_checkpoint_continues_from_the_best_one(run_copy):
    latest = run_copy / "checkpoints" / "latest.params"
    latest.write_bytes(os.urandom(3000))
    broken = latest.read_bytes()
    best_epoch = json.loads((run_copy / "metrics.json").read_text())["best_epoch"]
    done = run_subprocess(["train", "--out", str(run_copy), "--resume", "--epochs", "3",
                           "--no-progress"], cwd=run_copy.parent)
    assert done.returncode == 0, done.stderr
    notices = [line for line in done.stderr.splitlines() if "corrupt" in line]
    assert len(notices) == 1 and "Traceback" not in done.stderr
    assert str(latest) in notices[0]
    assert f"best.params, after epoch {best_epoch}" in notices[0]
    assert (run_copy / "checkpoints" / "latest.params.corrupt").read_bytes() == broken
    history = json.loads((run_copy / "history.json").read_text())
    assert [row["epoch"] for row in history] == [1, 2, 3]


def test_resume_of_a_corrupt_checkpoint_beside_an_old_best_one(run_copy):
    """A best checkpoint without the optimiser states (as written before they were kept
    there): refused with the command that continues; that command continues."""
    latest = run_copy / "checkpoints" / "latest.params"
    latest.write_bytes(os.urandom(3000))
    best = run_copy / "checkpoints" / "best.params"
    arrays = mx.nd.load(str(best))
    mx.nd.save(str(best), {k: v for k, v in arrays.items() if not k.startswith("__trainer")})
    before = snapshot(run_copy)
    status, _, stderr = run_in_process(["train", "--out", str(run_copy), "--resume",
                                        "--no-progress"])
    assert_usage_error(status, stderr, "corrupt")
    command = f"bbb-gluon train --out {run_copy} --resume best"
    assert str(latest) in stderr and command in stderr
    assert snapshot(run_copy) == before  # the corrupt file is still there, byte-identical
    status, _, stderr = run_in_process([*command.split()[1:], "--no-progress"])
    assert status == 0, stderr
    assert "the optimiser starts afresh" in stderr


def test_missing_data_names_the_environment_variable(tmp_path, monkeypatch):
    empty = tmp_path / "data"
    empty.mkdir()
    out = tmp_path / "new"
    monkeypatch.setenv("BBB_GLUON_DATA", str(empty))
    status, _, stderr = run_in_process(["train", *QUICK, "--out", str(out)])
    assert_usage_error(status, stderr, "BBB_GLUON_DATA")
    assert not out.exists()
    done = run_subprocess(["train", *QUICK, "--out", str(out)], cwd=tmp_path,
                          env={"BBB_GLUON_DATA": str(empty)})
    assert_usage_error(done.returncode, done.stderr, "BBB_GLUON_DATA")
    assert str(empty) in done.stderr
    assert not out.exists()
    assert list(empty.iterdir()) == []


@pytest.mark.parametrize("dataset", ["mnist", "fashion-mnist"])
def test_a_data_dir_that_does_not_exist_is_reported_as_such(tmp_path, dataset):
    missing = tmp_path / "nowhere"
    out = tmp_path / "run"
    status, _, stderr = run_in_process(["train", *QUICK, "--dataset", dataset,
                                        "--data-dir", str(missing), "--out", str(out)])
    assert_usage_error(status, stderr, f"the data folder {missing} .given. does not exist")
    assert "subfolder" not in stderr.split("does not exist")[0] and "root=" not in stderr
    assert ("dataset-fashion-mnist" in stderr) == (dataset == "fashion-mnist")
    # the folder was given: the fix is the flag, not the variable (it would not be read)
    assert "--data-dir" in stderr and "BBB_GLUON_DATA" not in stderr
    assert not out.exists() and not missing.exists()


@pytest.mark.parametrize("args, message", [
    (["train", "--hidden", "0"], "argument --hidden"),
    (["train", "--transform", "x"], "argument --transform"),
    (["train", "--weighting", "sometimes"], "argument --weighting"),
    (["train", "--epochs", "two"], "argument --epochs"),
    (["train", "--hidden", "400,,400"], "argument --hidden: an empty item in '400,,400'"),
    (["train", "--hidden", "400,"], "argument --hidden: an empty item in '400,'"),
    (["train", "--lr-decay-epochs", "1,,2"], "argument --lr-decay-epochs: an empty item"),
    (["fly"], "invalid choice"),
    ([], "required"),
])
def test_argument_errors_exit_2_without_traceback(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    status, stdout, stderr = run_in_process(args)
    assert status == 2
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("bbb-gluon") and ": error: " in last and message in last
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["train", "evaluate", "compare", "demo", "bandit"])
def test_an_unknown_option_is_reported_by_its_command(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    args = [command, *(["runs/x"] if command in ("evaluate", "compare") else []), "--frobnicate"]
    status, stdout, stderr = run_in_process(args)
    assert status == 2 and stdout == ""
    assert stderr == (f"bbb-gluon {command}: error: unrecognized arguments: --frobnicate "
                      f"(see bbb-gluon {command} --help)\n")
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- help


def test_no_function_of_the_command_line_is_over_60_lines():
    import ast

    long = []
    for path in sorted(Path(bbb_gluon.__file__).parent.joinpath("cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.end_lineno - node.lineno >= 60:
                long.append(f"{path.name}:{node.name} ({node.end_lineno - node.lineno + 1})")
    assert not long, long


def test_the_options_defaults_are_the_librarys(monkeypatch):
    """train's defaults are TrainConfig's fields and bandit's BanditConfig's: changed there,
    they change on the command line (and in its help)."""
    import dataclasses

    from bbb_gluon.bandit import BanditConfig
    from bbb_gluon.cli.parser import build_parser
    from bbb_gluon.training import MLP, TrainConfig

    def changed(cls, name, value):
        field = {f.name: f for f in dataclasses.fields(cls)}[name]
        monkeypatch.setattr(field, "default", value)

    for name, value in (("batch_size", 96), ("lr", 2e-3), ("rho_init", -4.5),
                        ("weighting", "blundell"), ("eval_samples", 3), ("epochs", 7),
                        ("seed", 5)):
        changed(TrainConfig, name, value)
    changed(MLP, "hidden", (50,))
    changed(BanditConfig, "steps", 1234)
    changed(BanditConfig, "rho_init", -4.0)
    parser = build_parser()
    train = parser.commands["train"]
    assert [train.get_default(n) for n in ("batch_size", "lr", "rho_init", "weighting",
                                           "hidden", "eval_samples", "seed")] == \
        [96, 2e-3, -4.5, "blundell", [50], 3, 5]
    help_text = " ".join(train.format_help().split())
    assert "(default 7; with --resume" in help_text and "(default 96)" in help_text
    args = parser.parse_args(["train"])
    from bbb_gluon.cli.train import _config_from_args

    assert _config_from_args(args).epochs == 7
    bandit = parser.commands["bandit"]
    assert bandit.get_default("steps") == 1234 and bandit.get_default("rho_init") == -4.0


def test_every_option_of_every_command_has_help():
    from bbb_gluon.cli.parser import build_parser

    parser = build_parser()
    missing = [f"{name} {'/'.join(action.option_strings) or action.dest}"
               for name, command in parser.commands.items() for action in command._actions
               if not action.help and not isinstance(action, argparse._HelpAction)]
    assert not missing, missing


def test_train_help_lists_its_options():
    status, stdout, _ = run_in_process(["train", "--help"])
    assert status == 0
    for option in ("--resume", "--ctx", "--subset", "--weighting", "--prior", "--out",
                   "--epochs", "--model", "--hidden", "--samples", "--eval-samples",
                   "--test-samples", "--dataset", "--lr", "--pi", "--log-sigma1",
                   "--log-sigma2", "--no-progress", "--data-dir"):
        assert option in stdout, option


def test_demo_help_lists_its_options():
    status, stdout, _ = run_in_process(["demo", "--help"])
    assert status == 0
    for option in ("--samples", "--epochs", "--out", "--seed", "--no-progress"):
        assert option in stdout, option


def test_top_level_help_and_version():
    status, stdout, _ = run_in_process(["--help"])
    assert status == 0
    assert "train" in stdout and "demo" in stdout
    status, stdout, _ = run_in_process(["--version"])
    assert status == 0
    assert stdout.strip() == f"bbb_gluon {bbb_gluon.__version__}"


# --------------------------------------------------------------------------- the paper's recipe


def test_recipe_paper_sets_its_options_and_given_options_win(data_root, tmp_path):
    out = tmp_path / "recipe"
    status, stdout, stderr = run_in_process(
        ["train", "--recipe", "paper", "--subset", "300", "--hidden", "16", "--epochs", "2",
         "--lr-decay-epochs", "1", "--test-samples", "3", "--no-progress", "--out", str(out)])
    assert status == 0, stderr
    stored = json.loads((out / "config.json").read_text())
    train, data = stored["train"], stored["data"]
    assert train["optimizer"] == "sgd" and train["lr"] == 1e-3
    assert train["loss_reduction"] == "sum" and train["lr_decay_factor"] == 0.1
    assert train["prior"]["pi"] == 0.75 and train["prior"]["sigma1"] == 1.0
    assert train["prior"]["sigma2"] == pytest.approx(math.exp(-8))
    assert train["weighting"] == "uniform" and train["samples"] == 1
    assert train["mu_init"] == "uniform" and train["mu_scale"] == 0.03
    assert train["rho_init"] == [-3.5, -3.0]
    assert data["num_valid"] == 0 and data["monitor_test"] is True
    # Given beside the recipe: these win.
    assert stored["mlp"]["hidden"] == [16]
    assert train["epochs"] == 2 and train["lr_decay_epochs"] == [1]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["selected_by"] == "end of training (no validation split)"
    assert metrics["best_epoch"] == 2 and metrics["test_samples"] == 3
    assert metrics["end_of_training"]["test_error_means"] == metrics["test_error_means"]
    history = json.loads((out / "history.json").read_text())
    assert "valid_error" not in history[-1]
    assert history[-1]["test_error"] == metrics["test_error_means"]
    plot = out.parent / "curves.png"
    status, stdout, stderr = run_in_process(["compare", str(out), "--at", "1,2,5", "--plot",
                                             str(plot)])
    assert status == 0, stderr
    assert "-3.5..-3" in stdout and "sgd/sum" in stdout
    # The error at the asked epochs: the recorded test error (no validation split here).
    row = [line.split() for line in stdout.splitlines() if line.startswith("recipe")][-1]
    assert row[1:] == ["test", f"{100 * history[0]['test_error']:.2f}%",
                       f"{100 * history[1]['test_error']:.2f}%", "-", "-"]
    assert plot.read_bytes().startswith(PNG_SIGNATURE)
    from bbb_gluon.runs import summarize_run

    summary = summarize_run(out)
    assert summary["end_test_error_means"] == metrics["end_of_training"]["test_error_means"]
    assert summary["optimizer"] == "sgd" and summary["loss_reduction"] == "sum"
    assert summary["last10_test_error"] is None  # fewer than ten epochs recorded


def test_recipe_cannot_change_a_resumed_run(run_copy):
    before = snapshot(run_copy)
    status, _, stderr = run_in_process(["train", "--out", str(run_copy), "--resume",
                                        "--recipe", "paper"])
    assert_usage_error(status, stderr, "--recipe with --resume")
    assert snapshot(run_copy) == before


def test_train_help_shows_what_the_recipe_sets():
    status, stdout, _ = run_in_process(["train", "--help"])
    assert status == 0
    text = " ".join(stdout.split())
    for setting in ("--optimizer sgd", "--loss-reduction sum", "--lr-decay-epochs=300",
                    "--pi 0.75", "--log-sigma2 -8", "--rho-init=-3.5,-3", "--num-valid 0",
                    "--mu-init uniform", "--mu-scale 0.03", "--epochs 600"):
        assert setting in text, setting


def test_metrics_hold_the_best_and_the_end_of_training_network(trained_run, data_root):
    out, stdout = trained_run
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["selected_by"] == "lowest validation error (means)"
    end = metrics["end_of_training"]
    assert end["epoch"] == 2
    net, posterior, _, _ = load_run(out, "latest")
    Xt, yt = load_dataset("mnist", root=data_root, subset=1000).test
    assert end["test_error_means"] == error_rate(predict_proba(net, posterior, Xt, 0), yt)
    assert f"end of training: {100 * end['test_error_means']:.2f}%" in stdout


@pytest.mark.parametrize("args, message", [
    (["--rho-init=-3,-3.5"], "LOW,HIGH"),
    (["--rho-init", "x"], "LOW,HIGH"),
    (["--lr-decay-epochs", "300,200"], "increasing epoch numbers"),
    (["--lr-decay-epochs", "0"], "increasing epoch numbers"),
    (["--loss-reduction", "batch"], "invalid choice"),
    (["--recipe", "blundell"], "invalid choice"),
])
def test_recipe_option_errors(tmp_path, args, message):
    status, _, stderr = run_in_process(["train", *QUICK, *args, "--out", str(tmp_path / "r")])
    assert status == 2 and re.search(message, stderr), stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_a_diverging_run_stops_with_a_clear_error(data_root, tmp_path):
    # The settings of issue 17: every cost turns NaN within the first epoch.
    out = tmp_path / "nan"
    result = run_subprocess(
        ["train", "--dataset", "mnist", "--model", "bbb", "--epochs", "1", "--prior",
         "scale_mixture", "--pi", "0.75", "--log-sigma2", "-8", "--rho-init=-1.5",
         "--mu-scale", "0.0173", "--optimizer", "sgd", "--lr", "0.128", "--no-progress",
         "--out", str(out)], cwd=tmp_path, env={"BBB_GLUON_DATA": str(data_root)})
    assert result.returncode == 3, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert re.search(r"diverged in epoch 1, batch \d+: the cost is not finite", lines[0])
    assert not (out / "metrics.json").exists() and not (out / "history.json").exists()
    # Nothing was kept, so the folder can take a new run.
    status, _, stderr = run_in_process(["train", *QUICK, "--out", str(out)])
    assert status == 0, stderr


# ---------------------------------------------------------------- bandit
def test_bandit_runs_resumes_and_refuses_to_overwrite(mushroom_root, tmp_path, capsys):
    out = tmp_path / "bandit"
    args = ["bandit", "--out", str(out), "--data-dir", str(mushroom_root), "--steps", "40",
            "--seeds", "2", "--updates", "2", "--hidden", "8", "--no-progress"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "bayes-by-backprop" in printed and "5%-greedy" in printed
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps"] == 40 and metrics["seeds"] == [0, 1]
    before = (out / "regret.csv").read_bytes()
    # a second run into the same folder is refused, and nothing changes
    assert main(args) == 2
    assert "--resume" in capsys.readouterr().err
    assert (out / "regret.csv").read_bytes() == before
    # resuming a finished run rewrites the same results
    assert main(["bandit", "--out", str(out), "--data-dir", str(mushroom_root), "--resume",
                 "--no-progress"]) == 0
    assert (out / "regret.csv").read_bytes() == before


@pytest.mark.parametrize("extra, message", [
    (["--seeds", "0"], "--seeds"),
    (["--lr", "-1"], "lr"),
    (["--greedy-lr", "0"], "lr"),
    (["--rho-lr-mult", "-2"], "rho_lr_mult"),
    (["--agents", "bayes-by-backprop,ucb"], "--agents"),
    (["--agents", ""], "--agents"),
    (["--resume", "--force"], "give one"),
    (["--threads", "0"], "--threads"),
])
def test_bandit_bad_options_exit_2(mushroom_root, tmp_path, capsys, extra, message):
    args = ["bandit", "--out", str(tmp_path / "b"), "--data-dir", str(mushroom_root),
            "--steps", "5", "--no-progress", *extra]
    assert main(args) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_bandit_greedy_lr_and_blundell_weighting_reach_the_config(mushroom_root, tmp_path):
    out = tmp_path / "bandit"
    assert main(["bandit", "--out", str(out), "--data-dir", str(mushroom_root), "--steps", "3",
                 "--seeds", "1", "--updates", "2", "--hidden", "4", "--no-progress",
                 "--lr", "1e-4", "--greedy-lr", "3e-4", "--rho-lr-mult", "0.5",
                 "--complexity-over", "blundell", "--agents", "bayes-by-backprop,1%-greedy"]) == 0
    config = json.loads((out / "config.json").read_text())["config"]
    assert {a["name"]: a["lr"] for a in config["agents"]} == {
        "bayes-by-backprop": None, "1%-greedy": 3e-4}
    assert (config["lr"], config["rho_lr_mult"], config["complexity_over"]) == (
        1e-4, 0.5, "blundell")


def test_bandit_without_data_says_where_to_put_it(tmp_path, capsys):
    assert main(["bandit", "--out", str(tmp_path / "b"), "--data-dir", str(tmp_path),
                 "--steps", "5", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "agaricus-lepiota.data" in err and "mushroom" in err
    assert "--data-dir" in err and "BBB_GLUON_DATA" not in err  # the option was given
    assert not (tmp_path / "b").exists()


# --------------------------------------------------------------------------- a failing disk


@pytest.mark.parametrize("command, target, error", [
    (["evaluate", "--samples", "2", "--ood", "none"], "evaluation.json", errno.ENOSPC),
    (["evaluate", "--samples", "2", "--ood", "none"], "reliability.png", errno.EIO),
    (["prune", "--fractions", "0,0.5"], "pruning.csv", errno.ENOSPC),
    (["prune", "--fractions", "0,0.5"], "weight_statistics.json", errno.EROFS),
])
def test_a_failing_write_is_one_line_naming_the_file_and_loses_nothing(run_copy,
                                                                       failing_disk,
                                                                       command, target,
                                                                       error):
    before = snapshot(run_copy)
    failing_disk(target, error=error)
    status, stdout, stderr = run_in_process([command[0], str(run_copy), *command[1:]])
    assert status == 1, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert re.search(f"error: could not write .*{re.escape(target)}: "
                     f"{re.escape(os.strerror(error))}; nothing was left there$",
                     lines[0]), lines[0]  # there was no such file before
    if command[0] == "evaluate":  # what it computed is shown all the same
        assert re.search(r"test error \d+\.\d\d% with the means", stdout), stdout
        assert re.search(r"NLL \d+\.\d{4}, Brier", stdout) and "wrote" not in stdout
    after = snapshot(run_copy)
    assert not (run_copy / target).exists()
    assert {k: v for k, v in after.items() if k in before} == before  # nothing replaced
    assert not [k for k in after if ".tmp-" in k]
    # The disk has room again: the same command finishes (what it wrote before the
    # failure is its own output, so --force).
    status, _, stderr = run_in_process([command[0], str(run_copy), *command[1:], "--force"])
    assert status == 0, stderr
    assert (run_copy / target).is_file()


# Places no one can write, root included (permission bits do not stop root): a folder
# under a regular file, and /proc, which takes no new entries.
UNWRITABLE = [("/proc/self/status/run", "is a file, not a folder"),
              ("/proc/bbb-gluon-run", "cannot write in /proc")]


@pytest.mark.parametrize("out, reason", UNWRITABLE, ids=["under-a-file", "proc"])
def test_an_unwritable_out_is_refused_before_any_work(data_root, out, reason):
    status, stdout, stderr = run_in_process(["train", *QUICK, "--out", out])
    assert_usage_error(status, stderr, f"--out {re.escape(out)}: .*{re.escape(reason)}.*"
                                       "choose another --out")
    assert stdout == ""  # the data were not even loaded


@pytest.mark.parametrize("argv, flag", [
    (["bandit", "--steps", "5", "--out", "{}"], "--out"), (["demo", "--out", "{}"], "--out"),
    (["weights", "runs/x", "--out", "{}.png"], "--out"),
    (["compare", "runs/x", "--csv", "{}.csv"], "--csv"),
    (["compare", "runs/x", "--plot", "{}.png"], "--plot")], ids=lambda a: a[0] if
    isinstance(a, list) else "")
@pytest.mark.parametrize("place, reason", UNWRITABLE, ids=["under-a-file", "proc"])
def test_every_command_refuses_an_output_it_cannot_write(tmp_path, monkeypatch, argv, flag,
                                                         place, reason):
    monkeypatch.chdir(tmp_path)  # runs/x does not exist: the check comes before reading it
    status, stdout, stderr = run_in_process([a.format(place) for a in argv])
    assert_usage_error(status, stderr, f"{flag} {re.escape(place)}.*: .*{re.escape(reason)}"
                                       f".*choose another {flag}")
    assert stdout == "" and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [["evaluate", "--samples", "2", "--ood", "none"],
                                     ["prune", "--fractions", "0,0.5"]], ids=lambda c: c[0])
def test_a_run_folder_that_cannot_be_written_is_refused_before_any_work(run_copy, monkeypatch,
                                                                        command):
    import bbb_gluon.cli.common as common

    real = common.tempfile.mkdtemp

    def read_only(*args, dir=None, **kwargs):  # as a read-only mount answers
        if Path(dir) == run_copy:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(common.tempfile, "mkdtemp", read_only)
    before = snapshot(run_copy)
    status, stdout, stderr = run_in_process([command[0], str(run_copy), *command[1:]])
    assert_usage_error(status, stderr, f"RUN_DIR {re.escape(str(run_copy))}: cannot write in "
                                       r".*\(Read-only file system\); .* a copy of the run")
    assert stdout == "" and snapshot(run_copy) == before


def test_a_corrupt_latest_checkpoint_points_to_the_best_one(run_copy):
    (run_copy / "checkpoints" / "latest.params").write_bytes(os.urandom(3000))
    for command in (["evaluate", "--samples", "2", "--ood", "none"], ["prune"]):
        status, _, stderr = run_in_process([command[0], str(run_copy), *command[1:],
                                            "--checkpoint", "latest"])
        assert_usage_error(status, stderr, r"latest\.params is corrupt .*; --checkpoint best "
                                           "reads the best checkpoint instead$")
    status, stdout, stderr = run_in_process(["evaluate", str(run_copy), "--samples", "2",
                                             "--ood", "none", "--checkpoint", "best"])
    assert status == 0 and "best checkpoint" in stdout, stderr


@pytest.mark.parametrize("args, warning", [
    (["--rho-init", "50"], r"--rho-init 50 starts sigma at 50, above the prior's scale 1: "
                           r"lower --rho-init"),
    (["--prior", "gaussian", "--prior-sigma", "0.01", "--rho-init", "-3"],
     r"--rho-init -3 starts sigma at 0\.0486, above the prior's scale 0\.01"),
    (["--batch-size", "20", "--lr", "1e6"], r"the likelihood cost grew from \S+ to \S+ per "
                                            r"example in the first 10 steps: the learning rate "
                                            r"1e\+06 is likely too large; lower --lr$"),
    ([], None), (["--batch-size", "20", "--lr", "0.01"], None),
], ids=["sigma-above-prior", "sigma-above-gaussian-prior", "lr-too-large", "defaults",
        "a-large-but-sane-lr"])
def test_implausible_settings_get_one_line_of_warning_and_run(data_root, tmp_path, args,
                                                              warning):
    status, _, stderr = run_in_process(["train", *QUICK, *args, "--out", str(tmp_path / "r")])
    assert status == 0, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    if warning is None:
        assert lines == []
    else:
        assert len(lines) == 1 and lines[0].startswith("bbb-gluon train: warning: "), stderr
        assert re.search(warning, lines[0]), lines[0]


# --------------------------------------------------------------------------- odd input

ODD_INT = ["-1", "0", "1", "2", "abc", "1.5", "", "nan", "-99999999999", "1e3", " 3"]
ODD_FLOAT = ["-1", "0", "1e-3", "0.5", "nan", "inf", "-inf", "abc", "", "1e308", "-0"]
# Values are drawn from these; every command is kept small (--subset, --steps), so that an
# accepted combination runs in about a second.
TRAIN_OPTIONS = {
    "--epochs": ["-1", "0", "1", "abc", "", "1.5"],
    "--hidden": ["8", "0", "-3", "8,8", "abc", "", "8,,8", "99999999999", "8,-1"],
    "--batch-size": ODD_INT + ["99999999999"],
    "--lr": ODD_FLOAT + ["1e6"], "--pi": ODD_FLOAT + ["1", "1.5"], "--log-sigma1": ODD_FLOAT,
    "--log-sigma2": ODD_FLOAT, "--prior-sigma": ODD_FLOAT, "--mu-scale": ODD_FLOAT,
    "--dropout": ODD_FLOAT + ["1"], "--lr-decay-factor": ODD_FLOAT,
    "--samples": ["-1", "0", "1", "2", "abc"],
    "--rho-init": ["-3", "-3,-4", "-4,-3", "abc", "nan", "-3,nan", "inf", "-3,-3", "50"],
    "--weighting": ["uniform", "blundell", "0.5", "-1", "nan", "abc", "inf"],
    "--num-valid": ["-1", "0", "100", "199", "200", "abc", "99999999999"],
    "--seed": ODD_INT, "--lr-decay-epochs": ["1", "0", "2,1", "abc", "", "1,1", "1,,2", "1,"],
    "--out": [out for out, _ in UNWRITABLE], "--data-dir": ["/nonexistent"],
    "--dataset": ["mnist", "fashion-mnist", "cifar", ""],
    "--model": ["bbb", "plain", "dropout", "x"],
    "--activation": ["relu", "tanh", "x"], "--prior": ["gaussian", "scale_mixture", "x"],
    "--complexity": ["mc", "kl", "x"], "--optimizer": ["adam", "sgd", "x"],
    "--ctx": ["cpu", "gpu", "cpu:0,cpu:0", "cpu:x", "", "cpu:0,cpu:1", "tpu"],
    "--kvstore": ["local", "device", "dist_sync", "x"],
    "--eval-samples": ["-1", "0", "2", "abc"], "--test-samples": ["-1", "0", "2", "abc"],
    "--transform": ["126", "255", "standardize", "x"],
    "--engine": ["auto", "fused", "reference", "x"],
    "--loss-reduction": ["mean", "sum", "x"], "--rho-lr-mult": ODD_FLOAT,
}
BANDIT_OPTIONS = {
    "--steps": ["-1", "0", "1", "20", "abc"], "--seeds": ["-1", "0", "1", "abc"],
    "--first-seed": ["-1", "0", "3", "abc"], "--threads": ["-1", "0", "1", "abc"],
    "--buffer": ["-1", "0", "1", "16", "abc"], "--updates": ["-1", "0", "1", "abc"],
    "--batch": ["-1", "0", "1", "8", "abc", "99"], "--hidden": ["-1", "0", "4", "abc"],
    "--act-samples": ["-1", "0", "1", "2", "abc"], "--optimizer": ["adam", "sgd", "x"],
    "--lr": ODD_FLOAT, "--prior": ["mixture", "gaussian", "x"], "--pi": ODD_FLOAT,
    "--log-sigma1": ODD_FLOAT, "--log-sigma2": ODD_FLOAT, "--prior-sigma": ODD_FLOAT,
    "--noise-sigma": ODD_FLOAT, "--mu-init": ODD_FLOAT, "--rho-init": ODD_FLOAT,
    "--complexity-over": ["seen", "buffer", "blundell", "x"], "--greedy-lr": ODD_FLOAT,
    "--rho-lr-mult": ODD_FLOAT, "--agents": ["greedy", "bayes-by-backprop,greedy", "", "x"],
}
RUN_OPTIONS = {
    "evaluate": {"--samples": ["-1", "0", "2", "abc"], "--bins": ["-1", "0", "3", "abc"],
                 "--ood": ["none", "mnist", "fashion-mnist", "x"],
                 "--checkpoint": ["best", "latest", "x"], "--ctx": ["cpu", "gpu", "cpu:1,cpu:2"],
                 "--data-dir": ["/nonexistent"]},
    "prune": {"--fractions": ["0,0.5", "", "abc", "-0.1", "1.5", "nan", "0,,1", "1", "0,"],
              "--checkpoint": ["best", "latest", "x"], "--ctx": ["cpu", "gpu", "x"]},
}


def _assert_clean_outcome(status, stderr, accepted=(0,)):
    """Accepted and run, or refused: exit 2 with one line. Never a traceback."""
    assert "Traceback" not in stderr, stderr
    if status in accepted:
        return
    assert_usage_error(status, stderr)


def _argv(draw, options, keys):
    argv = []
    for key in keys:
        argv += [f"{key}={draw(st.sampled_from(options[key]))}"]
    return argv


@st.composite
def train_argv(draw):
    keys = draw(st.lists(st.sampled_from(sorted(TRAIN_OPTIONS)), min_size=1, max_size=6,
                         unique=True))
    return _argv(draw, TRAIN_OPTIONS, keys)


@st.composite
def bandit_argv(draw):
    keys = draw(st.lists(st.sampled_from(sorted(BANDIT_OPTIONS)), min_size=1, max_size=6,
                         unique=True))
    return _argv(draw, BANDIT_OPTIONS, keys)


@st.composite
def run_argv(draw):
    command = draw(st.sampled_from(sorted(RUN_OPTIONS)))
    options = RUN_OPTIONS[command]
    keys = draw(st.lists(st.sampled_from(sorted(options)), min_size=1, max_size=4,
                         unique=True))
    return command, _argv(draw, options, keys)


@pytest.mark.slow
@pytest.mark.timeout(900)
@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(extra=train_argv())
def test_train_takes_any_arguments_without_a_traceback(data_root, extra):
    out = Path(tempfile.mkdtemp()) / "run"
    try:
        status, _, stderr = run_in_process(
            ["train", "--subset", "200", "--hidden", "8", "--epochs", "1", "--eval-samples",
             "0", "--test-samples", "0", "--no-progress", "--out", str(out), *extra])
        # 3: the run diverged (an enormous learning rate), said in one line
        _assert_clean_outcome(status, stderr, accepted=(0, 3))
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(900)
@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(extra=bandit_argv())
def test_bandit_takes_any_arguments_without_a_traceback(mushroom_root, extra):
    out = Path(tempfile.mkdtemp()) / "bandit"
    try:
        status, _, stderr = run_in_process(
            ["bandit", "--steps", "20", "--seeds", "1", "--hidden", "4", "--updates", "1",
             "--buffer", "16", "--batch", "8", "--no-progress", "--data-dir",
             str(mushroom_root), "--out", str(out), *extra])
        _assert_clean_outcome(status, stderr, accepted=(0, 3))  # 3: the weights diverged
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(900)
@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(drawn=run_argv())
def test_evaluate_and_prune_take_any_arguments_without_a_traceback(trained_run, drawn):
    command, extra = drawn
    copy = Path(tempfile.mkdtemp()) / "run"
    shutil.copytree(trained_run[0], copy)
    try:
        status, _, stderr = run_in_process([command, str(copy), *extra])
        _assert_clean_outcome(status, stderr)
    finally:
        shutil.rmtree(copy.parent, ignore_errors=True)


# One test per option (so that pytest-xdist spreads them), each value of it on its own.
ODD_VALUE_CASES = [("train", key) for key in sorted(TRAIN_OPTIONS)] + \
    [("bandit", key) for key in sorted(BANDIT_OPTIONS)]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("command", "key"), ODD_VALUE_CASES,
                         ids=[f"{c}{k}" for c, k in ODD_VALUE_CASES])
def test_every_odd_value_of_every_option_alone(data_root, mushroom_root, command, key,
                                               tmp_path):
    """Each drawn value of each option on its own (the combinations above rarely isolate
    one): accepted and run, or refused in one line; never a traceback."""
    if command == "train":
        base = ["train", "--subset", "200", "--hidden", "8", "--epochs", "1",
                "--eval-samples", "0", "--test-samples", "0", "--no-progress"]
        options, accepted = TRAIN_OPTIONS, (0, 3)
    else:
        base = ["bandit", "--steps", "20", "--seeds", "1", "--hidden", "4", "--updates", "1",
                "--buffer", "16", "--batch", "8", "--no-progress", "--data-dir",
                str(mushroom_root)]
        options, accepted = BANDIT_OPTIONS, (0, 3)  # 3: the weights diverged
    failures = []
    for k, value in enumerate(options[key]):
        out = tmp_path / f"run{k}"
        try:
            status, _, stderr = run_in_process([*base, "--out", str(out), f"{key}={value}"])
            _assert_clean_outcome(status, stderr, accepted)
        except AssertionError:
            failures.append(f"{key}={value}: status {status}\n{stderr[-600:]}")
        except Exception as e:  # noqa: BLE001 - a traceback the user would have seen
            failures.append(f"{key}={value}: {type(e).__name__}: {str(e)[-300:]}")
        shutil.rmtree(out, ignore_errors=True)
    assert not failures, "\n".join(failures)


def test_an_unreadable_host_file_is_a_usage_error(tmp_path):
    hosts = tmp_path / "hosts.bin"
    hosts.write_bytes(b"\xff\xfe\x00binary")
    status, _, stderr = run_in_process(["launch", "--host-file", str(hosts), "--", "train"])
    assert_usage_error(status, stderr, "^bbb-gluon launch: error: --host-file")
    status, _, stderr = run_in_process(["launch", "-n", "0", "--", "train"])
    assert_usage_error(status, stderr, "^bbb-gluon launch: error: --workers must be >= 1")


def test_a_missing_program_is_a_usage_error_of_launch_and_loads_no_mxnet(tmp_path):
    # FileNotFoundError from starting the workers: one line, without importing the
    # library to recognise it (the launcher runs no MXNet).
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "bbb_gluon", "launch",
                           "-n", "1", "--timeout", "60", "--", str(tmp_path / "no-program")],
                          capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stderr.splitlines() if not line.startswith("import time:")]
    assert_usage_error(done.returncode, "\n".join(lines),
                       "^bbb-gluon launch: error: .*No such file or directory")
    assert "| mxnet\n" not in done.stderr and not done.stderr.rstrip().endswith("| mxnet")


def test_each_error_the_command_line_reports_in_one_line_is_where_it_looks_for_it():
    # cli/main.py looks these classes up by module, without importing them: one that moved
    # would turn its one-line error into a traceback.
    import importlib

    from bbb_gluon.cli.main import ERROR_HOMES

    for name, module in ERROR_HOMES.items():
        error = getattr(importlib.import_module(f"bbb_gluon.{module}"), name)
        assert issubclass(error, Exception) and error.__module__ == f"bbb_gluon.{module}"


def test_regress_trains_a_uci_split_and_writes_its_scores(uci_root, tmp_path):
    out = tmp_path / "yacht"
    status, stdout, stderr = run_in_process(
        ["regress", "--uci", "yacht", "--split", "0", "--epochs", "5", "--samples", "20",
         "--data-dir", str(uci_root), "--out", str(out), "--no-progress"])
    assert status == 0, stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["test_rows"] == 31 and math.isfinite(metrics["log_likelihood"])
    assert metrics["rmse"] > 0 and set(metrics["coverage"]) == {"0.5", "0.9", "0.95"}
    assert (out / "intervals.png").read_bytes().startswith(PNG_SIGNATURE)
    stored = json.loads((out / "config.json").read_text())
    assert stored["train"]["likelihood"] == "gaussian" and stored["mlp"]["num_inputs"] == 6
    assert stored["data"]["uci"] == "yacht" and stored["machines"][0]["threads"]
    assert f"test RMSE {metrics['rmse']:.3f}" in stdout
    # the run loads back with its learned noise
    _, _, _, meta = load_run(out, which="latest")
    assert meta["loss"].sigma() > 0
    # the classifiers' commands say what the folder is instead of failing on it
    for command in ("evaluate", "prune"):
        status, _, stderr = run_in_process([command, str(out)])
        assert_usage_error(status, stderr, "is a regression run \\(bbb-gluon regress\\)")


@pytest.mark.parametrize("likelihood", ["heteroscedastic", "studentt"])
def test_regress_trains_on_a_csv_file_of_ones_own(tmp_path, likelihood):
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(120, 2))
    y = x[:, 0] - 2 * x[:, 1] + 0.1 * rng.normal(size=120)
    table = tmp_path / "mine.csv"
    table.write_text("a,b,price\n" + "\n".join(f"{p},{q},{t}" for (p, q), t in zip(
        x, y, strict=True)) + "\n")
    out = tmp_path / "run"
    status, _, stderr = run_in_process(
        ["regress", "--csv", str(table), "--target", "price", "--likelihood",
         likelihood, "--epochs", "3", "--samples", "10", "--out", str(out),
         "--no-progress"])
    assert status == 0, stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["test_rows"] == 12 and math.isfinite(metrics["log_likelihood"])
    stored = json.loads((out / "config.json").read_text())["train"]
    assert stored["likelihood"] == likelihood


@pytest.mark.parametrize("argv, message", [
    (["--uci", "housing"], "unknown UCI set 'housing'"),
    (["--uci", "yacht", "--split", "20"], "--split 20: yacht has splits 0 to 19"),
    (["--uci", "protein", "--split", "5"], "protein has splits 0 to 4"),
    ([], "give one of --uci NAME"),
    (["--csv", "x.csv"], "--csv needs --target COLUMN"),
    (["--uci", "yacht", "--target", "y"], "--target goes with --csv"),
    (["--uci", "yacht", "--epochs", "0"], "--epochs must be >= 1"),
    (["--csv", "MISSING.csv", "--target", "y"], "cannot read it"),
])
def test_regress_refuses_bad_input_in_one_line(tmp_path, argv, message):
    argv = [a.replace("MISSING", str(tmp_path / "missing")) for a in argv]
    status, _, stderr = run_in_process(["regress", *argv, "--out", str(tmp_path / "r")])
    assert_usage_error(status, stderr, re.escape(message))
    assert not (tmp_path / "r" / "config.json").exists()


def test_regress_names_a_csv_cell_that_is_not_a_number(tmp_path):
    table = tmp_path / "bad.csv"
    table.write_text("a,y\n" + "\n".join(f"{i},{i}" for i in range(11)) + "\nx,1\n")
    status, _, stderr = run_in_process(["regress", "--csv", str(table), "--target", "y",
                                        "--out", str(tmp_path / "r")])
    assert_usage_error(status, stderr, r"row 13, column 'a': 'x' is not a number")
    status, _, stderr = run_in_process(["regress", "--csv", str(table), "--target", "price",
                                        "--out", str(tmp_path / "r")])
    assert_usage_error(status, stderr, r"no column named 'price' \(its columns: a, y\)")
