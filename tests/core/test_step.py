"""Tests for bbb_gluon.core.step: BBBStep in a user's own loop, with any network and loss.

The fused and the reference engines are given the same noise and must make the same
updates, for a convolutional network with BatchNorm (trained by the step's one Trainer),
a last-layer-only posterior, and regression and binary losses.
"""

import math

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon
from mxnet.gluon import nn

from bbb_gluon import (
    BBBLoss,
    BBBStep,
    GaussianNLLLoss,
    GaussianPrior,
    LaplacePrior,
    Posterior,
    Prior,
    ScaleMixturePrior,
    trainable_params,
)

MIXTURE = ScaleMixturePrior(0.5, 1.0, math.exp(-6))


pytestmark = pytest.mark.usefixtures("fused_kernels")


def lenet(ctx):
    net = nn.HybridSequential()
    net.add(nn.Conv2D(4, 3, in_channels=1, activation="relu"), nn.BatchNorm(in_channels=4),
            nn.MaxPool2D(), nn.Conv2D(6, 3, in_channels=4, activation="relu"), nn.Flatten(),
            nn.Dense(16, activation="relu", in_units=6 * 2 * 2), nn.Dense(5, in_units=16))
    mx.random.seed(0)
    net.initialize(mx.init.Xavier(), ctx=ctx)
    net.hybridize()
    return net


def mlp(ctx, outputs=5, inputs=12):
    net = nn.HybridSequential()
    net.add(nn.Dense(16, activation="relu", in_units=inputs),
            nn.Dense(16, activation="relu", in_units=16), nn.Dense(outputs, in_units=16))
    mx.random.seed(0)
    net.initialize(mx.init.Xavier(), ctx=ctx)
    net.hybridize()
    return net


def make_step(net, posterior, prior=None, likelihood=None, optimizer="sgd", lr=0.1,
              num_batches=2, **kwargs):
    """A BBBStep as a user builds one: the loss, one Trainer over trainable_params."""
    loss = BBBLoss(prior or MIXTURE, likelihood, num_batches=num_batches)
    trainer = gluon.Trainer(trainable_params(net, posterior, loss), optimizer,
                            {"learning_rate": lr})
    return BBBStep(net, posterior, loss, trainer, **kwargs)


def batches(kind, n=16, steps=3, seed=1):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        if kind == "image":
            X = rng.normal(size=(n, 1, 10, 10))
            y = rng.integers(0, 5, n)
        elif kind == "regression":
            X = rng.normal(size=(n, 12))
            y = X[:, :3] @ np.array([1.0, -2.0, 0.5]) + 0.1 * rng.normal(size=n)
            y = y.reshape(n, 1)
        elif kind == "binary":
            X = rng.normal(size=(n, 12))
            y = (X[:, 0] > 0).astype(np.float32)
        else:
            X = rng.normal(size=(n, 12))
            y = rng.integers(0, 5, n)
        yield mx.nd.array(X), mx.nd.array(y)


def noise(posterior, step, engine):
    flat = np.random.default_rng([7, step]).standard_normal(posterior.num_weights)
    flat = flat.astype(np.float32)
    if engine == "reference":
        return [[flat]]
    parts, start = [], 0
    for shape in posterior.shapes:
        size = int(np.prod(shape))
        parts.append(mx.nd.array(flat[start:start + size]).reshape(shape))
        start += size
    return [[parts]]


CASES = {
    "conv-bn": (lenet, {}, "image", gluon.loss.SoftmaxCrossEntropyLoss(), MIXTURE),
    "last-layer": (mlp, {"select": "last"}, "class", gluon.loss.SoftmaxCrossEntropyLoss(),
                   MIXTURE),
    "l2-regression": (lambda ctx: mlp(ctx, outputs=1), {}, "regression", gluon.loss.L2Loss(),
                      GaussianPrior(1.0)),
    "sigmoid-bce": (lambda ctx: mlp(ctx, outputs=1), {}, "binary",
                    gluon.loss.SigmoidBCELoss(), MIXTURE),
    "laplace": (mlp, {}, "class", gluon.loss.SoftmaxCrossEntropyLoss(), LaplacePrior(0.1)),
}


