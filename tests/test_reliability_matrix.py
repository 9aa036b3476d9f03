"""docs/reliability.md's promises about bad input, on every path it names.

"Bad input is refused before any work, in one line, naming the argument" and "a NaN never
reaches the posterior", as a matrix: each path that takes arrays (``fit`` with the
package's MLP and with a network of the user's, ``predict_proba``, ``predict_samples``,
``uncertainty``, ``evaluate_model``, ``BBBStep`` on both engines and under each estimator,
``BBBLoss(validate=True)`` around a Gluon loss) against each kind of bad array (NaN, +-inf,
no examples, mis-shaped, float64 or integer inputs, labels out of range, fractional or
NaN, NDArrays where NumPy arrays go). A case is either refused with a ``ValueError`` or
``TypeError`` of one line that names the argument, what was expected and what came, and
changes nothing (no run folder, no weight moved, no noise drawn), or it works and gives
what the NumPy float32 input gives. ``BBBStep`` reads nothing back to the host, so it
does not refuse a NaN: it leaves mu and rho as they were and ``check_finite()`` names the
calls.

Cases that tests elsewhere already hold are not repeated here: bad labels into ``fit``
with the package's MLP (tests/training/test_fit.py), the label checks of
``BBBLoss(validate=True)`` (tests/core/test_loss.py), NaN and inf inputs into ``BBBStep``
on a network with BatchNorm under Adam (tests/core/test_step.py).
"""

import math

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

from bbb_gluon import (
    MLP,
    BBBLoss,
    BBBStep,
    GaussianPrior,
    NotFiniteError,
    Posterior,
    TrainConfig,
    build_mlp,
    fit,
    predict_proba,
    predict_samples,
    trainable_params,
    uncertainty,
    use_weights,
)
from bbb_gluon.evaluation import evaluate_model

CTX = mx.cpu(1)  # not the default context: a path that hard-codes one fails
N = 32


def make_net(dropout=0.0):
    mx.random.seed(0)
    net = build_mlp((16,), 3, num_inputs=5, dropout=dropout)
    net.initialize(mx.init.Xavier(), ctx=CTX)
    return net


def make_data(seed=0):
    """Whole-numbered inputs (so that integer copies of them are the same inputs) and
    labels 0..2."""
    rng = np.random.default_rng(seed)
    return (rng.integers(-3, 4, (N, 5)).astype(np.float32),
            rng.integers(0, 3, N).astype(np.int64))


def config(**kw):
    return TrainConfig(**{"model": "bbb", "epochs": 1, "batch_size": 16, "eval_samples": 2,
                          "seed": 0, **kw})


# The package's MLP of the same shape as make_net's, built by fit on CTX.
MLP_ON_CTX = MLP(hidden=(16,), num_inputs=5, num_outputs=3, ctx=CTX)


def on_ctx(a, dtype=None):
    return mx.nd.array(a, ctx=CTX, dtype=dtype)


# ------------------------------------------------------------------ bad inputs, every path


def _set(X, value):
    X = X.copy()
    X[3, 2] = value
    return X


def _label(y, value):
    y = y.astype(np.float32)
    y[4] = value
    return y


# (id, spoil X, the message's pattern after the argument's name)
BAD_INPUTS = [
    ("nan", lambda X: _set(X, np.nan), "contains? NaN or infinity"),
    ("inf", lambda X: _set(X, np.inf), "contains? NaN or infinity"),
    ("-inf", lambda X: _set(X, -np.inf), "contains? NaN or infinity"),
    ("nan-ndarray", lambda X: on_ctx(_set(X, np.nan)), "contains? NaN or infinity"),
    ("empty", lambda X: X[:0], r"holds? no examples \(shape \(0, 5\)\)"),
    ("one-axis", lambda X: X[:, 0], r"must have an examples axis"),
    ("text", lambda X: X.astype(str), "must be an array of numbers, got one of <U"),
]
# The network's own inputs of the wrong width: refused with the width it takes.
WIDE = ("too-wide", lambda X: np.concatenate([X, X[:, :1]], axis=1),
        r"^the network does not take {name} of shape \(32, 6\) \(its first layer takes "
        r"\(N, 5\)\): Shape inconsistent")


