"""The fused CPU kernels compute the same estimator as the reference (BBBLoss + autograd)."""

import math
import os
import shutil
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

from bbb_gluon import (
    BBBLoss,
    BBBStep,
    GaussianPrior,
    LaplacePrior,
    Posterior,
    ScaleMixturePrior,
)
from bbb_gluon._kernels.fused import packed
from bbb_gluon.core.engines import FusedBBBStep, ReferenceBBBStep, forward_with, prior_attrs
from bbb_gluon.core.likelihood import (
    GaussianNLLLoss,
    HeteroscedasticGaussianNLLLoss,
    likelihood_loss,
)
from bbb_gluon.training import build_mlp

pytestmark = pytest.mark.usefixtures("fused_kernels")


def _fused_step(net, posterior, trainer, loss):
    return FusedBBBStep(forward_with(net, posterior), posterior, trainer, loss)


PRIORS = [
    pytest.param(ScaleMixturePrior(0.5, 1.0, math.exp(-6)), "mc", id="mixture-mc"),
    pytest.param(ScaleMixturePrior(0.25, math.exp(-1), math.exp(-7)), "mc", id="mixture2-mc"),
    pytest.param(GaussianPrior(1.0), "mc", id="gaussian-mc"),
    pytest.param(GaussianPrior(0.5), "kl", id="gaussian-kl"),
    pytest.param(LaplacePrior(0.1), "mc", id="laplace-mc"),
]


def _setup(ctxs, rho_init=-3.0, hidden=(24,), inputs=12, classes=5, seed=0):
    net = build_mlp(hidden, classes, num_inputs=inputs)
    mx.random.seed(seed)
    net.initialize(mx.init.Xavier(), ctx=ctxs)
    net.hybridize()
    posterior = Posterior(net, seed=seed, rho_init=rho_init)
    kv = "device" if len(ctxs) > 1 else None
    # SGD with lr 1 and no momentum: the parameter change is exactly -gradient / batch.
    trainer = gluon.Trainer(posterior.params, "sgd", {"learning_rate": 1.0}, kvstore=kv,
                            update_on_kvstore=False if kv else None)
    return net, posterior, trainer


def _batch(n=16, inputs=12, classes=5, seed=1):
    rng = np.random.default_rng(seed)
    return (mx.nd.array(rng.normal(size=(n, inputs))),
            mx.nd.array(rng.integers(0, classes, n)))


def _flat_eps(posterior, seed=2):
    return np.random.default_rng(seed).standard_normal(posterior.num_weights).astype(np.float32)


def _split(posterior, flat, ctx=None):
    parts, start = [], 0
    for shape in posterior.shapes:
        size = int(np.prod(shape))
        parts.append(mx.nd.array(flat[start:start + size], ctx=ctx).reshape(shape))
        start += size
    return parts


def _params(posterior):
    return [a.asnumpy() for a in posterior.mu() + posterior.rho()]


def _close_updates(before, a, b, rtol):
    """The parameter changes ``a - before`` and ``b - before`` agree to ``rtol`` of the
    largest change of each array (not of the parameters' own size: rho is about -3, so a
    tolerance on it would hide an error of several percent in a small update), plus the
    float32 rounding of the stored parameter (one unit in the last place each)."""
    for x0, x, y in zip(before, a, b, strict=True):
        dx, dy = x.astype(np.float64) - x0, y.astype(np.float64) - x0
        scale = np.abs(dx).max()
        assert scale > 0
        ulp = np.spacing(np.maximum(np.abs(x), np.abs(y)).astype(np.float32))
        assert (np.abs(dy - dx) <= rtol * scale + 2 * ulp).all(), \
            np.abs(dy - dx).max() / scale


def _reference_step(net, posterior, loss_fn, trainer):
    return ReferenceBBBStep(forward_with(net, posterior, fused=False), posterior, trainer,
                            loss_fn)


def _one_step(engine, prior, complexity, batch_index, likelihood="softmax", rho_init=-3.0,
              weighting="blundell"):
    classes = 1 if likelihood == "bernoulli" else 5
    X, y = _batch(classes=2 if likelihood == "bernoulli" else 5)
    net, posterior, trainer = _setup([mx.cpu()], rho_init=rho_init, classes=classes)
    before = _params(posterior)
    eps = _flat_eps(posterior)
    loss_fn = BBBLoss(prior, likelihood_loss(likelihood), complexity=complexity,
                      weighting=weighting, num_batches=8)
    if engine == "fused":
        step = _fused_step(net, posterior, trainer, loss_fn)
        nll, cost = step(X, y, batch_index, eps=[[_split(posterior, eps)]],
                         want_complexity=True)
    else:
        nll, cost = _reference_step(net, posterior, loss_fn, trainer)(X, y, batch_index,
                                                                      eps=[[eps]])
    return before, _params(posterior), nll.asscalar(), cost.asscalar()


@pytest.mark.parametrize("prior, complexity", PRIORS)
@pytest.mark.parametrize("batch_index", [0, 3])
@pytest.mark.parametrize("likelihood", ["softmax", "bernoulli"])
def test_fused_step_equals_reference_step(prior, complexity, batch_index, likelihood):
    before, p_ref, nll_ref, c_ref = _one_step("reference", prior, complexity, batch_index,
                                              likelihood)
    _, p_fused, nll_fused, c_fused = _one_step("fused", prior, complexity, batch_index,
                                               likelihood)
    # The narrow component of the scale mixture has curvature ~1/sigma2^2 (1e6 for
    # sigma2 = e^-7): a weight near the crossing point turns a float32 rounding of w
    # (1e-7) into a 1e-4 change of its gradient, whichever order the operations run in.
    # The Gaussian priors have no such term.
    mixture = complexity == "mc" and "Mixture" in repr(prior)
    _close_updates(before, p_ref, p_fused, rtol=5e-4 if mixture else 1e-5)
    assert nll_fused == pytest.approx(nll_ref, rel=1e-5)
    assert c_fused == pytest.approx(c_ref, rel=1e-5)


@pytest.mark.parametrize("rho_init", [-12.0, -5.0, 1.0])
def test_fused_step_equals_reference_step_at_other_sigmas(rho_init):
    prior, complexity = ScaleMixturePrior(0.75, 1.0, math.exp(-8)), "mc"
    before, p_ref, _, c_ref = _one_step("reference", prior, complexity, 0, rho_init=rho_init,
                                        weighting="uniform")
    _, p_fused, _, c_fused = _one_step("fused", prior, complexity, 0, rho_init=rho_init,
                                       weighting="uniform")
    _close_updates(before, p_ref, p_fused, rtol=5e-4)
    assert c_fused == pytest.approx(c_ref, rel=1e-5)


@pytest.mark.parametrize("prior, complexity", PRIORS[:1] + PRIORS[-1:])
def test_fused_step_with_two_samples_averages(prior, complexity):
    X, y = _batch()
    runs = {}
    for engine in ("reference", "fused"):
        net, posterior, trainer = _setup([mx.cpu()])
        before = _params(posterior)
        eps = [_flat_eps(posterior, 2), _flat_eps(posterior, 3)]
        loss_fn = BBBLoss(prior, complexity=complexity, weighting=0.1)
        if engine == "fused":
            step = _fused_step(net, posterior, trainer, loss_fn)
            step(X, y, 0, samples=2, eps=[[_split(posterior, e) for e in eps]])
        else:
            _reference_step(net, posterior, loss_fn, trainer)(X, y, 0, samples=2, eps=[eps])
        runs[engine] = _params(posterior)
    _close_updates(before, runs["reference"], runs["fused"], rtol=5e-4)