def train(case, engine, steps=3):
    build, options, kind, loss, prior = CASES[case]
    ctx = mx.cpu(1)  # not the default context: nothing may assume cpu(0)
    net = build(ctx)
    select = [net[-1]] if options.get("select") == "last" else None
    posterior = Posterior(net, seed=3, rho_init=-4.0, select=select)
    # Small steps: a few large ones on the scale mixture's narrow spike (curvature
    # 1/sigma2^2) would amplify float32 rounding differences between the engines.
    others = posterior.deterministic_params(net)
    step = make_step(net, posterior, prior, loss, lr=0.01, num_batches=100, engine=engine)
    assert step.engine == engine
    start = {"mu": [a.asnumpy() for a in posterior.mu()],
             "rho": [a.asnumpy() for a in posterior.rho()],
             "other": [p.data(ctx).asnumpy() for p in others.values()]}
    costs = []
    for i, (X, y) in enumerate(batches(kind, steps=steps)):
        X, y = X.as_in_context(ctx), y.as_in_context(ctx)
        nll, complexity = step._step(X, y, i, True, None, eps=noise(posterior, i, engine))
        costs.append((nll.asscalar(), complexity.asscalar()))
    end = {"mu": [a.asnumpy() for a in posterior.mu()],
           "rho": [a.asnumpy() for a in posterior.rho()],
           "other": [p.data(ctx).asnumpy() for p in others.values()]}
    return start, end, costs, posterior


def assert_same_updates(start, a, b, rtol):
    for x0, x, y in zip(start, a, b, strict=True):
        dx, dy = x.astype(np.float64) - x0, y.astype(np.float64) - x0
        scale = np.abs(dx).max()
        assert scale > 0, "the step did not move this array"
        ulp = np.spacing(np.maximum(np.abs(x), np.abs(y)).astype(np.float32))
        worst = (np.abs(dy - dx) - 2 * ulp).max() / scale
        assert worst <= rtol, worst


@pytest.mark.parametrize("case", list(CASES))
def test_fused_and_reference_make_the_same_updates(case):
    start, ref, ref_costs, posterior = train(case, "reference")
    _, fus, fus_costs, _ = train(case, "fused")
    rtol = 5e-4 if CASES[case][4] is MIXTURE else 1e-4
    for part in ("mu", "rho", "other"):
        assert_same_updates(start[part], ref[part], fus[part], rtol)
    for (n_ref, c_ref), (n_fus, c_fus) in zip(ref_costs, fus_costs, strict=True):
        assert n_fus == pytest.approx(n_ref, rel=1e-4)
        assert c_fus == pytest.approx(c_ref, rel=1e-5)
    if case == "conv-bn":
        assert posterior.keys == ["0.weight", "0.bias", "3.weight", "3.bias", "5.weight",
                                  "5.bias", "6.weight", "6.bias"]
        assert len(start["other"]) == 2  # BatchNorm's gamma and beta, by the same Trainer
    if case == "last-layer":
        assert posterior.keys == ["2.weight", "2.bias"]
        assert len(start["other"]) == 4  # the first two Dense layers, deterministic


def test_a_conv_net_learns_with_the_step():
    # Ten 4-pixel patterns, one per class, with noise: a few steps separate them.
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(5, 1, 10, 10))
    y = rng.integers(0, 5, 200)
    X = mx.nd.array(centres[y] + 0.3 * rng.normal(size=(200, 1, 10, 10)))
    y = mx.nd.array(y)
    net = lenet(mx.cpu())
    posterior = Posterior(net, seed=0, rho_init=-5.0)
    step = make_step(net, posterior, optimizer="adam", lr=0.01, num_batches=5)
    first = None
    for _ in range(8):
        for i in range(5):
            nll = step(X[i * 40:(i + 1) * 40], y[i * 40:(i + 1) * 40], i).nll
            first = nll.asscalar() if first is None else first
    from bbb_gluon import predict_proba

    error = (predict_proba(net, posterior, X.asnumpy(), 0).argmax(axis=1)
             != y.asnumpy()).mean()
    assert nll.asscalar() < first / 4 and error < 0.1, (first, nll.asscalar(), error)


