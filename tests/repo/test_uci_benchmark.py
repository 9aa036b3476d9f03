"""experiments/uci_benchmark.py end to end on one split (its --smoke setting): the split's
JSON with the test scores and the setting chosen on validation rows, the summary, and a
second run that finds the split done and trains nothing."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from bbb_gluon.data import load_uci

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "experiments" / "uci_benchmark.py"


def run(out, root):
    env = {**os.environ, "BBB_GLUON_DATA": str(root), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), "--datasets", "yacht", "--splits", "0",
                           "--smoke", "--out", str(out)], capture_output=True, text=True,
                          env=env, timeout=300, check=True)


def test_one_split_end_to_end_then_resumed(uci_root, tmp_path):
    out = tmp_path / "uci"
    first = run(out, uci_root)
    assert "yacht split 0: RMSE" in first.stdout
    split = json.loads((out / "yacht" / "split_0.json").read_text())
    test = split["test"]
    data = load_uci("yacht", 0, root=uci_root)
    # the scores are on the original scale: an RMSE of the order of the target's spread
    assert 0 < test["rmse"] < 3 * data.y_std and np.isfinite(test["log_likelihood"])
    assert 0 <= test["coverage"] <= 1 and test["level"] == 0.95
    # the chosen setting is one the validation curve scored, and the best of them
    scored = [(c["log_likelihood"], t["setting"], c["epoch"]) for t in split["tuning"]
              for c in t["curve"]]
    best = max(scored, key=lambda s: s[0])
    assert split["chosen"] == {**best[1], "epochs": best[2]}
    assert split["validation_log_likelihood"] == best[0]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["yacht"]["splits"] == 1
    assert summary["yacht"]["rmse"]["mean"] == test["rmse"]
    assert summary["yacht"]["log_likelihood"]["se"] is None  # one split: no error bar
    before = (out / "yacht" / "split_0.json").stat().st_mtime_ns
    second = run(out, uci_root)
    assert "split 0:" not in second.stdout and "over 1 splits" in second.stdout
    assert (out / "yacht" / "split_0.json").stat().st_mtime_ns == before


def test_the_table_brackets_only_differences_the_columns_can_show():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))
    import uci_table

    summary = {"naval": {"splits": 20, "rmse": {"mean": 0.002, "se": 0.0001}}}
    tables = {"rmse": {"columns": ["A", "B", "C"],
                       "rows": {"Naval": {"A": (0.01, 0.0), "B": (0.0, 0.0), "C": (0.004, 0.001)}}}}
    row = uci_table.table(summary, tables, "rmse", higher_is_better=False).splitlines()[-1]
    # 0.01 ± 0.00: higher than ours at two decimals; 0.00 ± 0.00: equal there, no bracket;
    # a column with a spread always gets one
    assert row == ("| Naval | 20 | 0.002 ± 0.000 | 0.01 ± 0.00 (+80.0) | 0.00 ± 0.00 | "
                   "0.00 ± 0.00 (+2.0) |")


def _script(args, root, script=SCRIPT, cwd=None):
    env = {**os.environ, "BBB_GLUON_DATA": str(root), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(script), *args], capture_output=True,
                          text=True, env=env, timeout=300, cwd=cwd)


def _refused(done, message):
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_bad_input_is_refused_before_any_work(uci_root, tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    _refused(_script(["--out", str(a_file), "--smoke"], uci_root), "a file, not a folder")
    _refused(_script(["--out", "/proc/x", "--smoke"], uci_root), "cannot write a folder there")
    out = tmp_path / "never"
    _refused(_script(["--datasets", "yacht", "--splits", "99", "--out", str(out)], uci_root),
             "--splits 99: yacht has splits 0 to 19")
    assert not out.exists()  # nothing made
    _refused(_script(["--datasets", "protein", "--splits", "5", "--out", str(out)], uci_root),
             "protein has splits 0 to 4")


def test_results_of_other_settings_are_never_mixed(uci_root, tmp_path):
    out = tmp_path / "uci"
    run(out, uci_root)  # --smoke
    assert json.loads((out / "settings.json").read_text())["smoke"] is True
    before = sorted(p.name for p in out.rglob("*"))
    _refused(_script(["--datasets", "yacht", "--splits", "0", "--out", str(out)], uci_root),
             "holds smoke (--smoke) results of other settings")
    assert sorted(p.name for p in out.rglob("*")) == before
    # a folder written before settings.json existed: told by its splits' settings
    (out / "settings.json").unlink()
    _refused(_script(["--datasets", "yacht", "--splits", "0", "--out", str(out)], uci_root),
             "holds smoke (--smoke) results")
    # the committed full run is not a smoke run's folder either
    committed = Path(__file__).resolve().parents[2] / "results" / "uci"
    _refused(_script(["--datasets", "yacht", "--splits", "0", "--smoke", "--out",
                      str(committed)], uci_root), "holds full results of other settings")


def test_help_is_whole_and_the_table_says_what_is_missing(tmp_path):
    done = _script(["--help"], tmp_path)
    assert done.returncode == 0
    assert "standard splits, hyperparameters chosen per split on validation rows only." \
        in " ".join(done.stdout.split())
    assert "--out OUT" in done.stdout and "default runs/uci" in " ".join(done.stdout.split())
    table = Path(SCRIPT).with_name("uci_table.py")
    done = _script([], tmp_path / "no-data", script=table, cwd=tmp_path)
    _refused(done, "uci/SOURCE.md not found: it holds the published columns")


def test_the_ivon_model_trains_the_same_network_with_ivonstep(uci_root, tmp_path):
    out = tmp_path / "uci-ivon"
    done = _script(["--model", "ivon", "--datasets", "yacht", "--splits", "0", "--smoke",
                    "--out", str(out)], uci_root)
    assert done.returncode == 0, done.stderr
    split = json.loads((out / "yacht" / "split_0.json").read_text())
    assert split["chosen"]["method"] == "ivon" and split["settings"]["model"] == "ivon"
    assert np.isfinite(split["test"]["log_likelihood"]) and split["noise_sigma"] > 0
    # lambda is the rows trained on, times the tempering: the prior N(0, 1) either way
    assert split["chosen"]["ess_scale"] in (1, 10) and split["chosen"]["prior_sigma"] == 1.0
