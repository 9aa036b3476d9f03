"""Tests for bbb_gluon.pruning and ``bbb-gluon prune``.

The ranking is checked on a posterior whose mu and rho are set by hand, so which weights
go at each fraction is worked out in the comments; fraction 0 must leave predictions
bit-identical to the means, fraction 1 every weight (not bias) zero; the sparse export
must load back to the same predictions and be smaller than dense at 90% removed. The
command runs in-process on a tiny real-MNIST run trained once for the module.
"""

import csv
import json
import shutil
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest
from mxnet.gluon import nn

from bbb_gluon import Posterior, PosteriorMismatchError, use_means, use_weights
from bbb_gluon.cli import main
from bbb_gluon.core import ops
from bbb_gluon.core.selection import structural_params
from bbb_gluon.prediction import predict_proba
from bbb_gluon.pruning import (
    evaluate_pruning,
    export_pruned,
    load_pruned,
    prunable_keys,
    prune_masks,
    pruned_weights,
    pruning_scores,
    thresholds,
    weight_statistics,
)


def make_net(units=(2, 2, 1), seed=0):
    net = nn.HybridSequential()
    with net.name_scope():
        net.add(nn.Dense(units[1], activation="tanh", in_units=units[0]))
        net.add(nn.Dense(units[2], in_units=units[1]))
    net.initialize(mx.init.Normal(0.5))
    return net, Posterior(net, seed=seed)


def set_posterior(posterior, mus, sigmas):
    """Put hand-chosen mu and sigma (as rho = softplus^-1(sigma)) into the posterior."""
    for key, mu, sigma in zip(posterior.keys, mus, sigmas, strict=True):
        rho = np.log(np.expm1(np.asarray(sigma, dtype=np.float64)))
        posterior.params[f"{posterior.params.prefix}{key}_mu"].set_data(
            mx.nd.array(np.asarray(mu, dtype=np.float32)))
        posterior.params[f"{posterior.params.prefix}{key}_rho"].set_data(
            mx.nd.array(rho.astype(np.float32)))


@pytest.fixture
def hand_posterior():
    # Weights (4 in layer 0, 2 in layer 1) with:
    #   mu    = [[1, 2], [3, 4]]   and [[0.5, -5]]
    #   sigma = [[0.1, 10], [1, 1]] and [[0.01, 100]]
    #   |mu|/sigma = [[10, 0.2], [3, 4]] and [[50, 0.05]]
    # so the two rankings disagree. Biases are 7 and -7 with sigma 1 and 1e-3.
    net, posterior = make_net()
    set_posterior(posterior,
                  mus=[[[1, 2], [3, 4]], [7, -7], [[0.5, -5]], [0.25]],
                  sigmas=[[[0.1, 10], [1, 1]], [1, 1e-3], [[0.01, 100]], [1.0]])
    return net, posterior


def test_only_weights_are_pruned(hand_posterior):
    _, posterior = hand_posterior
    assert prunable_keys(posterior) == ["0.weight", "1.weight"]


def test_scores_are_the_stated_ones(hand_posterior):
    _, posterior = hand_posterior
    snr = pruning_scores(posterior, "snr")
    np.testing.assert_allclose(snr["0.weight"], [[10, 0.2], [3, 4]], rtol=1e-4)
    np.testing.assert_allclose(snr["1.weight"], [[50, 0.05]], rtol=1e-4)
    mu = pruning_scores(posterior, "abs_mu")
    np.testing.assert_array_equal(mu["0.weight"], [[1, 2], [3, 4]])
    np.testing.assert_array_equal(mu["1.weight"], [[0.5, 5]])


def test_half_pruned_by_snr_removes_the_three_lowest_ratios(hand_posterior):
    _, posterior = hand_posterior
    # Lowest three of 10, 0.2, 3, 4, 50, 0.05: 0.05, 0.2 and 3.
    masks = prune_masks(posterior, 0.5, "snr")
    np.testing.assert_array_equal(masks["0.weight"], [[True, False], [False, True]])
    np.testing.assert_array_equal(masks["1.weight"], [[True, False]])
    w = [a.asnumpy() for a in pruned_weights(posterior, 0.5, "snr")]
    np.testing.assert_array_equal(w[0], [[1, 0], [0, 4]])
    np.testing.assert_array_equal(w[2], [[0.5, 0]])
    np.testing.assert_array_equal(w[1], [7, -7])  # biases as they were


