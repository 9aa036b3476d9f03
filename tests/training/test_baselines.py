"""Tests for bbb_gluon.training.baselines: the plain and dropout baselines' step."""

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon
from mxnet.gluon import nn

from bbb_gluon.training.baselines import PlainStep

CTX = mx.cpu(1)  # a context that is not the default catches a hard-coded one


def net_and_data(seed=0):
    net = nn.HybridSequential()
    net.add(nn.Dense(8, activation="relu", in_units=5), nn.Dense(3, in_units=8))
    mx.random.seed(seed)
    net.initialize(mx.init.Xavier(), ctx=CTX)
    rng = np.random.default_rng(seed)
    X = mx.nd.array(rng.normal(size=(6, 5)), ctx=CTX)
    y = mx.nd.array(rng.integers(0, 3, size=6), ctx=CTX)
    return net, X, y


@pytest.mark.parametrize("reduction, step_size", [("mean", 6), ("sum", 1)])
def test_the_plain_step_is_gluons_own_step(reduction, step_size):
    """The same update as autograd + Trainer.step by hand, to the bit, and the batch's
    summed loss as the step's cost (no complexity, weighted 0)."""
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    results = []
    for by_hand in (True, False):
        net, X, y = net_and_data()
        trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 0.1})
        if by_hand:
            with autograd.record():
                cost = loss(net(X), y)
            cost.backward()
            trainer.step(step_size)
            total = cost.sum().asnumpy()
        else:
            costs = PlainStep(net, loss, trainer, [CTX], reduction)(X, y, 3)
            assert costs.complexity is None and costs.complexity_weight == 0.0
            assert costs.nll.shape == (1,) and costs.nll.context == CTX
            assert costs.cost is costs.nll
            total = costs.nll.asnumpy()
        results.append([p.data(CTX).asnumpy() for p in net.collect_params().values()]
                       + [total])
    for a, b in zip(*results, strict=True):
        np.testing.assert_array_equal(a.reshape(-1), b.reshape(-1))


def test_the_plain_step_refuses_an_unknown_reduction():
    net, _, _ = net_and_data()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    with pytest.raises(ValueError, match="loss_reduction must be 'mean' or 'sum'"):
        PlainStep(net, gluon.loss.L2Loss(), trainer, [CTX], "max")
