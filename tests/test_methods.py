"""The training methods as objects (bbb_gluon.methods): what each says of itself, and that
the places which used to compare names now ask it."""

import dataclasses
import json
import pickle

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

from bbb_gluon import MLP, GaussianPrior, Posterior, TrainConfig
from bbb_gluon.data import load_dataset
from bbb_gluon.evaluation import PREDICTIVES
from bbb_gluon.methods import (
    IVON,
    METHODS,
    BayesByBackprop,
    MCDropout,
    Method,
    Plain,
    learns_posterior,
    method_of,
)
from bbb_gluon.training import MODELS, fit, load_run
from bbb_gluon.training.checkpoint import read_checkpoint


def test_the_registry_holds_each_method_once_by_its_name():
    assert list(METHODS) == ["bbb", "plain", "dropout", "ivon"] == list(MODELS)
    assert [type(m) for m in METHODS.values()] == [BayesByBackprop, Plain, MCDropout, IVON]
    assert method_of("bbb") is METHODS["bbb"] and method_of(METHODS["plain"]) is METHODS["plain"]
    with pytest.raises(ValueError, match="unknown model 'bayes'; choose one of"):
        method_of("bayes")
    assert PREDICTIVES == {n: m.predictive for n, m in METHODS.items()}


def test_what_each_method_says_of_itself():
    bbb, plain, dropout = (METHODS[n] for n in ("bbb", "plain", "dropout"))
    assert (bbb.learns_posterior, plain.learns_posterior, dropout.learns_posterior) == \
        (True, False, False)
    assert (bbb.samples, plain.samples, dropout.samples) == (True, False, True)
    assert (bbb.dropout(0.5), plain.dropout(0.5), dropout.dropout(0.5)) == (0.0, 0.0, 0.5)
    assert bbb.sample_noun == "weight samples" and dropout.sample_noun == "dropout masks"
    assert learns_posterior("bbb") and not learns_posterior("plain")
    assert not learns_posterior(None) and not learns_posterior("from-a-future-version")


def test_a_method_builds_the_posterior_from_the_config_once():
    net = gluon.nn.Dense(3, in_units=4)
    net.initialize(ctx=mx.cpu(1))
    config = TrainConfig(rho_init=-4.0, mu_init="copy", seed=3)
    posterior = config.method.make_posterior(net, config)
    assert isinstance(posterior, Posterior) and posterior.contexts == [mx.cpu(1)]
    assert float(posterior.rho()[0].mean().asscalar()) == pytest.approx(-4.0)
    assert TrainConfig(model="plain").method.make_posterior(net, config) is None


@pytest.mark.parametrize("setting", [{"complexity_warmup": 2}, {"complexity_scale": 0.5},
                                     {"estimator": "local"}])
@pytest.mark.parametrize("model", ["plain", "dropout"])
def test_a_setting_of_another_method_is_refused_by_name(model, setting):
    with pytest.raises(ValueError, match=f"{next(iter(setting))}=.* is a setting of the bbb "
                                         f"(and ivon )?models?, not of '{model}'"):
        TrainConfig(model=model, **setting)
    TrainConfig(model="bbb", **setting)  # its own


def test_a_new_method_is_known_once_defined():
    class Frozen(Method):
        name = "frozen-test-method"

    try:
        assert isinstance(method_of("frozen-test-method"), Frozen)
        assert "frozen-test-method" in METHODS and not learns_posterior("frozen-test-method")
    finally:
        from bbb_gluon import methods
        methods._METHODS.pop("frozen-test-method")


# --------------------------------------------------------------------------- IVON in fit


def test_ivon_starts_from_its_own_settings_where_the_config_leaves_them_out():
    config = TrainConfig(model="ivon")
    assert (config.lr, config.prior, config.mu_init) == (0.1, GaussianPrior(1.0), "copy")
    assert (config.hess_init, config.beta2, config.complexity_scale) == (1.0, 0.99999, 1.0)
    assert TrainConfig(model="ivon", lr=0.3, mu_init="normal").lr == 0.3  # given: kept
    regression = TrainConfig(model="ivon", likelihood="gaussian", epochs=10)
    assert (regression.lr, regression.complexity_scale, regression.hess_init,
            regression.beta2, regression.mu_init) == (3e-3, 0.1, 0.5, 0.999, "copy")
    assert regression.complexity_warmup == 0  # IVON has no complexity cost to warm up
    assert TrainConfig().lr == 1e-3 and TrainConfig().prior != GaussianPrior(1.0)
    assert TrainConfig.from_dict(config.to_dict()) == config  # config.json round-trips