def test_fused_two_devices_equal_one_device_given_the_same_noise():
    X, y = _batch(n=16)
    prior = ScaleMixturePrior(0.5, 1.0, math.exp(-6))
    results = []
    for ctxs in ([mx.cpu(0)], [mx.cpu(0), mx.cpu(1)]):
        net, posterior, trainer = _setup(ctxs)
        before = _params(posterior)
        flat = _flat_eps(posterior)
        loss_fn = BBBLoss(prior, weighting=0.05)
        step = _fused_step(net, posterior, trainer, loss_fn)
        step(X, y, 0, eps=[[_split(posterior, flat, c)] for c in ctxs])
        results.append(_params(posterior))
    _close_updates(before, results[0], results[1], rtol=5e-4)


@pytest.mark.parametrize("samples, ctxs, estimator", [
    (1, [mx.cpu()], "reparam"), (2, [mx.cpu()], "reparam"),
    (1, [mx.cpu(0), mx.cpu(1)], "reparam"), (1, [mx.cpu()], "local"),
    (2, [mx.cpu()], "flipout"), (1, [mx.cpu(0), mx.cpu(1)], "flipout")],
    ids=["one-sample", "two-samples", "two-devices", "local", "flipout-two-samples",
         "flipout-two-devices"])
def test_the_steps_draws_into_the_same_arrays_change_no_step(samples, ctxs, estimator):
    """The step draws each sample's noise and weights (and an estimator's perturbations or
    variances) into arrays it keeps (allocating them was a third of the draw's call on a
    small network): three steps, the last on a smaller batch, give the parameters, costs
    and complexity to the bit that they give with fresh arrays at every draw, also where a
    second sample's draw overwrites the first's within one step."""
    X, y = _batch()
    runs = []
    for fresh in (False, True):
        net, posterior, trainer = _setup(ctxs)
        loss_fn = BBBLoss(ScaleMixturePrior(0.5, 1.0, math.exp(-6)), weighting=0.1)
        step = BBBStep(net, posterior, loss_fn, trainer, samples=samples,
                       estimator=estimator)._engine
        if fresh:
            def fresh_draw(*args, _step=step, _draw=step.draw):
                _step._drawn.clear()
                return _draw(*args)
            step.draw = fresh_draw
        costs = [c.asnumpy() for i, n in enumerate((16, 16, 10))
                 for c in step(X[:n], y[:n], i, samples=samples, want_complexity=True)]
        runs.append((_params(posterior), costs, len(step._drawn)))
    (kept, kept_costs, arrays), (new, new_costs, _) = runs
    assert arrays == len(ctxs)  # one set of arrays per device, kept
    for a, b in zip(kept + kept_costs, new + new_costs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_skipped_complexity_gives_the_likelihood_gradient_only():
    X, y = _batch()
    prior = ScaleMixturePrior(0.5, 1.0, math.exp(-6))
    runs = []
    for weighting in (0.0, 1e-30):  # 1e-30 <= skip_below: skipped
        net, posterior, trainer = _setup([mx.cpu()])
        loss_fn = BBBLoss(prior, weighting=weighting)
        assert loss_fn.weight_of(0) <= loss_fn.skip_below  # the step takes it from the loss
        step = _fused_step(net, posterior, trainer, loss_fn)
        step(X, y, 0, eps=[[_split(posterior, _flat_eps(posterior))]])
        runs.append(_params(posterior))
    for a, b in zip(runs[0], runs[1], strict=True):
        np.testing.assert_array_equal(a, b)


def _mixed_run(engine, likelihood, samples, fuse, monkeypatch, optimizer="sgd"):
    """One step of a network whose first layer is deterministic (the posterior covers the
    last Dense only), with a Trainer over the posterior's parameters, the network's
    deterministic ones and, for the learned Gaussian, the loss's noise scale."""
    monkeypatch.setenv("BBB_GLUON_FUSED_UPDATE", "1" if fuse else "0")
    gaussian = likelihood == "gaussian_learned"
    heteroscedastic = likelihood == "heteroscedastic"
    X, y = _batch()
    if gaussian or heteroscedastic:
        y = mx.nd.array(np.random.default_rng(4).normal(size=(16, 5)))
    net = build_mlp((24,), 10 if heteroscedastic else 5, num_inputs=12)
    mx.random.seed(0)
    net.initialize(mx.init.Xavier(), ctx=[mx.cpu()])
    net.hybridize()
    posterior = Posterior(net, seed=0, rho_init=-3.0, select=[net[-1]])
    loss_fn = BBBLoss(ScaleMixturePrior(0.5, 1.0, math.exp(-6)),
                      GaussianNLLLoss(None) if gaussian
                      else HeteroscedasticGaussianNLLLoss() if heteroscedastic else None,
                      weighting=0.1)
    loss_fn.initialize(ctx=mx.cpu())
    others = list(posterior.deterministic_params(net).values()) + \
        list(loss_fn.collect_params().values())
    assert len(others) == (3 if gaussian else 2)
    trainer = gluon.Trainer(list(posterior.params.values()) + others, optimizer,
                            {"learning_rate": 0.1})
    before = _params(posterior) + [p.data().asnumpy() for p in others]
    eps = [_flat_eps(posterior, 2 + s) for s in range(samples)]
    if engine == "fused":
        step = _fused_step(net, posterior, trainer, loss_fn)
        step(X, y, 0, samples=samples, eps=[[_split(posterior, e) for e in eps]])
        assert (step._update_plan() is not False) == fuse
    else:
        _reference_step(net, posterior, loss_fn, trainer)(X, y, 0, samples=samples, eps=[eps])
    return before, _params(posterior) + [p.data().asnumpy() for p in others]


@pytest.mark.parametrize("likelihood", ["softmax", "gaussian_learned", "heteroscedastic"])
@pytest.mark.parametrize("samples, fuse", [(1, True), (1, False), (2, False)],
                         ids=["fused-update", "trainer-update", "two-samples"])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_fused_step_trains_the_trainers_other_parameters_as_the_reference(
        monkeypatch, likelihood, samples, fuse, optimizer):
    """A Trainer holding more than the posterior's parameters: the fused step updates mu
    and rho, and the deterministic layer and the learned noise scale, as the reference
    does (with two samples, the other parameters get the average gradient)."""
    before, ref = _mixed_run("reference", likelihood, samples, fuse, monkeypatch, optimizer)
    _, got = _mixed_run("fused", likelihood, samples, fuse, monkeypatch, optimizer)
    _close_updates(before, ref, got, rtol=5e-4)


def test_bbb_normal_is_standard_normal_and_reproducible():
    like = mx.nd.zeros((400_001,))
    a = mx.nd.bbb_normal(like, seed=3, stream=0, counter=5, layer=1).asnumpy()
    b = mx.nd.bbb_normal(like, seed=3, stream=0, counter=5, layer=1).asnumpy()
    np.testing.assert_array_equal(a, b)
    n = a.size
    assert abs(a.mean()) < 5 / math.sqrt(n)
    assert abs(a.var() - 1) < 5 * math.sqrt(2 / n)
    # tails: P(|z| > 2) = 0.0455, P(|z| > 3) = 0.0027
    assert np.mean(np.abs(a) > 2) == pytest.approx(0.0455, abs=0.002)
    assert np.mean(np.abs(a) > 3) == pytest.approx(0.0027, abs=0.0006)
    for key in ({"seed": 4}, {"stream": 1}, {"counter": 6}, {"layer": 2}):
        attrs = {"seed": 3, "stream": 0, "counter": 5, "layer": 1, **key}
        c = mx.nd.bbb_normal(like, **attrs).asnumpy()
        assert abs(np.corrcoef(a, c)[0, 1]) < 0.01, key


@pytest.mark.parametrize("n", [400_001, 63, 1])
def test_bbb_normals_signs_are_fair_independent_coins_and_reproducible(n):
    """Flipout's signs (signs=1): +1 or -1 only, half each, no pattern between
    neighbours or between the 64-sign blocks one hash fills, the same for the same key
    and independent of the next key's."""
    like = mx.nd.zeros((n,))
    key = {"seed": 3, "stream": 0, "counter": 5, "layer": 1, "signs": 1}
    a = mx.nd.bbb_normal(like, **key).asnumpy()
    np.testing.assert_array_equal(a, mx.nd.bbb_normal(like, **key).asnumpy())
    assert set(np.unique(a)) <= {-1.0, 1.0}
    longer = mx.nd.bbb_normal(mx.nd.zeros((400_001,)), **key).asnumpy()
    np.testing.assert_array_equal(a, longer[:n])  # a short last block: the same first bits
    if n < 1000:
        return
    assert abs(a.mean()) < 5 / math.sqrt(n)
    for lag in (1, 2, 63, 64, 65):  # within a hash, across hashes, a block apart
        assert abs(np.mean(a[lag:] * a[:-lag])) < 5 / math.sqrt(n), lag
    bits = a[:n - n % 64].reshape(-1, 64)
    assert abs(bits.mean(axis=0)).max() < 5 / math.sqrt(len(bits))  # each bit position fair
    for change in ({"counter": 6}, {"layer": 2}):
        c = mx.nd.bbb_normal(like, **{**key, **change}).asnumpy()
        assert abs(np.mean(a * c)) < 5 / math.sqrt(n), change


def test_bbb_sample_matches_float64_reference_and_is_finite_for_extreme_rho():
    rng = np.random.default_rng(0)
    rho = np.concatenate([np.linspace(-30, 30, 2001), rng.uniform(-10, 2, 1000)])
    rho = rho.astype(np.float32)
    mu = rng.normal(0, 0.1, rho.size).astype(np.float32)
    eps = rng.standard_normal(rho.size).astype(np.float32)
    w = mx.nd.bbb_sample(mx.nd.array(mu), mx.nd.array(rho), mx.nd.array(eps)).asnumpy()
    ref = mu + np.logaddexp(0, rho.astype(np.float64)) * eps
    assert np.isfinite(w).all()
    np.testing.assert_allclose(w, ref, rtol=1e-5, atol=1e-7)


def test_build_can_be_disabled_and_training_falls_back():
    code = ("import bbb_gluon._kernels.fused as f, warnings; warnings.simplefilter('ignore');"
            "print(f.available(), f.unavailable_reason())")
    env = dict(os.environ, BBB_GLUON_FUSED="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert out.startswith("False") and "BBB_GLUON_FUSED=0" in out


# ------------------------------------------------ the kernels against float64, per element
#
# bbb_grad and bbb_cost are compiled with -ffast-math and use float32 softplus/sigmoid
# approximations, so they are checked here element by element against float64 NumPy over
# the whole range training can reach: rho from -30 to 5 (sigma from 1e-13 to 5), |w| up to
# 1e3, the narrowest sigma2 of the paper's grid and beyond (e^-10), pi at 0.01 and 0.99.
# Each element's tolerance is relative to the size of the terms it is made of, so a
# small result from a cancellation is not held to more digits than float32 can give.

KERNEL_PRIORS = [
    pytest.param(ScaleMixturePrior(0.01, 1.0, math.exp(-10)), "mc", id="mixture-pi0.01-e-10"),
    pytest.param(ScaleMixturePrior(0.99, 1.0, math.exp(-10)), "mc", id="mixture-pi0.99-e-10"),
    pytest.param(ScaleMixturePrior(0.5, 1.0, math.exp(-6)), "mc", id="mixture-pi0.5-e-6"),
    pytest.param(ScaleMixturePrior(0.25, math.exp(-1), math.exp(-8)), "mc",
                 id="mixture-pi0.25-e-1-e-8"),
    pytest.param(GaussianPrior(1.0), "mc", id="gaussian1-mc"),
    pytest.param(GaussianPrior(math.exp(-3)), "mc", id="gaussian-e-3-mc"),
    pytest.param(GaussianPrior(1.0), "kl", id="gaussian1-kl"),
    pytest.param(GaussianPrior(0.5), "kl", id="gaussian0.5-kl"),
    pytest.param(LaplacePrior(1.0), "mc", id="laplace1-mc"),
    pytest.param(LaplacePrior(math.exp(-4)), "mc", id="laplace-e-4-mc"),
]
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _extreme_inputs(n=6000, seed=0):
    """float32 (gw, w, eps, mu, rho) spanning the extremes, and their float64 copies."""
    rng = np.random.default_rng(seed)
    rho = np.concatenate([np.linspace(-30, 5, n // 2), rng.uniform(-30, 5, n - n // 2 - 3),
                          [-5.0, -30.0, 5.0]])
    rng.shuffle(rho)
    mu = rng.choice([-1, 1], n) * 10.0 ** rng.uniform(-5, 3, n)
    eps = rng.standard_normal(n)
    w = mu + np.logaddexp(0, rho) * eps
    gw = rng.normal(0, 0.1, n) * rng.choice([1e-3, 1, 1e2], n)
    arrays = [a.astype(np.float32) for a in (gw, w, eps, mu, rho)]
    assert np.abs(arrays[1]).max() > 900 and np.abs(arrays[1]).min() < 1e-4
    return arrays, [a.astype(np.float64) for a in arrays]


def _sigmoid64(x):
    return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))),
                    np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x))))


