"""The benchmark script still runs (tiny mode: a few batches; never a timed test)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Each runs a benchmark in processes of its own: seconds each, so they run first
# (tests/conftest.py).
pytestmark = pytest.mark.slow


def test_benchmark_runs_in_tiny_mode(tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_epoch.py"), "--tiny", "--hidden",
         "32", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "x floor" in done.stdout and "peak resident memory" in done.stdout
    results = json.loads(out.read_text())
    models = [row["model"] for row in results["configs"]]
    assert models[0].startswith("plain")
    assert any("scale mixture, uniform" in m for m in models)
    assert any("closed-form KL" in m for m in models)
    for row in results["configs"]:
        assert row["seconds_per_epoch"] > 0 and row["ratio_to_floor"] > 0
    assert results["predictive"]["ratio"] > 0


def test_small_predictive_benchmark_runs():
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_small_predictive.py"), "--samples",
         "20", "--points", "50", "--repeats", "1"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if "x the hand-written" in line]
    assert len(lines) == 3 and "predict_samples" in done.stdout


def test_cnn_and_user_loop_benchmark_runs_in_tiny_mode():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_cnn.py"), "--tiny"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "x the plain CNN" in done.stdout and "x fit's time" in done.stdout


def test_ivon_benchmark_runs_in_tiny_mode():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_ivon.py"), "--tiny"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("x the plain step") == 4 and "cpu: " in done.stdout


def test_bandit_benchmark_runs_in_tiny_mode(mushroom_root):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_bandit.py"),
                           "--tiny", "--data-dir", str(mushroom_root)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "x the Gluon loop" in done.stdout and "updates/s" in done.stdout


def test_distributed_benchmark_runs_in_tiny_mode():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_dist.py"), "--tiny"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if "x one process" in line]
    assert len(lines) == 2 and lines[0].startswith("bbb") and lines[1].startswith("plain")


def test_threads_benchmark_runs_in_tiny_mode():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_threads.py"),
                           "--tiny", "--threads", "1"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "bbb/fastest plain" in done.stdout and "predictive/plain" in done.stdout


def test_threads_benchmark_runs_the_peers_workload(fashion_root):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_threads.py"),
                           "--tiny", "--threads", "1", "--workload", "peers"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Fashion-MNIST" in done.stdout and "GaussianPrior(sigma=1)" in done.stdout


def test_peers_benchmark_runs_in_tiny_mode(fashion_root):
    # Without --torch-python the PyTorch contenders are left out, and it says so.
    script = str(ROOT / "benchmarks" / "bench_peers.py")
    done = subprocess.run([sys.executable, script, "--tiny", "--contenders",
                           "gluon,bbb-flipout,bt-flipout"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("no --torch-python: the PyTorch contenders are left out")
    rows = [line.split() for line in done.stdout.splitlines()
            if line.split()[:1] in (["gluon"], ["bbb-flipout"])]
    assert [r[0] for r in rows] == ["gluon", "bbb-flipout"] and rows[0][2] == "1.00"
    assert float(rows[1][1]) > 0 and "bt-flipout" not in done.stdout.split("cpu:")[1]
    done = subprocess.run([sys.executable, script, "--contenders", "gluon,pyro"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unknown contenders ['pyro']" in done.stderr
    done = subprocess.run([sys.executable, script, "--rounds", "0"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "--rounds must be at least 1" in done.stderr
    done = subprocess.run([sys.executable, script, "--contenders", ","], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "--contenders names none" in done.stderr


def test_step_profile_runs():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "profile_step.py"),
                           "--steps", "3", "--threads", "1"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "bbb_update" in done.stdout and "adam_update" in done.stdout


def test_memory_benchmark_runs():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_memory.py"),
                           "--tiny", "--samples", "2"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "every peak within its bound" in done.stdout
    assert done.stdout.count("predict_proba") == 2 and done.stdout.count("evaluate ") == 2


def test_fit_reports_benchmark_runs_in_tiny_mode(data_root):
    env = {**os.environ, "BBB_GLUON_DATA": str(data_root)}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_fit_reports.py"),
                           "--tiny", "--epochs", "1"], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "log_every=50:" in done.stdout and "log_every=10:" in done.stdout


def test_busy_machine_benchmark_runs_in_tiny_mode():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_busy.py"), "--tiny"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("cpu: ")
    rows = [line.split() for line in lines[3:]]
    assert [r[1] for r in rows] == ["tiny", "2x400"]
    assert all(float(r[-1]) > 0 for r in rows)


def test_small_facts_benchmark_runs():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_small_facts.py"),
                           "--repeats", "1"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "nd.sum / ops.total" in done.stdout and "folder names" in done.stdout


@pytest.mark.parametrize("net", ["mlp", "lenet"])
def test_the_estimators_per_step_benchmark_runs_in_tiny_mode(net):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_estimator_steps.py"),
                           "--tiny", "--net", net], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "cpu: " in done.stdout and f"net {net}," in done.stdout
    assert "local: " in done.stdout and "flipout: " in done.stdout
    assert "x the shared sample" in done.stdout


def test_estimators_benchmark_runs_in_tiny_mode(tmp_path):
    out = tmp_path / "estimators.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_estimators.py"),
                           "--tiny", "--out", str(out)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "x less variance" in done.stdout and "x the plain network" in done.stdout
    results = json.loads(out.read_text())
    assert {r["of"] for r in results["variance"]} == {"mu", "rho"}
    assert {r["batch"] for r in results["variance"]} == {16, 128}
    assert {(r["workload"], r["estimator"]) for r in results["speed"]} == {
        (w, e) for w in ("784-400-400-10", "LeNet-5") for e in ("reparam", "local", "flipout")}
    assert all(r["ratio"] > 0 for r in results["speed"])


def test_update_benchmark_times_every_compiled_setting_in_tiny_mode():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_update.py"),
                           "--tiny"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split() for line in done.stdout.splitlines() if line.endswith("x")]
    # 3 optimisers x 3 priors x 3 aux, each with a positive time and ratio
    assert len(rows) == 27
    assert {(r[0], r[1], r[2]) for r in rows} == {
        (o, p, a) for o in ("adam", "sgd", "sgd-momentum")
        for p in ("mixture-mc", "gaussian-mc", "gaussian-kl") for a in "012"}
    assert all(float(r[3]) > 0 and float(r[5].rstrip("x")) > 0 for r in rows)


@pytest.mark.parametrize("estimator", ["reparam", "flipout"])
def test_step_benchmark_prints_its_milliseconds_per_step(estimator):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_step.py"),
                           "--steps", "3", "--estimator", estimator, "--prior", "gaussian"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("cpu: ")
    words = lines[-1].split()
    assert words[:3] == [estimator, "gaussian", "readme"]  # README's call by default
    assert float(words[3]) > 0 and words[4] == "ms/step"


def tiny_output(script):
    """The lines ``benchmarks/<script> --tiny`` prints, after it exits with 0."""
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--tiny"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines()


def test_floor_benchmark_runs_in_tiny_mode():
    lines = tiny_output("bench_floor.py")
    assert lines[0].startswith("cpu: ") and "GB/s" in lines[1]
    rows = [line for line in lines if "x the floor" in line]
    assert len(rows) == 2 and "README's call" in rows[0] and "want_complexity=False" in rows[1]
    assert float(lines[-1].split(":")[1].split()[0]) > 0  # README's call / without the cost


def test_uci_step_benchmark_runs_in_tiny_mode():
    lines = tiny_output("bench_uci_step.py")
    assert lines[0].startswith("cpu: ")
    rows = [line.rsplit(None, 2) for line in lines[3:]]
    assert [r[0] for r in rows] == ["plain", "bbb", "bbb, README's call",
                                   "bbb, loss imperative"]
    assert rows[0][2] == "1.00x" and all(float(r[1]) > 0 for r in rows)


def test_small_step_benchmark_runs_in_tiny_mode():
    lines = tiny_output("bench_small_step.py")
    assert lines[0].startswith("cpu: ")
    rows = [line.split() for line in lines[2:]]
    assert [r[0] for r in rows] == ["13-50-1", "1-50-50-1", "13-50-1"]
    assert all(float(r[-1].rstrip("x")) > 0 and float(r[-4].rstrip("x")) > 0 for r in rows)


def test_launch_benchmark_runs_in_tiny_mode():
    lines = tiny_output("bench_launch.py")
    assert lines[0].startswith("cpu: ")
    names = [line.split("  ")[0].strip() for line in lines[1:]]
    assert names == ["adam_update (baseline)", "update, attributes apart",
                     "update, packed in args", "draw, new outputs", "draw, kept outputs"]
    assert all(float(line.split()[-2].rstrip("x")) > 0 for line in lines[1:])
