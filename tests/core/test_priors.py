"""Tests for bbb_gluon.core.priors against float64 NumPy references.

Tolerances (stated once, used everywhere below):

- summed log density: ``|got - ref| <= 1e-4 * max(|ref|, 1)``;
- gradient, elementwise: ``|got_j - ref_j| <= 1e-4 * max(|ref_j|, 1)``, with ``ref_j`` the
  float64 analytic derivative of ``log p(w_j)``;
- closed-form KL: 1e-5 relative.

The references are evaluated at the float32 values the MXNet arrays actually hold.
"""

import math

import mxnet as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from mxnet import autograd

from bbb_gluon import (
    EmpiricalBayesPrior,
    FanInGaussianPrior,
    GaussianPrior,
    LaplacePrior,
    Prior,
    ScaleMixturePrior,
    make_prior,
)
from bbb_gluon.core.priors import prior_kinds

CPU0 = mx.cpu(0)
CONTEXTS = [CPU0, mx.cpu(1)]
CTX_IDS = ["cpu0", "cpu1"]
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
RTOL = 1e-4


# --------------------------------------------------------------------------- references


def gauss_logpdf64(w, sigma):
    w = np.asarray(w, dtype=np.float64)
    return -HALF_LOG_2PI - math.log(sigma) - w**2 / (2 * sigma**2)


def gauss_grad64(w, sigma):
    return -np.asarray(w, dtype=np.float64) / sigma**2


def mixture_logpdf64(w, pi, sigma1, sigma2):
    a = math.log(pi) + gauss_logpdf64(w, sigma1)
    b = math.log1p(-pi) + gauss_logpdf64(w, sigma2)
    return np.logaddexp(a, b)


def mixture_grad64(w, pi, sigma1, sigma2):
    w = np.asarray(w, dtype=np.float64)
    a = math.log(pi) + gauss_logpdf64(w, sigma1)
    b = math.log1p(-pi) + gauss_logpdf64(w, sigma2)
    total = np.logaddexp(a, b)
    r1, r2 = np.exp(a - total), np.exp(b - total)
    return -(r1 * w / sigma1**2 + r2 * w / sigma2**2)


def _log_prob_and_grad(prior, w32, ctx=CPU0):
    wa = mx.nd.array(w32, ctx=ctx, dtype=np.float32)
    wa.attach_grad()
    with autograd.record():
        lp = prior.log_prob(wa)
    lp.backward()
    assert lp.shape == (1,)
    assert lp.context == ctx
    return float(lp.asscalar()), wa.grad.asnumpy().astype(np.float64)


def _check(prior, w32, ref_fn, grad_fn, ctx=CPU0):
    w64 = np.asarray(w32, dtype=np.float32).astype(np.float64)
    got, grad = _log_prob_and_grad(prior, w32, ctx)
    ref = float(ref_fn(w64).sum())
    assert math.isfinite(got)
    assert abs(got - ref) <= RTOL * max(abs(ref), 1.0), (got, ref)
    assert np.all(np.isfinite(grad))
    gref = grad_fn(w64)
    err = np.abs(grad - gref) / np.maximum(np.abs(gref), 1.0)
    assert err.max() <= RTOL, (w64.ravel()[err.argmax()], grad.ravel()[err.argmax()],
                               gref.ravel()[err.argmax()])


# --------------------------------------------------------------------------- log_prob: grids


WEIGHT_GRID = np.concatenate([
    np.linspace(-10, 10, 4001),
    np.linspace(-0.01, 0.01, 2001),  # the narrow spike and the crossing points
    [0.0, 1e-30, -1e-30, 1e-8],
]).astype(np.float32)


@pytest.mark.parametrize("sigma", [math.exp(-8), 0.05, 1.0, 7.5])
@pytest.mark.parametrize("ctx", CONTEXTS, ids=CTX_IDS)
def test_gaussian_log_prob_grid(sigma, ctx):
    prior = GaussianPrior(sigma)
    _check(prior, WEIGHT_GRID, lambda w: gauss_logpdf64(w, sigma),
           lambda w: gauss_grad64(w, sigma), ctx)


