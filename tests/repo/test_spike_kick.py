"""experiments/spike_kick.py simulates the package's updates: check it against the package.

docs/RESULTS.md explains the trained networks' weight statistics with this simulation, so its
gradients must be the ones BBBLoss differentiates and its Adam step the one MXNet takes.
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd

from bbb_gluon import complexity_weight
from bbb_gluon.core.priors import GaussianPrior, ScaleMixturePrior

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "experiments" / "spike_kick.py"


@pytest.fixture(scope="module")
def sk():
    spec = importlib.util.spec_from_file_location("spike_kick", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["recipe", "sigma1-e1-sigma2-e6", "half-e6", "gaussian"])
def test_complexity_gradients_match_autograd_of_the_package_prior(sk, name):
    _, spec = sk.PRIORS[name]
    prior = (GaussianPrior(spec[1]) if spec[0] == "gaussian"
             else ScaleMixturePrior(pi=spec[1], sigma1=spec[2], sigma2=spec[3]))
    rng = np.random.default_rng(3)
    # weights near zero, where the spike's gradient is steep, and out in the slab
    mu = np.concatenate([rng.normal(0, 1e-3, 50), rng.normal(0, 0.2, 50)])
    rho = rng.uniform(-6, -2, 100)
    eps = rng.standard_normal(100)
    scale = 1 / 469
    g_mu, g_rho = sk.complexity_grads(mu, rho, eps, spec, scale)

    ctx = mx.cpu(1)
    m = mx.nd.array(mu, ctx=ctx, dtype="float64")
    r = mx.nd.array(rho, ctx=ctx, dtype="float64")
    e = mx.nd.array(eps, ctx=ctx, dtype="float64")
    m.attach_grad()
    r.attach_grad()
    with autograd.record():
        sigma = mx.nd.Activation(r, act_type="softrelu")
        w = m + sigma * e
        log_q = -mx.nd.log(sigma) - 0.5 * ((w - m) / sigma) ** 2
        cost = scale * (log_q.sum() - prior.log_prob(w))  # log_prob sums over w
    cost.backward()
    np.testing.assert_allclose(g_mu, m.grad.asnumpy(), rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(g_rho, r.grad.asnumpy(), rtol=1e-6, atol=1e-12)


def test_adam_step_matches_mxnets_adam_optimizer(sk):
    rng = np.random.default_rng(4)
    param = rng.normal(0, 0.1, 64)
    m, v = np.zeros(64), np.zeros(64)
    # what a Trainer with optimizer="adam" runs: the optimizer's own bias correction
    updater = mx.optimizer.get_updater(mx.optimizer.Adam(learning_rate=1e-3))
    mx_param = mx.nd.array(param, ctx=mx.cpu(1), dtype="float64")
    for t in range(1, 6):
        # the simulation's zero gradient on skipped minibatches is a step too
        grad = rng.normal(0, 1e-3, 64) if t != 3 else np.zeros(64)
        sk.adam_step(param, grad, m, v, t, 1e-3)
        updater(0, mx.nd.array(grad, ctx=mx.cpu(1), dtype="float64"), mx_param)
        # MXNet passes beta2 and the rate to its kernel as float32: 1 - beta2 is off by 1e-5
        np.testing.assert_allclose(param, mx_param.asnumpy(), rtol=1e-4, atol=1e-12)


@pytest.mark.parametrize("batches", [100, 1100])  # 2**1100 overflows a float
def test_adam_simulation_uses_blundells_weights(sk, monkeypatch, batches):
    seen = []
    real = sk.complexity_grads
    monkeypatch.setattr(sk, "complexity_grads",
                        lambda mu, rho, eps, prior, scale: seen.append(scale)
                        or real(mu, rho, eps, prior, scale))
    sk.simulate_adam(sk.PRIORS["half-e6"][1], 10, 1, batches=batches, report=(1,))
    expected = [complexity_weight("blundell", i, batches) / 128 for i in range(batches)
                if complexity_weight("blundell", i, batches) > 2.0 ** -60]
    np.testing.assert_allclose(seen, expected, rtol=1e-12)


def test_under_adam_sigma_grows_and_under_sgd_it_stays(sk):
    # the finding docs/RESULTS.md reports, at a scale a test can afford
    prior = sk.PRIORS["half-e6"][1]
    adam = sk.simulate_adam(prior, 200, 40, report=(1, 40))
    assert adam[1][2] > 1.5 * adam[0][2]  # median sigma
    sgd = sk.simulate(prior, 200, 40, report=(1, 40))
    assert abs(sgd[1][2] - sgd[0][2]) < 0.05 * sgd[0][2]


def test_command_line_refuses_unknown_priors_and_bad_report():
    for args in (["--priors", "nope"], ["--report", "1,x"], ["--weights", "1"],
                 ["--epochs", "0"]):
        done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 2 and "error:" in done.stderr