def _neg_log_prior_grad64(prior, w):
    """d(-log P(w))/dw in float64, and the size of its terms (for the tolerance)."""
    if isinstance(prior, GaussianPrior):
        g = w / prior.sigma**2
        return g, np.abs(g)
    if isinstance(prior, LaplacePrior):
        g = np.sign(w) / prior.scale
        return g, np.abs(g)
    s1, s2, pi = prior.sigma1, prior.sigma2, prior.pi
    log1 = math.log(pi) - math.log(s1) - w**2 / (2 * s1**2)
    log2 = math.log1p(-pi) - math.log(s2) - w**2 / (2 * s2**2)
    top = np.logaddexp(log1, log2)
    r1, r2 = np.exp(log1 - top), np.exp(log2 - top)
    a, b = w * r1 / s1**2, w * r2 / s2**2
    return a + b, np.abs(a) + np.abs(b)


def _reference_grad64(prior, complexity, scale, gw, w, eps, mu, rho):
    sigma, sig = np.logaddexp(0, rho), _sigmoid64(rho)
    if complexity == "kl":
        inv = 1 / prior.sigma**2
        gmu = gw + scale * mu * inv
        gmu_size = np.abs(gw) + np.abs(scale * mu * inv)
        parts = [eps * gw, scale * sigma * inv, scale / sigma]
    else:
        g, g_size = _neg_log_prior_grad64(prior, w) if scale else (0 * w, 0 * w)
        gmu = gw + scale * g
        gmu_size = np.abs(gw) + scale * g_size
        parts = [eps * gmu, scale / sigma]
        if scale:
            parts.append(np.abs(eps) * gmu_size)
    grho = sig * (parts[0] + (parts[1] - parts[2] if complexity == "kl" else -parts[1]))
    grho_size = sig * sum(np.abs(p) for p in parts)
    return gmu, gmu_size, grho, grho_size


