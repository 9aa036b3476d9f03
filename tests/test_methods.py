"""The training methods as objects (bbb_gluon.methods): what each says of itself, and that
the places which used to compare names now ask it."""

import mxnet as mx
import pytest
from mxnet import gluon

from bbb_gluon import Posterior, TrainConfig
from bbb_gluon.evaluation import PREDICTIVES
from bbb_gluon.methods import (
    METHODS,
    BayesByBackprop,
    MCDropout,
    Method,
    Plain,
    learns_posterior,
    method_of,
)
from bbb_gluon.training import MODELS


def test_the_registry_holds_each_method_once_by_its_name():
    assert list(METHODS) == ["bbb", "plain", "dropout"] == list(MODELS)
    assert [type(m) for m in METHODS.values()] == [BayesByBackprop, Plain, MCDropout]
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
                                         f"model, not of '{model}'"):
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
