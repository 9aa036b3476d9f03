"""Tests for ``bbb_gluon.distributed``: the worker's side of a ``dist_sync`` run and the
launcher, with real scheduler, server and worker processes on loopback.

Each launched run is bounded by a timeout, takes a free port, and is checked to leave no
process behind. Two workers with one device each must end with the parameters that one
process with two devices reaches on the same batches and noise.
"""

import dataclasses
import json
import os
import signal
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

from bbb_gluon._kernels import cores
from bbb_gluon.distributed import LaunchError, WorkerGroup, launch, launch_commands
from bbb_gluon.training import fit, load_run

sys.path.insert(0, str(Path(__file__).parent))
import dist_worker  # noqa: E402

WORKER = str(Path(__file__).parent / "dist_worker.py")
LIMIT = 180  # seconds any launched run may take here (they take about 10)

# Most start processes and train: seconds each, so they run first (tests/conftest.py).
pytestmark = pytest.mark.slow


# --------------------------------------------------------------------------- one process


def test_one_process_group():
    group = WorkerGroup()
    assert not group.distributed and group.rank == 0 and group.num_workers == 1
    assert group.shard(128) == slice(0, 128)
    np.testing.assert_array_equal(group.allreduce([1.5, 2]), [1.5, 2.0])
    group.prepare([])  # nothing to do
    group.barrier()
    assert WorkerGroup("device").kvstore is None and WorkerGroup("local").kvstore is None


@pytest.mark.parametrize("n, workers", [(128, 2), (100, 3), (96, 2), (7, 7), (65, 4)])
def test_shards_cut_a_batch_as_split_and_load_cuts_it_over_devices(n, workers):
    group = WorkerGroup()
    group.num_workers = workers
    X = mx.nd.arange(n)
    parts = gluon.utils.split_and_load(X, [mx.cpu(k) for k in range(workers)],
                                       even_split=False)
    for rank, part in enumerate(parts):
        here = group.shard(n, rank)
        np.testing.assert_array_equal(X[here.start:here.stop].asnumpy(), part.asnumpy())


def test_batches_too_small_for_the_workers_are_refused_up_front():
    group = WorkerGroup()
    group.num_workers = 4
    group.check_batches(1000, 128, 1)  # last batch 104
    with pytest.raises(ValueError, match="batch of 3 examples"):
        group.check_batches(1027, 128, 1)  # last batch 3
    with pytest.raises(ValueError, match="4 workers x 2 devices"):
        group.check_batches(1030, 128, 2)  # last batch 6, for 8 devices in all
    with pytest.raises(ValueError, match="cannot be shared"):
        group.shard(3)


@pytest.mark.parametrize("kvstore, error", [("dist_async", ValueError), (3, TypeError),
                                            (mx.kv.create("local"), ValueError)])
def test_bad_kvstores(kvstore, error):
    with pytest.raises(error, match="kvstore|KVStore"):
        WorkerGroup(kvstore)


def test_launch_commands_for_several_machines():
    lines = launch_commands(["python", "train.py", "--epochs", "1"], 3, 2,
                            ["10.0.0.1", "10.0.0.2"], port=9100, threads=4, cwd="/data/run")
    roles = [(host, role) for host, role, _ in lines]
    assert roles == [("10.0.0.1", "scheduler"), ("10.0.0.1", "server"), ("10.0.0.2", "server"),
                     ("10.0.0.1", "worker"), ("10.0.0.2", "worker"), ("10.0.0.1", "worker")]
    for host, role, text in lines:
        assert text.startswith("cd /data/run && ")
        assert f"DMLC_ROLE={role}" in text and f"DMLC_NODE_HOST={host}" in text
        assert "DMLC_PS_ROOT_URI=10.0.0.1" in text and "DMLC_PS_ROOT_PORT=9100" in text
        assert "DMLC_NUM_WORKER=3" in text and "DMLC_NUM_SERVER=2" in text
        if role == "worker":
            assert text.endswith("python train.py --epochs 1") and "OMP_NUM_THREADS=4" in text
        elif role == "server":  # MXNet's import, which can run an optimizer sent to it
            assert text.endswith("-c 'import mxnet'") and "OMP_NUM_THREADS=1" in text
        else:
            assert text.endswith("-m bbb_gluon.distributed.node") and "OMP_NUM_THREADS=1" in text
    # Workers that update their own parameters: every server runs without the import.
    lines = launch_commands(["python", "train.py"], 2, 2, ["10.0.0.1"],
                            server_optimizer=False)
    for _, role, text in lines:
        assert text.endswith("python train.py") if role == "worker" else \
            text.endswith("-m bbb_gluon.distributed.node")