def _assert_elementwise(got, ref, size, rtol, what):
    err = np.abs(got.astype(np.float64) - ref)
    bound = rtol * size + 1e-30
    bad = np.flatnonzero(err > bound)
    assert bad.size == 0, (f"{what}: {bad.size} elements off, e.g. index {bad[0]}: got "
                           f"{got[bad[0]]!r}, float64 {ref[bad[0]]!r}, bound {bound[bad[0]]!r}")


@pytest.mark.parametrize("prior, complexity", KERNEL_PRIORS)
@pytest.mark.parametrize("scale", [0.0, 1 / (469 * 128), 1.0])
def test_bbb_grad_matches_float64_per_element(prior, complexity, scale):
    arrays, (gw, w, eps, mu, rho) = _extreme_inputs()
    gmu, grho = mx.nd.bbb_grad(*[mx.nd.array(a) for a in arrays], scale=repr(scale),
                               **prior_attrs(prior, complexity))
    ref_mu, size_mu, ref_rho, size_rho = _reference_grad64(prior, complexity, scale, gw, w,
                                                           eps, mu, rho)
    gmu, grho = gmu.asnumpy(), grho.asnumpy()
    assert np.isfinite(gmu).all() and np.isfinite(grho).all()
    _assert_elementwise(gmu, ref_mu, size_mu, 2e-5, "d/dmu")
    _assert_elementwise(grho, ref_rho, size_rho, 2e-5, "d/drho")


def _cost64(prior, complexity, w, eps, mu, rho):
    """Each element's complexity cost in float64, and the size of its terms."""
    sigma = np.logaddexp(0, rho)
    if complexity == "kl":
        sp = prior.sigma
        ref = math.log(sp) - np.log(sigma) + (sigma**2 + mu**2) / (2 * sp**2) - 0.5
        size = abs(math.log(sp)) + np.abs(np.log(sigma)) + (sigma**2 + mu**2) / (2 * sp**2)
    else:
        log_q = -np.log(sigma) - 0.5 * eps**2 - HALF_LOG_2PI
        if isinstance(prior, GaussianPrior):
            log_p = -math.log(prior.sigma) - HALF_LOG_2PI - w**2 / (2 * prior.sigma**2)
        elif isinstance(prior, LaplacePrior):
            log_p = -np.abs(w) / prior.scale - math.log(2 * prior.scale)
        else:
            s1, s2, pi = prior.sigma1, prior.sigma2, prior.pi
            log_p = np.logaddexp(math.log(pi) - math.log(s1) - w**2 / (2 * s1**2),
                                 math.log1p(-pi) - math.log(s2) - w**2 / (2 * s2**2)) \
                - HALF_LOG_2PI
        ref = log_q - log_p
        size = np.abs(log_q) + np.abs(log_p) + 0.5 * eps**2
    return ref, size


@pytest.mark.parametrize("prior, complexity", KERNEL_PRIORS)
def test_bbb_cost_matches_float64_per_element(prior, complexity):
    arrays, (_, w, eps, mu, rho) = _extreme_inputs(n=400, seed=1)
    ref, size = _cost64(prior, complexity, w, eps, mu, rho)
    attrs = prior_attrs(prior, complexity)
    got = np.array([mx.nd.bbb_cost(*[mx.nd.array(a[i:i + 1]) for a in arrays[1:]],
                                   **attrs).asscalar() for i in range(len(w))])
    assert np.isfinite(got).all()
    _assert_elementwise(got, ref, size, 1e-5, "cost")
    # ... and summed over an array, as the training step calls it.
    total = mx.nd.bbb_cost(*[mx.nd.array(a) for a in arrays[1:]], **attrs).asscalar()
    assert total == pytest.approx(ref.sum(), rel=1e-5, abs=1e-5 * size.sum())


# ------------------------------------------- the cost's value from the update's own pass
#
# bbb_update(_layers) with cost=1 returns the complexity cost of mu and rho as they were
# before the update (what bbb_cost gives), summed in the loop that updates them; its
# terms are float32, so it is held to float32's precision of the terms' sizes against
# float64, per element and summed; and asking for it changes no update by a bit.

_ADAM = {"adam": 1, "beta1": "0.9", "beta2": "0.999", "epsilon": "1e-08"}


def _update_cost(arrays, attrs, guard=0.0, cost=1, scale="0.01"):
    """bbb_update on copies of float32 (gw, w, eps, mu, rho), Adam, with zero states:
    (the cost it returns, mu and rho after it)."""
    ins = [mx.nd.array(a) for a in arrays] + [mx.nd.zeros(arrays[0].shape) for _ in range(4)]
    out = mx.nd.bbb_update(*ins, mx.nd.array([guard]), guard=1, cost=cost, lr_mu="0.001",
                           lr_rho="0.002", rescale="1.0", clip="-1.0", scale=scale,
                           **_ADAM, **attrs)
    return out.asscalar(), ins[3].asnumpy(), ins[4].asnumpy()


@pytest.mark.parametrize("prior, complexity", KERNEL_PRIORS)
def test_the_updates_cost_matches_float64_per_element(prior, complexity):
    arrays, (_, w, eps, mu, rho) = _extreme_inputs(n=400, seed=1)
    ref, size = _cost64(prior, complexity, w, eps, mu, rho)
    attrs = prior_attrs(prior, complexity)
    got = np.array([_update_cost([a[i:i + 1] for a in arrays], attrs)[0]
                    for i in range(len(w))])
    assert np.isfinite(got).all()
    _assert_elementwise(got, ref, size, 1e-5, "the update's cost")


@pytest.mark.parametrize("prior, complexity", KERNEL_PRIORS)
@pytest.mark.parametrize("scale", ["0.01", "0.0"])  # 0: the gradient's plain loop
@pytest.mark.parametrize("guard", [0.0, float("nan")])  # NaN: no update, the cost asked
def test_the_updates_cost_is_bbb_cost_and_changes_no_update(prior, complexity, scale, guard):
    """Over whole arrays (6,000 elements: several blocks of the kernel's sum and a
    partial one), to float32 rounding of the terms' total size."""
    arrays, (_, w, eps, mu, rho) = _extreme_inputs(seed=5)
    _, size = _cost64(prior, complexity, w, eps, mu, rho)
    attrs = prior_attrs(prior, complexity)
    want = mx.nd.bbb_cost(*[mx.nd.array(a) for a in arrays[1:]], **attrs).asscalar()
    cost, mu_after, rho_after = _update_cost(arrays, attrs, guard, 1, scale)
    assert cost == pytest.approx(want, rel=1e-5, abs=1e-6 * size.sum())
    no_cost, mu_plain, rho_plain = _update_cost(arrays, attrs, guard, 0, scale)
    assert no_cost == 0.0
    np.testing.assert_array_equal(mu_after, mu_plain)
    np.testing.assert_array_equal(rho_after, rho_plain)


