"""The networks a configuration names: ``build_mlp``, and the network, posterior and loss of
a run built from its ``TrainConfig`` (or checked, when the user brings their own).
"""

import math

import mxnet as mx
import numpy as np
from mxnet import gluon
from mxnet.gluon import nn

from .._checks import check_network_takes
from ..core.likelihood import likelihood_of
from ..core.posterior import Posterior
from ..core.selection import structural_params

__all__ = ["build_mlp"]


def build_mlp(hidden=(400, 400), num_outputs=10, activation="relu", num_inputs=784,
              dropout=0.0):
    """An initialised ``nn.HybridSequential`` MLP; ``dropout > 0`` adds Dropout before every
    Dense layer after the first (the baseline of the paper's Table 1)."""
    net = nn.HybridSequential()
    units_in = num_inputs
    with net.name_scope():
        for units in hidden:
            if dropout > 0 and units_in != num_inputs:
                net.add(nn.Dropout(dropout))
            net.add(nn.Dense(units, activation=activation, in_units=units_in))
            units_in = units
        if dropout > 0:
            net.add(nn.Dropout(dropout))
        net.add(nn.Dense(num_outputs, in_units=units_in))
    return net


def build_model(config, ctxs):
    net = build_mlp(config.hidden, config.num_outputs, config.activation, config.num_inputs,
                    config.dropout if config.model == "dropout" else 0.0)
    net.initialize(mx.init.Zero(), ctx=ctxs)
    # Xavier-uniform weights (MXNet's default Xavier: magnitude 3, fan average) drawn by
    # NumPy from the run's seed, so that fit neither depends on nor changes MXNet's
    # global random state; biases stay zero.
    rng = np.random.default_rng([config.seed, 3])
    for key, param in structural_params(net).items():
        if key.endswith(".weight"):
            fan_out, fan_in = param.shape[0], int(np.prod(param.shape[1:]))
            scale = math.sqrt(3.0 / ((fan_in + fan_out) / 2.0))
            param.set_data(mx.nd.array(rng.uniform(-scale, scale, param.shape)
                                       .astype(np.float32)))
    net.hybridize(static_alloc=True, static_shape=True)
    posterior = None
    if config.model == "bbb":
        posterior = Posterior(net, mu_init=config.mu_init, mu_scale=config.mu_scale,
                              rho_init=config.rho_init, seed=config.seed)
    return net, posterior


def check_user_model(config, net, posterior, loss):
    """What the labels must be for a user's network: None (the package's MLP), ("classes",
    None) for integer labels, ("targets", None) for real values; errors before any work."""
    if net is None:
        if posterior is not None:
            raise ValueError("posterior= needs net=: the package's MLP gets its own")
        if loss is not None:
            raise ValueError("loss= needs net=: the package's MLP trains with the likelihood "
                             "that config names")
        return None
    if not isinstance(net, gluon.Block):
        raise TypeError(f"net must be a gluon Block, got {type(net).__name__}")
    if posterior is not None:
        if config.model != "bbb":
            raise ValueError(f"a posterior was given but config.model is {config.model!r}; "
                             "use model='bbb'")
        posterior.check_net(net)
    if loss is not None and not isinstance(loss, gluon.loss.Loss):
        raise TypeError(f"loss must be a gluon.loss.Loss, got {type(loss).__name__}")
    for name, param in (loss.collect_params().items() if loss is not None else []):
        try:
            param.data(param.list_ctx()[0])
        except Exception:
            raise ValueError(f"the loss's parameter {name!r} has no value yet: call "
                             "loss.initialize() before fit") from None
    return ("classes", None) if loss is None else ("targets", None)


def classes_of(net, X, ctx, likelihood, name):
    """Classes the user's network predicts: its output width (2 for one Bernoulli logit),
    from X's first example; ``ValueError`` naming ``name`` where it cannot take them."""
    out = check_network_takes(net, X, name, ctx)
    return likelihood_of(likelihood).num_classes(out.shape[-1])
