"""Tests for bbb_gluon.prediction: uncertainty measures and the Monte-Carlo predictive.

- entropy, expected entropy, mutual information and per-class spread against values
  worked out by hand (in the comments), to 1e-7;
- ``predict_samples`` and ``predict_proba(samples=S)`` against a per-sample loop over
  the same weight draws (noise state rewound with ``state_dict``/``load_state_dict``) with
  a float64 NumPy forward pass, for the fused and the NumPy noise, hybridized or not;
- the local reparameterisation of the first layer against a float64 re-computation with
  the same noise, and in distribution against weight sampling (within 5 standard errors);
- ``uncertainty`` for weight samples, MC dropout and a deterministic net.

Bad inputs into every prediction function: tests/test_reliability_matrix.py.
"""

import mxnet as mx
import numpy as np
import pytest
from mxnet.gluon import nn

from bbb_gluon import Posterior, prediction, predictive_paths, use_means, use_weights
from bbb_gluon._kernels import fused
from bbb_gluon.prediction import (
    PREDICTION_STREAM,
    class_std,
    entropy,
    error_rate,
    expected_entropy,
    mutual_information,
    predict_proba,
    predict_samples,
    predictive_entropy,
    uncertainty,
)

LOG2 = 0.6931471805599453

# Two samples of two examples. Example 0: the samples are certain and disagree;
# example 1: [0.8, 0.2] and [0.4, 0.6].
SAMPLES = np.array([[[1.0, 0.0], [0.8, 0.2]],
                    [[0.0, 1.0], [0.4, 0.6]]])


# --------------------------------------------------------------------------- pure functions


def test_entropy_by_hand():
    np.testing.assert_allclose(entropy([[0.5, 0.5], [1.0, 0.0]]), [LOG2, 0.0], atol=1e-12)
    assert entropy([0.25] * 4) == pytest.approx(2 * LOG2, abs=1e-12)
    # 0 log 0 counts as 0, not NaN
    assert entropy([0.0, 0.5, 0.5]) == pytest.approx(LOG2, abs=1e-12)


def test_predictive_entropy_by_hand():
    # Example 0: mean [0.5, 0.5] -> log 2. Example 1: mean [0.6, 0.4] ->
    # -(0.6 log 0.6 + 0.4 log 0.4) = 0.6 * 0.5108256238 + 0.4 * 0.9162907319 = 0.6730116670
    np.testing.assert_allclose(predictive_entropy(SAMPLES), [LOG2, 0.6730116670], atol=1e-9)


def test_expected_entropy_by_hand():
    # Example 0: both samples certain -> 0. Example 1: H(0.8, 0.2) = 0.8 * 0.2231435513
    # + 0.2 * 1.6094379124 = 0.5004024235 and H(0.4, 0.6) = 0.6730116670: mean 0.5867070453
    np.testing.assert_allclose(expected_entropy(SAMPLES), [0.0, 0.5867070453], atol=1e-9)


def test_mutual_information_by_hand():
    # Predictive minus expected: log 2 - 0 and 0.6730116670 - 0.5867070453 = 0.0863046217
    np.testing.assert_allclose(mutual_information(SAMPLES), [LOG2, 0.0863046217], atol=1e-9)


def test_mutual_information_is_zero_when_samples_agree():
    same = np.repeat(np.array([[[0.7, 0.2, 0.1]]]), 5, axis=0)
    assert mutual_information(same)[0] == 0.0  # clipped, never a tiny negative number
    assert expected_entropy(same)[0] == pytest.approx(predictive_entropy(same)[0])


def test_class_std_by_hand():
    # Example 0: values 1 and 0 -> std 0.5 per class; example 1: 0.8/0.4 -> 0.2.
    np.testing.assert_allclose(class_std(SAMPLES), [[0.5, 0.5], [0.2, 0.2]], atol=1e-12)


@pytest.mark.parametrize("fn", [predictive_entropy, expected_entropy, mutual_information,
                                class_std])