@pytest.mark.parametrize("adam, momentum", [(1, 0.0), (0, 0.0), (0, 0.9)])
def test_bbb_update_layers_cost_is_the_sum_of_bbb_cost_over_the_layers(adam, momentum):
    """Every optimiser's loop and every aux (shared sample, local, Flipout); to the bit
    the same updates as without the cost."""
    shapes, aux = [(60, 50), (60,), (7, 60)], [0, 2, 1]
    states = 4 if adam else (2 if momentum else 0)

    def arrays():
        r = np.random.default_rng(7)
        out = []
        for s, a in zip(shapes, aux, strict=True):
            layer = [mx.nd.array(r.normal(size=s).astype(np.float32)) for _ in range(5 + states)]
            layer[4] = mx.nd.array(r.uniform(-6, 1, s).astype(np.float32))  # rho
            out.append(layer + ([mx.nd.array(r.normal(size=s).astype(np.float32))] if a else []))
        return out
    attrs = dict(guard=1, layers=3, aux=",".join(map(str, aux)), adam=adam,
                 lr_mu="0.001,0.002,0.003", lr_rho="0.003,0.001,0.01", wd_mu="0,0,0",
                 wd_rho="0,0,0", rescale="0.0078125", clip="-1.0", scale="0.01",
                 **prior_attrs(ScaleMixturePrior(0.5, 1.0, math.exp(-6)), "mc"),
                 **({"beta1": "0.9", "beta2": "0.999", "epsilon": "1e-08"} if adam
                    else {"momentum": repr(momentum)}))
    with_cost, plain = arrays(), arrays()
    want = sum(mx.nd.bbb_cost(*layer[1:5], **attrs).asscalar() for layer in with_cost)
    g = mx.nd.array([0.0])
    got = mx.nd.bbb_update_layers(*[a for layer in with_cost for a in layer], g, cost=1,
                                  **attrs).asscalar()
    mx.nd.bbb_update_layers(*[a for layer in plain for a in layer], g, **attrs)
    assert got == pytest.approx(want, rel=1e-5)
    for t, p in zip(with_cost, plain, strict=True):
        for x, y in zip(t, p, strict=True):
            np.testing.assert_array_equal(x.asnumpy(), y.asnumpy())


@pytest.mark.parametrize("bad", [None, "X", "g2", "costs"])
def test_bbb_update_layers_computes_its_guard_as_bbb_finite_does(bad):
    """check=1: the guard (the costs' sum, NaN where the costs, X, y or a likelihood
    gradient hold a NaN), the update, the others' gradients made finite and the watch, in
    one operator: what bbb_finite followed by the guarded update gives, to the bit."""
    shapes, aux = [(30, 20), (30,), (5, 30)], [0, 2, 1]

    def arrays():
        r = np.random.default_rng(11)
        layers = [[mx.nd.array(r.normal(size=s).astype(np.float32)) for _ in range(9)]
                  + ([mx.nd.array(r.normal(size=s).astype(np.float32))] if a else [])
                  for s, a in zip(shapes, aux, strict=True)]
        costs, X, y = (mx.nd.array(r.normal(size=n).astype(np.float32)) for n in (16, 48, 16))
        keep = mx.nd.array(np.array([1.0, np.inf, np.nan, -2.0], dtype=np.float32))
        watch = mx.nd.array([5.0])
        if bad == "X":
            X[3] = np.nan
        elif bad == "g2":
            layers[2][-1][1, 2] = np.inf
        elif bad == "costs":
            costs[0] = np.nan
        return layers, costs, X, y, keep, watch
    attrs = dict(layers=3, aux=",".join(map(str, aux)), adam=1, lr_mu="0.001,0.002,0.003",
                 lr_rho="0.003,0.001,0.01", wd_mu="0,0,0", wd_rho="0,0,0", rescale="0.1",
                 clip="-1.0", scale="0.01", beta1="0.9", beta2="0.999", epsilon="1e-08",
                 cost=1, **prior_attrs(GaussianPrior(1.0), "mc"))
    layers, costs, X, y, keep, watch = arrays()
    flat = [a for layer in layers for a in layer]
    guard, cost = mx.nd.bbb_update_layers(*flat, costs, X, y, keep, watch, check=1, keep=1,
                                          watch=1, **attrs)
    layers2, costs2, X2, y2, keep2, watch2 = arrays()
    checked = [X2, y2] + [layer[0] for layer in layers2] + [layer[9] for layer in layers2
                                                           if len(layer) == 10]
    guard2 = mx.nd.bbb_finite(costs2, *checked, keep2, watch2, num_arrays=len(checked) + 3,
                              value=2, keep=1, watch=1)
    cost2 = mx.nd.bbb_update_layers(*[a for layer in layers2 for a in layer], guard2, guard=1,
                                    **attrs)
    g, g2 = guard.asscalar(), guard2.asscalar()
    assert (np.isnan(g) and np.isnan(g2)) if bad else g == g2 == pytest.approx(
        costs.asnumpy().astype(np.float64).sum(), rel=1e-6)
    assert cost.asscalar() == cost2.asscalar()
    for x1, x2 in zip(flat + [keep, watch], [a for layer in layers2 for a in layer]
                      + [keep2, watch2], strict=True):
        np.testing.assert_array_equal(x1.asnumpy(), x2.asnumpy())
    assert np.isfinite(keep.asnumpy()).all()
    assert (keep.asnumpy() == 0).all() == bool(bad)  # all zeroed where the guard fails


# --------------------------------------------------------------------------- fused update


def _adam_steps(fuse, steps=3, lr_mult=1.0, wd=0.0, clip=None, monkeypatch=None,
                optimizer="adam", extra=None):
    monkeypatch.setenv("BBB_GLUON_FUSED_UPDATE", "1" if fuse else "0")
    prior = ScaleMixturePrior(0.5, 1.0, math.exp(-6))
    X, y = _batch()
    net, posterior, _ = _setup([mx.cpu()])
    for name, p in posterior.params.items():
        if name.endswith("_rho"):
            p.lr_mult = lr_mult
    opts = {"learning_rate": 0.01, "wd": wd, **(extra or {})}
    if clip is not None:
        opts["clip_gradient"] = clip
    trainer = gluon.Trainer(posterior.params, optimizer, opts)
    loss_fn = BBBLoss(prior, weighting=0.1)
    step = _fused_step(net, posterior, trainer, loss_fn)
    for s in range(steps):
        step(X, y, 0, eps=[[_split(posterior, _flat_eps(posterior, 10 + s))]],
             step_size=X.shape[0])
    states = trainer._updaters[0].states
    flat_states = [a.asnumpy() for k in sorted(states)
                   for a in (states[k] if isinstance(states[k], tuple) else [states[k]])
                   if a is not None]
    return step, _params(posterior), flat_states, trainer


@pytest.mark.parametrize("lr_mult, wd, clip", [(1.0, 0.0, None), (10.0, 1e-3, 0.5),
                                              (1.0, 0.0, 0.0)])  # 0: MXNet does not clip
