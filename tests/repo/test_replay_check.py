"""experiments/replay_check.py: a committed result rerun here, bit for bit where the
machine matches its record, within a stated tolerance where it does not."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "experiments" / "replay_check.py"


def run(args, root, env=None):
    full = {k: v for k, v in os.environ.items()
            if k not in ("OMP_NUM_THREADS", "BBB_GLUON_TRAIN_THREADS",
                         "BBB_GLUON_PREDICT_THREADS")}
    full.update({"BBB_GLUON_DATA": str(root), **(env or {})})
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                          text=True, env=full, timeout=300)


def test_a_training_run_replays_bit_for_bit_on_its_own_machine(data_root, tmp_path):
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "bbb_gluon", "train", "--subset", "1000",
                           "--hidden", "16", "--epochs", "2", "--eval-samples", "2",
                           "--test-samples", "0", "--no-progress", "--out", str(out)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "BBB_GLUON_DATA": str(data_root)})
    assert done.returncode == 0, done.stderr
    check = run(["train", str(out), "--epochs", "2"], data_root)
    assert check.returncode == 0, check.stdout + check.stderr
    lines = check.stdout.splitlines()
    assert lines[0] == "machine: as recorded: a bit-for-bit replay is expected", lines[0]
    assert lines[-1] == "bit for bit"
    assert sum(" within " in line for line in lines) == 2 * 5  # 3 costs, 2 errors an epoch
    # A run committed before runs recorded their machine says so; another thread count
    # is named, and the replay is then judged by the tolerance.
    stored = json.loads((out / "config.json").read_text())
    threads = stored["machines"][0]["threads"]["train"]
    stored["machines"][0]["threads"] = {"train": threads + 1, "predict": threads + 1}
    (out / "config.json").write_text(json.dumps(stored))
    check = run(["train", str(out), "--epochs", "1"], data_root,
                env={"OMP_NUM_THREADS": str(threads)})
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.startswith("machine: differs from the record (threads: recorded")
    del stored["machines"]
    (out / "config.json").write_text(json.dumps(stored))
    check = run(["train", str(out), "--epochs", "1"], data_root)
    assert check.stdout.startswith("machine: the committed run records none"), check.stdout


def test_the_committed_bandit_run_is_checked_agent_by_agent(mushroom_root):
    check = run(["bandit", str(ROOT / "results" / "bandit"), "--steps", "30"], mushroom_root)
    # Within the tolerance or not depends on the CPU (the committed run records none):
    # what is checked is that every agent is judged and the machine is named.
    assert check.returncode in (0, 1), check.stderr
    lines = check.stdout.splitlines()
    assert lines[0].startswith("machine: the committed run records none")
    assert lines[1].startswith("actions: ") and " of 600 equal" in lines[1]
    agents = [line for line in lines[2:] if "cumulative regret after 30 steps" in line]
    assert len(agents) == 4
    assert check.returncode == (1 if any("OUTSIDE" in a for a in agents) else 0)


def test_bad_input_is_refused_with_exit_2(data_root, tmp_path):
    check = run(["train", str(tmp_path)], data_root)
    assert check.returncode == 2 and "holds no config.json" in check.stderr
    check = run(["bandit", str(ROOT / "results" / "bandit"), "--steps", "0"], data_root)
    assert check.returncode == 2 and "--steps must be 1 to the run's 50000" in check.stderr
    assert "Traceback" not in check.stderr