@pytest.mark.parametrize("engine", ["fused", "reference"])
def test_the_step_reads_nothing_back_to_the_host(engine, monkeypatch):
    net = mlp(mx.cpu())
    posterior = Posterior(net, seed=0)
    step = make_step(net, posterior, optimizer="adam", lr=1e-3, num_batches=3, engine=engine)
    X, y = next(batches("class"))
    step(X, y, 0)  # warm-up: the first call may build kernels and caches

    def forbidden(*args, **kwargs):
        raise AssertionError("a host sync inside the step")

    for name in ("asnumpy", "asscalar", "wait_to_read"):
        monkeypatch.setattr(mx.nd.NDArray, name, forbidden)
    costs = step(X, y, 1)
    monkeypatch.undo()
    assert math.isfinite(costs.nll.asscalar()) and math.isfinite(costs.complexity.asscalar())
    # the cost the step followed: nll + pi_i C, pi_i = 1/3 (uniform over 3 batches)
    assert costs.complexity_weight == pytest.approx(1 / 3)
    assert costs.cost.asscalar() == pytest.approx(
        costs.nll.asscalar() + costs.complexity.asscalar() / 3, rel=1e-6)


def test_engine_choice_and_errors():
    net = mlp(mx.cpu(), outputs=1)
    posterior = Posterior(net, seed=0)
    assert make_step(net, posterior, likelihood=gluon.loss.L2Loss()).engine == "fused"
    # a Gaussian likelihood with a learned noise scale runs fused too: the scale is an
    # ordinary parameter of the loss, trained by the step's Trainer
    learned = GaussianNLLLoss(None)
    learned.initialize(ctx=mx.cpu())
    step = make_step(net, posterior, likelihood=learned)
    assert step.engine == "fused" and step.engine_reason is None
    weighted = BBBLoss(MIXTURE, gluon.loss.L2Loss(), num_batches=2, weight=2.0)
    trainer = gluon.Trainer(trainable_params(net, posterior, weighted), "sgd")
    step = BBBStep(net, posterior, weighted, trainer)
    assert step.engine == "reference" and "global weight" in step.engine_reason
    with pytest.raises(ValueError, match="engine='fused' cannot run here: .*global weight"):
        BBBStep(net, posterior, weighted, trainer, engine="fused")
    with pytest.raises(ValueError, match="engine must be"):
        BBBStep(net, posterior, weighted, trainer, engine="gpu")
    with pytest.raises(TypeError, match="Trainer"):
        BBBStep(net, posterior, weighted, "adam")
    with pytest.raises(TypeError, match="BBBLoss"):
        BBBStep(net, posterior, gluon.loss.L2Loss(), trainer)
    with pytest.raises(ValueError, match="samples"):
        BBBStep(net, posterior, weighted, trainer, samples=0)
    other = mlp(mx.cpu(), outputs=3)
    with pytest.raises(ValueError, match="does not match"):
        BBBStep(other, posterior, weighted, trainer)


def test_one_trainer_trains_everything_and_a_partial_one_is_refused():
    net = lenet(mx.cpu())
    posterior = Posterior(net, seed=0)
    loss = BBBLoss(MIXTURE, num_batches=2)
    params = trainable_params(net, posterior, loss)
    bn = [p for p in net.collect_params().values()
          if "batchnorm" in p.name and p.grad_req != "null"]  # gamma, beta
    assert {id(p) for p in params.values()} == \
        {id(p) for p in list(posterior.params.values()) + bn}
    # the Gluon habit (the network's own weights) and the posterior alone are refused,
    # before any work, naming what is wrong
    with pytest.raises(ValueError, match="does not train .*posterior.*trainable_params"):
        BBBStep(net, posterior, loss, gluon.Trainer(net.collect_params(), "sgd"))
    with pytest.raises(ValueError, match="does not train batchnorm.*trainable_params"):
        BBBStep(net, posterior, loss, gluon.Trainer(posterior.params, "sgd"))
    everything = gluon.ParameterDict()
    everything.update(params)
    everything.update(net.collect_params())
    with pytest.raises(ValueError, match="trains the network's own .*weight samples"):
        BBBStep(net, posterior, loss, gluon.Trainer(everything, "sgd"))
    # a frozen parameter (grad_req 'null') is not asked for
    for p in bn:
        p.grad_req = "null"
    assert list(trainable_params(net, posterior, loss).keys()) == list(posterior.params.keys())
    BBBStep(net, posterior, loss, gluon.Trainer(posterior.params, "sgd"))


