"""Tests for ``bbb_gluon.signals``, and Ctrl-C sent to ``bbb-gluon launch`` at many moments.

The launcher, the training loop and the bandit runner read SIGINT/SIGTERM as a flag; a
signal never lands as an exception inside ``Popen.poll()`` or a checkpoint. The repeated
test below sends Ctrl-C to a real launch (scheduler, server, two workers on loopback)
while its workers start, in the first epochs, in the middle of a checkpoint write and
while they are already stopping, and each time requires: exit 130 within a bound, one
readable checkpoint of both workers, no process of the run left, and ``--resume`` going on
with the same history.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from bbb_gluon.signals import signals_blocked, stop_requests
from bbb_gluon.training import load_run

BOUND = 90  # seconds a launch may take to stop after Ctrl-C (it takes a few here)


# --------------------------------------------------------------------------- the flag


def test_a_signal_sets_the_flag_and_raises_nothing():
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN when the suite runs in the background
    with stop_requests() as stop:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)  # the handler runs between two bytecodes
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)
    assert stop.requested and stop.signum == signal.SIGINT and stop.count == 2
    assert stop.exit_status == 130
    assert signal.getsignal(signal.SIGINT) is before  # restored


def test_a_signal_held_while_blocked_arrives_once_the_flag_listens():
    with signals_blocked():
        # To this thread: a signal to the process would go to a thread that does not block
        # it (MXNet's). A child started here has only this thread's mask, so it holds
        # a signal to the process as this thread holds this one.
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        time.sleep(0.01)  # pending: no KeyboardInterrupt here
        with stop_requests() as stop:
            time.sleep(0.01)
            assert stop.requested and stop.signum == signal.SIGINT
        # Blocked again outside: the mask came back before the old handler did.
        assert signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_sigterm_gives_143():
    with stop_requests() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)
    assert stop.exit_status == 143


# --------------------------------------------------------------------------- launch


def _tagged(tag):
    """Live processes whose environment holds ``tag``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if tag.encode() in (entry / "environ").read_bytes() and \
                        (entry / "stat").read_text().split()[2] != "Z":
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


# Loaded into every worker through PYTHONPATH: the n-th write of the latest checkpoint
# marks a file, then takes a second, so the test can send Ctrl-C in the middle of it.
SLOW_CHECKPOINT = textwrap.dedent("""
    import os, time
    if os.environ.get("DMLC_ROLE") == "worker" and os.environ.get("BBB_TEST_SLOW_NTH"):
        import bbb_gluon._files as files
        original, seen = files.atomic_write, [0]

        def atomic_write(path, write, suffix=""):
            if not str(path).endswith("latest.params"):
                return original(path, write, suffix)
            seen[0] += 1

            def slow(tmp):
                if seen[0] == int(os.environ["BBB_TEST_SLOW_NTH"]):
                    open(os.environ["BBB_TEST_MARK"], "w").close()
                    time.sleep(1.0)
                write(tmp)
            return original(path, write if seen[0] != int(os.environ["BBB_TEST_SLOW_NTH"])
                            else slow, suffix)
        files.atomic_write = atomic_write
""")

TRAIN = ["train", "--subset", "600", "--num-valid", "100", "--hidden", "16",
         "--eval-samples", "0", "--test-samples", "0", "--no-progress"]

# When the first Ctrl-C goes, by family: what each value means for that family. Each
# family is its own chain of launches (and its own test, so that the four can run side by
# side under pytest-xdist).
MOMENTS = {
    # start-up: seconds after the launcher has started its four processes (the workers
    # are importing MXNet, connecting, loading data, or in their first batches)
    "start-up": (0.0, 0.3, 0.6, 1.0, 1.5, 2.0, 2.5, 3.0),
    # training: seconds after the first epoch's history was written
    "training": (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.8),
    # checkpoint: in the middle of the n-th write of the latest checkpoint
    "checkpoint": (1, 2, 3, 4, 5, 6),
    # stopping: Ctrl-C in the first epochs, then again after these many seconds
    "stopping": (0.0, 0.05, 0.2, 0.5, 1.0, 1.5, 2.0, 3.0),
}