@pytest.mark.parametrize("pi, sigma1, sigma2", [
    (0.5, 1.0, math.exp(-8)),
    (0.5, 1.0, math.exp(-6)),
    (0.25, math.exp(-1), math.exp(-7)),
    (0.75, math.exp(-2), math.exp(-6)),
    (0.5, 1.0, 0.5),
    (0.01, 3.0, math.exp(-8)),
    (0.99, 1.0, math.exp(-8)),
])
@pytest.mark.parametrize("ctx", CONTEXTS, ids=CTX_IDS)
def test_scale_mixture_log_prob_grid(pi, sigma1, sigma2, ctx):
    prior = ScaleMixturePrior(pi, sigma1, sigma2)
    _check(prior, WEIGHT_GRID, lambda w: mixture_logpdf64(w, pi, sigma1, sigma2),
           lambda w: mixture_grad64(w, pi, sigma1, sigma2), ctx)


@pytest.mark.parametrize("shape", [(1,), (3, 4), (2, 3, 5)])
def test_log_prob_is_a_sum_over_any_shape(shape):
    w = np.random.uniform(-2, 2, size=shape).astype(np.float32)
    mix = ScaleMixturePrior(0.5, 1.0, math.exp(-8))
    _check(mix, w, lambda v: mixture_logpdf64(v, 0.5, 1.0, math.exp(-8)),
           lambda v: mixture_grad64(v, 0.5, 1.0, math.exp(-8)))
    gauss = GaussianPrior(0.3)
    _check(gauss, w, lambda v: gauss_logpdf64(v, 0.3), lambda v: gauss_grad64(v, 0.3))


def test_scale_mixture_with_equal_pi_limits():
    """A mixture whose narrow component is nearly the wide one is nearly that Gaussian."""
    prior = ScaleMixturePrior(0.5, 1.0, 1.0 - 1e-9)
    w = np.linspace(-4, 4, 101).astype(np.float32)
    got, _ = _log_prob_and_grad(prior, w)
    assert got == pytest.approx(gauss_logpdf64(w.astype(np.float64), 1.0).sum(), rel=1e-5)


# --------------------------------------------------------------------------- log_prob: properties


_weights = arrays(np.float32, st.integers(1, 64),
                  elements=st.floats(-10, 10, width=32, allow_nan=False, allow_subnormal=False))


@settings(max_examples=60, deadline=None)
@given(w=_weights, log_sigma=st.floats(-8, 2.5))
def test_gaussian_log_prob_property(w, log_sigma):
    sigma = math.exp(log_sigma)
    _check(GaussianPrior(sigma), w, lambda v: gauss_logpdf64(v, sigma),
           lambda v: gauss_grad64(v, sigma))


@settings(max_examples=80, deadline=None)
@given(
    w=_weights,
    pi=st.floats(0.01, 0.99),
    log_sigma1=st.floats(-2, 1),
    log_gap=st.floats(0.5, 8),
)
def test_scale_mixture_log_prob_property(w, pi, log_sigma1, log_gap):
    sigma1, sigma2 = math.exp(log_sigma1), math.exp(log_sigma1 - log_gap)
    prior = ScaleMixturePrior(pi, sigma1, sigma2)
    _check(prior, w, lambda v: mixture_logpdf64(v, pi, sigma1, sigma2),
           lambda v: mixture_grad64(v, pi, sigma1, sigma2))


@settings(max_examples=60, deadline=None)
@given(w=arrays(np.float32, st.integers(1, 32),
                elements=st.floats(-0.0625, 0.0625, width=32, allow_nan=False,
                                  allow_subnormal=False)))
def test_scale_mixture_paper_prior_near_zero_property(w):
    """sigma1 = 1, sigma2 = e^-8: the float32 under/overflow regime of the paper."""
    s2 = math.exp(-8)
    _check(ScaleMixturePrior(0.5, 1.0, s2), w, lambda v: mixture_logpdf64(v, 0.5, 1.0, s2),
           lambda v: mixture_grad64(v, 0.5, 1.0, s2))


# --------------------------------------------------------------------------- closed-form KL


def kl64(mu, sigma, sigma_p):
    mu, sigma = np.asarray(mu, np.float64), np.asarray(sigma, np.float64)
    return float(np.sum(np.log(sigma_p / sigma) + (sigma**2 + mu**2) / (2 * sigma_p**2) - 0.5))