@pytest.mark.parametrize("engine", ["fused", "reference"])
@pytest.mark.parametrize("samples", [1, 2])
def test_batchnorm_learns_under_the_one_trainer(engine, samples):
    net = lenet(mx.cpu())
    posterior = Posterior(net, seed=0)
    step = make_step(net, posterior, optimizer="adam", lr=0.01, engine=engine,
                     samples=samples)
    assert step.engine == engine
    gamma = [p for p in net.collect_params().values() if p.name.endswith("gamma")][0]
    before = gamma.data().asnumpy()
    X, y = next(batches("image"))
    step(X, y, 0)
    assert np.abs(gamma.data().asnumpy() - before).max() > 1e-4  # Adam moved it


@pytest.mark.parametrize("engine", ["fused", "reference"])
def test_check_finite_names_what_went_wrong(engine):
    from bbb_gluon.core.step import NotFiniteError

    net = mlp(mx.cpu())
    posterior = Posterior(net, seed=0)
    step = make_step(net, posterior, lr=0.01, num_batches=3, engine=engine)
    X, y = next(batches("class"))
    step(X, y, 0)
    step.check_finite()  # all finite
    # A NaN rho: the fused kernels would compute a tiny finite sigma from it, so only the
    # parameter check can see it.
    rho = posterior.rho()[2].copy()
    rho[0, 0] = float("nan")
    posterior.params["posterior_" + posterior.keys[2] + "_rho"].set_data(rho)
    with pytest.raises(NotFiniteError, match=r"1\.weight \(rho\)"):
        step.check_finite()
    posterior.params["posterior_" + posterior.keys[2] + "_rho"].set_data(
        mx.nd.full(rho.shape, -3.0))
    huge = make_step(net, posterior, lr=1e12, num_batches=3, engine=engine)
    for i, (Xb, yb) in enumerate(batches("class", steps=3)):
        huge(Xb * 1e3, yb, i)
    with pytest.raises(NotFiniteError, match="step calls 1 to 3"):
        huge.check_finite()


@pytest.mark.parametrize("engine", ["fused", "reference"])
@pytest.mark.parametrize("X_shape, y_shape, batch_size", [
    ((16, 12), (15,), None), ((16, 12), (1,), None), ((16, 12), (16,), 8)],
    ids=["mismatched", "one-label", "batch-too-small"])  # (MXNet has no empty NDArray)
def test_a_bad_batch_is_refused_before_any_update(engine, X_shape, y_shape, batch_size):
    net = mlp(mx.cpu(), outputs=5)
    posterior = Posterior(net, seed=0)
    step = make_step(net, posterior, engine=engine)
    before = [m.asnumpy() for m in posterior.mu()]
    with pytest.raises(ValueError, match="X and y|batch_size"):
        step(mx.nd.zeros(X_shape), mx.nd.zeros(y_shape), batch_size=batch_size)
    for a, b in zip(before, posterior.mu(), strict=True):
        np.testing.assert_array_equal(a, b.asnumpy())


