"""What ``fit`` trains: the package's MLP (``MLP``, a spec it builds; ``build_mlp``) or a
network of the user's own (``Network``: the Block, optionally its posterior and its loss),
apart from the training settings (``TrainConfig``).
"""

import math
import numbers
from dataclasses import dataclass, field

import mxnet as mx
import numpy as np
from mxnet import gluon
from mxnet.gluon import nn

from .._checks import check_int, check_network_takes
from ..core.likelihood import likelihood_of
from ..core.posterior import Posterior
from ..core.selection import structural_params
from .config import MLP_FIELDS

__all__ = ["build_mlp", "MLP", "Network"]

ACTIVATIONS = ("relu", "tanh", "sigmoid", "softrelu")
# MXNet 1.9.1's wheels index arrays with int32 (built without USE_INT64_TENSOR_SIZE).
_MAX_ARRAY = 2**31 - 1


@dataclass(frozen=True)
class MLP:
    """The package's multilayer perceptron, as ``fit(config, train, net=MLP(...))`` builds
    it (the default network of ``fit``): Dense layers with ``activation``, Xavier weights
    drawn from ``config.seed``, hybridized. Frozen and checked when made; a run folder
    records it as ``config.json``'s ``"mlp"`` entry (``ctx`` aside).

    Parameters
    ----------
    hidden : tuple of int, default (400, 400)
        Units per hidden layer.
    activation : {"relu", "tanh", "sigmoid", "softrelu"}, default "relu"
    num_inputs, num_outputs : int, default 784, 10
        ``num_outputs`` must suit the likelihood: 1 for "bernoulli".
    dropout : float, default 0.5
        Drop probability of the dropout baseline (``config.model="dropout"``: before every
        Dense layer but the first); the other models ignore it.
    ctx : Context or list of Context, optional
        Where ``fit`` builds it (a list trains data-parallel); default
        ``mx.current_context()``. Not part of the run's record: a run may resume elsewhere
        only as ``fit`` allows (the noise streams follow the devices).
    """

    hidden: tuple = (400, 400)
    activation: str = "relu"
    num_inputs: int = 784
    num_outputs: int = 10
    dropout: float = 0.5
    ctx: object = field(default=None, compare=False)

    def __post_init__(self):
        if isinstance(self.hidden, list | tuple):
            object.__setattr__(self, "hidden", tuple(self.hidden))
        if not isinstance(self.hidden, tuple) or not self.hidden or any(
                isinstance(h, bool) or not isinstance(h, numbers.Integral) or h < 1
                for h in self.hidden):
            raise ValueError(f"hidden must be a non-empty list of positive unit counts, "
                             f"got {self.hidden!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {self.activation!r}; choose one of "
                             f"{ACTIVATIONS}")
        check_int(self.num_inputs, "num_inputs", 1)
        check_int(self.num_outputs, "num_outputs", 1)
        if isinstance(self.dropout, bool) or not (isinstance(self.dropout, numbers.Real)
                                                  and 0 <= self.dropout < 1):
            raise ValueError(f"dropout must lie in [0, 1), got {self.dropout!r}")
        widths = (self.num_inputs, *self.hidden, self.num_outputs)
        largest = max(a * b for a, b in zip(widths, widths[1:], strict=False))
        if largest >= _MAX_ARRAY:
            raise ValueError(f"hidden {list(self.hidden)!r} makes a weight array of {largest:,} "
                             f"elements; MXNet 1.9.1's builds hold at most {_MAX_ARRAY - 1:,}")

    def to_dict(self):
        """The record ``config.json`` keeps (everything but ``ctx``)."""
        return {"hidden": list(self.hidden), "activation": self.activation,
                "num_inputs": self.num_inputs, "num_outputs": self.num_outputs,
                "dropout": self.dropout}

    @classmethod
    def from_dict(cls, d, ctx=None):
        unknown = set(d) - set(MLP_FIELDS)
        if unknown:
            raise ValueError(f"unknown MLP keys {sorted(unknown)}")
        return cls(**d, ctx=ctx)

    def contexts(self):
        ctx = self.ctx
        return list(ctx if isinstance(ctx, list | tuple) else [ctx or mx.current_context()])

    def check(self, config):
        """Refuse a likelihood the outputs do not suit, before any work."""
        likelihood = likelihood_of(config.likelihood)
        if not likelihood.fits(self.num_outputs):
            raise ValueError(f"the {likelihood.name} likelihood needs "
                             f"num_outputs{likelihood.outputs_needed}, got MLP(num_outputs="
                             f"{self.num_outputs})")

    def __repr__(self):
        ctx = "" if self.ctx is None else f", ctx={self.ctx}"
        return (f"MLP(hidden={self.hidden}, activation={self.activation!r}, num_inputs="
                f"{self.num_inputs}, num_outputs={self.num_outputs}, dropout={self.dropout}"
                f"{ctx})")


