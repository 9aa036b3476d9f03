"""Tests for bbb_gluon.metrics (NLL, Brier, ECE, reliability data, AUROC) and for
``bbb-gluon evaluate``.

The metric values are worked out by hand on small fixed inputs (the arithmetic is in the
comments) and compared to 1e-12; AUROC is also compared with a brute-force count over all
pairs. The command is run in-process on tiny real-MNIST runs trained once per module with
``bbb-gluon train --subset 500 --hidden 32 --epochs 1``.
"""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from bbb_gluon import metrics
from bbb_gluon.cli import main

# Four examples, two classes. Confidence, predicted class, correct?
#   [0.9, 0.1] y=0: 0.9, 0, yes      [0.2, 0.8] y=0: 0.8, 1, no
#   [0.6, 0.4] y=0: 0.6, 0, yes      [0.5, 0.5] y=1: 0.5, 0 (first of a tie), no
PROBS = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.5, 0.5]])
LABELS = np.array([0, 0, 0, 1])


def test_nll_by_hand():
    # -(log 0.9 + log 0.2 + log 0.6 + log 0.5) / 4
    # = (0.105360516 + 1.609437912 + 0.510825624 + 0.693147181) / 4 = 0.729692808
    assert metrics.nll(PROBS, LABELS) == pytest.approx(0.7296928081, abs=1e-9)


def test_nll_of_a_zero_probability_is_large_but_finite():
    value = metrics.nll([[1.0, 0.0]], [1])
    assert np.isfinite(value) and value > 80


def test_brier_by_hand():
    # (0.1² + 0.1²) + (0.8² + 0.8²) + (0.4² + 0.4²) + (0.5² + 0.5²) = 0.02 + 1.28 + 0.32 + 0.5
    # = 2.12, over 4 examples = 0.53
    assert metrics.brier_score(PROBS, LABELS) == pytest.approx(0.53, abs=1e-12)


def test_brier_extremes():
    assert metrics.brier_score([[1.0, 0.0, 0.0]], [0]) == 0.0
    assert metrics.brier_score([[1.0, 0.0, 0.0]], [2]) == pytest.approx(2.0)


def test_ece_by_hand_two_bins():
    # Bins (0, 0.5] and (0.5, 1]. Upper bin: 0.9, 0.8, 0.6, two correct: acc 2/3,
    # conf 2.3/3, gap 0.1. Lower bin: 0.5 (on the edge, so the lower bin), wrong: acc 0,
    # conf 0.5, gap 0.5. ECE = 3/4 * 0.1 + 1/4 * 0.5 = 0.2.
    assert metrics.expected_calibration_error(PROBS, LABELS, num_bins=2) == \
        pytest.approx(0.2, abs=1e-12)


def test_ece_by_hand_ten_bins_three_classes():
    probs = np.array([[0.3, 0.3, 0.4],      # conf 0.4 -> bin (0.3, 0.4], pred 2, y 2: right
                      [0.7, 0.2, 0.1],      # conf 0.7 -> bin (0.6, 0.7], pred 0, y 1: wrong
                      [0.05, 0.9, 0.05],    # conf 0.9 -> bin (0.8, 0.9], pred 1, y 1: right
                      [0.95, 0.03, 0.02]])  # conf 0.95 -> bin (0.9, 1.0], pred 0, y 0: right
    y = np.array([2, 1, 1, 0])
    # Each bin holds one example: gaps |1 - 0.4|, |0 - 0.7|, |1 - 0.9|, |1 - 0.95|
    # = 0.6 + 0.7 + 0.1 + 0.05 = 1.45, times 1/4 = 0.3625
    assert metrics.expected_calibration_error(probs, y, num_bins=10) == \
        pytest.approx(0.3625, abs=1e-12)
    rel = metrics.reliability_data(probs, y, num_bins=10)
    np.testing.assert_array_equal(rel["count"], [0, 0, 0, 1, 0, 0, 1, 0, 1, 1])


