"""Tests for bbb_gluon.training.checkpoint beyond those of fit's resume (test_fit.py)."""

import mxnet as mx
import numpy as np
from mxnet.gluon import nn

from bbb_gluon import Posterior
from bbb_gluon.training.checkpoint import _model_arrays, _set_model_arrays


def test_a_checkpoint_of_a_tied_network_holds_the_shared_weight_once():
    """The posterior stands for a Parameter under every name layers share it by: neither
    name is written again as a deterministic array, and the arrays load back."""
    first = nn.Dense(3, in_units=3)
    net = nn.HybridSequential()
    net.add(first, nn.Dense(3, in_units=3, params=first.params), nn.BatchNorm(in_channels=3))
    net.initialize(ctx=mx.cpu(1))
    posterior = Posterior(net, seed=0)
    arrays = _model_arrays(net, posterior)
    plain = sorted(k for k in arrays if ":" not in k)  # not the posterior's or the loss's
    assert plain == ["2.beta", "2.gamma", "2.running_mean", "2.running_var"]
    other = nn.HybridSequential()
    first2 = nn.Dense(3, in_units=3)
    other.add(first2, nn.Dense(3, in_units=3, params=first2.params),
              nn.BatchNorm(in_channels=3))
    other.initialize(ctx=mx.cpu(1))
    posterior2 = Posterior(other, seed=1)
    _set_model_arrays(arrays, other, posterior2, "test")
    for a, b in zip(posterior.mu(), posterior2.mu(), strict=True):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())