def _wait_for(condition, proc, what, limit=BOUND):
    deadline = time.monotonic() + limit
    while not condition():
        if proc.poll() is not None:
            pytest.fail(f"the launch ended (status {proc.returncode}) before {what}:\n"
                        + proc.stderr.read())
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {limit} s")
        time.sleep(0.01)


def _launch(args, env, cwd):
    return subprocess.Popen([sys.executable, "-m", "bbb_gluon", "launch", "-n", "2",
                             "--threads", "1", "--timeout", str(3 * BOUND), "--", *args],
                            env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("family", MOMENTS)
def test_ctrl_c_at_any_moment_stops_the_launch_at_one_checkpoint(data_root, tmp_path, family):
    # One run folder per family: each launch after the first resumes the checkpoint the
    # last Ctrl-C left, and is itself stopped by Ctrl-C at the family's next moment; a
    # last launch resumes it to the end.
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_CHECKPOINT)
    out = tmp_path / "run"
    done, history = 0, []
    for k, (moment, value) in enumerate((family, v) for v in MOMENTS[family]):
        where = f"Ctrl-C #{k} ({moment} {value}, after epoch {done})"
        tag = f"bbb-test-{uuid.uuid4()}"
        mark = tmp_path / f"mark{k}"
        env = {**os.environ, "BBB_GLUON_DATA": str(data_root), "BBB_TEST_TAG": tag,
               "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
               "BBB_TEST_MARK": str(mark),
               "BBB_TEST_SLOW_NTH": str(value) if moment == "checkpoint" else ""}
        args = [*TRAIN, "--epochs", "1000", "--out", str(out)] if k == 0 else \
            ["train", "--out", str(out), "--resume", "--no-progress"]
        launcher = _launch(args, env, tmp_path)
        epochs_seen = len(history)
        try:
            if moment == "start-up":
                _wait_for(lambda t=tag: len(_tagged(t)) >= 5, launcher, "four processes")
                time.sleep(value)
            elif moment == "checkpoint":
                _wait_for(mark.exists, launcher, f"checkpoint write {value}")
            else:
                _wait_for(lambda n=epochs_seen: _epochs(out) > n, launcher, "a new epoch")
                time.sleep(value if moment == "training" else 0.0)
            sent = time.monotonic()
            launcher.send_signal(signal.SIGINT)
            if moment == "stopping":
                time.sleep(value)
                launcher.send_signal(signal.SIGINT)
                launcher.send_signal(signal.SIGINT)
            stdout, stderr = launcher.communicate(timeout=BOUND)
            took = time.monotonic() - sent
        finally:
            if launcher.poll() is None:
                launcher.kill()
                launcher.communicate()
        deadline = time.monotonic() + 10
        while _tagged(tag) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert launcher.returncode == 130, f"{where}: status {launcher.returncode}\n{stderr}"
        assert "Traceback" not in stderr + stdout, f"{where}:\n{stderr}"
        assert took < BOUND
        assert _tagged(tag) == [], f"{where}: processes left"
        _, _, _, meta = load_run(out, "latest")  # one readable checkpoint
        assert meta["workers"] == 2 and meta["batch"] == 0, where
        # It continued the run the last Ctrl-C left (the first launch: a new run).
        now = json.loads((out / "history.json").read_text())
        assert meta["epoch"] == len(now) > done and now[:done] == history, where
        done, history = meta["epoch"], now
    resumed = subprocess.run(
        [sys.executable, "-m", "bbb_gluon", "launch", "-n", "2", "--threads", "1",
         "--timeout", str(3 * BOUND), "--", "train", "--out", str(out), "--resume",
         "--epochs", str(done + 1), "--test-samples", "0", "--no-progress"],
        env={**os.environ, "BBB_GLUON_DATA": str(data_root)}, cwd=tmp_path,
        capture_output=True, text=True, timeout=3 * BOUND)
    assert resumed.returncode == 0, resumed.stderr
    now = json.loads((out / "history.json").read_text())
    assert len(now) == done + 1 and now[:done] == history
    assert sum(map(len, MOMENTS.values())) >= 30


def _epochs(out):
    try:
        return len(json.loads((out / "history.json").read_text()))
    except (OSError, ValueError):
        return 0