@pytest.mark.parametrize("sigma_p", [0.1, 1.0, 3.0])
@pytest.mark.parametrize("shape", [(1,), (4, 3), (2, 2, 5)])
@pytest.mark.parametrize("with_log_sigma", [False, True])
@pytest.mark.parametrize("ctx", CONTEXTS, ids=CTX_IDS)
def test_gaussian_kl_matches_formula(sigma_p, shape, with_log_sigma, ctx):
    mu = np.random.uniform(-2, 2, size=shape).astype(np.float32)
    sigma = np.exp(np.random.uniform(-6, 1, size=shape)).astype(np.float32)
    prior = GaussianPrior(sigma_p)
    mu_a, sigma_a = mx.nd.array(mu, ctx=ctx), mx.nd.array(sigma, ctx=ctx)
    log_sigma = mx.nd.log(sigma_a) if with_log_sigma else None
    got = prior.kl(mu_a, sigma_a, log_sigma)
    assert got.shape == (1,) and got.context == ctx
    ref = kl64(mu, sigma, sigma_p)
    assert got.asscalar() == pytest.approx(ref, rel=1e-5, abs=1e-5)


def test_gaussian_kl_is_zero_at_the_prior():
    prior = GaussianPrior(0.7)
    kl = prior.kl(mx.nd.zeros((50,)), mx.nd.full((50,), 0.7)).asscalar()
    assert abs(kl) < 1e-5


def test_gaussian_kl_gradient():
    mu = np.random.uniform(-1, 1, size=(5,)).astype(np.float32)
    sigma = np.random.uniform(0.05, 2, size=(5,)).astype(np.float32)
    mu_a, sigma_a = mx.nd.array(mu), mx.nd.array(sigma)
    mu_a.attach_grad()
    sigma_a.attach_grad()
    with autograd.record():
        kl = GaussianPrior(1.5).kl(mu_a, sigma_a)
    kl.backward()
    mu64, s64 = mu.astype(np.float64), sigma.astype(np.float64)
    mx.test_utils.assert_almost_equal(mu_a.grad.asnumpy(), mu64 / 1.5**2, rtol=1e-5, atol=1e-6)
    mx.test_utils.assert_almost_equal(sigma_a.grad.asnumpy(), s64 / 1.5**2 - 1 / s64,
                                      rtol=1e-5, atol=1e-6)


def test_scale_mixture_has_no_closed_form_kl():
    prior = ScaleMixturePrior()
    assert not prior.has_closed_form_kl
    assert GaussianPrior().has_closed_form_kl
    with pytest.raises(NotImplementedError):
        prior.kl(mx.nd.zeros((2,)), mx.nd.ones((2,)))


# --------------------------------------------------------------------------- constructors


@pytest.mark.parametrize("sigma", [0, 0.0, -1.0, float("nan"), float("inf"), "1.0", None, True,
                                   [1.0]])
def test_gaussian_prior_rejects_bad_sigma(sigma):
    with pytest.raises(ValueError, match="sigma"):
        GaussianPrior(sigma)


@pytest.mark.parametrize("pi", [0, 0.0, 1, 1.0, -0.5, 1.5, float("nan"), float("inf"), "0.5",
                                None, True])
def test_scale_mixture_rejects_bad_pi(pi):
    with pytest.raises(ValueError, match="pi"):
        ScaleMixturePrior(pi=pi)


@pytest.mark.parametrize("name", ["sigma1", "sigma2"])
@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), float("inf"), "x", None, False])
def test_scale_mixture_rejects_bad_sigmas(name, value):
    kwargs = {"sigma1": 1.0, "sigma2": 0.01, name: value}
    with pytest.raises(ValueError, match=name):
        ScaleMixturePrior(0.5, **kwargs)


@pytest.mark.parametrize("sigma1, sigma2", [(1.0, 1.0), (0.1, 1.0), (math.exp(-8), 1.0)])
def test_scale_mixture_requires_sigma1_above_sigma2(sigma1, sigma2):
    with pytest.raises(ValueError, match="sigma1") as info:
        ScaleMixturePrior(0.5, sigma1, sigma2)
    assert "sigma2" in str(info.value)


def test_valid_constructors_store_floats():
    g = GaussianPrior(2)
    assert g.sigma == 2.0 and isinstance(g.sigma, float)
    m = ScaleMixturePrior(0.25, 1, math.exp(-7))
    assert (m.pi, m.sigma1, m.sigma2) == (0.25, 1.0, math.exp(-7))
    assert isinstance(m, Prior) and isinstance(g, Prior)


# --------------------------------------------------------------------------- make_prior


def test_make_prior_round_trips_to_dict():
    for prior in [GaussianPrior(0.3), ScaleMixturePrior(0.25, 2.0, math.exp(-6))]:
        again = make_prior(**prior.to_dict())
        assert type(again) is type(prior)
        assert again.to_dict() == prior.to_dict()