def test_reliability_data_by_hand():
    rel = metrics.reliability_data(PROBS, LABELS, num_bins=2)
    np.testing.assert_allclose(rel["edges"], [0.0, 0.5, 1.0])
    np.testing.assert_array_equal(rel["count"], [1, 3])
    np.testing.assert_allclose(rel["confidence"], [0.5, 2.3 / 3], atol=1e-12)
    np.testing.assert_allclose(rel["accuracy"], [0.0, 2 / 3], atol=1e-12)
    assert rel["num_examples"] == 4


def test_reliability_empty_bins_are_nan_and_counts_sum_to_n():
    rel = metrics.reliability_data(PROBS, LABELS, num_bins=4)
    # Confidences 0.5 -> (0.25, 0.5]; 0.6 -> (0.5, 0.75]; 0.8, 0.9 -> (0.75, 1].
    np.testing.assert_array_equal(rel["count"], [0, 1, 1, 2])
    assert np.isnan(rel["accuracy"][0]) and np.isnan(rel["confidence"][0])
    assert rel["count"].sum() == 4


def test_confidence_on_an_inexact_edge_goes_to_the_lower_bin():
    # 0.3 is not exactly representable; it must land in (0.2, 0.3] like the edges say.
    rel = metrics.reliability_data([[0.3, 0.3, 0.2, 0.2]], [0], num_bins=10)
    assert rel["count"][2] == 1


def test_perfectly_calibrated_predictions_have_zero_ece():
    # Ten examples at confidence 0.8 of which eight are right.
    probs = np.tile([0.8, 0.2], (10, 1))
    y = np.array([0] * 8 + [1] * 2)
    assert metrics.expected_calibration_error(probs, y, num_bins=10) == \
        pytest.approx(0.0, abs=1e-12)


def test_calibration_summary_collects_the_metrics():
    s = metrics.calibration_summary(PROBS, LABELS, num_bins=2)
    assert s["error"] == 0.5
    assert s["nll"] == pytest.approx(0.7296928081, abs=1e-9)
    assert s["brier"] == pytest.approx(0.53)
    assert s["ece"] == pytest.approx(0.2)
    assert s["num_bins"] == 2


@pytest.mark.parametrize("probs, y", [
    (np.ones(4), [0]),                       # not 2-D
    (np.ones((2, 1)), [0, 0]),               # one class
    (PROBS, [0, 0, 0]),                      # wrong label count
    (PROBS, [0, 0, 0, 2]),                   # label out of range
    (PROBS, [0, 0, 0, 0.5]),                 # not an integer
    ([[np.nan, 1.0]], [0]),                  # NaN
])
def test_bad_inputs_raise_value_error(probs, y):
    with pytest.raises(ValueError):
        metrics.nll(probs, y)
    with pytest.raises(ValueError):
        metrics.expected_calibration_error(probs, y)


def test_bad_bin_count():
    with pytest.raises(ValueError, match="num_bins"):
        metrics.reliability_data(PROBS, LABELS, num_bins=0)


# --------------------------------------------------------------------------- AUROC


def test_auroc_all_tied_is_one_half():
    assert metrics.auroc([0.3, 0.3, 0.3], [0.3, 0.3]) == 0.5


def test_auroc_three_against_three_with_one_tie():
    # Out 0.8 and 0.9 beat all three in-scores: 3 + 3. Out 0.4 beats 0.1 and 0.35 and ties
    # 0.4: 2.5. Total 8.5 of 9 pairs.
    assert metrics.auroc([0.1, 0.4, 0.35], [0.8, 0.4, 0.9]) == pytest.approx(8.5 / 9,
                                                                             abs=1e-12)