def _predict_paths():
    """{path id: (the argument's name in messages, call(X) with everything else good)}."""
    net = make_net()
    posterior = Posterior(net, seed=0)
    dropout = make_net(dropout=0.5)
    X, y = make_data()
    return posterior, {
        "predict_proba-means": ("X", lambda Xb: predict_proba(net, posterior, Xb, 0, ctx=CTX)),
        "predict_proba-mc": ("X", lambda Xb: predict_proba(net, posterior, Xb, 3)),
        "predict_samples": ("X", lambda Xb: predict_samples(net, posterior, Xb, 3, ctx=CTX)),
        "uncertainty": ("X", lambda Xb: uncertainty(net, posterior, Xb, 3, ctx=CTX)),
        "uncertainty-mc-dropout": ("X", lambda Xb: uncertainty(dropout, None, Xb, 3,
                                                               mc_dropout=True)),
        "evaluate_model-X": ("X", lambda Xb: evaluate_model(
            net, posterior, Xb, y[:len(Xb)], samples=2, ctx=CTX)),
        "evaluate_model-X_ood": ("X_ood", lambda Xb: evaluate_model(
            net, posterior, X, y, samples=2, X_ood=Xb, ctx=CTX)),
    }


PREDICT_PATHS = list(_predict_paths()[1])


@pytest.mark.parametrize("case", BAD_INPUTS + [WIDE], ids=lambda c: c[0])
@pytest.mark.parametrize("path", PREDICT_PATHS)
def test_prediction_refuses_bad_inputs_naming_the_argument(path, case):
    posterior, paths = _predict_paths()
    name, call = paths[path]
    _, spoil, message = case
    noise = posterior.noise.state_dict()
    pattern = message.format(name=name) if case is WIDE else f"^{name} {message}"
    with pytest.raises(ValueError, match=pattern) as info:
        call(spoil(make_data()[0]))
    assert "\n" not in str(info.value)
    assert posterior.noise.state_dict() == noise  # refused before a weight was drawn


def _fit(tmp_path, train, valid=None, own_network=True):
    return fit(config(), train, valid, run_dir=tmp_path / "run", progress=False,
               net=make_net() if own_network else MLP_ON_CTX)


# The package's MLP knows the width it takes without a forward pass.
MLP_SHAPE_MESSAGES = {
    "one-axis": r"must have shape \(N, 5\) for MLP\(num_inputs=5\), got \(32,\)",
    "too-wide": r"must have shape \(N, 5\) for MLP\(num_inputs=5\), got \(32, 6\)"}


@pytest.mark.parametrize("case", BAD_INPUTS + [WIDE], ids=lambda c: c[0])
@pytest.mark.parametrize("split", ["training", "validation"])
@pytest.mark.parametrize("network", ["own-network", "package-mlp"])
def test_fit_refuses_bad_inputs_naming_the_split(tmp_path, network, split, case):
    """A network of the user's is checked as the package's MLP is, its inputs' shape by
    one example through it."""
    case_id, spoil, message = case
    X, y = make_data()
    bad = spoil(X)
    bad_y = y[:len(bad)]
    if split == "validation" and case_id == "empty":
        return  # no validation examples: trained without validation (test_fit.py)
    train, valid = ((bad, bad_y), None) if split == "training" else ((X, y), (bad, bad_y))
    name = f"{split} inputs"
    if network == "package-mlp" and case_id in MLP_SHAPE_MESSAGES:
        pattern = f"{name} {MLP_SHAPE_MESSAGES[case_id]}"
    else:
        pattern = message.format(name=f"the {name}") if case is WIDE else f"{name} {message}"
    with pytest.raises(ValueError, match=pattern) as info:
        _fit(tmp_path, train, valid, own_network=network == "own-network")
    assert "\n" not in str(info.value)
    assert not (tmp_path / "run").exists()