def test_make_prior_defaults_and_kwargs():
    assert isinstance(make_prior(), ScaleMixturePrior)
    g = make_prior("gaussian", sigma=0.5)
    assert isinstance(g, GaussianPrior) and g.sigma == 0.5


@pytest.mark.parametrize("kind", ["cauchy", "Gaussian", "mixture", "", None])
def test_make_prior_unknown_kind(kind):
    with pytest.raises(ValueError, match="unknown prior"):
        make_prior(kind)


def test_make_prior_passes_on_validation():
    with pytest.raises(ValueError, match="sigma"):
        make_prior("gaussian", sigma=-1)


def test_make_prior_refuses_a_hyperparameter_the_prior_does_not_take():
    with pytest.raises(ValueError, match="takes sigma; got 'pi'"):
        make_prior("gaussian", pi=0.5)


# --------------------------------------------------------------- one class per prior
# Everything about a prior lives in its class: these hold for every prior make_prior
# knows, so a new one is checked as soon as it is defined.


@pytest.mark.parametrize("kind", list(prior_kinds()))
def test_every_prior_carries_its_names_and_round_trips(kind):
    cls = prior_kinds()[kind]
    prior = cls()  # every hyperparameter has a default (the command line shows it)
    assert prior.kind == kind and set(prior.to_dict()) == {"kind", *cls.params}
    assert make_prior(**prior.to_dict()) == prior
    assert set(prior.summary()) == set(cls.summary_columns())
    assert {o.param for o in cls.cli_options} == set(cls.params)
    for option in cls.cli_options:  # an option's value and the hyperparameter agree
        value = getattr(prior, option.param)
        assert option.to_param(option.from_param(value)) == pytest.approx(value, rel=1e-12)
    assert prior.label() and repr(prior).startswith(cls.__name__)
    scale = prior.widest_scale()  # None only where the data set the scale
    assert scale > 0 if cls.kind != "empirical_bayes" else scale is None


def test_the_command_line_flags_of_the_priors_are_distinct():
    flags = [o.flag for cls in prior_kinds().values() for o in cls.cli_options]
    assert len(flags) == len(set(flags)) and "--prior" not in flags


def test_the_prior_says_what_the_fused_kernel_runs():
    # the codes of fused.cc's enum Kind, the hyperparameters as exact decimal strings
    assert GaussianPrior(0.5).fused_attrs("mc") == {"kind": 2, "sigma": "0.5"}
    assert GaussianPrior(0.5).fused_attrs("kl") == {"kind": 3, "sigma": "0.5"}
    assert ScaleMixturePrior(0.25, 1.0, 0.1).fused_attrs("mc") == {
        "kind": 1, "pi": "0.25", "sigma1": "1.0", "sigma2": "0.1"}
    assert ScaleMixturePrior().fused_attrs("kl") is None  # no closed-form KL
    assert Prior().fused_attrs("mc") is None


def test_run_summaries_take_the_priors_own_columns():
    from bbb_gluon.runs import PRIOR_COLUMNS, SUMMARY_COLUMNS

    for cls in prior_kinds().values():
        assert set(cls.summary_columns()) <= set(PRIOR_COLUMNS) <= set(SUMMARY_COLUMNS)
    m = ScaleMixturePrior(0.25, math.exp(-1), math.exp(-7))
    assert m.summary() == pytest.approx({"pi": 0.25, "log_sigma1": -1.0, "log_sigma2": -7.0})
    assert m.label() == "pi=0.25 ls1=-1 ls2=-7"
    assert GaussianPrior(0.5).summary() == {"prior_sigma": 0.5}
    assert GaussianPrior(0.5).label() == "N(0,0.5^2)"


def test_the_widest_scale_is_each_priors_own():
    assert GaussianPrior(0.5).widest_scale() == 0.5
    assert ScaleMixturePrior(0.5, 2.0, 0.1).widest_scale() == 2.0
    assert LaplacePrior(1.0).widest_scale() == pytest.approx(math.sqrt(2))  # its std
    assert Prior().widest_scale() is None


# --------------------------------------------------------------------------- Laplace