def test_auroc_perfect_reversed_and_symmetric():
    assert metrics.auroc([0, 1, 2], [3, 4]) == 1.0
    assert metrics.auroc([3, 4], [0, 1, 2]) == 0.0
    a, b = [0.1, 0.5, 0.5, 0.7], [0.5, 0.6, 0.2]
    assert metrics.auroc(a, b) == pytest.approx(1 - metrics.auroc(b, a), abs=1e-12)


def test_auroc_matches_a_count_over_all_pairs():
    rng = np.random.default_rng(3)
    s_in = rng.integers(0, 8, 57).astype(float)   # few values: many ties
    s_out = rng.integers(2, 10, 43).astype(float)
    diff = s_out[None, :] - s_in[:, None]
    expected = (np.sum(diff > 0) + 0.5 * np.sum(diff == 0)) / diff.size
    assert metrics.auroc(s_in, s_out) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("a, b", [([], [1.0]), ([1.0], []), ([np.nan], [1.0])])
def test_auroc_rejects_empty_or_nan(a, b):
    with pytest.raises(ValueError):
        metrics.auroc(a, b)


# --------------------------------------------------------------------------- bbb-gluon evaluate


@pytest.fixture(scope="module")
def tiny_runs(data_root, tmp_path_factory):
    """One tiny bbb, dropout and plain run, trained through the command line, on demand."""
    base = tmp_path_factory.mktemp("runs")
    made = {}

    def get(model):
        if model not in made:
            out = base / model
            rc = main(["train", "--model", model, "--subset", "500", "--hidden", "32",
                       "--epochs", "1", "--eval-samples", "2", "--test-samples", "2",
                       "--no-progress", "--data-dir", str(data_root), "--out", str(out)])
            assert rc == 0
            made[model] = out
        return made[model]

    return get


def _copy_run(src, dst):
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("evaluation.json", "*.png"))
    return dst