# (id, spoil y, the message's pattern after the labels' name)
BAD_LABELS = [
    ("too-large", lambda y: _label(y, 3),
     r"must lie in 0\.\.2 for 3 classes, got labels from 0 to 3"),
    ("negative", lambda y: _label(y, -1),
     r"must lie in 0\.\.2 for 3 classes, got labels from -1 to 2"),
    ("fractional", lambda y: y + 0.5, r"must be whole numbers \(class indices 0\.\.2\), got"),
    ("nan", lambda y: _label(y, np.nan), "contain NaN or infinity"),
    ("inf", lambda y: _label(y, np.inf), "contain NaN or infinity"),
    ("nan-ndarray", lambda y: on_ctx(_label(y, np.nan)), "contain NaN or infinity"),
    ("too-few", lambda y: y[:-1], r"must have shape \(32,\)(, one per example of X)?, got "
                                  r"\(31,\)"),
    ("one-hot", lambda y: np.eye(3)[y], r"must have shape \(32,\)(, one per example of X)?, "
                                        r"got \(32, 3\)"),
    ("text", lambda y: y.astype(str), "must be an array of numbers, got one of <U"),
]


@pytest.mark.parametrize("case", BAD_LABELS, ids=lambda c: c[0])
@pytest.mark.parametrize("path", ["fit-own-network", "fit-own-network-validation",
                                  "evaluate_model"])
def test_bad_labels_are_refused_naming_them(tmp_path, path, case):
    _, spoil, message = case
    X, y = make_data()
    if path == "evaluate_model":
        net = make_net()
        posterior = Posterior(net, seed=0)
        noise = posterior.noise.state_dict()
        with pytest.raises(ValueError, match=f"labels y {message}") as info:
            evaluate_model(net, posterior, X, spoil(y), samples=2, ctx=CTX)
        assert posterior.noise.state_dict() == noise
    else:
        split = "validation" if path.endswith("validation") else "training"
        train, valid = ((X, spoil(y)), None) if split == "training" else \
            ((X, y), (X, spoil(y)))
        with pytest.raises(ValueError, match=f"{split} labels {message}") as info:
            _fit(tmp_path, train, valid)
        assert not (tmp_path / "run").exists()
    assert "\n" not in str(info.value)


def test_a_dataloaders_first_batch_goes_through_the_network_before_any_work(tmp_path):
    X, y = make_data()
    wide = np.concatenate([X, X[:, :1]], axis=1)
    loader = gluon.data.DataLoader(gluon.data.ArrayDataset(wide, y.astype(np.float32)),
                                   batch_size=8)
    with pytest.raises(ValueError, match=r"does not take the DataLoader's inputs of shape "
                                         r"\(8, 6\) \(its first layer takes \(N, 5\)\)"):
        fit(config(), loader, run_dir=tmp_path / "run", progress=False, net=make_net())
    assert not (tmp_path / "run").exists()


def test_predict_samples_needs_a_posterior():
    X, _ = make_data()
    with pytest.raises(TypeError, match="predict_samples .* needs the Posterior; for MC "
                                        r"dropout, uncertainty\(.*mc_dropout=True\)"):
        predict_samples(make_net(dropout=0.5), None, X, 2)


# ------------------------------------------------- other dtypes and NDArrays: the same result