@pytest.mark.parametrize("scale", [1e-3, 0.1, 1.0, 30.0])
@pytest.mark.parametrize("ctx", CONTEXTS, ids=CTX_IDS)
def test_laplace_log_prob_and_gradient_match_float64(scale, ctx):
    w32 = np.array([-50.0, -1.0, -1e-3, 0.0, 2e-4, 0.3, 7.0], dtype=np.float32)
    w = mx.nd.array(w32, ctx=ctx)
    w.attach_grad()
    with autograd.record():
        lp = LaplacePrior(scale).log_prob(w)
    lp.backward()
    w64 = w32.astype(np.float64)
    ref = np.sum(-np.abs(w64) / scale - math.log(2 * scale))
    assert lp.shape == (1,) and lp.context == ctx
    assert abs(lp.asscalar() - ref) <= RTOL * max(abs(ref), 1)
    # d log p / dw = -sign(w) / b, and 0 at w = 0 (as the fused kernel)
    np.testing.assert_allclose(w.grad.asnumpy(), -np.sign(w64) / scale, rtol=RTOL)


@given(w=arrays(np.float32, st.integers(1, 40), elements=st.floats(-1e3, 1e3, width=32)),
       log_scale=st.floats(-6, 3))
@settings(max_examples=50, deadline=None)
def test_laplace_log_prob_property(w, log_scale):
    scale = math.exp(log_scale)
    got = LaplacePrior(scale).log_prob(mx.nd.array(w)).asscalar()
    ref = np.sum(-np.abs(w.astype(np.float64)) / scale - math.log(2 * scale))
    assert abs(got - ref) <= RTOL * max(abs(ref), 1)


@pytest.mark.parametrize("scale", [0, -1.0, float("nan"), float("inf"), "1", True])
def test_laplace_prior_rejects_bad_scale(scale):
    with pytest.raises(ValueError, match="scale"):
        LaplacePrior(scale)


def test_laplace_prior_is_one_class_with_its_names():
    prior = make_prior("laplace", scale=0.25)
    assert isinstance(prior, LaplacePrior) and prior.to_dict() == {"kind": "laplace",
                                                                    "scale": 0.25}
    assert prior.fused_attrs("mc") == {"kind": 4, "b": "0.25"}
    assert prior.fused_attrs("kl") is None and not prior.has_closed_form_kl
    assert prior.summary() == {"prior_scale": 0.25} and prior.label() == "Laplace(0,0.25)"
    assert [o.flag for o in prior.cli_options] == ["--prior-scale"]


# ------------------------------------------------------------ scales set per array


@pytest.mark.parametrize("shape, fan_in", [((7, 50), 50), ((4, 3, 5, 5), 75), ((9,), 1)])
@pytest.mark.parametrize("ctx", CONTEXTS, ids=CTX_IDS)
def test_fan_in_prior_is_a_gaussian_with_the_arrays_own_scale(shape, fan_in, ctx):
    prior = FanInGaussianPrior(gain=1.3)
    sigma_p = 1.3 / math.sqrt(fan_in)
    assert prior.sigma_of(shape) == pytest.approx(sigma_p, rel=1e-12)
    w = np.random.uniform(-1, 1, size=shape).astype(np.float32)
    _check(prior, w, lambda v: gauss_logpdf64(v, sigma_p), lambda v: gauss_grad64(v, sigma_p),
           ctx)
    mu = np.random.uniform(-1, 1, size=shape).astype(np.float32)
    sigma = np.exp(np.random.uniform(-6, 0, size=shape)).astype(np.float32)
    got = prior.kl(mx.nd.array(mu, ctx=ctx), mx.nd.array(sigma, ctx=ctx))
    assert got.context == ctx
    assert got.asscalar() == pytest.approx(kl64(mu, sigma, sigma_p), rel=1e-5, abs=1e-5)


def eb_variance64(squares, n, alpha, beta):
    return (squares + 2 * beta) / (n + 2 * alpha + 2)


