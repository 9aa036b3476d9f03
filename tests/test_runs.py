"""Tests for bbb_gluon.runs and the ``bbb-gluon compare`` / ``weights`` commands.

Two tiny real-MNIST runs (bbb and plain, 500 images, 2 epochs) are trained once for the
module; the summaries are checked against the history and metrics files the runs wrote,
and the weights against the checkpoints loaded directly.
"""

import csv
import json
import os
import shutil

import numpy as np
import pytest

from bbb_gluon import plotting
from bbb_gluon.cli import main
from bbb_gluon.plotting import plot_validation_curves
from bbb_gluon.runs import SUMMARY_COLUMNS, RunFolderError, run_weights, summarize_run
from bbb_gluon.training import load_run

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
COMMON = ["--subset", "500", "--hidden", "16", "--epochs", "2", "--eval-samples", "0",
          "--no-progress"]


@pytest.fixture(scope="module")
def runs(data_root, tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    bbb, plain = root / "bbb", root / "plain"
    assert main(["train", *COMMON, "--test-samples", "3", "--pi", "0.25", "--log-sigma2", "-7",
                 "--weighting", "uniform", "--rho-init", "-4", "--data-dir", str(data_root),
                 "--out", str(bbb)]) == 0
    assert main(["train", *COMMON, "--model", "plain", "--data-dir", str(data_root),
                 "--out", str(plain)]) == 0
    return bbb, plain


def _history(run):
    with open(run / "history.csv") as f:
        return list(csv.DictReader(f))


def test_summary_of_a_finished_bbb_run(runs):
    bbb, _ = runs
    s = summarize_run(bbb)
    assert set(s) == set(SUMMARY_COLUMNS)
    metrics = json.loads((bbb / "metrics.json").read_text())
    history = _history(bbb)
    errors = [float(r["valid_error"]) for r in history]
    assert s["run"] == "bbb" and s["model"] == "bbb" and s["hidden"] == "16"
    assert s["dataset"] == "mnist" and s["transform"] == "126"
    assert s["prior"] == "scale_mixture" and s["pi"] == 0.25
    assert s["log_sigma1"] == pytest.approx(0.0) and s["log_sigma2"] == pytest.approx(-7.0)
    assert s["prior_sigma"] is None
    assert s["weighting"] == "uniform" and s["rho_init"] == -4.0
    assert s["epochs_run"] == s["epochs_planned"] == 2
    assert s["best_valid_error"] == min(errors) == metrics["best_valid_error"]
    assert s["best_epoch"] == errors.index(min(errors)) + 1 == metrics["best_epoch"]
    assert s["last_valid_error"] == errors[-1]
    assert s["test_error_means"] == metrics["test_error_means"]
    assert s["test_error_mc"] == metrics["test_error_mc"] and s["test_samples"] == 3
    seconds = sorted(float(r["seconds"]) for r in history)
    assert s["median_seconds_per_epoch"] == pytest.approx(np.median(seconds))


def test_summary_of_a_plain_run_has_no_prior(runs):
    s = summarize_run(runs[1])
    assert s["model"] == "plain"
    for key in ("prior", "pi", "log_sigma1", "log_sigma2", "prior_sigma", "weighting",
                "rho_init", "samples", "test_error_mc"):
        assert s[key] is None, key


def test_summary_of_a_run_still_training(runs, tmp_path):
    """No metrics.json yet and one epoch in the history: read as far as it got."""
    run = shutil.copytree(runs[0], tmp_path / "running")
    (run / "metrics.json").unlink()
    lines = (run / "history.csv").read_text().splitlines()
    (run / "history.csv").write_text("\n".join(lines[:2]) + "\n")
    s = summarize_run(run)
    assert s["epochs_run"] == 1 and s["epochs_planned"] == 2
    assert s["best_epoch"] == 1
    assert s["best_valid_error"] == float(lines[1].split(",")[lines[0].split(",").index(
        "valid_error")])
    assert s["test_error_means"] is None


def test_ties_keep_the_first_best_epoch(runs, tmp_path):
    run = shutil.copytree(runs[0], tmp_path / "ties")
    rows = _history(run)
    for r in rows:
        r["valid_error"] = "0.5"
    with open(run / "history.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert summarize_run(run)["best_epoch"] == 1


def test_folders_that_are_not_runs(runs, tmp_path):
    with pytest.raises(RunFolderError, match="no config.json"):
        summarize_run(tmp_path)
    run = shutil.copytree(runs[0], tmp_path / "broken")
    (run / "metrics.json").write_text("[1, 2]")
    with pytest.raises(RunFolderError, match="metrics.json is corrupt"):
        summarize_run(run)
    (run / "metrics.json").unlink()
    (run / "history.csv").write_text("epoch,valid_error\nx,0.1\n")
    with pytest.raises(RunFolderError, match="corrupt"):
        summarize_run(run)
    (run / "history.csv").unlink()
    with pytest.raises(RunFolderError, match="no history.csv"):
        summarize_run(run)
    (run / "config.json").write_text("{not json")
    with pytest.raises(RunFolderError, match="corrupt"):
        summarize_run(run)
    (run / "config.json").write_text('{"train": {}}')
    with pytest.raises(RunFolderError, match="not a bbb_gluon run configuration"):
        summarize_run(run)


def test_weights_of_a_bbb_run(runs):
    bbb, _ = runs
    _, posterior, _, _ = load_run(bbb, "best")
    weight_keys = [i for i, k in enumerate(posterior.keys) if k.endswith("weight")]
    mus = [posterior.mu()[i].asnumpy().ravel() for i in weight_keys]
    sigmas = [posterior.sigma()[i].asnumpy().ravel() for i in weight_keys]
    means = run_weights(bbb, draw="means")
    np.testing.assert_array_equal(means, np.concatenate(mus))
    assert means.size == 784 * 16 + 16 * 10  # no biases
    a, b = run_weights(bbb, seed=1), run_weights(bbb, seed=1)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, run_weights(bbb, seed=2))
    # A draw is the means plus sigma-scaled standard normal noise.
    z = (a - means) / np.concatenate(sigmas)
    assert abs(z.mean()) < 0.05 and z.std() == pytest.approx(1.0, abs=0.05)
    with pytest.raises(ValueError, match="draw"):
        run_weights(bbb, draw="mode")


def test_weights_of_a_plain_run_are_its_parameters(runs):
    _, plain = runs
    net, posterior, _, _ = load_run(plain, "best")
    assert posterior is None
    expected = np.concatenate([p.data().asnumpy().ravel()
                               for name, p in net.collect_params().items()
                               if name.endswith("weight")])
    np.testing.assert_array_equal(run_weights(plain), expected)
    np.testing.assert_array_equal(run_weights(plain, draw="means"), expected)


# --------------------------------------------------------------------------- the commands


def _one_line_error(capsys, rc, command):
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith(f"bbb-gluon {command}: error: "), err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_compare_prints_and_writes_csv(runs, tmp_path, capsys):
    bbb, plain = runs
    out_csv = tmp_path / "search.csv"
    assert main(["compare", str(plain), str(bbb), "--sort", "valid",
                 "--csv", str(out_csv)]) == 0
    lines = capsys.readouterr().out.splitlines()
    # trained on a --subset: the table says so (a full run would not look different else)
    assert lines[0].split()[:4] == ["run", "subset", "model", "hidden"]
    assert [ln.split()[1] for ln in lines[1:3]] == ["500", "500"]
    with open(out_csv) as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(SUMMARY_COLUMNS)
    by_valid = sorted((summarize_run(r) for r in runs), key=lambda s: s["best_valid_error"])
    assert [r["run"] for r in rows] == [s["run"] for s in by_valid]
    assert [ln.split()[0] for ln in lines[1:3]] == [s["run"] for s in by_valid]
    bbb_row = next(r for r in rows if r["run"] == "bbb")
    assert float(bbb_row["best_valid_error"]) == summarize_run(bbb)["best_valid_error"]
    assert "pi=0.25" in next(ln for ln in lines if ln.startswith("bbb "))
    # Never overwritten without --force.
    out_csv.write_text("keep me")
    _one_line_error(capsys, main(["compare", str(bbb), "--csv", str(out_csv)]), "compare")
    assert out_csv.read_text() == "keep me"
    assert main(["compare", str(bbb), "--csv", str(out_csv), "--force"]) == 0
    assert out_csv.read_text().startswith("run,")


def test_compare_plots_the_validation_curves(runs, tmp_path, capsys, monkeypatch):
    bbb, plain = runs
    png = tmp_path / "curves.png"
    drawn = {}

    def spy(curves, path=None, **kwargs):
        drawn.update(curves)
        return plot_validation_curves(curves, path, **kwargs)

    monkeypatch.setattr(plotting, "plot_validation_curves", spy)
    # In one of the two orders, sorting by validation error reorders the table; each
    # curve must still be its own run's history.
    for order in ((plain, bbb), (bbb, plain)):
        drawn.clear()
        assert main(["compare", *map(str, order), "--sort", "valid", "--plot", str(png),
                     "--force"]) == 0
        assert png.read_bytes()[:8] == PNG_SIGNATURE
        for run in (bbb, plain):
            errors = [float(r["valid_error"]) for r in _history(run)]
            assert drawn[run.name][1] == errors
    png.write_bytes(b"keep")
    _one_line_error(capsys, main(["compare", str(bbb), "--plot", str(png)]), "compare")
    assert png.read_bytes() == b"keep"
    err = _one_line_error(capsys, main(["compare", str(bbb), "--plot",
                                        str(tmp_path / "c.pdf")]), "compare")
    assert "png" in err


def test_compare_of_a_folder_that_is_not_a_run(runs, tmp_path, capsys):
    err = _one_line_error(capsys, main(["compare", str(runs[0]), str(tmp_path)]), "compare")
    assert "no config.json" in err


def test_weights_command_writes_the_figure(runs, tmp_path, capsys):
    bbb, plain = runs
    png = tmp_path / "weights.png"
    assert main(["weights", str(plain), str(bbb), "--labels", "plain,Bayes by Backprop",
                 "--out", str(png)]) == 0
    out = capsys.readouterr().out
    assert png.read_bytes()[:8] == PNG_SIGNATURE
    assert "plain: 12,704 weights" in out and "Bayes by Backprop: 12,704 weights" in out
    before = png.read_bytes()
    for argv, message in [
        (["--out", str(png)], "already exists"),
        (["--out", str(tmp_path / "w.jpg")], "png"),
        (["--out", str(tmp_path / "w2.png"), "--labels", "one"], "labels"),
        (["--out", str(tmp_path / "w2.png"), "--labels", "same,same"], "label"),
        (["--out", str(tmp_path / "w2.png"), "--bins", "0"], "bins"),
    ]:
        err = _one_line_error(capsys, main(["weights", str(plain), str(bbb), *argv]), "weights")
        assert message in err.lower(), err
    assert png.read_bytes() == before
    assert not (tmp_path / "w2.png").exists()


def test_last10_and_errors_at_from_a_hand_written_history(tmp_path):
    from bbb_gluon.runs import curve_column, errors_at, read_history

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({
        "train": {"model": "bbb", "hidden": [8], "optimizer": "sgd", "lr": 1e-3,
                  "loss_reduction": "sum", "epochs": 12},
        "data": {"dataset": "mnist", "transform": "126"}}))
    errors = [0.1 - 0.005 * e for e in range(12)]
    lines = ["epoch,cost,test_error"] + [f"{e + 1},1.0,{v!r}" for e, v in enumerate(errors)]
    (run / "history.csv").write_text("\n".join(lines) + "\n")
    summary = summarize_run(run)
    assert summary["last10_test_error"] == pytest.approx(np.mean(errors[-10:]))
    assert summary["best_valid_error"] is None and summary["loss_reduction"] == "sum"
    history = read_history(run)
    assert curve_column(history) == "test_error"
    assert errors_at(history, [1, 12, 13], "test_error") == [errors[0], errors[11], None]