def test_per_sample_functions_need_three_axes(fn):
    with pytest.raises(ValueError, match=r"\(S, N, C\)"):
        fn(np.ones((3, 2)) / 2)


def test_measures_are_vectorised_over_many_samples():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(4), size=(50, 30))  # (S=50, N=30, C=4)
    loop = np.array([np.mean([-np.sum(p[s, n] * np.log(p[s, n])) for s in range(50)])
                     for n in range(30)])
    np.testing.assert_allclose(expected_entropy(p), loop, rtol=1e-12)
    assert np.all(mutual_information(p) >= 0)
    np.testing.assert_allclose(predictive_entropy(p),
                               expected_entropy(p) + mutual_information(p), rtol=1e-12)


# --------------------------------------------------------------------------- MC predictive


def make_net(units=(6, 8, 3), hybrid=False, seed=1, rho_init=-1.5):
    net = nn.HybridSequential()
    with net.name_scope():
        net.add(nn.Dense(units[1], activation="relu", in_units=units[0]))
        net.add(nn.Dense(units[2], in_units=units[1]))
    net.initialize(mx.init.Normal(0.5))
    if hybrid:
        net.hybridize()
    posterior = Posterior(net, mu_scale=0.8, rho_init=rho_init, seed=seed)
    return net, posterior


def softmax64(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def forward64(X, weights):
    w0, b0, w1, b1 = (np.asarray(w, dtype=np.float64) for w in weights)
    return softmax64(np.maximum(X @ w0.T + b0, 0.0) @ w1.T + b1)


@pytest.fixture(params=["fused", "numpy"])
def noise_engine(request, monkeypatch):
    """Each test twice: with the fused kernels' noise and with NumPy's."""
    if request.param == "fused":
        if not fused.available():
            pytest.skip(f"fused kernels unavailable: {fused.unavailable_reason()}")
    else:
        monkeypatch.setattr(fused, "available", lambda: False)
    return request.param


def reference_weights(posterior, engine, counter):
    """The weights a prediction draws for one counter of the prediction stream, rebuilt
    from the noise generators' documented keys and float64 arithmetic, without the
    package's own sampling code (so a shared error in it cannot pass)."""
    seed, out, flat = posterior.noise.seed, [], None
    if engine == "numpy":
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(
            [seed, PREDICTION_STREAM, counter])))
        flat, start = rng.standard_normal(posterior.num_weights, dtype=np.float32), 0
    for k, (mu, rho) in enumerate(zip(posterior.mu(), posterior.rho(), strict=True)):
        if engine == "numpy":
            eps = flat[start:start + mu.size].reshape(mu.shape)
            start += mu.size
        else:
            eps = mx.nd.bbb_normal(mx.nd.zeros(mu.shape), seed=seed, stream=PREDICTION_STREAM,
                                   counter=counter, layer=k).asnumpy()
        rho64 = rho.asnumpy().astype(np.float64)
        out.append(mu.asnumpy() + np.logaddexp(0.0, rho64) * eps)
    return out


def next_counter(posterior):
    return posterior.noise.state_dict()["counters"].get(str(PREDICTION_STREAM), 0)


@pytest.fixture
def per_sample_path(monkeypatch):
    """Small test networks would take the all-samples-at-once path; these tests are about
    the per-sample one (and the first layer's local reparameterisation)."""
    monkeypatch.setattr(predictive_paths, "_BATCHED_MAX_WEIGHTS", 0)


def inputs(n=7, d=6, seed=0):
    return np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)


@pytest.mark.parametrize("hybrid", [False, True])
def test_predict_samples_equals_a_loop_over_the_same_draws(noise_engine, hybrid,
                                                           per_sample_path):
    net, posterior = make_net(hybrid=hybrid)
    X = inputs()
    c0 = next_counter(posterior)
    samples = predict_samples(net, posterior, X, 5, batch_size=3)
    loop = np.stack([forward64(X, reference_weights(posterior, noise_engine, c0 + s))
                     for s in range(5)])
    np.testing.assert_allclose(samples, loop, rtol=1e-5, atol=1e-6)
    # the draws differ from one another, so the comparison is not vacuous
    assert np.abs(samples[0] - samples[1]).max() > 1e-3