@pytest.mark.parametrize("alpha, beta", [(0.0, 1e-3), (1.0, 1.0), (3.0, 10.0)])
@pytest.mark.parametrize("ctx", CONTEXTS, ids=CTX_IDS)
def test_empirical_bayes_kl_uses_the_variance_that_maximises_the_elbo(alpha, beta, ctx):
    mu = np.random.uniform(-0.3, 0.3, size=(20, 30)).astype(np.float32)
    sigma = np.exp(np.random.uniform(-5, -2, size=mu.shape)).astype(np.float32)
    mu64, s64 = mu.astype(np.float64), sigma.astype(np.float64)
    v = eb_variance64(np.sum(mu64**2 + s64**2), mu.size, alpha, beta)
    # v maximises -KL(q || N(0, v)) + log IG(v; alpha, beta)
    grid = v * np.exp(np.linspace(-0.05, 0.05, 11))
    objective = [-kl64(mu, sigma, math.sqrt(u)) - (alpha + 1) * math.log(u) - beta / u
                 for u in grid]
    assert int(np.argmax(objective)) == 5
    mu_a, sigma_a = mx.nd.array(mu, ctx=ctx), mx.nd.array(sigma, ctx=ctx)
    mu_a.attach_grad()
    sigma_a.attach_grad()
    prior = EmpiricalBayesPrior(alpha, beta)
    with autograd.record():
        kl = prior.kl(mu_a, sigma_a)
    kl.backward()
    assert kl.shape == (1,) and kl.context == ctx
    assert kl.asscalar() == pytest.approx(kl64(mu, sigma, math.sqrt(v)), rel=1e-5)
    # v held fixed: the gradient of the ELBO with v optimised out (its slope in v is 0)
    mx.test_utils.assert_almost_equal(mu_a.grad.asnumpy(), mu64 / v, rtol=1e-4, atol=1e-5)
    mx.test_utils.assert_almost_equal(sigma_a.grad.asnumpy(), s64 / v - 1 / s64,
                                      rtol=1e-4, atol=1e-3)


def test_empirical_bayes_log_prob_puts_the_sample_in_place_of_the_moments():
    w = np.random.normal(0, 0.2, size=(40, 25)).astype(np.float32)
    w64 = w.astype(np.float64)
    v = eb_variance64(np.sum(w64**2), w.size, 1.0, 1.0)
    _check(EmpiricalBayesPrior(), w, lambda u: gauss_logpdf64(u, math.sqrt(v)),
           lambda u: gauss_grad64(u, math.sqrt(v)))


def test_empirical_bayes_gives_each_array_its_own_scale():
    prior = EmpiricalBayesPrior(alpha=0.0, beta=1e-6)
    wide, narrow = mx.nd.full((100,), 2.0), mx.nd.full((100,), 0.01)
    # each at its own variance, N(0, v) with v ~ w^2: about -n/2 (log 2 pi v + 1)
    for w in (wide, narrow):
        v = eb_variance64(float((w.asnumpy().astype(np.float64) ** 2).sum()), 100, 0, 1e-6)
        ref = -50 * (math.log(2 * math.pi * v)) - 0.5 * 100 * float(w[0].asscalar()) ** 2 / v
        assert prior.log_prob(w).asscalar() == pytest.approx(ref, rel=1e-5)


@pytest.mark.parametrize("bad, match", [
    ({"alpha": -1.0}, "alpha"), ({"beta": 0.0}, "beta"), ({"alpha": math.nan}, "alpha"),
])
def test_empirical_bayes_refuses_a_bad_hyperprior(bad, match):
    with pytest.raises(ValueError, match=match):
        EmpiricalBayesPrior(**bad)
    with pytest.raises(ValueError, match="gain"):
        FanInGaussianPrior(gain=0.0)


@pytest.mark.parametrize("prior", [FanInGaussianPrior(0.5), EmpiricalBayesPrior()],
                         ids=["fan_in", "empirical_bayes"])
def test_priors_without_fused_code_train_on_the_reference_engine(prior):
    from mxnet import gluon

    from bbb_gluon import BBBLoss, BBBStep, Posterior, trainable_params

    mx.random.seed(1)
    net = gluon.nn.Dense(3, in_units=4)
    net.initialize()
    posterior = Posterior(net, seed=0, rho_init=-4.0)
    loss = BBBLoss(prior, complexity="kl", num_batches=1)
    trainer = gluon.Trainer(trainable_params(net, posterior, loss), "adam",
                            {"learning_rate": 1e-2})
    step = BBBStep(net, posterior, loss, trainer)
    assert step.engine == "reference" and prior.fused_attrs("kl") is None
    rng = np.random.default_rng(0)
    X = mx.nd.array(rng.normal(size=(16, 4)))
    y = mx.nd.array(np.arange(16) % 3)
    before = [a.asnumpy() for a in posterior.mu()]
    costs = [float(step(X, y)[0].asscalar()) for _ in range(30)]
    assert all(math.isfinite(c) for c in costs) and costs[-1] < costs[0]
    assert not np.allclose(before[0], posterior.mu()[0].asnumpy())