def test_one_family_of_divergence_errors():
    import bbb_gluon
    from bbb_gluon.bandit import BanditDiverged

    assert issubclass(bbb_gluon.TrainingDiverged, bbb_gluon.NotFiniteError)
    assert issubclass(bbb_gluon.TrainingDiverged, RuntimeError)  # what it was before
    assert issubclass(BanditDiverged, bbb_gluon.NotFiniteError)
    assert issubclass(bbb_gluon.NotFiniteError, FloatingPointError)
    diverged = bbb_gluon.TrainingDiverged("diverged", 3, None)
    assert (diverged.epoch, diverged.batch) == (3, None)


@pytest.mark.parametrize("engine", ["fused", "reference"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_a_non_finite_batch_never_reaches_the_posterior(engine, bad):
    from bbb_gluon import NotFiniteError

    net = lenet(mx.cpu())  # BatchNorm's gamma and beta too, by the same Trainer
    posterior = Posterior(net, seed=0)
    step = make_step(net, posterior, optimizer="adam", lr=0.01, engine=engine)
    batch = list(batches("image", steps=2))
    step(*batch[0], 0)
    before = [a.asnumpy() for a in posterior.mu() + posterior.rho()]
    X, y = batch[1]
    X = X.copy()
    X[3, 0, 2, 2] = bad
    costs = step(X, y, 1)
    after = [a.asnumpy() for a in posterior.mu() + posterior.rho()]
    assert all(np.isfinite(a).all() for a in after)
    gamma = [p for p in net.collect_params().values() if p.name.endswith("gamma")][0]
    assert np.isfinite(gamma.data().asnumpy()).all()
    if engine == "fused":  # the kernels skip the update: nothing moved
        for a, b in zip(before, after, strict=True):
            np.testing.assert_array_equal(a, b)
    assert not np.isfinite(costs.nll.asscalar())  # the cost says what happened
    with pytest.raises(NotFiniteError, match="step calls 1 to 2"):
        step.check_finite()
    # and the next clean batch trains on from finite parameters (BatchNorm's running
    # statistics are not: its forward pass updates them, outside any Trainer)
    clean = step(*batch[0], 0)
    assert np.isfinite(clean.nll.asscalar()) and np.isfinite(clean.complexity.asscalar())
    assert all(np.isfinite(a.asnumpy()).all() for a in posterior.mu() + posterior.rho())


@pytest.mark.parametrize("engine", ["fused", "reference"])
def test_numpy_batches_are_taken_and_a_float64_batch_is_refused_in_words(engine):
    net = mlp(mx.cpu(), outputs=5)
    posterior = Posterior(net, seed=0)
    step = make_step(net, posterior, engine=engine)
    X, y = next(batches("class"))
    costs = step(X.asnumpy(), y.asnumpy(), 0)  # NumPy arrays, as fit and predict_* take
    assert np.isfinite(costs.nll.asscalar())
    before = [m.asnumpy() for m in posterior.mu()]
    with pytest.raises(TypeError, match=r"X must be float32 .* got float64: pass "
                                        r"X.astype\('float32'\)"):
        step(X.astype("float64"), y, 1)
    for a, b in zip(before, posterior.mu(), strict=True):
        np.testing.assert_array_equal(a, b.asnumpy())


class _HalfCauchy(Prior):
    """A user's own prior: a log density and nothing else (no kind, no kernel code)."""

    def log_prob(self, w, F=mx.nd):
        return -F.sum(F.log1p(F.square(w))).reshape((1,))


def test_a_users_own_prior_trains_on_the_reference_engine():
    ctx = mx.cpu(1)
    net = mlp(ctx)
    posterior = Posterior(net)
    step = make_step(net, posterior, prior=_HalfCauchy())
    assert step.engine == "reference" and "no fused kernel" in step.engine_reason
    mu = posterior.mu_parameters[0].data().copy()
    X, y = mx.nd.ones((4, 12), ctx=ctx), mx.nd.array([0, 1, 2, 3], ctx=ctx)
    costs = step(X, y, 0)
    assert np.isfinite(costs.complexity.asscalar()) and np.isfinite(costs.nll.asscalar())
    assert not np.array_equal(posterior.mu_parameters[0].data().asnumpy(), mu.asnumpy())


# (id, X, y, the message): each refused in one line naming the shapes, before the weights
# are drawn (MXNet's own messages name operators, not the batch)
MALFORMED = [
    ("empty", np.zeros((0, 12), np.float32), np.zeros(0),
     r"^X holds no examples \(shape \(0, 12\)\): a batch needs at least one$"),
    ("one-example-without-its-axis", np.zeros(12, np.float32), np.zeros(1),
     r"^X holds 12 examples and y 1 label \(got X \(12,\) and y \(1,\)\); for one example "
     r"of 12 values, pass X\.reshape\(\(1, 12\)\)$"),
    ("scalar-label", np.zeros((1, 12), np.float32), np.float32(3),
     r"^y must hold one label per example .*not a scalar: got X \(1, 12\) and y \(\)$"),
    ("no-values", np.zeros((4, 0), np.float32), np.zeros(4),
     r"^X holds no values \(shape \(4, 0\)\)"),
    ("label-matrix", np.zeros((4, 12), np.float32), np.zeros((4, 3)),
     r"^y \(shape \(4, 3\)\) for X \(shape \(4, 12\)\): class labels must have shape "
     r"\(4,\), got \(4, 3\)$"),
    # label values: read once, on the first call, without validate=True
    ("labels-out-of-range", np.zeros((4, 12), np.float32), np.array([10, 12, 20, 25]),
     r"^y \(shape \(4,\)\) .*: class labels must lie in 0\.\.4 for 5 classes, got labels "
     r"from 10 to 25$"),
    ("negative-labels", np.zeros((4, 12), np.float32), np.array([-1, 0, 1, 2]),
     r"must lie in 0\.\.4 for 5 classes, got labels from -1 to 2$"),
    ("fractional-labels", np.zeros((4, 12), np.float32), np.array([0.5, 0, 1, 2]),
     r"class labels must be whole numbers"),
    ("nan-labels", np.zeros((4, 12), np.float32), np.array([np.nan, 0, 1, 2]),
     r"labels contain NaN or infinity"),
]


@pytest.mark.parametrize("engine", ["fused", "reference"])
@pytest.mark.parametrize("case", MALFORMED, ids=lambda c: c[0])
def test_a_malformed_batch_is_refused_in_one_line_before_the_draw(engine, case):
    _, X, y, message = case
    net = mlp(mx.cpu(), outputs=5)
    posterior = Posterior(net, seed=0)
    step = make_step(net, posterior, engine=engine)
    before, drawn = [m.asnumpy() for m in posterior.mu()], posterior.noise.state_dict()
    for as_nd in (False, True):  # NumPy arrays and NDArrays alike (MXNet has no empty one)
        batch = [mx.nd.array(a) if as_nd and np.size(a) else a for a in (X, y)]
        with pytest.raises(ValueError, match=message) as info:
            step(*batch, 0)
        assert "\n" not in str(info.value)
    assert posterior.noise.state_dict() == drawn
    for a, b in zip(before, posterior.mu(), strict=True):
        np.testing.assert_array_equal(a, b.asnumpy())


@pytest.mark.parametrize("engine", ["fused", "reference"])
def test_labels_are_read_on_the_first_call_only_unless_validate(engine):
    """The first call reads the labels' values (the one host read a step makes); later
    calls go unread, so a bad label there trains (Gluon's loss clips it) unless the loss
    validates every call."""
    X, y = next(batches("class"))
    bad = y.copy()
    bad[0] = 7  # 5 classes
    for validate in (False, True):
        net = mlp(mx.cpu(), outputs=5)
        posterior = Posterior(net, seed=0)
        loss = BBBLoss(MIXTURE, num_batches=2, validate=validate)
        step = BBBStep(net, posterior, loss, gluon.Trainer(
            trainable_params(net, posterior, loss), "sgd", {"learning_rate": 0.1}),
            engine=engine)
        step(X, y, 0)
        if validate:
            with pytest.raises(ValueError, match="must lie in 0..4 for 5 classes"):
                step(X, bad, 1)
        else:
            assert math.isfinite(step(X, bad, 1).nll.asscalar())
