"""Tests for bbb_gluon.evaluation: evaluate_model's numbers against the metrics computed
one by one from the same predictive."""

import math

import mxnet as mx
import numpy as np
import pytest
from mxnet.gluon import nn

from bbb_gluon import Posterior, metrics
from bbb_gluon.evaluation import evaluate_model
from bbb_gluon.prediction import error_rate, predict_proba, uncertainty


def make(dropout=False):
    net = nn.HybridSequential()
    net.add(nn.Dense(16, activation="relu", in_units=6))
    if dropout:
        net.add(nn.Dropout(0.5))
    net.add(nn.Dense(3, in_units=16))
    net.initialize(mx.init.Normal(0.5))
    return net


def data(n=60, seed=0, shift=0.0):
    rng = np.random.default_rng(seed)
    X = (rng.normal(size=(n, 6)) + shift).astype(np.float32)
    return X, rng.integers(0, 3, n)


@pytest.mark.parametrize("model", ["bbb", "dropout", "plain"])
def test_numbers_match_the_metrics_of_the_same_predictive(model):
    net = make(dropout=model == "dropout")
    posterior = Posterior(net, seed=0, rho_init=-2.0) if model == "bbb" else None
    X, y = data()
    X_ood, _ = data(40, seed=1, shift=3.0)
    seed_state = posterior.noise.state_dict() if posterior else None
    mx.random.seed(5)
    ev = evaluate_model(net, posterior, X, y, model, samples=7, X_ood=X_ood, bins=5)
    s = ev.summary
    assert s["test_error_means"] == error_rate(
        predict_proba(net, posterior if model == "bbb" else None, X, 0), y)
    assert s["nll"] == pytest.approx(metrics.nll(ev.probs, y))
    assert s["brier"] == pytest.approx(metrics.brier_score(ev.probs, y))
    assert s["ece"] == pytest.approx(metrics.expected_calibration_error(ev.probs, y, 5))
    assert s["ood"]["auroc_entropy"] == pytest.approx(metrics.auroc(
        ev.uncertainty_in["predictive_entropy"], ev.uncertainty_out["predictive_entropy"]))
    assert s["ood"]["num_examples"] == 40 and s["num_test"] == 60
    assert len(s["reliability"]["count"]) == 5 and sum(s["reliability"]["count"]) == 60
    if model == "plain":
        assert s["test_error_mc"] is None and s["ood"]["auroc_mutual_information"] is None
        assert "means" not in s
        np.testing.assert_allclose(ev.probs, predict_proba(net, None, X), rtol=1e-6)
    else:
        assert s["samples"] == 7 and 0 <= s["ood"]["auroc_mutual_information"] <= 1
        assert s["test_error_mc"] == error_rate(ev.probs, y)
        assert s["mean_mutual_information"] > 0
    if model == "bbb":
        # The same draws again give the same predictive.
        posterior.noise.load_state_dict(seed_state)
        again = uncertainty(net, posterior, X, 7)
        np.testing.assert_allclose(ev.probs, again["probs"], rtol=1e-6)
    assert all(math.isfinite(v) for v in (s["nll"], s["brier"], s["ece"]))


@pytest.mark.parametrize("kwargs, match", [({"model": "ensemble"}, "model"),
                                           ({"model": "bbb", "posterior": None}, "posterior"),
                                           ({"samples": 0}, "samples"),
                                           ({"bins": 0}, "bins")])
def test_bad_arguments(kwargs, match):
    net = make()
    X, y = data()
    args = {"posterior": Posterior(net, seed=0), "model": "bbb", **kwargs}
    posterior = args.pop("posterior")
    with pytest.raises(ValueError, match=match):
        evaluate_model(net, posterior, X, y, **args)