# (id, make X, make y) from the float32 inputs and int64 labels of make_data()
VARIANTS = [
    ("float64", lambda X: X.astype(np.float64), lambda y: y),
    ("int64-float32-labels", lambda X: X.astype(np.int64), lambda y: y.astype(np.float32)),
    ("int32", lambda X: X.astype(np.int32), lambda y: y.astype(np.int32)),
    ("ndarray", on_ctx, on_ctx),
    ("ndarray-cpu0", lambda X: mx.nd.array(X), lambda y: mx.nd.array(y)),
    ("ndarray-float64-int32", lambda X: mx.nd.array(X, dtype="float64"),
     lambda y: mx.nd.array(y, dtype="int32")),
    ("list", lambda X: X.tolist(), lambda y: y.tolist()),
]


def _same(a, b):
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for u, v in zip(a, b, strict=True):
            _same(u, v)
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b)
    else:
        np.testing.assert_array_equal(a, b)


def _prediction_result(path, X, y):
    """What ``path`` gives for X (and y, and X as X_ood, for evaluate_model), from a new
    network and posterior each time: the same weights and noise."""
    if path == "evaluate_model":
        net = make_net()
        return evaluate_model(net, Posterior(net, seed=0), X, y, samples=2, X_ood=X,
                              ctx=CTX).summary
    return _predict_paths()[1][path][1](X)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v[0])
@pytest.mark.parametrize("path", [p for p in PREDICT_PATHS if not p.startswith("evaluate")]
                         + ["evaluate_model"])
def test_prediction_takes_other_dtypes_and_ndarrays(path, variant):
    _, make_X, make_y = variant
    X, y = make_data()
    _same(_prediction_result(path, make_X(X), make_y(y)), _prediction_result(path, X, y))


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v[0])
@pytest.mark.parametrize("network", ["package-mlp", "own-network"])
def test_fit_takes_other_dtypes_and_ndarrays(tmp_path, network, variant):
    _, make_X, make_y = variant
    X, y = make_data()

    def train(Xt, yt, folder):
        net = make_net() if network == "own-network" else MLP_ON_CTX
        result = fit(config(), (Xt, yt), (Xt, yt), run_dir=tmp_path / folder,
                     progress=False, net=net)
        return result.history, [m.asnumpy() for m in result.posterior.mu()]

    expected_history, expected_mu = train(X, y, "numpy")
    history, mu = train(make_X(X), make_y(y), "variant")
    for row, want in zip(history, expected_history, strict=True):
        assert {k: v for k, v in row.items() if "seconds" not in k} == \
            {k: v for k, v in want.items() if "seconds" not in k}
    _same(mu, expected_mu)


# ------------------------------------------------------------------------------ BBBStep


ENGINES = ["fused", "reference"]
ESTIMATORS = ["reparam", "local", "flipout"]


def make_step(engine, estimator, validate=False):
    net = make_net()
    posterior = Posterior(net, seed=0)
    loss = BBBLoss(GaussianPrior(), gluon.loss.SoftmaxCrossEntropyLoss(), num_batches=4,
                   validate=validate)
    # plain SGD: a zero gradient moves nothing (Adam's momentum would)
    trainer = gluon.Trainer(trainable_params(net, posterior, loss), "sgd",
                            {"learning_rate": 0.1})
    step = BBBStep(net, posterior, loss, trainer, engine=engine, estimator=estimator)
    assert step.engine == engine
    return step


def snapshot(step):
    return [a.asnumpy() for a in step.posterior.mu() + step.posterior.rho()]


# (id, the batch from make_data()'s (X, y))
NON_FINITE = [
    ("X-nan", lambda X, y: (on_ctx(_set(X, np.nan)), on_ctx(y))),
    ("X-inf", lambda X, y: (on_ctx(_set(X, np.inf)), on_ctx(y))),
    ("X-minus-inf", lambda X, y: (on_ctx(_set(X, -np.inf)), on_ctx(y))),
    ("X-nan-numpy", lambda X, y: (_set(X, np.nan), y)),
    ("y-nan", lambda X, y: (on_ctx(X), on_ctx(_label(y, np.nan)))),
    ("y-inf", lambda X, y: (on_ctx(X), on_ctx(_label(y, np.inf)))),
]