@pytest.mark.parametrize("hybrid", [False, True])
def test_mc_mean_with_weight_sampling_equals_a_loop(noise_engine, hybrid, monkeypatch,
                                                    per_sample_path):
    net, posterior = make_net(hybrid=hybrid)
    X = inputs()
    monkeypatch.setattr(predictive_paths, "_first_dense", lambda net, posterior: None)
    state = posterior.noise.state_dict()
    c0 = next_counter(posterior)
    mean = predict_proba(net, posterior, X, 6, batch_size=4)
    loop = np.mean([forward64(X, reference_weights(posterior, noise_engine, c0 + s))
                    for s in range(6)], axis=0)
    np.testing.assert_allclose(mean, loop, rtol=1e-5, atol=1e-6)
    posterior.noise.load_state_dict(state)
    np.testing.assert_allclose(mean, predict_samples(net, posterior, X, 6).mean(axis=0),
                               rtol=1e-5, atol=1e-6)


def test_local_reparameterisation_equals_its_float64_recomputation(noise_engine,
                                                                   per_sample_path):
    """Same noise, recomputed by hand: first-layer pre-activations mean + std * zeta."""
    net, posterior = make_net()
    assert predictive_paths._first_dense(net, posterior) is not None
    X = inputs(n=5)
    c0 = next_counter(posterior)
    got = predict_proba(net, posterior, X, 4, batch_size=5)
    mu0, mub = (a.asnumpy().astype(np.float64) for a in posterior.mu()[:2])
    s0, sb = (a.asnumpy().astype(np.float64) for a in posterior.sigma()[:2])
    mean = X @ mu0.T + mub
    std = np.sqrt(X.astype(np.float64) ** 2 @ (s0 ** 2).T + sb ** 2)
    probs = []
    for s in range(4):
        # each sample takes two counters: one for the weights, one for the first layer
        w = reference_weights(posterior, noise_engine, c0 + 2 * s)
        counter = c0 + 2 * s + 1
        # the NumPy path draws each sample's first-layer noise from its own counter
        rng = np.random.default_rng([posterior.noise.seed, PREDICTION_STREAM, counter])
        if noise_engine == "fused":
            zeta = mx.nd.bbb_normal(mx.nd.zeros(mean.shape), seed=posterior.noise.seed,
                                    stream=PREDICTION_STREAM, counter=counter,
                                    layer=1000).asnumpy()
        else:
            zeta = rng.standard_normal(mean.shape, dtype=np.float32)
        hidden = np.maximum(mean + std * zeta, 0.0)
        w1, b1 = w[2:]
        probs.append(softmax64(hidden @ w1.T + b1))
    np.testing.assert_allclose(got, np.mean(probs, axis=0), rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_local_reparameterisation_matches_weight_sampling_in_distribution(per_sample_path):
    net, posterior = make_net(rho_init=-1.0)
    X = inputs(n=8)
    S = 3000
    local = predict_proba(net, posterior, X, S)  # local reparameterisation, first layer
    per_sample = predict_samples(net, posterior, X, S)  # every weight sampled
    sampled = per_sample.mean(axis=0)
    # Standard error of the difference of two independent S-sample means.
    se = np.sqrt(2.0 / S) * per_sample.std(axis=0) + 1e-6
    assert np.all(np.abs(local - sampled) < 5 * se), np.max(np.abs(local - sampled) / se)
    # The noise matters here: both are far (in standard errors) from the means' prediction
    # (about 20 standard errors with either noise generator, so the bound leaves room).
    means = predict_proba(net, posterior, X, 0)
    assert np.max(np.abs(means - sampled) / se) > 10


# --------------------------------------------------------------------------- uncertainty()


def test_uncertainty_with_weight_samples_agrees_with_predict_samples():
    net, posterior = make_net()
    X = inputs()
    state = posterior.noise.state_dict()
    u = uncertainty(net, posterior, X, 7)
    posterior.noise.load_state_dict(state)
    samples = predict_samples(net, posterior, X, 7)
    assert u["sample_probs"].shape == (7, 7, 3)
    np.testing.assert_allclose(u["probs"], samples.mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(u["mutual_information"], mutual_information(samples),
                               rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(u["predictive_entropy"], predictive_entropy(samples), rtol=1e-6)
    np.testing.assert_allclose(u["expected_entropy"], expected_entropy(samples), rtol=1e-6)
    np.testing.assert_allclose(u["std"], class_std(samples), rtol=1e-6, atol=1e-9)
    assert np.all(u["mutual_information"] > 0)


def dropout_net():
    net = nn.HybridSequential()
    with net.name_scope():
        net.add(nn.Dense(16, activation="relu", in_units=6))
        net.add(nn.Dropout(0.5))
        net.add(nn.Dense(3, in_units=16))
    net.initialize(mx.init.Normal(0.5))
    return net


def test_uncertainty_with_mc_dropout_and_deterministic():
    net = dropout_net()
    X = inputs()
    u = uncertainty(net, None, X, 20, mc_dropout=True)
    assert u["sample_probs"].shape == (20, 7, 3)
    np.testing.assert_allclose(u["probs"].sum(axis=1), 1.0, rtol=1e-6)
    assert np.all(u["mutual_information"] > 0) and np.all(u["std"].max(axis=1) > 0)
    det = uncertainty(net, None, X, 20)
    assert det["sample_probs"].shape == (1, 7, 3)
    np.testing.assert_array_equal(det["mutual_information"], 0.0)
    np.testing.assert_allclose(det["probs"], predict_proba(net, None, X), rtol=1e-6)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_uncertainty_rejects_bad_sample_counts(bad):
    net, posterior = make_net()
    with pytest.raises(ValueError, match="samples"):
        uncertainty(net, posterior, inputs(), bad)


@pytest.mark.parametrize("function", [predict_proba, predict_samples, uncertainty])
def test_the_old_keyword_num_samples_is_refused_naming_samples(function):
    # one name per idea: the step, TrainConfig and the command line say samples
    net, posterior = make_net()
    with pytest.raises(TypeError, match=r"takes samples=, not num_samples="):
        function(net, posterior, inputs(), num_samples=3)
    got = function(net, posterior, inputs(), samples=3)
    if isinstance(got, dict):
        assert got["sample_probs"].shape[0] == 3
    elif got.ndim == 3:
        assert got.shape[0] == 3
    else:
        np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-5)


def test_weights_go_back_after_prediction():
    net, posterior = make_net()
    before = [p.data().asnumpy().copy() for p in net.collect_params().values()]
    uncertainty(net, posterior, inputs(), 3)
    with use_weights(net, posterior, posterior.mu()):
        pass
    after = [p.data().asnumpy() for p in net.collect_params().values()]
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)


def test_images_through_a_conv_net():
    net = nn.HybridSequential()
    net.add(nn.Conv2D(3, 3, in_channels=1, activation="relu"), nn.Flatten(),
            nn.Dense(4, in_units=3 * 4 * 4))
    net.initialize(mx.init.Normal(0.5))
    posterior = Posterior(net, seed=0, rho_init=-2.0)
    X = np.random.default_rng(0).normal(size=(9, 1, 6, 6)).astype(np.float32)
    with use_means(net, posterior):
        expected = softmax64(net(mx.nd.array(X)).asnumpy().astype(np.float64))
    np.testing.assert_allclose(predict_proba(net, posterior, X, 0, batch_size=4), expected,
                               rtol=1e-5, atol=1e-7)
    state = posterior.noise.state_dict()
    samples = predict_samples(net, posterior, X, 5, batch_size=4)
    posterior.noise.load_state_dict(state)
    mean = predict_proba(net, posterior, X, 5, batch_size=4)
    assert samples.shape == (5, 9, 4)
    np.testing.assert_allclose(mean, samples.mean(axis=0), rtol=1e-5, atol=1e-7)
    assert np.abs(samples[0] - samples[1]).max() > 1e-3
    with pytest.raises(ValueError, match="examples axis"):
        predict_proba(net, posterior, X[0, 0, 0], 0)


# --------------------------------------------------------------------------- small networks


def batched_reference(posterior, engine, counter, num_samples):
    """All draws of one prediction-stream counter, rebuilt independently: per parameter k,
    noise of shape (S,) + shape (bbb_normal's layer k, or NumPy's generator drawing the
    parameters in order), weights in float64."""
    seed, out = posterior.noise.seed, []
    rng = np.random.default_rng([seed, PREDICTION_STREAM, counter])
    for k, (mu, rho) in enumerate(zip(posterior.mu(), posterior.rho(), strict=True)):
        shape = (num_samples,) + mu.shape
        if engine == "numpy":
            eps = rng.standard_normal(shape, dtype=np.float32)
        else:
            eps = mx.nd.bbb_normal(mx.nd.zeros(shape), seed=seed, stream=PREDICTION_STREAM,
                                   counter=counter, layer=k).asnumpy()
        out.append(mu.asnumpy()[None] + np.logaddexp(0.0, rho.asnumpy().astype(np.float64))
                   [None] * eps)
    return out


@pytest.mark.parametrize("hybrid", [False, True])
def test_small_networks_predict_all_samples_at_once(noise_engine, hybrid):
    net, posterior = make_net(hybrid=hybrid)
    assert predictive_paths.batched_plan(net, posterior, inputs()) is not None
    X = inputs(n=9)
    c0 = next_counter(posterior)
    samples = predict_samples(net, posterior, X, 6, batch_size=4)
    draws = batched_reference(posterior, noise_engine, c0, 6)
    loop = np.stack([forward64(X, [w[s] for w in draws]) for s in range(6)])
    np.testing.assert_allclose(samples, loop, rtol=1e-5, atol=1e-6)
    assert np.abs(samples[0] - samples[1]).max() > 1e-3
    # The MC predictive is the mean of the same draws.
    state = posterior.noise.state_dict()
    state["counters"][str(PREDICTION_STREAM)] = c0
    posterior.noise.load_state_dict(state)
    np.testing.assert_allclose(predict_proba(net, posterior, X, 6, batch_size=4),
                               loop.mean(axis=0), rtol=1e-5, atol=1e-6)


def test_batched_path_with_a_bernoulli_output_and_many_samples(monkeypatch):
    net = nn.HybridSequential()
    net.add(nn.Dense(5, activation="tanh", in_units=2), nn.Dense(5, activation="tanh"),
            nn.Dense(1))
    net.initialize(mx.init.Normal(0.5))
    net(mx.nd.ones((1, 2)))
    posterior = Posterior(net, seed=0, rho_init=-1.0)
    X = inputs(n=50, d=2)
    # Chunks of 7 samples: the draws of later chunks come from later counters.
    monkeypatch.setattr(predictive_paths, "_BATCHED_FLOATS", 7 * posterior.num_weights)
    samples = predict_samples(net, posterior, X, 20, likelihood="bernoulli")
    assert samples.shape == (20, 50, 2)
    np.testing.assert_allclose(samples.sum(axis=2), 1.0, rtol=1e-6)
    spread = samples[:, :, 1].std(axis=0)
    assert (spread > 1e-3).mean() > 0.9  # every chunk drew its own weights
    assert len({tuple(np.round(samples[s, :3, 1], 6)) for s in range(20)}) == 20


def test_which_networks_take_the_batched_path():
    net, posterior = make_net()
    assert predictive_paths.batched_plan(net, posterior, inputs()) is not None
    assert predictive_paths.batched_plan(net, posterior, inputs()[:, None, :]) is None  # not 2-D
    conv = nn.HybridSequential()
    conv.add(nn.Conv2D(2, 3, in_channels=1), nn.Flatten(), nn.Dense(2, in_units=32))
    conv.initialize()
    assert predictive_paths.batched_plan(conv, Posterior(conv, seed=0),
                                    np.zeros((2, 36), np.float32)) is None
    last = Posterior(net, seed=0, select=[net[-1]])
    assert predictive_paths.batched_plan(net, last, inputs()) is None  # not every layer sampled


def test_gaussian_likelihood_returns_the_outputs_per_sample():
    net, posterior = make_net()
    X = inputs()
    c0 = next_counter(posterior)
    raw = predict_samples(net, posterior, X, 4, likelihood="gaussian")
    draws = batched_reference(posterior, "fused" if fused.available() else "numpy", c0, 4)
    for s in range(4):
        w0, b0, w1, b1 = (w[s] for w in draws)
        np.testing.assert_allclose(raw[s], np.maximum(X @ w0.T + b0, 0) @ w1.T + b1,
                                   rtol=1e-5, atol=1e-5)
    means = predict_proba(net, posterior, X, 0, likelihood="gaussian")
    with use_means(net, posterior):
        np.testing.assert_allclose(means, net(mx.nd.array(X)).asnumpy(), rtol=1e-6)


def test_large_inputs_are_predicted_in_passes(monkeypatch):
    from bbb_gluon.prediction import predict_proba, predict_samples, uncertainty

    net, posterior = make_net()
    X = np.random.default_rng(0).normal(size=(230, 6)).astype(np.float32)
    whole_means = predict_proba(net, posterior, X, 0)
    monkeypatch.setattr(prediction, "PASS_EXAMPLES", 100)  # three passes: 100, 100, 30
    # The same numbers but for the matrix products' rounding: oneDNN may block a product
    # by its number of rows, and on some CPUs (an AMD EPYC without AVX-512) a pass of 100
    # rows sums in another order than one of 230 (measured: one probability in 690 off by
    # 1e-6 of itself).
    np.testing.assert_allclose(predict_proba(net, posterior, X, 0), whole_means, rtol=1e-5,
                               atol=1e-7)
    mc = predict_proba(net, posterior, X, 200)
    assert mc.shape == (230, 3) and np.allclose(mc.sum(axis=1), 1, atol=1e-5)
    assert np.abs(mc - whole_means).max() < 0.2  # an average over weight samples
    samples = predict_samples(net, posterior, X, 4)
    assert samples.shape == (4, 230, 3)
    u = uncertainty(net, posterior, X, 8, keep_samples=False)
    assert "sample_probs" not in u
    assert {k: v.shape for k, v in u.items()} == {
        "probs": (230, 3), "predictive_entropy": (230,), "expected_entropy": (230,),
        "mutual_information": (230,), "std": (230, 3)}
    np.testing.assert_allclose(u["mutual_information"],
                               u["predictive_entropy"] - u["expected_entropy"], atol=1e-12)


def test_keep_samples_false_gives_the_same_measures():
    from bbb_gluon.prediction import uncertainty

    net, posterior = make_net(seed=4)
    X = np.random.default_rng(1).normal(size=(50, 6)).astype(np.float32)
    full = uncertainty(net, posterior, X, 6)
    net, posterior = make_net(seed=4)
    lean = uncertainty(net, posterior, X, 6, keep_samples=False)
    for k, v in lean.items():
        np.testing.assert_array_equal(v, full[k])


def three_inputs(outputs):
    """A 3-8-outputs network and its posterior."""
    net = nn.HybridSequential()
    net.add(nn.Dense(8, activation="relu", in_units=3), nn.Dense(outputs, in_units=8))
    net.initialize(mx.init.Xavier())
    return net, Posterior(net, seed=0)


def test_the_network_and_its_posterior_come_first_and_regressions_get_no_probabilities():
    net, posterior = three_inputs(1)
    X = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    # the order of the package's earlier predict_proba(net, X, posterior) is refused
    for call in (lambda: predict_proba(net, X, posterior),
                 lambda: predict_samples(net, X, posterior, 2),
                 lambda: uncertainty(net, X, posterior, 2)):
        with pytest.raises(TypeError, match=r"\(net, posterior, X, \.\.\.\).*ndarray"):
            call()
    # one output under softmax would be a probability of 1.0 for every input
    with pytest.raises(ValueError, match="regression takes likelihood='gaussian'"):
        predict_proba(net, posterior, X, 0)
    with pytest.raises(ValueError, match="for a regression, predict_samples"):
        uncertainty(net, posterior, X, 2, likelihood="gaussian")
    outputs = predict_samples(net, posterior, X, 3, likelihood="gaussian")
    assert outputs.shape == (3, 5, 1) and np.isfinite(outputs).all()


def test_ndarrays_are_taken_and_bad_inputs_are_refused_in_the_users_words():
    net, posterior = three_inputs(4)
    X = np.random.default_rng(1).normal(size=(6, 3)).astype(np.float32)
    np.testing.assert_array_equal(predict_proba(net, posterior, mx.nd.array(X), 0),
                                  predict_proba(net, posterior, X, 0))
    assert predict_samples(net, posterior, mx.nd.array(X), 2).shape == (2, 6, 4)
    bad = X.copy()
    bad[2, 1] = np.inf
    with pytest.raises(ValueError, match="X contains NaN or infinity"):
        predict_proba(net, posterior, mx.nd.array(bad), 0)
    with pytest.raises(ValueError, match="X holds no examples"):
        predict_proba(net, posterior, X[:0], 0)
    with pytest.raises(ValueError, match="X must be an array of numbers"):
        predict_proba(net, posterior, [["a", "b", "c"]], 0)
    probs = predict_proba(net, posterior, X, 0)
    assert error_rate(mx.nd.array(probs), mx.nd.array(probs.argmax(axis=1))) == 0.0
    with pytest.raises(ValueError, match=r"N labels, got probs of shape \(6, 4\) and 5 labels"):
        error_rate(probs, np.zeros(5))


def test_the_likelihood_may_be_the_loss_the_network_trained_with():
    from mxnet import gluon as g

    from bbb_gluon import BBBLoss, GaussianNLLLoss, GaussianPrior

    net, posterior = three_inputs(1)
    X = np.random.default_rng(2).normal(size=(4, 3)).astype(np.float32)
    by_name = predict_proba(net, posterior, X, 0, likelihood="bernoulli")
    loss = BBBLoss(GaussianPrior(), g.loss.SigmoidBCELoss(), num_batches=1)
    np.testing.assert_array_equal(predict_proba(net, posterior, X, 0, likelihood=loss),
                                  by_name)
    np.testing.assert_array_equal(
        predict_proba(net, posterior, X, 0, likelihood=g.loss.SigmoidBCELoss()), by_name)
    with pytest.raises(ValueError, match="for a regression, predict_samples"):
        uncertainty(net, posterior, X, 2, likelihood=GaussianNLLLoss(1.0))
    with pytest.raises(ValueError, match="cannot tell what KLDivLoss makes"):
        predict_proba(net, posterior, X, 0, likelihood=g.loss.KLDivLoss())


def test_a_weight_two_layers_share_is_one_draw_in_both():
    """y = W (W x) with one tied weight W, mean 0 and sigma 1: E[W W] is the identity (the
    diagonal W_ii W_ii terms), so the predictive mean is x; two draws of W, or the means
    in the second use (the first layer's moment path), would give 0."""
    first = nn.Dense(2, use_bias=False, in_units=2)
    net = nn.HybridSequential()
    net.add(first, nn.Dense(2, use_bias=False, in_units=2, params=first.params))
    net.initialize(ctx=mx.cpu(1))
    posterior = Posterior(net, rho_init=float(np.log(np.e - 1)), seed=1)  # sigma = 1
    assert posterior.keys == ["0.weight"]
    posterior.mu(mx.cpu(1))[0][:] = 0
    X = mx.nd.ones((3, 2), ctx=mx.cpu(1))
    mean = prediction.predict_proba(net, posterior, X, samples=4000,
                                    likelihood="gaussian")
    # each output's sd over draws is about 2.24: 0.035 for the mean of 4000
    np.testing.assert_allclose(mean, 1.0, atol=0.15)