@dataclass(frozen=True, eq=False)
class Network:
    """A network of your own for ``fit(config, train, net=Network(net, posterior, loss))``.

    Parameters
    ----------
    net : gluon.Block
        Initialised (any layers; run one batch through it first if shapes are deferred);
        ``fit`` trains on the contexts its parameters live on. Passing the Block alone,
        ``fit(..., net=net)``, is ``Network(net)``.
    posterior : Posterior, optional
        For ``config.model="bbb"``: the posterior to train (which layers are Bayesian,
        their initialisation); default ``Posterior(net, ...)`` over every Dense and
        convolution layer, initialised as ``config`` says.
    loss : gluon.loss.Loss, optional
        The likelihood cost, any Gluon loss with one value per example
        (``bbb.GaussianNLLLoss(None)`` or ``L2Loss`` for regression, say); default: the
        one ``config.likelihood`` names. With a loss of your own, the history records
        ``valid_loss`` (the mean per example, with the means) instead of error rates, and
        the best epoch is chosen by it. A loss with parameters (a learned noise scale;
        initialise it first) has them trained and checkpointed with the network.
    """

    net: gluon.Block
    posterior: Posterior | None = None
    loss: gluon.loss.Loss | None = None

    def contexts(self):
        return list(next(iter(self.net.collect_params().values())).list_ctx())


def as_network(net):
    """``fit``'s ``net=``: (the MLP spec, None) or (None, the user's ``Network``)."""
    if net is None:
        return MLP(), None
    if isinstance(net, MLP):
        return net, None
    if isinstance(net, gluon.Block):
        return None, Network(net)
    if isinstance(net, Network):
        return None, net
    raise TypeError(f"net must be a bbb_gluon.MLP, a gluon Block or a bbb_gluon.Network, got "
                    f"{type(net).__name__}")


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


def build_network(config, mlp, ctxs):
    net = build_mlp(mlp.hidden, mlp.num_outputs, mlp.activation, mlp.num_inputs,
                    config.method.dropout(mlp.dropout))
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
    return net, config.method.make_posterior(net, config)


def check_user_network(config, own):
    """What the labels must be for a user's ``Network``: None (the package's MLP),
    "classes" for integer labels, "targets" for real values; errors before any work."""
    if own is None:
        return None
    net, posterior, loss = own.net, own.posterior, own.loss
    if not isinstance(net, gluon.Block):
        raise TypeError(f"net must be a gluon Block, got {type(net).__name__}")
    if posterior is not None:
        if not config.method.learns_posterior:
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
    return "classes" if loss is None else "targets"


def classes_of(net, X, ctx, likelihood, name):
    """Classes the user's network predicts: its output width (2 for one Bernoulli logit),
    from X's first example; ``ValueError`` naming ``name`` where it cannot take them."""
    out = check_network_takes(net, X, name, ctx)
    return likelihood_of(likelihood).num_classes(out.shape[-1])