@pytest.mark.parametrize("setting, message", [
    ({"prior": {"kind": "scale_mixture", "pi": 0.5, "sigma1": 1.0, "sigma2": 0.01}},
     "the ivon model takes a Gaussian prior"),
    ({"loss_reduction": "sum"}, "loss_reduction must be 'mean'"),
    ({"engine": "fused", "samples": 2}, "fused engine takes one draw a step; samples=2"),
    ({"estimator": "flipout"}, "estimator='flipout' is a setting of the bbb model, not of "
                               "'ivon'"),
    ({"complexity_warmup": 1}, "complexity_warmup=1 is a setting of the bbb model"),
    ({"rho_lr_mult": 2.0}, "rho_lr_mult=2.0 is a setting of the bbb model"),
    ({"rho_init": -5.0}, r"rho_init=-5.0 is a setting of the bbb model, not of 'ivon' \(its "
                         r"sigma starts from hess_init\)"),
    ({"hess_init": 0.0}, r"hess_init must be a number in \(0, inf\), got 0.0"),
    ({"beta2": 1.0}, r"beta2 must be a number in \[0, 1\), got 1.0"),
    ({"beta2": -0.1}, r"beta2 must be a number in \[0, 1\)"),
    ({"others_lr": -1.0}, "others_lr must be a finite number > 0"),
])
def test_ivon_refuses_what_it_cannot_train_in_one_line(setting, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(model="ivon", **setting)


def test_ivon_settings_are_refused_under_another_method():
    with pytest.raises(ValueError, match="hess_init=0.5 is a setting of the ivon model, not "
                                         "of 'bbb'"):
        TrainConfig(hess_init=0.5)
    with pytest.raises(ValueError, match="others_lr=0.01 is a setting of the ivon model"):
        TrainConfig(model="plain", others_lr=0.01)


def _mnist(data_root):
    return load_dataset("mnist", root=data_root, subset=300, num_valid=300)


def test_fit_trains_ivon_and_its_run_is_the_package_posterior(data_root, tmp_path):
    """The run folder of an IVON fit loads as a Bayes-by-Backprop run does, and the
    posterior it holds is IVON's: sigma = 1/sqrt(lambda (h + delta)) from the saved h."""
    data = _mnist(data_root)
    config = TrainConfig(model="ivon", epochs=3, batch_size=64, eval_samples=2)
    result = fit(config, data.train, data.valid, net=MLP(hidden=(32,)), run_dir=tmp_path,
                 progress=False)
    errors = [row["valid_error"] for row in result.history]
    assert errors[-1] < 0.5 < 0.9  # chance is 90%: it learned (3 epochs of 300 images)
    stored = json.loads((tmp_path / "config.json").read_text())["train"]
    assert stored["model"] == "ivon" and stored["prior"] == {"kind": "gaussian", "sigma": 1.0}
    net, posterior, loaded, meta = load_run(tmp_path, "latest")
    assert loaded == config and meta["engine"] in ("fused", "reference")
    _, states = read_checkpoint(tmp_path / "checkpoints" / "latest.params")
    state = pickle.loads(states["trainer_states"])  # noqa: S301 - written by this test
    lam = len(data.train[0])  # lambda: the training images (complexity_scale 1)
    delta = 1.0 / lam  # the prior N(0, 1)
    assert state["num_updates"] == 3 * 5 and state["skipped"] == 0  # 5 batches an epoch
    for sigma, h in zip(posterior.sigma(), state["hess"], strict=True):
        expected = 1.0 / np.sqrt(lam * (h + delta))
        np.testing.assert_allclose(sigma.asnumpy(), expected, rtol=1e-4)
    assert not np.allclose(state["hess"][0], config.hess_init)  # h learned, not its start


def test_fit_trains_an_ivon_regression_with_its_noise_scale_beside(tmp_path):
    """The learned noise scale (outside the posterior) trains by the run's optimiser at
    others_lr, and is checkpointed: a resume continues the same run."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (200, 1)).astype("float32")
    y = (np.sin(2 * X) + 0.1 * rng.normal(size=X.shape)).astype("float32")
    config = TrainConfig(model="ivon", likelihood="gaussian", epochs=4, batch_size=32,
                         eval_samples=2, others_lr=0.05)
    net = MLP(hidden=(16,), num_inputs=1, num_outputs=1)
    whole = fit(config, (X, y), net=net, progress=False)
    assert whole.loss.sigma() != pytest.approx(1.0, abs=1e-3)  # the scale moved
    fit(dataclasses.replace(config, epochs=2), (X, y), net=net, run_dir=tmp_path,
        progress=False)
    resumed = fit(config, (X, y), net=net, run_dir=tmp_path, resume=True, progress=False)
    assert resumed.loss.sigma() == whole.loss.sigma()
    for a, b in zip(whole.posterior.mu(), resumed.posterior.mu(), strict=True):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())


def test_fit_refuses_ivon_on_two_devices_before_any_work(tmp_path):
    X, y = np.zeros((8, 784), "float32"), np.zeros(8, "int32")
    with pytest.raises(ValueError, match="the ivon model trains on one device in one "
                                         "process \\(here 2 devices\\)"):
        fit(TrainConfig(model="ivon", epochs=1), (X, y), run_dir=tmp_path / "run",
            net=MLP(hidden=(4,), ctx=[mx.cpu(0), mx.cpu(1)]), progress=False)
    assert not (tmp_path / "run").exists()