def test_half_pruned_by_abs_mu_removes_the_three_smallest_means(hand_posterior):
    _, posterior = hand_posterior
    # Lowest three of |mu| 1, 2, 3, 4, 0.5, 5: 0.5, 1 and 2.
    masks = prune_masks(posterior, 0.5, "abs_mu")
    np.testing.assert_array_equal(masks["0.weight"], [[False, False], [True, True]])
    np.testing.assert_array_equal(masks["1.weight"], [[False, True]])


def test_weight_statistics_by_hand(hand_posterior):
    _, posterior = hand_posterior
    rows = weight_statistics(posterior)
    assert [r["key"] for r in rows] == prunable_keys(posterior)
    first, second = rows
    # Layer 0: |mu| = 1, 2, 3, 4 and sigma = 0.1, 10, 1, 1.
    assert first["count"] == 4
    assert first["median_abs_mu"] == pytest.approx(2.5)
    assert first["median_sigma"] == pytest.approx(1.0, rel=1e-5)
    assert first["corr_abs_mu_sigma"] == pytest.approx(
        np.corrcoef([1, 2, 3, 4], [0.1, 10, 1, 1])[0, 1], rel=1e-4)
    assert first["sigma_q10"] == pytest.approx(np.quantile([0.1, 10, 1, 1], 0.1), rel=1e-4)
    # Layer 1: |mu| = 0.5, 5 and sigma = 0.01, 100: sigma grows with |mu|.
    assert second["corr_abs_mu_sigma"] == pytest.approx(1.0)


def test_weight_statistics_of_constant_sigma_has_no_correlation():
    net, posterior = make_net()
    set_posterior(posterior, mus=[[[1, 2], [3, 4]], [0, 0], [[0.5, -5]], [0.0]],
                  sigmas=[np.full((2, 2), 0.1), [1, 1], np.full((1, 2), 0.1), [1.0]])
    assert all(np.isnan(r["corr_abs_mu_sigma"]) for r in weight_statistics(posterior))


def test_thresholds_by_hand():
    scores = {"a": np.array([[10, 0.2], [3, 4]]), "b": np.array([[50, 0.05]])}
    # Sorted: 0.05 0.2 3 4 10 50. Removing k = round(f * 6): f=1/6 -> k=1, keep >= 0.2;
    # f=0.5 -> k=3, keep >= 4; f=0.9 -> k=5, keep >= 50.
    got = thresholds(scores, [0, 1 / 6, 0.5, 0.9, 1])
    np.testing.assert_array_equal(got, [-np.inf, 0.2, 4, 50, np.inf])


def test_tied_scores_at_the_threshold_are_all_kept():
    got = thresholds([np.ones(10)], [0.5])
    assert got[0] == 1.0  # keep >= 1: nothing removed, as documented


@pytest.mark.parametrize("bad", [[-0.1], [1.5], [np.nan], []])
def test_bad_fractions_raise(hand_posterior, bad):
    with pytest.raises(ValueError):
        thresholds([np.ones(3)], bad)


def test_bad_score_name(hand_posterior):
    with pytest.raises(ValueError, match="by must be"):
        pruning_scores(hand_posterior[1], "sigma")


@pytest.fixture
def trained_like():
    """A 20-30-4 net and a posterior with spread-out means and sigmas."""
    net, posterior = make_net(units=(20, 30, 4), seed=3)
    rng = np.random.default_rng(0)
    sigmas = [ops.softplus(mx.nd.array(rng.normal(-3, 1, s))).asnumpy()
              for s in posterior.shapes]
    set_posterior(posterior, [m.asnumpy() for m in posterior.mu()], sigmas)
    X = rng.normal(size=(64, 20)).astype(np.float32)
    return net, posterior, X


def test_fraction_zero_leaves_predictions_unchanged(trained_like):
    net, posterior, X = trained_like
    with use_means(net, posterior):
        means = predict_proba(net, None, X)
    with use_weights(net, posterior, pruned_weights(posterior, 0.0)):
        pruned = predict_proba(net, None, X)
    np.testing.assert_array_equal(pruned, means)