@pytest.mark.usefixtures("fused_kernels")
@pytest.mark.parametrize("case", NON_FINITE, ids=lambda c: c[0])
@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("engine", ENGINES)
def test_a_non_finite_batch_leaves_mu_and_rho_and_check_finite_names_the_calls(
        engine, estimator, case, monkeypatch):
    step = make_step(engine, estimator)
    X, y = make_data()
    step(on_ctx(X), on_ctx(y), 0)
    step.check_finite()  # the first, clean call
    before = snapshot(step)
    Xb, yb = case[1](X, y)

    def forbidden(*args, **kwargs):
        raise AssertionError("a host read inside the step")

    for name in ("asnumpy", "asscalar", "wait_to_read"):
        monkeypatch.setattr(mx.nd.NDArray, name, forbidden)
    costs = step(Xb, yb, 1)  # no exception: the step reads nothing back
    monkeypatch.undo()
    assert not math.isfinite(costs.nll.asscalar())
    for a, b in zip(before, snapshot(step), strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(NotFiniteError, match=r"^a cost returned by step calls 2 to 2 is not "
                                             r"finite$"):
        step.check_finite()
    step.check_finite()  # the parameters themselves stayed finite


# (id, (X, y) from make_data(), exception, message, refused before the weights are drawn)
BAD_BATCHES = [
    ("empty", lambda X, y: (X[:0], y[:0]), ValueError,
     r"^X holds no examples \(shape \(0, 5\)\): a batch needs at least one$", True),
    ("too-wide", lambda X, y: (np.concatenate([X, X[:, :1]], axis=1), y), ValueError,
     r"the network does not take X of shape \(32, 6\) \(its first layer takes \(N, 5\)\)",
     True),
    ("one-axis", lambda X, y: (X[:, 0], y), ValueError,
     r"the network does not take X of shape \(32,\) \(its first layer takes \(N, 5\)\)",
     True),
    ("text-X", lambda X, y: (X.astype(str), y), ValueError,
     "X must be an array of numbers, got one of <U", True),
    ("text-y", lambda X, y: (X, y.astype(str)), ValueError,
     "y must be an array of numbers, got one of <U", True),
    ("int-ndarray", lambda X, y: (on_ctx(X, "int32"), y), TypeError,
     r"X must be float32 like the network's parameters, got int32: pass "
     r"X.astype\('float32'\)", True),
    # the labels' shape against the network's output, seen on one example before the draw
    ("one-hot-labels", lambda X, y: (X, np.eye(3)[y]), ValueError,
     r"^y \(shape \(32, 3\)\) for X \(shape \(32, 5\)\): class labels must have shape "
     r"\(32,\), got \(32, 3\)$", True),
]


@pytest.mark.usefixtures("fused_kernels")
@pytest.mark.parametrize("case", BAD_BATCHES, ids=lambda c: c[0])
@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("engine", ENGINES)
def test_a_bad_batch_is_refused_before_any_work(engine, estimator, case):
    _, spoil, error, message, before_the_draw = case
    step = make_step(engine, estimator)
    before, noise = snapshot(step), step.posterior.noise.state_dict()
    with pytest.raises(error, match=message) as info:
        step(*spoil(*make_data()), 0)
    assert "\n" not in str(info.value)
    for a, b in zip(before, snapshot(step), strict=True):
        np.testing.assert_array_equal(a, b)
    if before_the_draw:
        assert step.posterior.noise.state_dict() == noise


@pytest.mark.usefixtures("fused_kernels")
@pytest.mark.parametrize("case", BAD_LABELS[:3], ids=lambda c: c[0])
@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("engine", ENGINES)
def test_bad_label_values_are_refused_by_a_validating_loss_before_any_update(
        engine, estimator, case):
    """Without ``validate`` the step reads the first call's labels only (later ones go to
    Gluon's loss as they are); with it, the loss refuses them on any call before the
    update."""
    step = make_step(engine, estimator, validate=True)
    X, y = make_data()
    step(X, y, 0)
    before = snapshot(step)
    with pytest.raises(ValueError, match="class labels must (lie in 0..2|be whole numbers)"):
        step(X, case[1](y), 1)
    for a, b in zip(before, snapshot(step), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.usefixtures("fused_kernels")
@pytest.mark.parametrize("variant", [v for v in VARIANTS if v[0] != "ndarray-float64-int32"],
                         ids=lambda v: v[0])
@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("engine", ENGINES)
def test_the_step_takes_numpy_and_ndarrays_alike(engine, estimator, variant):
    """NumPy inputs of any number type, and labels of any, give the update that float32
    NDArrays give (a float64 or integer NDArray X is refused above)."""
    X, y = make_data()
    reference = make_step(engine, estimator)
    reference(on_ctx(X), on_ctx(y), 0)
    step = make_step(engine, estimator)
    costs = step(variant[1](X), variant[2](y), 0)
    assert math.isfinite(costs.nll.asscalar())
    _same(snapshot(step), snapshot(reference))


# ------------------------------------------------------------- BBBLoss(validate=True)

LIKELIHOODS = {
    "softmax": (gluon.loss.SoftmaxCrossEntropyLoss, lambda out: out, lambda y: y),
    "bernoulli": (gluon.loss.SigmoidBCELoss, lambda out: out[:, 0], lambda y: y % 2),
    "l2": (gluon.loss.L2Loss, lambda out: out, lambda y: np.eye(3)[y] * y[:, None]),
}


def _outputs(likelihood):
    """A Gluon loss inside a validating BBBLoss, the network's outputs for it (a weight
    sample's) and whole-numbered labels it takes."""
    cls, pred_of, labels_of = LIKELIHOODS[likelihood]
    net = make_net()
    posterior = Posterior(net, seed=0)
    sample = posterior.sample(CTX)
    X, y = make_data()
    with use_weights(net, posterior, sample.weights, CTX):
        out = net(on_ctx(X))
    loss = BBBLoss(GaussianPrior(), cls(), num_batches=4, validate=True)
    return loss, pred_of(out), labels_of(y).astype(np.float32), sample


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "float64", "float16"])
@pytest.mark.parametrize("likelihood", list(LIKELIHOODS))
def test_the_loss_takes_labels_of_any_number_type(likelihood, dtype):
    """Integer labels (the usual dtype of class indices) give float32 labels' values, with
    any Gluon loss, validated (uint8 labels were once refused as NaN)."""
    loss, pred, labels, sample = _outputs(likelihood)
    expected = loss(pred, on_ctx(labels), sample).asnumpy()
    got = loss(pred, on_ctx(labels, dtype), sample).asnumpy()
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("likelihood", list(LIKELIHOODS))
def test_the_loss_refuses_what_no_gluon_loss_takes(likelihood):
    loss, pred, labels, sample = _outputs(likelihood)
    with pytest.raises(TypeError, match="^label must be an MXNet NDArray, got ndarray$"):
        loss(pred, labels, sample)
    with pytest.raises(TypeError, match="^pred must be float32 like the posterior's weights, "
                                        "got float64$"):
        loss(pred.astype("float64"), on_ctx(labels), sample)
    empty = on_ctx(np.zeros((0, *pred.shape[1:])))
    with pytest.raises(ValueError, match=r"^pred holds no examples \(shape \(0"):
        loss(empty, on_ctx(np.zeros((0, *labels.shape[1:]))), sample)
    # a NaN output is not the labels' fault: the cost says it (and BBBStep skips the batch)
    nan_pred = pred.copy()
    nan_pred[2] = np.nan
    assert np.isnan(loss(nan_pred, on_ctx(labels), sample).asnumpy()[2])
    labels[1] = -np.inf
    with pytest.raises(ValueError, match="^labels contain NaN or infinity$"):
        loss(pred, on_ctx(labels), sample)