@pytest.mark.parametrize("kwargs, message", [
    ({"num_workers": 0}, "workers"), ({"num_servers": -1}, "servers"),
    ({"threads": 0}, "threads"), ({"timeout": 0}, "timeout"), ({"command": []}, "command"),
])
def test_launch_checks_its_arguments_before_starting_anything(kwargs, message):
    args = {"command": [sys.executable, "-c", "pass"], **kwargs}
    with pytest.raises(ValueError, match=message):
        launch(**args)


# --------------------------------------------------------------------------- launched runs


def _tagged_processes(tag):
    """PIDs of live processes whose environment holds ``tag``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if tag.encode() in (entry / "environ").read_bytes():
                state = (entry / "stat").read_text().split()[2]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def run_launch(data_root, *args, workers=2, timeout=LIMIT, **kwargs):
    """``launch`` of ``dist_worker.py args``, then a check that nothing it started is left."""
    tag = f"bbb-test-{uuid.uuid4()}"
    env = {"BBB_GLUON_DATA": str(data_root), "BBB_TEST_TAG": tag}
    kwargs.setdefault("server_optimizer", False)  # fit updates on the workers
    try:
        return launch([sys.executable, WORKER, *args], workers, 1, timeout=timeout,
                      threads=1, env=env, echo=False, **kwargs)
    finally:
        deadline = time.monotonic() + 10
        while _tagged_processes(tag) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _tagged_processes(tag) == [], "processes left running"


def single_process(model, engine):
    """One process, two devices: the run two workers must reproduce."""
    splits = dist_worker.data()
    return fit(dist_worker.config(model, engine), splits.train, splits.valid,
               net=dataclasses.replace(dist_worker.NET, ctx=[mx.cpu(0), mx.cpu(1)]),
               progress=False)


def arrays_of(result):
    if result.posterior is not None:
        return [a.asnumpy() for a in result.posterior.mu() + result.posterior.rho()]
    return [p.data(p.list_ctx()[0]).asnumpy()
            for p in result.net._collect_params_with_prefix().values()]


def load_rank(folder, rank):
    with np.load(folder / f"rank{rank}.npz") as z:
        return [z[f"arr_{k}"] for k in range(len(z.files))]


@pytest.mark.parametrize("model, engine", [("bbb", "auto"), ("bbb", "reference"),
                                           ("plain", "auto")])
def test_two_workers_equal_one_process_with_two_devices(data_root, tmp_path, model, engine):
    assert run_launch(data_root, "fit", str(tmp_path), model, engine) == 0
    ranks = [load_rank(tmp_path, r) for r in (0, 1)]
    for a, b in zip(*ranks, strict=True):
        np.testing.assert_array_equal(a, b)  # the workers hold the same parameters
    reference = single_process(model, engine)
    for a, b in zip(ranks[0], arrays_of(reference), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert np.abs(ranks[0][0]).max() > 0
    # Rank 0 evaluates: the same validation errors, and the same likelihood cost.
    history = json.loads((tmp_path / "rank0.json").read_text())
    assert [row["valid_error"] for row in history] == \
        [row["valid_error"] for row in reference.history]
    for row, ref in zip(history, reference.history, strict=True):
        assert row["likelihood_cost"] == pytest.approx(ref["likelihood_cost"], rel=1e-5)
    assert "valid_error" not in json.loads((tmp_path / "rank1.json").read_text())[0]


def test_a_distributed_run_resumed_from_its_checkpoint_continues_the_same_run(data_root,
                                                                             tmp_path):
    assert run_launch(data_root, "stop", str(tmp_path), "bbb", "auto") == 0
    run = tmp_path / "run"
    _, _, _, meta = load_run(run, "latest")
    assert (meta["epoch"], meta["batch"], meta["workers"]) == (0, 7, 2)
    assert run_launch(data_root, "resume", str(tmp_path), "bbb", "auto") == 0
    reference = single_process("bbb", "auto")
    for a, b in zip(load_rank(tmp_path, 0), arrays_of(reference), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    history = json.loads((run / "history.json").read_text())
    assert [row["valid_error"] for row in history] == \
        [row["valid_error"] for row in reference.history]
    # The interrupted epoch's likelihood cost is counted once, not once per worker.
    for row, ref in zip(history, reference.history, strict=True):
        assert row["likelihood_cost"] == pytest.approx(ref["likelihood_cost"], rel=1e-5)


# A Gluon Trainer of the user's own, as Gluon makes it for dist_sync: it sends its optimizer
# to the servers, which update the weights (update_on_kvstore=True).
SERVER_UPDATES = textwrap.dedent("""
    import sys
    import mxnet as mx
    from mxnet import autograd, gluon
    kv = mx.kv.create("dist_sync")
    net = gluon.nn.Dense(1, in_units=2, use_bias=False)
    net.initialize(mx.init.One())
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.25}, kvstore=kv)
    with autograd.record():
        loss = net(mx.nd.ones((1, 2))).sum()
    loss.backward()
    trainer.step(1)
    assert trainer._update_on_kvstore
    with open(sys.argv[1] + f"/rank{kv.rank}.txt", "w") as f:
        f.write(repr(net.weight.data().asnumpy().ravel().tolist()))