def test_evaluate_run_writes_the_report_it_returns(runs, fashion_root, tmp_path):
    from bbb_gluon.evaluation import evaluate_model
    from bbb_gluon.reports import evaluate_run, evaluation_files
    from bbb_gluon.runs import load_test_split

    bbb = tmp_path / "bbb"
    shutil.copytree(runs[0], bbb)
    report = evaluate_run(bbb, "latest", samples=3, ood="fashion-mnist", bins=5)
    files = evaluation_files(bbb, "latest", "fashion-mnist")
    assert [p.rsplit("/", 1)[1] for p in map(str, files)] == [
        "evaluation_latest.json", "reliability_latest.png", "least_certain_latest.png",
        "entropy_histograms_latest.png"]
    for path in files[1:]:
        assert open(path, "rb").read(8) == PNG_SIGNATURE
    assert json.loads(open(files[0]).read()) == json.loads(
        json.dumps(report).replace("NaN", "null"))
    net, posterior, config, meta = load_run(bbb, "latest")
    Xt, yt = load_test_split(bbb, config.seed).test
    means = evaluate_model(net, posterior, Xt, yt, "bbb", 3, bins=5).summary
    assert report["test_error_means"] == means["test_error_means"]
    assert report["epoch"] == meta["epoch"] == 2 and report["checkpoint"] == "latest"
    assert report["ood"]["dataset"] == "fashion-mnist"
    assert report["ood"]["num_examples"] == report["num_test"] == len(yt)
    with pytest.raises(ValueError, match="own dataset"):
        evaluate_run(bbb, ood="mnist")


def test_prune_run_writes_its_table_and_refuses_a_plain_run(runs, tmp_path):
    from bbb_gluon.pruning import evaluate_pruning
    from bbb_gluon.reports import prune_run, pruning_files
    from bbb_gluon.runs import load_test_split

    bbb = tmp_path / "bbb"
    shutil.copytree(runs[0], bbb)
    done = prune_run(bbb, [0.0, 0.5, 0.9])
    net, posterior, config, _ = load_run(bbb, "best")
    Xt, yt = load_test_split(bbb, config.seed).test
    assert done["table"] == evaluate_pruning(net, posterior, Xt, yt, [0.0, 0.5, 0.9])
    rows = list(csv.DictReader(open(pruning_files(bbb, "best", [0.9])[0])))
    assert [float(r["error_by_snr"]) for r in rows] == [r["error_by_snr"]
                                                         for r in done["table"]]
    assert all(os.path.exists(p) for p in pruning_files(bbb, "best", [0.9]))
    with pytest.raises(RunFolderError, match="needs a bbb run"):
        prune_run(runs[1], [0.5])
