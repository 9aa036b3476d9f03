"""Which parameters of a user's Gluon network get a posterior, by their structural names."""

import re

from mxnet import gluon
from mxnet.gluon import nn

from .._kernels.private import params_with_prefix

__all__ = ["bayesian_parameters", "structural_params", "BAYESIAN_LAYERS"]

# The layers whose weight and bias a posterior covers by default.
BAYESIAN_LAYERS = (nn.Dense, nn.Conv1D, nn.Conv2D, nn.Conv3D, nn.Conv1DTranspose,
                   nn.Conv2DTranspose, nn.Conv3DTranspose)


def structural_params(net):
    """Every parameter of ``net`` under its structural name.

    Parameters
    ----------
    net : gluon.Block

    Returns
    -------
    dict
        ``{"0.weight": Parameter, "1.gamma": Parameter, ...}`` in the order
        ``net.save_parameters`` writes them, the same names for every instance of one
        architecture; a Parameter that layers share appears under each of its names.
    """
    if not isinstance(net, gluon.Block):
        raise TypeError(f"expected a gluon Block, got {type(net).__name__}")
    # Block has no public accessor for save_parameters' structural names ("0.weight").
    return params_with_prefix(net)


def bayesian_parameters(net, select=None):
    """The parameters of ``net`` a posterior covers, by structural name.

    Parameters
    ----------
    net : gluon.Block
        An initialised network.
    select : None, list of Blocks, str or callable, optional
        Which parameters get a posterior. ``None`` (default): the weight and bias of every
        layer in :data:`BAYESIAN_LAYERS` (Dense, Conv1D/2D/3D and their transposes). A list
        of blocks: every trainable parameter of those blocks (e.g. ``[net[-1]]`` for a
        last-layer posterior). A string: a regular expression searched in the structural
        names (``"0.weight"``, ``"3.bias"``: those ``net.save_parameters`` writes). A
        callable: ``select(name, parameter) -> bool``. Parameters that are not trained
        (``grad_req='null'``, e.g. BatchNorm's running statistics) are never chosen.

    Returns
    -------
    dict
        ``{"0.weight": Parameter, "0.bias": Parameter, ...}`` in structural order; the
        names are the same for every instance of one architecture. A Parameter that
        several layers share (weight tying: ``nn.Dense(..., params=other.params)``) is
        one entry, under the first of its names chosen: one weight, one posterior.

    Raises
    ------
    ValueError
        If nothing is chosen, the selector is of an unknown kind, or a chosen parameter
        has no value yet (not initialised, or deferred shapes not yet inferred).
    """
    named = structural_params(net)
    if select is None:
        ids = set()

        def visit(block):
            if isinstance(block, BAYESIAN_LAYERS):
                ids.update(id(p) for p in block.params.values())

        net.apply(visit)
        chosen = {k: p for k, p in named.items() if id(p) in ids}
    elif isinstance(select, str):
        pattern = re.compile(select)
        chosen = {k: p for k, p in named.items() if pattern.search(k)}
    elif isinstance(select, list | tuple) and all(isinstance(b, gluon.Block) for b in select):
        ids = {id(p) for b in select for p in b.collect_params().values()}
        chosen = {k: p for k, p in named.items() if id(p) in ids}
    elif callable(select):
        chosen = {k: p for k, p in named.items() if select(k, p)}
    else:
        raise ValueError("select must be None, a list of blocks, a regular expression or a "
                         f"callable (name, parameter) -> bool, got {select!r}")
    chosen = {k: p for k, p in chosen.items() if p.grad_req != "null"}
    seen = set()
    chosen = {k: p for k, p in chosen.items() if not (id(p) in seen or seen.add(id(p)))}
    if not chosen:
        raise ValueError("no parameters of the network were selected for a posterior "
                         f"(select={select!r}; by default: the weights and biases of Dense "
                         "and convolution layers)")
    for key, param in chosen.items():
        try:
            param.data(param.list_ctx()[0])
        except Exception:
            raise ValueError(
                f"the network is not initialised (parameter {key!r} has no value yet): call "
                "net.initialize() and, for layers without in_units/in_channels, run one "
                "batch through it before building the posterior"
            ) from None
    return chosen