def test_fraction_one_zeroes_every_weight_but_no_bias(trained_like):
    net, posterior, X = trained_like
    weights = pruned_weights(posterior, 1.0, "snr")
    for key, w, mu in zip(posterior.keys, weights, posterior.mu(), strict=True):
        if key.endswith("weight"):
            assert not np.any(w.asnumpy()), key
        else:
            np.testing.assert_array_equal(w.asnumpy(), mu.asnumpy())


def test_evaluate_pruning_table(trained_like):
    net, posterior, X = trained_like
    y = predict_proba(net, posterior, X, 0).argmax(axis=1)  # the means are 100% right
    table = evaluate_pruning(net, posterior, X, y, [0, 0.5, 1])
    assert [list(r) for r in table] == [["fraction", "weights_left", "error_by_snr",
                                         "error_by_abs_mu"]] * 3
    assert [r["fraction"] for r in table] == [0.0, 0.5, 1.0]
    num_weights = 20 * 30 + 30 * 4
    assert [r["weights_left"] for r in table] == [num_weights, num_weights // 2, 0]
    assert table[0]["error_by_snr"] == table[0]["error_by_abs_mu"] == 0.0
    # With no weights every example gets the class of the largest output bias.
    bias_class = int(np.argmax(posterior.mu()[3].asnumpy()))
    expected = float(np.mean(y != bias_class))
    assert table[2]["error_by_snr"] == table[2]["error_by_abs_mu"] == expected


def test_evaluate_pruning_matches_predicting_with_pruned_weights(trained_like):
    net, posterior, X = trained_like
    y = np.arange(len(X)) % 4
    for by, column in (("snr", "error_by_snr"), ("abs_mu", "error_by_abs_mu")):
        with use_weights(net, posterior, pruned_weights(posterior, 0.7, by)):
            error = float(np.mean(predict_proba(net, None, X).argmax(axis=1) != y))
        assert evaluate_pruning(net, posterior, X, y, [0.7])[0][column] == error


def test_sparse_export_round_trips_and_is_smaller(trained_like, tmp_path):
    net, posterior, X = trained_like
    info = export_pruned(tmp_path / "pruned.params", posterior, 0.9, "snr")
    assert info["bytes"] == (tmp_path / "pruned.params").stat().st_size
    assert info["bytes"] < info["dense_bytes"]
    assert info["weights_left"] == 72  # 720 weights, 648 removed
    stored = mx.nd.load(str(tmp_path / "pruned.params"))
    assert stored["0.weight"].stype == "csr" and stored["0.bias"].stype == "default"
    assert stored["0.weight"].data.shape[0] + stored["1.weight"].data.shape[0] == 72
    with use_weights(net, posterior, pruned_weights(posterior, 0.9, "snr")):
        expected = predict_proba(net, None, X)
    fresh, _ = make_net(units=(20, 30, 4), seed=9)
    layout = load_pruned(tmp_path / "pruned.params", fresh)
    assert layout["fraction"] == 0.9 and layout["by"] == "snr"
    np.testing.assert_array_equal(predict_proba(fresh, None, X), expected)
    assert not list(tmp_path.glob(".tmp-*"))


def test_sparse_export_of_an_all_zero_net(trained_like, tmp_path):
    net, posterior, X = trained_like
    export_pruned(tmp_path / "p.params", posterior, 1.0)
    fresh, _ = make_net(units=(20, 30, 4), seed=9)
    load_pruned(tmp_path / "p.params", fresh)
    assert not np.any(fresh[0].weight.data().asnumpy())
    assert not np.any(fresh[1].weight.data().asnumpy())


def test_load_pruned_rejects_other_files_and_nets(trained_like, tmp_path):
    net, posterior, _ = trained_like
    posterior.save_parameters(tmp_path / "posterior.params")
    with pytest.raises(ValueError, match="not a bbb_gluon pruned"):
        load_pruned(tmp_path / "posterior.params", net)
    export_pruned(tmp_path / "p.params", posterior, 0.5)
    other, _ = make_net(units=(20, 31, 4))
    with pytest.raises(PosteriorMismatchError):
        load_pruned(tmp_path / "p.params", other)


# --------------------------------------------------------------------------- bbb-gluon prune


@pytest.fixture(scope="module")
def tiny_run(data_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "bbb"
    rc = main(["train", "--subset", "500", "--hidden", "32", "--epochs", "1",
               "--eval-samples", "2", "--test-samples", "2", "--no-progress",
               "--data-dir", str(data_root), "--out", str(out)])
    assert rc == 0
    return out


@pytest.fixture
def run(tiny_run, tmp_path):
    return shutil.copytree(tiny_run, tmp_path / "run")


def _one_line_error(capsys, rc):
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("bbb-gluon prune: error: "), err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_prune_writes_table_export_and_plots(run, capsys):
    assert main(["prune", str(run), "--fractions", "0,0.5,0.9"]) == 0
    out = capsys.readouterr().out
    with open(run / "pruning.csv") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["fraction"]) for r in rows] == [0.0, 0.5, 0.9]
    num_weights = 784 * 32 + 32 * 10
    assert [int(r["weights_left"]) for r in rows] == [num_weights, num_weights // 2,
                                                      round(0.1 * num_weights)]
    trained = json.loads((run / "metrics.json").read_text())
    # Nothing removed: the test error of the means that training reported.
    assert float(rows[0]["error_by_snr"]) == pytest.approx(trained["test_error_means"])
    assert float(rows[0]["error_by_abs_mu"]) == pytest.approx(trained["test_error_means"])
    export = run / "pruned_0.9.params"
    assert export.stat().st_size > 0
    assert f"{export.stat().st_size:,} bytes" in out and "dense" in out
    assert "by |mu|/sigma" in out
    for name in ("snr_histogram.png", "snr_cdf.png"):
        assert (run / name).stat().st_size > 0
    stats = json.loads((run / "weight_statistics.json").read_text())
    assert [r["count"] for r in stats] == [784 * 32, 32 * 10]
    assert "correlation of sigma with |mu|" in out