def _one_line_error(capsys, rc, command="evaluate"):
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith(f"bbb-gluon {command}: error: "), err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("model", ["bbb", "dropout", "plain"])
def test_evaluate_writes_its_files(tiny_runs, fashion_root, tmp_path, capsys, model):
    run = _copy_run(tiny_runs(model), tmp_path / "run")
    rc = main(["evaluate", str(run), "--samples", "3", "--bins", "10"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "test error" in out and "AUROC" in out
    for name in ("evaluation.json", "reliability.png", "least_certain.png",
                 "entropy_histograms.png"):
        assert (run / name).stat().st_size > 0, name
    ev = json.loads((run / "evaluation.json").read_text())
    trained = json.loads((run / "metrics.json").read_text())
    # The means' error is what training reported for the same checkpoint and test split.
    assert ev["test_error_means"] == pytest.approx(trained["test_error_means"], abs=1e-12)
    assert ev["num_test"] == 500 and ev["model"] == model
    assert 0 <= ev["ece"] <= 1 and 0 <= ev["brier"] <= 2 and ev["nll"] > 0
    assert sum(ev["reliability"]["count"]) == 500 and len(ev["reliability"]["count"]) == 10
    assert ev["ood"]["dataset"] == "fashion-mnist" and ev["ood"]["num_examples"] == 500
    assert 0 <= ev["ood"]["auroc_entropy"] <= 1
    if model == "plain":
        assert ev["test_error_mc"] is None and ev["samples"] is None
        assert ev["ood"]["auroc_mutual_information"] is None
        assert "means" not in ev  # its predictive is the softmax of the means already
    else:
        assert ev["samples"] == 3 and 0 <= ev["test_error_mc"] <= 1
        assert 0 <= ev["ood"]["auroc_mutual_information"] <= 1
        assert ev["mean_mutual_information"] > 0
        assert set(ev["means"]) == {"nll", "brier", "ece"}


def test_evaluate_without_ood(tiny_runs, tmp_path, capsys):
    run = _copy_run(tiny_runs("bbb"), tmp_path / "run")
    assert main(["evaluate", str(run), "--samples", "2", "--ood", "none"]) == 0
    ev = json.loads((run / "evaluation.json").read_text())
    assert ev["ood"] is None
    assert not (run / "entropy_histograms.png").exists()


def test_evaluate_refuses_to_overwrite_without_force(tiny_runs, tmp_path, capsys):
    run = _copy_run(tiny_runs("bbb"), tmp_path / "run")
    (run / "evaluation.json").write_text("keep me")
    _one_line_error(capsys, main(["evaluate", str(run), "--samples", "2", "--ood", "none"]))
    assert (run / "evaluation.json").read_text() == "keep me"
    assert main(["evaluate", str(run), "--samples", "2", "--ood", "none", "--force"]) == 0
    assert json.loads((run / "evaluation.json").read_text())["model"] == "bbb"


@pytest.mark.parametrize("planted, ood", [("reliability.png", "none"),
                                           ("least_certain.png", "none"),
                                           ("entropy_histograms.png", None)])
def test_evaluate_never_overwrites_any_of_its_files(tiny_runs, tmp_path, capsys, request,
                                                    planted, ood):
    if ood is None:  # the default OOD test, which needs Fashion-MNIST on disk
        request.getfixturevalue("fashion_root")
    run = _copy_run(tiny_runs("bbb"), tmp_path / "run")
    (run / planted).write_bytes(b"keep me")
    before = {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    argv = ["evaluate", str(run), "--samples", "2"] + (["--ood", ood] if ood else [])
    err = _one_line_error(capsys, main(argv))
    assert planted in err and "--force" in err
    assert {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


@pytest.fixture
def mnist_only(data_root, tmp_path):
    """A data folder with MNIST and no Fashion-MNIST."""
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "mnist").symlink_to(data_root / "mnist")
    return folder


def test_evaluate_without_fashion_mnist_skips_the_ood_test_with_a_note(tiny_runs, tmp_path,
                                                                      capsys, mnist_only):
    run = _copy_run(tiny_runs("bbb"), tmp_path / "run")
    assert main(["evaluate", str(run), "--samples", "2", "--data-dir", str(mnist_only)]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    assert "fashion-mnist" in err[0] and str(mnist_only) in err[0] and "skipped" in err[0]
    assert "--ood none" in err[0]
    assert json.loads((run / "evaluation.json").read_text())["ood"] is None
    assert not (run / "entropy_histograms.png").exists()


def test_evaluate_with_a_missing_ood_dataset_names_ood_none(tiny_runs, tmp_path, capsys,
                                                           mnist_only):
    run = _copy_run(tiny_runs("bbb"), tmp_path / "run")
    before = sorted(p.name for p in run.iterdir())
    err = _one_line_error(capsys, main(["evaluate", str(run), "--samples", "2", "--ood",
                                        "fashion-mnist", "--data-dir", str(mnist_only)]))
    assert "fashion-mnist" in err and "--ood none" in err and "dataset-fashion-mnist" in err
    assert sorted(p.name for p in run.iterdir()) == before


@pytest.mark.parametrize("args", [["--samples", "0"], ["--bins", "0"],
                                  ["--ood", "cifar"], ["--ood", "mnist"]])
def test_evaluate_bad_options(tiny_runs, tmp_path, capsys, args):
    run = _copy_run(tiny_runs("bbb"), tmp_path / "run")
    _one_line_error(capsys, main(["evaluate", str(run), *args]))
    assert not (run / "evaluation.json").exists()


def test_evaluate_not_a_run_folder(tmp_path, capsys):
    err = _one_line_error(capsys, main(["evaluate", str(tmp_path)]))
    assert "not a run folder" in err


@pytest.mark.parametrize("config", ['{"train": {}, "data": []}', "{not json", "{}"])
def test_evaluate_corrupt_config(tiny_runs, tmp_path, capsys, config):
    run = _copy_run(tiny_runs("bbb"), tmp_path / "run")
    (run / "config.json").write_text(config)
    err = _one_line_error(capsys, main(["evaluate", str(run), "--samples", "2"]))
    assert "corrupt" in err
    assert not (run / "evaluation.json").exists()


def test_evaluate_corrupt_checkpoint(tiny_runs, tmp_path, capsys):
    run = _copy_run(tiny_runs("bbb"), tmp_path / "run")
    best = run / "checkpoints" / "best.params"
    best.write_bytes(best.read_bytes()[:1000])
    err = _one_line_error(capsys, main(["evaluate", str(run), "--samples", "2"]))
    assert "corrupt" in err
    assert not (run / "evaluation.json").exists()
    assert not (run / "reliability.png").exists()


def test_evaluate_error_from_the_installed_command_has_no_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bbb_gluon", "evaluate", str(tmp_path),
                           "--samples", "0"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr


def test_evaluate_help_lists_every_option(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["evaluate", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for option in ("RUN_DIR", "--samples", "--ood", "--data-dir", "--bins", "--ctx",
                   "--force", "--checkpoint"):
        assert option in text


def test_evaluate_latest_checkpoint_writes_its_own_files(tiny_runs, tmp_path, capsys):
    run = _copy_run(tiny_runs("bbb"), tmp_path / "run")
    epoch_one = (run / "checkpoints" / "best.params").read_bytes()
    after_one = json.loads((run / "metrics.json").read_text())
    assert main(["train", "--out", str(run), "--resume", "--epochs", "2", "--no-progress"]) == 0
    (run / "checkpoints" / "best.params").write_bytes(epoch_one)  # best: epoch 1, latest: 2
    capsys.readouterr()
    assert main(["evaluate", str(run), "--samples", "2", "--ood", "none",
                 "--checkpoint", "latest"]) == 0
    assert "latest checkpoint, epoch 2" in capsys.readouterr().out
    ev = json.loads((run / "evaluation_latest.json").read_text())
    assert ev["checkpoint"] == "latest" and ev["epoch"] == 2 and ev["batch"] == 0
    assert set(ev["plots"].values()) == {"reliability_latest.png", "least_certain_latest.png"}
    for name in ev["plots"].values():
        assert (run / name).stat().st_size > 0
    assert not (run / "evaluation.json").exists() and not (run / "reliability.png").exists()
    end = json.loads((run / "metrics.json").read_text())["end_of_training"]
    assert end["epoch"] == 2
    assert ev["test_error_means"] == pytest.approx(end["test_error_means"], abs=1e-12)

    assert main(["evaluate", str(run), "--samples", "2", "--ood", "none"]) == 0
    assert "best checkpoint, epoch 1" in capsys.readouterr().out
    ev_best = json.loads((run / "evaluation.json").read_text())
    assert ev_best["checkpoint"] == "best" and ev_best["epoch"] == 1
    assert ev_best["test_error_means"] == pytest.approx(after_one["test_error_means"],
                                                         abs=1e-12)


# Two weight samples, two points, noise 1, targets standardised with deviation 2:
#   sample outputs f = [[0, 1], [2, 1]], targets y = [0, 2]
#   predictive mean [1, 1], errors [-1, 1]: RMSE 1, times 2 on the original scale
#   point 0: densities phi(0) and phi(2), so log((phi(0) + phi(2)) / 2)
#   point 1: phi(1) twice, so log phi(1) = -0.5 - log(2 pi)/2
#   the original scale divides each density by 2
#   the mixture CDFs at the targets: (Phi(0) + Phi(-2))/2 = 0.2614 and Phi(1) = 0.8413,
#   0.239 and 0.341 from a half: both in the central 95%, only the first in the central 50%
F = np.array([[0.0, 1.0], [2.0, 1.0]])
Y = np.array([0.0, 2.0])


def test_gaussian_scores_by_hand():
    phi = lambda z: np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)  # noqa: E731
    s = metrics.gaussian_scores(F, Y, 1.0, scale=2.0)
    ll = (np.log((phi(0.0) + phi(2.0)) / 2) + np.log(phi(1.0))) / 2 - np.log(2.0)
    assert s["rmse"] == pytest.approx(2.0, abs=1e-12)
    assert s["log_likelihood"] == pytest.approx(ll, abs=1e-12)
    assert s["coverage"] == 1.0 and s["level"] == 0.95
    assert metrics.gaussian_scores(F, Y, 1.0, level=0.5)["coverage"] == 0.5
    np.testing.assert_array_equal(metrics.interval_coverage(F, Y, 1.0, [0.5, 0.95]),
                                  [0.5, 1.0])
    # a shift of the targets changes nothing; one sample is a plain Gaussian
    shifted = metrics.gaussian_scores(F + 7, Y[:, None] + 7, 1.0, scale=2.0)
    assert shifted["log_likelihood"] == pytest.approx(s["log_likelihood"], abs=1e-12)
    one = metrics.gaussian_scores(np.array([0.0, 0.0]), [0.0, 0.0], 0.5)
    assert one["log_likelihood"] == pytest.approx(np.log(phi(0.0) / 0.5))


def test_gaussian_scores_far_targets_and_per_sample_noise():
    # densities that underflow float64 one by one still give a finite log-likelihood
    far = metrics.gaussian_scores(np.zeros((3, 1)), [100.0], 0.1)
    assert far["log_likelihood"] == pytest.approx(-0.5 * 1000 ** 2 - np.log(0.1)
                                                  - 0.5 * np.log(2 * np.pi))
    # the noise per sample and point broadcasts against the outputs
    noise = np.array([[1.0], [3.0]])
    s = metrics.gaussian_scores(np.zeros((2, 1)), [0.0], noise)
    expected = np.log((1 / 1.0 + 1 / 3.0) / 2 / np.sqrt(2 * np.pi))
    assert s["log_likelihood"] == pytest.approx(expected)


def test_a_calibrated_gaussian_covers_each_level():
    rng = np.random.default_rng(0)
    y = rng.normal(size=20000)
    got = metrics.interval_coverage(np.zeros(20000), y, 1.0, [0.5, 0.8, 0.95])
    np.testing.assert_allclose(got, [0.5, 0.8, 0.95], atol=0.01)
    # a predictive twice too narrow covers far less than it claims
    assert metrics.interval_coverage(np.zeros(20000), y, 0.5, [0.95])[0] < 0.7


def test_gaussian_scores_refuse_bad_shapes_and_scales():
    with pytest.raises(ValueError, match="one target per column"):
        metrics.gaussian_scores(F, [0.0, 1.0, 2.0], 1.0)
    with pytest.raises(ValueError, match="noise_sigma must be > 0"):
        metrics.gaussian_scores(F, Y, [1.0, 0.0])
    with pytest.raises(ValueError, match="scale must be > 0"):
        metrics.gaussian_scores(F, Y, 1.0, scale=0.0)
    with pytest.raises(ValueError, match=r"levels must lie in \(0, 1\), got \[1.5\]"):
        metrics.gaussian_scores(F, Y, 1.0, level=1.5)
    with pytest.raises(ValueError, match=r"levels must lie in \(0, 1\), got \[0.5, 0.0\]"):
        metrics.interval_coverage(F, Y, 1.0, [0.5, 0.0])
    with pytest.raises(ValueError, match=r"means must be \(samples, N\)"):
        metrics.gaussian_scores(np.zeros((1, 2, 1)), Y, 1.0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_nan_or_infinite_targets_are_refused_in_one_line(bad):
    y = np.array([0.0, bad])
    for call in (lambda: metrics.gaussian_scores(F, y, 1.0),
                 lambda: metrics.interval_coverage(F, y, 1.0, [0.9])):
        with pytest.raises(ValueError, match=r"^y holds 1 NaN or infinite target\(s\): drop "
                                             r"those rows before scoring$"):
            call()