def test_fused_update_equals_the_trainers_adam(monkeypatch, lr_mult, wd, clip):
    fused_step, p_fused, s_fused, t_fused = _adam_steps(True, lr_mult=lr_mult, wd=wd,
                                                        clip=clip, monkeypatch=monkeypatch)
    plain_step, p_plain, s_plain, t_plain = _adam_steps(False, lr_mult=lr_mult, wd=wd,
                                                        clip=clip, monkeypatch=monkeypatch)
    assert fused_step._update and fused_step._update[0] is True  # Adam, fused
    assert plain_step._update is False
    for a, b in zip(p_fused, p_plain, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert len(s_fused) == len(s_plain) == 2 * len(p_fused)  # mean and variance each
    for a, b in zip(s_fused, s_plain, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-9)
    assert t_fused._optimizer._index_update_count == t_plain._optimizer._index_update_count


@pytest.mark.parametrize("wd, clip", [(0.0, None), (1e-3, None), (0.0, 0.5)])
def test_fused_sgd_without_momentum_is_the_trainers_to_the_bit(monkeypatch, wd, clip):
    kw = dict(optimizer="sgd", extra={"learning_rate": 0.3}, wd=wd, clip=clip, lr_mult=3.0,
              monkeypatch=monkeypatch)
    fused_step, p_fused, _, _ = _adam_steps(True, **kw)
    _, p_plain, _, _ = _adam_steps(False, **kw)
    assert fused_step._update and fused_step._update[0] is False
    for a, b in zip(p_fused, p_plain, strict=True):
        np.testing.assert_array_equal(a, b)


def test_fused_sgd_follows_the_trainers_schedule_to_the_bit(monkeypatch):
    """The fused update counts every index, then reads every rate (one call each): with a
    schedule that changes the rate at each step, the Trainer's own numbers to the bit."""
    def kw():  # a fresh scheduler each: it is stateful
        sched = mx.lr_scheduler.FactorScheduler(step=1, factor=0.5, base_lr=0.3)
        return dict(optimizer="sgd", extra={"learning_rate": 0.3, "lr_scheduler": sched},
                    lr_mult=3.0, steps=4, monkeypatch=monkeypatch)
    fused_step, p_fused, _, t_fused = _adam_steps(True, **kw())
    _, p_plain, _, t_plain = _adam_steps(False, **kw())
    assert fused_step._update and fused_step._update[0] is False
    assert t_fused._optimizer.num_update == t_plain._optimizer.num_update == 4
    for a, b in zip(p_fused, p_plain, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("wd, clip", [(0.0, None), (1e-3, 0.5)])
def test_fused_sgd_with_momentum_equals_the_trainers(monkeypatch, wd, clip):
    kw = dict(optimizer="sgd", extra={"momentum": 0.9, "learning_rate": 0.3}, wd=wd, clip=clip,
              lr_mult=3.0, monkeypatch=monkeypatch)
    fused_step, p_fused, s_fused, t_fused = _adam_steps(True, **kw)
    plain_step, p_plain, s_plain, _ = _adam_steps(False, **kw)
    assert fused_step._update and fused_step._update[0] is False  # SGD, fused
    assert plain_step._update is False
    assert len(s_fused) == len(s_plain) == len(p_fused)  # one momentum per array
    # Float rounding apart: MXNet's own kernel may contract a product and a sum into one
    # instruction where ours rounds both (without momentum the two agree to the bit). Such
    # a rounding is relative to the operands, so an element that three steps brought near
    # zero may differ by more than 1e-5 of itself: the bound is 1e-5 of the array's scale.
    for a, b in zip(p_fused + s_fused, p_plain + s_plain, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * np.abs(b).max())
    assert np.abs(s_fused[0]).max() > 0


def test_fused_update_state_saves_and_loads_with_the_trainer(monkeypatch, tmp_path):
    # Two steps, save the Trainer's state, load it into a fresh step: the third step lands
    # where three uninterrupted steps do.
    _, p_three, _, _ = _adam_steps(True, steps=3, monkeypatch=monkeypatch)
    step, _, _, trainer = _adam_steps(True, steps=2, monkeypatch=monkeypatch)
    trainer.save_states(str(tmp_path / "states"))
    saved = [p.data().copy() for p in list(step.posterior._mu) + list(step.posterior._rho)]
    prior = ScaleMixturePrior(0.5, 1.0, math.exp(-6))
    X, y = _batch()
    net, posterior, _ = _setup([mx.cpu()])
    for p, value in zip(list(posterior._mu) + list(posterior._rho), saved, strict=True):
        p.set_data(value)
    fresh = gluon.Trainer(posterior.params, "adam", {"learning_rate": 0.01})
    fresh.load_states(str(tmp_path / "states"))
    loss_fn = BBBLoss(prior, weighting=0.1)
    again = _fused_step(net, posterior, fresh, loss_fn)
    again(X, y, 0, eps=[[_split(posterior, _flat_eps(posterior, 12))]], step_size=X.shape[0])
    for a, b in zip(_params(posterior), p_three, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_the_update_is_left_to_the_trainer_where_it_cannot_be_fused():
    prior = ScaleMixturePrior(0.5, 1.0, math.exp(-6))

    def plan(ctxs, optimizer, opts):
        net, posterior, _ = _setup(ctxs)
        kv = "device" if len(ctxs) > 1 else None
        trainer = gluon.Trainer(posterior.params, optimizer, opts, kvstore=kv,
                                update_on_kvstore=False if kv else None)
        loss_fn = BBBLoss(prior, weighting=0.1)
        return _fused_step(net, posterior, trainer, loss_fn)._update_plan()

    assert plan([mx.cpu()], "sgd", {"learning_rate": 0.1})[0] is False  # SGD, fused
    assert plan([mx.cpu()], "sgd", {"learning_rate": 0.1, "momentum": 0.9})[0] is False
    assert plan([mx.cpu()], "rmsprop", {"learning_rate": 0.1}) is False
    assert plan([mx.cpu(0), mx.cpu(1)], "adam", {"learning_rate": 0.1}) is False


@pytest.mark.parametrize("shape", [(40, 78), (41,), (7,)])
def test_bbb_draw_is_bbb_normal_then_bbb_sample_to_the_bit(shape):
    rng = np.random.default_rng(0)
    mu = mx.nd.array(rng.normal(size=shape).astype(np.float32))
    rho = mx.nd.array(rng.uniform(-5, 1, shape).astype(np.float32))
    key = dict(seed=3, stream=1, counter=5, layer=2)
    eps = mx.nd.bbb_normal(mu, **key)
    eps2, w = mx.nd.bbb_draw(mu, rho, **key)
    np.testing.assert_array_equal(eps2.asnumpy(), eps.asnumpy())
    np.testing.assert_array_equal(w.asnumpy(), mx.nd.bbb_sample(mu, rho, eps).asnumpy())


def _layers(rng, shapes):
    mus = [mx.nd.array(rng.normal(size=s).astype(np.float32)) for s in shapes]
    rhos = [mx.nd.array(rng.uniform(-5, 1, s).astype(np.float32)) for s in shapes]
    return mus, rhos


def test_bbb_draw_layers_is_bbb_draw_on_each_layer_to_the_bit():
    """One operator for every layer (each with its own aux) gives each layer's bbb_draw,
    layer k under key layer + k; the aux outputs follow, for the layers that have one."""
    shapes, aux = [(40, 78), (40,), (7, 40), (7,), (3, 3, 2, 2)], [2, 2, 0, 0, 1]
    mus, rhos = _layers(np.random.default_rng(1), shapes)
    key = dict(seed=3, stream=1, counter=5)
    outs = mx.nd.bbb_draw_layers(*mus, *rhos, layer=4, layers=len(shapes),
                                 aux=",".join(map(str, aux)), **key)
    assert len(outs) == 2 * len(shapes) + 3
    extra = iter(outs[2 * len(shapes):])
    for k, (m, r, a) in enumerate(zip(mus, rhos, aux, strict=True)):
        one = mx.nd.bbb_draw(m, r, layer=4 + k, **({"aux": a} if a else {}), **key)
        got = [outs[k], outs[len(shapes) + k]] + ([next(extra)] if a else [])
        assert len(one) == len(got)
        for want, have in zip(one, got, strict=True):
            assert have.shape == m.shape
            np.testing.assert_array_equal(have.asnumpy(), want.asnumpy())


@pytest.mark.parametrize("adam, momentum", [(1, 0.0), (0, 0.0), (0, 0.9)])
@pytest.mark.parametrize("guard", [0.0, float("nan")])
def test_bbb_update_layers_is_bbb_update_on_each_layer_to_the_bit(adam, momentum, guard):
    """Per-layer learning rates, weight decays and aux from the lists; a NaN guard leaves
    every layer unchanged."""
    shapes, aux = [(30, 20), (30,), (5, 30)], [0, 2, 1]
    states = 4 if adam else (2 if momentum else 0)

    def arrays():
        r = np.random.default_rng(3)
        return [[mx.nd.array(r.normal(size=s).astype(np.float32)) for _ in range(5 + states)]
                + ([mx.nd.array(r.normal(size=s).astype(np.float32))] if a else [])
                for s, a in zip(shapes, aux, strict=True)]
    lrs_mu, lrs_rho = ["0.001", "0.002", "0.0005"], ["0.003", "0.001", "0.01"]
    wds_mu, wds_rho = ["0.0", "0.0001", "0.0"], ["0.0", "0.0", "0.001"]
    shared = dict(guard=1, adam=adam, rescale="0.0078125", clip="-1.0", scale="0.01",
                  kind=2, sigma="1.0",
                  **({"beta1": "0.9", "beta2": "0.999", "epsilon": "1e-08"} if adam
                     else {"momentum": repr(momentum)}))
    g = mx.nd.array([guard])
    together, apart = arrays(), arrays()
    mx.nd.bbb_update_layers(*[a for layer in together for a in layer], g, layers=3,
                            aux=",".join(map(str, aux)), lr_mu=",".join(lrs_mu),
                            lr_rho=",".join(lrs_rho), wd_mu=",".join(wds_mu),
                            wd_rho=",".join(wds_rho), **shared)
    for k, layer in enumerate(apart):
        mx.nd.bbb_update(*layer, g, aux=aux[k], lr_mu=lrs_mu[k], lr_rho=lrs_rho[k],
                         wd_mu=wds_mu[k], wd_rho=wds_rho[k], **shared)
    before = arrays()
    for t, a, b in zip(together, apart, before, strict=True):
        for x, y in zip(t, a, strict=True):
            np.testing.assert_array_equal(x.asnumpy(), y.asnumpy())
        changed = not np.array_equal(t[3].asnumpy(), b[3].asnumpy())
        assert changed == (guard == 0.0)  # mu moved unless the guard is NaN


def test_no_per_element_body_of_the_update_is_compiled_out_of_line():
    """Each optimiser's per-element body (a lambda) is inlined into the vectorised loop
    that calls it. An out-of-line copy is a call per element in a loop left scalar: Adam
    with the scale mixture ran about four times slower that way, unnoticed, until
    benchmarks/bench_update.py (results_update_2026-11-26.txt)."""
    from bbb_gluon._kernels import fused
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm (binutils) to list the library's symbols")
    symbols = subprocess.run([nm, "-C", fused.library_path()], capture_output=True,
                             text=True, check=True).stdout.splitlines()
    assert any("update_forward" in s for s in symbols)  # the listing names our functions
    called = [s for s in symbols
              if "lambda(long, float, float)" in s and "}::operator()(" in s]
    assert called == []


@pytest.mark.parametrize("relu", [0, 1])
@pytest.mark.parametrize("square", [0, 1])
def test_bbb_lrt_combine_is_mxnets_five_operators_forward_and_backward(relu, square):
    """The local reparameterisation's last step, act(mean + sqrt(var + floor) * zeta),
    and its gradients w.r.t. mean and var, as MXNet's operators give them; a zero
    variance (a dead row) gives a finite gradient through the floor. With square=1 its
    square is a second output (the next layer's input to its variances' product), and the
    gradients take both outputs' as MXNet's square and the sum of the two paths do."""
    rng = np.random.default_rng(4)
    shape = (64, 50)
    mean, zeta, g, g2 = (mx.nd.array(rng.normal(size=shape).astype(np.float32))
                         for _ in range(4))
    var = mx.nd.array(rng.uniform(0, 2, shape).astype(np.float32))
    var[0] = 0
    got = []
    for fused in (True, False):
        m, v = mean.copy(), var.copy()
        m.attach_grad()
        v.attach_grad()
        with mx.autograd.record():
            if fused:
                outs = mx.nd.bbb_lrt_combine(m, v, zeta, floor="1e-12", relu=relu,
                                             square=square)
            else:
                out = mx.nd.elemwise_add(m, mx.nd.elemwise_mul(mx.nd.sqrt(v + 1e-12), zeta))
                out = mx.nd.relu(out) if relu else out
                outs = [out, mx.nd.square(out)] if square else out
        if square:
            mx.autograd.backward(outs, [g, g2])
        else:
            outs.backward(g)
        outs = outs if square else [outs]
        got.append([o.asnumpy() for o in outs] + [m.grad.asnumpy(), v.grad.asnumpy()])
    for a, b in zip(*got, strict=True):
        assert np.isfinite(a).all()
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    if relu:
        assert (got[0][0] == 0).any() and (got[0][-2] == 0).any()


@pytest.mark.parametrize("relu", [0, 1])
@pytest.mark.parametrize("shape, compact", [
    ((64, 50), (64, 50)),  # Dense: a sign per element
    ((8, 3, 5, 4), (8, 3, 1, 1)),  # NCHW: per (example, channel)
    ((256, 400), (256, 400)),  # large enough for the threaded loops
    ((128, 6, 12, 12), (128, 6, 1, 1))])
def test_flipouts_two_passes_are_mxnets_broadcast_operators_forward_and_backward(
        shape, compact, relu):
    """bbb_flip(x, s) = x * s and bbb_flipout_combine(mean, z, r) = act(mean + z * r) with
    compact signs broadcast over the trailing axes, and every input's gradient, as MXNet's
    broadcast operators give them (the same arithmetic: to the bit forward)."""
    rng = np.random.default_rng(5)
    x, mean, z, g = (mx.nd.array(rng.normal(size=shape).astype(np.float32)) for _ in range(4))
    s, r = (mx.nd.array(rng.choice([-1.0, 1.0], size=compact).astype(np.float32))
            for _ in range(2))
    got = []
    for fused in (True, False):
        ins = [a.copy() for a in (x, s, mean, z, r)]
        for a in ins:
            a.attach_grad()
        xi, si, mi, zi, ri = ins
        with mx.autograd.record():
            if fused:
                flipped = mx.nd.bbb_flip(xi, si)
                out = mx.nd.bbb_flipout_combine(mi, zi, ri, relu=relu)
            else:
                flipped = mx.nd.broadcast_mul(xi, si)
                out = mx.nd.broadcast_add(mi, mx.nd.broadcast_mul(zi, ri))
                out = mx.nd.relu(out) if relu else out
        mx.autograd.backward([flipped, out], [g, g])
        got.append([flipped.asnumpy(), out.asnumpy()] + [a.grad.asnumpy() for a in ins])
    for k, (a, b) in enumerate(zip(*got, strict=True)):
        if k < 2:
            np.testing.assert_array_equal(a, b)
        else:  # the signs' gradients are sums, in another order
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert (got[0][3] != 0).all()  # the signs' gradient is the sum, not left out
    if relu:
        assert (got[0][1] == 0).any() and (got[0][4] == 0).any()


@pytest.mark.parametrize("relu", [0, 1])
@pytest.mark.parametrize("shape, compact", [
    ((64, 50), (64, 50)),  # Dense
    ((8, 3, 5, 4), (8, 3, 1, 1)),  # NCHW: per (example, channel)
    ((128, 6, 12, 12), (128, 6, 1, 1))])  # large enough for the threaded loops
def test_flipout_combine_with_flip_is_combine_then_the_next_layers_flip(shape, compact, relu):
    """flip=1: bbb_flipout_combine(mean, z, r, s2) also returns out * s2, the next layer's
    bbb_flip of this output; outputs to the bit, and every input's gradient as the two
    operators and the sum of out's two gradients give them."""
    rng = np.random.default_rng(6)
    mean, z, g, g2 = (mx.nd.array(rng.normal(size=shape).astype(np.float32))
                      for _ in range(4))
    r, s2 = (mx.nd.array(rng.choice([-1.0, 1.0], size=compact).astype(np.float32))
             for _ in range(2))
    got = []
    for fused in (True, False):
        ins = [a.copy() for a in (mean, z, r, s2)]
        for a in ins:
            a.attach_grad()
        with mx.autograd.record():
            if fused:
                out, flipped = mx.nd.bbb_flipout_combine(*ins, relu=relu, flip=1)
            else:
                out = mx.nd.bbb_flipout_combine(*ins[:3], relu=relu)
                flipped = mx.nd.bbb_flip(out, ins[3])
        mx.autograd.backward([out, flipped], [g, g2])
        got.append([out.asnumpy(), flipped.asnumpy()] + [a.grad.asnumpy() for a in ins])
    for k, (a, b) in enumerate(zip(*got, strict=True)):
        if k < 4:  # the outputs, d mean and d z
            np.testing.assert_array_equal(a, b)
        else:  # the signs' gradients are sums, in another order
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    # s2's gradient is the sum, not left out (zero where relu cut a whole sign's elements)
    assert (got[0][5] != 0).any() if relu else (got[0][5] != 0).all()
    with pytest.raises(mx.base.MXNetError):  # s2 must have r's shape
        mx.nd.bbb_flipout_combine(mean, z, r, mx.nd.ones((1,) + compact[1:]),
                                  flip=1)[0].wait_to_read()


@pytest.mark.parametrize("full, signs", [
    ((4, 3), (5,)),  # does not divide
    ((4, 2, 3), (4, 3)),  # divides, but the signs would run along the wrong axis
    ((4, 5, 5, 3), (4, 1, 1, 3)),  # NHWC: not leading axes
    ((4, 3), (12,))])  # the right count, flattened: refused as a layout
def test_flipouts_passes_refuse_signs_that_do_not_cover_leading_axes(full, signs):
    with pytest.raises(mx.base.MXNetError):
        mx.nd.bbb_flip(mx.nd.ones(full), mx.nd.ones(signs)).wait_to_read()
    with pytest.raises(mx.base.MXNetError):
        mx.nd.bbb_flipout_combine(mx.nd.ones(full), mx.nd.ones(full),
                                  mx.nd.ones(signs)).wait_to_read()


def test_flipout_combine_refuses_a_z_that_is_not_the_means_shape():
    with pytest.raises(mx.base.MXNetError):
        mx.nd.bbb_flipout_combine(mx.nd.ones((4, 3)), mx.nd.ones((4, 2)),
                                  mx.nd.ones((4, 3))).wait_to_read()


def test_the_layers_kernels_refuse_lists_that_do_not_hold_one_entry_per_layer():
    mus = [mx.nd.zeros((3, 2)), mx.nd.zeros((3,))]
    rhos = [mx.nd.zeros((3, 2)), mx.nd.zeros((3,))]
    with pytest.raises(mx.base.MXNetError):
        mx.nd.bbb_draw_layers(*mus, *rhos, seed=0, stream=0, counter=0, layer=0, layers=2,
                              aux="0,0,2").wait_to_read()
    arrays = [mx.nd.zeros((3,)) for _ in range(5)]
    with pytest.raises(mx.base.MXNetError):
        mx.nd.bbb_update_layers(*arrays, *arrays, layers=2, aux="0,0", adam=0, lr_mu="0.1",
                                lr_rho="0.1,0.1", wd_mu="0,0", wd_rho="0,0").wait_to_read()


def test_the_layers_kernels_take_their_attributes_packed_in_args():
    """``args`` (``fused.packed``) is the same call as the attributes given one by one,
    to the bit; a malformed one is refused."""
    shapes, aux = [(6, 5), (6,), (2, 6)], [2, 0, 1]
    mus, rhos = _layers(np.random.default_rng(5), shapes)
    draw = dict(seed=3, stream=1, counter=5, layer=2, layers=3, aux=",".join(map(str, aux)))
    apart = mx.nd.bbb_draw_layers(*mus, *rhos, **draw)
    together = mx.nd.bbb_draw_layers(*mus, *rhos, args=packed(**draw))
    for a, b in zip(apart, together, strict=True):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())

    def arrays():
        r = np.random.default_rng(6)
        return [mx.nd.array(r.normal(size=s).astype(np.float32))
                for s, a in zip(shapes, aux, strict=True) for _ in range(9 + (a != 0))]
    update = dict(guard=1, adam=1, layers=3, aux=draw["aux"], lr_mu="0.001,0.002,0.003",
                  lr_rho="0.01,0.02,0.03", wd_mu="0.0,0.0001,0.0", wd_rho="0.0,0.0,0.001",
                  rescale="0.0078125", clip="-1.0", scale="0.01", kind=2, sigma="1.0",
                  beta1="0.9", beta2="0.999", epsilon="1e-08", cost=1)
    one, two = arrays(), arrays()
    g = mx.nd.zeros((1,))
    c1 = mx.nd.bbb_update_layers(*one, g, **update)
    # split between the two forms: the packed ones are merged into the others
    c2 = mx.nd.bbb_update_layers(*two, g, adam=1, layers=3, args=packed(
        **{k: v for k, v in update.items() if k not in ("adam", "layers")}))
    np.testing.assert_array_equal(c1.asnumpy(), c2.asnumpy())
    for a, b in zip(one, two, strict=True):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())
    for bad in ("layers", "=3", "seed=3;layers"):
        with pytest.raises(mx.base.MXNetError):
            mx.nd.bbb_draw_layers(*mus, *rhos, args=bad).wait_to_read()
    with pytest.raises(ValueError, match="'aux' holds ';'"):
        packed(layers=3, aux="0;1")