def test_prune_refuses_to_overwrite_without_force(run, capsys):
    (run / "pruning.csv").write_text("keep me")
    _one_line_error(capsys, main(["prune", str(run), "--fractions", "0.5"]))
    assert (run / "pruning.csv").read_text() == "keep me"
    assert not (run / "pruned_0.5.params").exists()
    assert main(["prune", str(run), "--fractions", "0.5", "--force"]) == 0
    assert (run / "pruning.csv").read_text().startswith("fraction,")


@pytest.mark.parametrize("planted", ["snr_histogram.png", "snr_cdf.png", "pruned_0.5.params",
                                     "weight_statistics.json"])
def test_prune_never_overwrites_any_of_its_files(run, capsys, planted):
    (run / planted).write_bytes(b"keep me")
    before = {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    err = _one_line_error(capsys, main(["prune", str(run), "--fractions", "0,0.5"]))
    assert planted in err
    assert {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("fractions", ["0,1.5", "-0.1", "a,b", "", "nan", "0.5,,x"])
def test_prune_bad_fractions(run, capsys, fractions):
    _one_line_error(capsys, main(["prune", str(run), "--fractions", fractions]))
    assert not (run / "pruning.csv").exists()


def test_prune_needs_a_bbb_run(run, capsys):
    config = json.loads((run / "config.json").read_text())
    config["train"]["model"] = "plain"
    (run / "config.json").write_text(json.dumps(config))
    err = _one_line_error(capsys, main(["prune", str(run)]))
    assert "needs a bbb run" in err
    assert not (run / "pruning.csv").exists()


def test_prune_not_a_run_and_corrupt_checkpoint(run, tmp_path, capsys):
    _one_line_error(capsys, main(["prune", str(tmp_path / "nowhere")]))
    best = run / "checkpoints" / "best.params"
    best.write_bytes(b"\0" * 100)
    err = _one_line_error(capsys, main(["prune", str(run)]))
    assert "corrupt" in err
    assert not (run / "pruning.csv").exists()


def test_prune_error_from_the_installed_command_has_no_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bbb_gluon", "prune", str(tmp_path),
                           "--fractions", "2"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr


def test_prune_help_lists_every_option(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["prune", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for option in ("RUN_DIR", "--fractions", "--data-dir", "--ctx", "--force", "--checkpoint"):
        assert option in text


def _best_is_epoch_one_latest_is_epoch_two(run):
    """A run folder whose best and latest checkpoints hold different networks."""
    epoch_one = (run / "checkpoints" / "best.params").read_bytes()
    assert main(["train", "--out", str(run), "--resume", "--epochs", "2", "--no-progress"]) == 0
    (run / "checkpoints" / "best.params").write_bytes(epoch_one)
    return run


def test_prune_latest_checkpoint_writes_its_own_files(run, capsys):
    from bbb_gluon.training import load_run

    _best_is_epoch_one_latest_is_epoch_two(run)
    capsys.readouterr()
    assert main(["prune", str(run), "--fractions", "0,0.5", "--checkpoint", "latest"]) == 0
    out = capsys.readouterr().out
    assert "latest checkpoint, epoch 2" in out
    for name in ("pruning_latest.csv", "pruned_0.5_latest.params", "weight_statistics_latest.json",
                 "snr_histogram_latest.png", "snr_cdf_latest.png"):
        assert (run / name).stat().st_size > 0, name
    for name in ("pruning.csv", "weight_statistics.json", "snr_histogram.png"):
        assert not (run / name).exists(), name  # the best checkpoint's are not touched

    stats = {}
    for which in ("best", "latest"):
        net, posterior, _, meta = load_run(run, which)
        stats[which] = weight_statistics(posterior)
    assert stats["best"] != stats["latest"]
    written = json.loads((run / "weight_statistics_latest.json").read_text())
    assert [r["median_abs_mu"] for r in written] == pytest.approx(
        [r["median_abs_mu"] for r in stats["latest"]], rel=1e-6)
    # Nothing removed: the end-of-training network's test error, as training reported it.
    with open(run / "pruning_latest.csv") as f:
        rows = list(csv.DictReader(f))
    end = json.loads((run / "metrics.json").read_text())["end_of_training"]
    assert float(rows[0]["error_by_snr"]) == pytest.approx(end["test_error_means"])

    assert main(["prune", str(run), "--fractions", "0,0.5"]) == 0
    assert "best checkpoint, epoch 1" in capsys.readouterr().out
    written = json.loads((run / "weight_statistics.json").read_text())
    assert [r["median_abs_mu"] for r in written] == pytest.approx(
        [r["median_abs_mu"] for r in stats["best"]], rel=1e-6)


def test_prune_bad_checkpoint_choice(run, capsys):
    with pytest.raises(SystemExit) as e:
        main(["prune", str(run), "--checkpoint", "last"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err
    assert not (run / "pruning.csv").exists()


# --------------------------------------------------------------------------- whole networks


def _train(net, posterior, X, y, steps=6):
    """A few steps of Bayes by Backprop, so that BatchNorm's gamma, beta and running
    statistics and the deterministic layers hold values of their own."""
    from mxnet import gluon

    from bbb_gluon import BBBLoss, BBBStep, GaussianPrior, trainable_params

    loss = BBBLoss(GaussianPrior(1.0), gluon.loss.SoftmaxCrossEntropyLoss(), num_batches=1)
    trainer = gluon.Trainer(trainable_params(net, posterior, loss), "adam",
                            {"learning_rate": 0.05})
    step = BBBStep(net, posterior, loss, trainer)
    for _ in range(steps):
        step(mx.nd.array(X), mx.nd.array(y), 0)


def bn_net(seed):
    mx.random.seed(seed)
    net = nn.HybridSequential()
    net.add(nn.Conv2D(4, 3, in_channels=1), nn.BatchNorm(in_channels=4),
            nn.Activation("relu"), nn.Flatten(), nn.Dense(3, in_units=4 * 4 * 4))
    net.initialize(mx.init.Normal(0.5))
    return net


def last_layer_net(seed):
    mx.random.seed(seed)
    net = nn.HybridSequential()
    net.add(nn.Dense(16, activation="tanh", in_units=5), nn.Dense(3, in_units=16))
    net.initialize(mx.init.Normal(0.5))
    return net


@pytest.fixture(scope="module")
def bn_trained():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(48, 1, 6, 6)).astype(np.float32)
    y = np.arange(48) % 3
    net = bn_net(0)
    posterior = Posterior(net, seed=1)
    _train(net, posterior, X, y)
    return net, posterior, X


@pytest.fixture(scope="module")
def last_layer_trained():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(48, 5)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 1)
    net = last_layer_net(0)
    posterior = Posterior(net, seed=1, select=[net[-1]])
    _train(net, posterior, X, y)
    return net, posterior, X


def _arrays(net):
    return {k: p.data().asnumpy().copy() for k, p in net.collect_params().items()}


@pytest.mark.parametrize("trained, make", [("bn_trained", bn_net),
                                           ("last_layer_trained", last_layer_net)])
def test_export_at_zero_predicts_as_the_trained_means(trained, make, request, tmp_path):
    net, posterior, X = request.getfixturevalue(trained)
    means = predict_proba(net, posterior, X, 0)
    fresh = make(7)
    assert not np.allclose(predict_proba(fresh, None, X), means)  # the load has work to do
    info = export_pruned(tmp_path / "p.params", posterior, 0.0, net=net)
    assert info["whole_network"] and info["weights_left"] == info["num_weights"]
    layout = load_pruned(tmp_path / "p.params", fresh)
    assert layout["whole_network"] and layout["fraction"] == 0.0
    np.testing.assert_array_equal(predict_proba(fresh, None, X), means)
    loaded = structural_params(fresh)
    outside = {k: p for k, p in structural_params(net).items() if k not in posterior.keys}
    assert outside  # BatchNorm's four arrays, or the first layer's two
    for key, param in outside.items():
        np.testing.assert_array_equal(loaded[key].data().asnumpy(), param.data().asnumpy())


def test_bn_network_trained_away_from_its_fresh_values(bn_trained):
    bn = bn_trained[0][1]
    assert np.any(bn.gamma.data().asnumpy() != 1) and np.any(bn.beta.data().asnumpy() != 0)
    assert np.any(bn.running_mean.data().asnumpy() != 0)
    assert np.any(bn.running_var.data().asnumpy() != 1)


def test_pruned_convolution_is_sparse_and_loads_as_the_pruned_means(bn_trained, tmp_path):
    net, posterior, X = bn_trained
    assert prunable_keys(posterior) == ["0.weight", "4.weight"]  # the 4-D kernel too
    info = export_pruned(tmp_path / "p.params", posterior, 0.9, net=net)
    assert info["weights_left"] == round(0.1 * (36 + 192))
    stored = mx.nd.load(str(tmp_path / "p.params"))
    assert stored["0.weight"].stype == "csr" and stored["0.weight"].shape == (4, 9)
    assert stored["1.running_mean"].stype == "default"
    with use_weights(net, posterior, pruned_weights(posterior, 0.9)):
        expected = predict_proba(net, None, X)
    fresh = bn_net(7)
    load_pruned(tmp_path / "p.params", fresh)
    assert fresh[0].weight.shape == (4, 1, 3, 3)
    np.testing.assert_array_equal(predict_proba(fresh, None, X), expected)


@pytest.mark.parametrize("trained, make, lost", [
    ("bn_trained", bn_net, "1.gamma, 1.beta, 1.running_mean, 1.running_var"),
    ("last_layer_trained", last_layer_net, "0.weight, 0.bias")])
def test_a_posterior_only_export_is_refused_naming_what_would_be_lost(
        trained, make, lost, request, tmp_path):
    net, posterior, X = request.getfixturevalue(trained)
    info = export_pruned(tmp_path / "p.params", posterior, 0.0)
    assert not info["whole_network"]
    fresh = make(7)
    before = _arrays(fresh)
    with pytest.raises(PosteriorMismatchError, match=f"network's {lost} are not in it"):
        load_pruned(tmp_path / "p.params", fresh)
    after = _arrays(fresh)
    assert all(np.array_equal(before[k], after[k]) for k in before)  # nothing changed
    # allow_missing: the posterior's arrays only, the rest as the network holds them
    load_pruned(tmp_path / "p.params", net, allow_missing=True)
    np.testing.assert_array_equal(predict_proba(net, None, X),
                                  predict_proba(net, posterior, X, 0))


def test_export_refuses_a_network_that_does_not_fit(bn_trained, tmp_path):
    _, posterior, _ = bn_trained
    with pytest.raises(PosteriorMismatchError):
        export_pruned(tmp_path / "p.params", posterior, 0.5, net=last_layer_net(0))
    assert not list(tmp_path.iterdir())


def _rewrite_layout(path, change):
    arrays = mx.nd.load(str(path))
    layout = json.loads(arrays["__layout__"].asnumpy().tobytes().decode())
    change(layout)
    arrays["__layout__"] = mx.nd.array(np.frombuffer(json.dumps(layout).encode(), np.uint8),
                                       dtype="uint8")
    mx.nd.save(str(path), arrays)


def test_format_1_exports_still_load_and_unknown_formats_are_refused(trained_like, tmp_path):
    net, posterior, X = trained_like
    path = tmp_path / "old.params"
    export_pruned(path, posterior, 0.5)

    def as_format_1(layout):  # what bbb_gluon wrote before the whole network went in
        layout["format"] = "bbb_gluon.pruned/1"
        del layout["whole_network"], layout["dense_shapes"]

    _rewrite_layout(path, as_format_1)
    with use_weights(net, posterior, pruned_weights(posterior, 0.5)):
        expected = predict_proba(net, None, X)
    fresh, _ = make_net(units=(20, 30, 4), seed=9)
    assert load_pruned(path, fresh)["format"] == "bbb_gluon.pruned/1"
    np.testing.assert_array_equal(predict_proba(fresh, None, X), expected)
    _rewrite_layout(path, lambda layout: layout.update(format="bbb_gluon.pruned/2",
                                                       dense_shapes={"0.weight": [7, 7]}))
    with pytest.raises(ValueError, match="corrupt pruned-network file"):
        load_pruned(path, fresh)
    _rewrite_layout(path, lambda layout: layout.update(format="bbb_gluon.pruned/9"))
    with pytest.raises(ValueError, match="pruned/9, which this version"):
        load_pruned(path, fresh)


def test_the_docs_pruning_example_runs(bn_trained, tmp_path, monkeypatch):
    import re
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    page = Path(__file__).resolve().parents[1] / "docs" / "api" / "pruning.rst"
    block = re.search(r"\.\. code-block:: python\n\n(.*?)\n\n\S", page.read_text(), re.S)
    code = "\n".join(line[3:] for line in block.group(1).splitlines())
    net, posterior, X = bn_trained
    y = predict_proba(net, posterior, X, 0).argmax(axis=1)
    monkeypatch.chdir(tmp_path)
    namespace = {"net": net, "posterior": posterior, "X_test": X, "y_test": y,
                 "new_net": bn_net(7)}
    exec(compile(code, str(page), "exec"), namespace)
    assert namespace["table"][0]["error_by_snr"] == 0.0  # the means' own labels
    assert (tmp_path / "pruning.png").stat().st_size > 0
    with use_weights(net, posterior, pruned_weights(posterior, 0.95)):
        expected = predict_proba(net, None, X)
    np.testing.assert_array_equal(namespace["probs"], expected)


def test_a_tied_weight_is_pruned_once_and_loads_under_both_names(tmp_path):
    first = nn.Dense(3, in_units=3)
    net = nn.HybridSequential()
    net.add(first, nn.Dense(3, in_units=3, params=first.params), nn.BatchNorm(in_channels=3))
    net.initialize(mx.init.Normal(0.5))
    posterior = Posterior(net, seed=0)
    assert prunable_keys(posterior) == ["0.weight"]
    X = np.random.default_rng(3).normal(size=(8, 3)).astype(np.float32)
    with use_weights(net, posterior, pruned_weights(posterior, 0.5)):
        expected = predict_proba(net, None, X)
    assert export_pruned(tmp_path / "p.params", posterior, 0.5, net=net)["num_weights"] == 9
    other = nn.Dense(3, in_units=3)
    fresh = nn.HybridSequential()
    fresh.add(other, nn.Dense(3, in_units=3, params=other.params), nn.BatchNorm(in_channels=3))
    fresh.initialize(mx.init.Normal(0.5))
    load_pruned(tmp_path / "p.params", fresh)
    assert int((fresh[1].weight.data() == 0).sum().asscalar()) == 5  # 4.5 rounds up
    np.testing.assert_array_equal(predict_proba(fresh, None, X), expected)