""")


def test_servers_run_the_optimizer_a_trainer_sends_them_unless_told_not_to(tmp_path):
    program = [sys.executable, "-c", SERVER_UPDATES, str(tmp_path)]
    tag = f"bbb-test-{uuid.uuid4()}"
    assert launch(program, 2, 1, timeout=LIMIT, threads=1, env={"BBB_TEST_TAG": tag},
                  echo=False) == 0
    # Two workers' gradients of ones, summed on the server: 1 - 0.25 * 2 on both.
    for rank in (0, 1):
        assert (tmp_path / f"rank{rank}.txt").read_text() == "[0.5, 0.5]"
    # Servers started without MXNet's Python package cannot, and say what to change.
    with pytest.raises(LaunchError) as info:
        launch(program, 2, 1, timeout=LIMIT, threads=1, env={"BBB_TEST_TAG": tag},
               echo=False, server_optimizer=False)
    text = str(info.value)
    assert "server 0" in text and "exited with status 1" in text
    assert "update_on_kvstore=True" in text and "server_optimizer=True" in text
    time.sleep(0.5)
    assert _tagged_processes(tag) == []


def test_a_dataloader_is_refused_before_connecting():
    X = np.zeros((64, 784), dtype=np.float32)
    loader = gluon.data.DataLoader(gluon.data.ArrayDataset(X, np.zeros(64)), batch_size=32)
    config = dist_worker.config("plain", "auto")
    from bbb_gluon.training import RunOptions, build_mlp

    with pytest.raises(ValueError, match="arrays, not a DataLoader"):
        fit(config, loader, net=build_mlp((8,)), options=RunOptions(kvstore="dist_sync"),
            progress=False)


def test_a_distributed_checkpoint_is_not_resumed_by_one_process(data_root, tmp_path):
    assert run_launch(data_root, "stop", str(tmp_path), "bbb", "auto") == 0
    splits = dist_worker.data()
    from bbb_gluon.training import CheckpointError

    with pytest.raises(CheckpointError, match="workers 2"):
        fit(dist_worker.config("bbb", "auto"), splits.train, splits.valid,
            net=dataclasses.replace(dist_worker.NET, ctx=mx.cpu(0)), run_dir=tmp_path / "run",
            resume=True, progress=False)


def test_a_killed_worker_stops_the_whole_run(data_root, tmp_path):
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match=r"worker \d \(pid \d+\) exited with status -9"):
        run_launch(data_root, "die", str(tmp_path), "bbb", "auto", timeout=120)
    assert time.monotonic() - t0 < 60  # noticed at once, not at the time limit


def _role_pid(tag, role):
    """The PID of the launched process of ``role`` ("server", "scheduler") in run ``tag``."""
    for pid in _tagged_processes(tag):
        try:
            environ = (Path("/proc") / str(pid) / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"DMLC_ROLE={role}".encode() in environ:
            return pid
    return None


@pytest.mark.parametrize("role", ["server", "scheduler"])
def test_a_dead_peer_stops_the_launch_within_seconds_and_resume_continues(data_root,
                                                                          tmp_path, role):
    tag = f"bbb-test-{uuid.uuid4()}"
    env = {"BBB_GLUON_DATA": str(data_root), "BBB_TEST_TAG": tag}
    killed = {}

    def kill_mid_run():
        deadline = time.monotonic() + LIMIT
        while not (tmp_path / "run" / "history.csv").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # in the middle of a later epoch
        killed["at"] = time.monotonic()
        killed["pid"] = _role_pid(tag, role)
        if killed["pid"] is not None:
            os.kill(killed["pid"], signal.SIGKILL)

    killer = threading.Thread(target=kill_mid_run, daemon=True)
    killer.start()
    with pytest.raises(LaunchError) as info:
        launch([sys.executable, WORKER, "long", str(tmp_path), "bbb", "auto"], 2, 1,
               timeout=LIMIT, threads=1, env=env, echo=False)
    killer.join()
    assert killed.get("pid") is not None, f"no {role} process found to kill"
    took = time.monotonic() - killed["at"]
    assert took < 20, f"noticed after {took:.1f} s"
    name = "scheduler" if role == "scheduler" else "server 0"
    assert f"{name} (pid {killed['pid']}) exited with status -9" in str(info.value)
    time.sleep(0.5)
    assert _tagged_processes(tag) == []
    _, _, _, meta = load_run(tmp_path / "run", "latest")
    done = meta["epoch"]
    assert done >= 1 and meta["workers"] == 2
    before = json.loads((tmp_path / "run" / "history.json").read_text())[:done]
    assert run_launch(data_root, "resume", str(tmp_path), "bbb", "auto", str(done + 1)) == 0
    history = json.loads((tmp_path / "run" / "history.json").read_text())
    assert len(history) == done + 1 and history[:done] == before


def test_the_time_limit_stops_every_process(data_root, tmp_path):
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match="time limit of 3 s"):
        run_launch(data_root, "hang", str(tmp_path), "bbb", "auto", timeout=3)
    assert time.monotonic() - t0 < 30


def test_a_failing_worker_reports_its_last_lines(data_root, tmp_path):
    tag = f"bbb-test-{uuid.uuid4()}"
    program = [sys.executable, "-c",
               "import sys; print('one'); print('two'); sys.exit(5)"]
    with pytest.raises(LaunchError) as info:
        launch(program, 2, 1, timeout=LIMIT, env={"BBB_TEST_TAG": tag}, echo=False)
    text = str(info.value)
    assert "exited with status 5" in text and "one" in text and "two" in text
    assert "every process of the run was stopped" in text
    time.sleep(0.5)
    assert _tagged_processes(tag) == []


def test_launch_through_the_command_line(data_root, tmp_path, monkeypatch):
    from bbb_gluon.cli import main

    monkeypatch.setenv("BBB_GLUON_DATA", str(data_root))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "two"
    status = main(["launch", "-n", "2", "--timeout", str(LIMIT), "--", "train", "--subset",
                   "600", "--hidden", "16", "--epochs", "1", "--eval-samples", "0",
                   "--test-samples", "0", "--no-progress", "--out", str(out)])
    assert status == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["epochs"] == 1 and metrics["test_error_means"] < 0.9
    _, _, _, meta = load_run(out, "latest")
    assert meta["workers"] == 2
    assert os.path.exists(out / "learning_curve.png")


def test_ctrl_c_stops_every_worker_at_one_checkpoint_and_resume_continues(data_root,
                                                                        tmp_path):
    import signal
    import subprocess

    tag = f"bbb-test-{uuid.uuid4()}"
    env = {**os.environ, "BBB_GLUON_DATA": str(data_root), "BBB_TEST_TAG": tag}
    out = tmp_path / "run"
    train = ["train", "--subset", "3000", "--hidden", "16", "--eval-samples", "0",
             "--test-samples", "0", "--no-progress", "--out", str(out)]
    launcher = subprocess.Popen([sys.executable, "-m", "bbb_gluon", "launch", "-n", "2",
                                 "--timeout", str(LIMIT), "--", *train, "--epochs", "200"],
                                env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + LIMIT
    while not (out / "history.csv").exists() and time.monotonic() < deadline:
        time.sleep(0.1)  # the first epoch has ended: the workers are training
    launcher.send_signal(signal.SIGINT)
    stdout, stderr = launcher.communicate(timeout=LIMIT)
    assert launcher.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "interrupted: checkpoint saved" in stdout
    time.sleep(0.5)
    assert _tagged_processes(tag) == []
    _, _, _, meta = load_run(out, "latest")
    done = meta["epoch"]
    assert 1 <= done < 200 and meta["workers"] == 2
    history = json.loads((out / "history.json").read_text())
    status = subprocess.run([sys.executable, "-m", "bbb_gluon", "launch", "-n", "2",
                             "--timeout", str(LIMIT), "--", "train", "--out", str(out),
                             "--resume", "--epochs", str(done + 1), "--test-samples", "0",
                             "--no-progress"], env=env, cwd=tmp_path, capture_output=True,
                            text=True, timeout=LIMIT)
    assert status.returncode == 0, status.stderr
    resumed = json.loads((out / "history.json").read_text())
    assert len(resumed) == done + 1 and resumed[:done] == history[:done]
    # Each worker trained with its share of the cores, recorded; the resumed launch took
    # the recorded count (not a new choice), so the run stayed on one record.
    machines = json.loads((out / "config.json").read_text())["machines"]
    per_worker = max(1, cores() // 2)
    assert [m["threads"] for m in machines] == [{"train": per_worker, "predict": per_worker}]
    assert "bit-identical" not in status.stderr and "bit for bit" not in status.stderr


def test_a_host_file_run_goes_through_ssh(data_root, tmp_path, monkeypatch):
    # A stand-in for ssh that runs the remote command here: what launch sends through ssh
    # must be a complete command (folder, environment, program) on its own.
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ssh").write_text('#!/bin/sh\n[ "$1" = "-tt" ] && shift\nhost=$1; shift\n'
                              'echo "$host" >> "$SSH_LOG"\nexec sh -c "$*"\n')
    (fake / "ssh").chmod(0o755)
    log = tmp_path / "ssh.log"
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    monkeypatch.setenv("SSH_LOG", str(log))
    from bbb_gluon.distributed import free_port

    monkeypatch.chdir(tmp_path)
    status = run_launch(data_root, "fit", str(tmp_path), "plain", "auto",
                        ssh_hosts=["127.0.0.1", "localhost"], port=free_port())
    assert status == 0
    for a, b in zip(load_rank(tmp_path, 0), load_rank(tmp_path, 1), strict=True):
        np.testing.assert_array_equal(a, b)
    # scheduler, server and worker 0 on the first host, worker 1 on the second
    assert sorted(log.read_text().split()) == ["127.0.0.1"] * 3 + ["localhost"]


def test_a_second_ctrl_c_ends_a_program_that_never_listens(tmp_path):
    # The workers start with SIGINT held; a program that never calls fit keeps it held, so
    # the first Ctrl-C waits in it. The second sends SIGTERM, which it cannot hold.
    from bbb_gluon.distributed import LaunchInterrupted

    tag = f"bbb-test-{uuid.uuid4()}"
    program = [sys.executable, "-c", "import time; time.sleep(120)"]

    def press_twice():
        time.sleep(4)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=press_twice, daemon=True).start()
    t0 = time.monotonic()
    with pytest.raises(LaunchInterrupted) as info:
        launch(program, 2, 1, timeout=LIMIT, env={"BBB_TEST_TAG": tag}, echo=False)
    assert info.value.exit_status == 130
    assert time.monotonic() - t0 < 30  # not the 120 s grace
    time.sleep(0.5)
    assert _tagged_processes(tag) == []


def test_a_worker_failing_while_it_stops_is_a_failure(tmp_path):
    from bbb_gluon.distributed import LaunchInterrupted

    tag = f"bbb-test-{uuid.uuid4()}"
    # Exits 1 on Ctrl-C, as a worker whose checkpoint write failed would.
    program = [sys.executable, "-c",
               "import signal, sys, time\n"
               "signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])\n"
               "signal.signal(signal.SIGINT, lambda *a: sys.exit(1))\n"
               "print('ready', flush=True)\n"
               "time.sleep(120)"]

    def press():
        time.sleep(4)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=press, daemon=True).start()
    with pytest.raises(LaunchError, match="exited with status 1 while stopping on Ctrl-C"):
        try:
            launch(program, 2, 1, timeout=LIMIT, env={"BBB_TEST_TAG": tag}, echo=False)
        except LaunchInterrupted:
            pytest.fail("a failing stop was reported as a clean one")
    time.sleep(0.5)
    assert _tagged_processes(tag) == []
