"""The one door to private attributes of MXNet objects other than the Trainer's (those are
in :mod:`bbb_gluon._kernels.trainer`): each read or write is a function here, written for
MXNet 1.9.1 (``bbb_gluon._mxnet_build`` checks the version at import), so that a version
that renamed one fails here and nowhere else.
"""

from mxnet.gluon.loss import _apply_weighting

__all__ = ["sparse_label", "is_hybridized", "set_hybridized", "act_type", "children",
           "own_params", "params_with_prefix", "input_width", "dense_settings",
           "conv_settings", "loss_settings", "apply_weighting", "parameter_arrays",
           "set_parameter_arrays", "dataset_arrays", "barrier"]


def sparse_label(loss):
    """Whether a ``gluon.loss.SoftmaxCrossEntropyLoss`` takes class indices (its
    ``sparse_label`` constructor argument, which Gluon keeps as ``_sparse_label``)."""
    return loss._sparse_label


def is_hybridized(block):
    """Whether ``block.hybridize()`` is in effect (Block has no public query)."""
    return bool(block._active)


def set_hybridized(block, active):
    """Switch ``block``'s own cached graph on or off without dropping it (``hybridize``
    would drop it and build it again at the next call)."""
    block._active = bool(active)


def children(block):
    """``{name: child}`` of a Block, the names ``save_parameters`` puts in its keys."""
    return block._children


def own_params(block):
    """``{attribute name: Parameter}`` a Block registered itself (``"weight"``, ``"bias"``;
    not its children's): the same Parameter objects where layers share them."""
    return block._reg_params


def params_with_prefix(block):
    """``{structural name: Parameter}`` of a Block and its children (``"0.weight"``), the
    names ``save_parameters`` writes; Block has no public accessor for them."""
    return block._collect_params_with_prefix()


def input_width(block):
    """``(in_units, in_channels)`` a layer was built with: a Dense's ``in_units``, a
    convolution's ``in_channels`` (0 while it infers them), None where it has no such
    setting (other blocks)."""
    return getattr(block, "_in_units", None), getattr(block, "_in_channels", None)


def dense_settings(dense):
    """``(units, flatten)`` of an ``nn.Dense``, as its forward passes them to
    ``FullyConnected``."""
    return dense._units, dense._flatten


def conv_settings(conv):
    """``(operator name, keyword arguments)`` of an ``nn.Conv*`` layer, as its forward
    calls the operator (``"Convolution"``, ``{"kernel": ..., "layout": ...}``)."""
    return conv._op_name, dict(conv._kwargs)


def loss_settings(loss):
    """``(weight, batch_axis)`` a Gluon Loss was built with."""
    return loss._weight, loss._batch_axis


def apply_weighting(F, loss, weight, sample_weight=None):
    """Gluon's own losses scale by ``weight`` (and ``sample_weight``) through this helper;
    using it keeps a global weight's semantics identical to theirs, and gluon.loss has no
    public equivalent."""
    return _apply_weighting(F, loss, weight, sample_weight)


def act_type(activation):
    """The ``act_type`` an ``nn.Activation`` was built with ("relu", "tanh", ...)."""
    return activation._act_type


def parameter_arrays(param):
    """The list of per-context arrays a Parameter hands out from ``data(ctx)``, or None
    when it is not initialised. Both the imperative and the hybridized forward read it."""
    return param._data


def set_parameter_arrays(param, arrays):
    """Make ``param.data(ctx)`` hand out ``arrays`` (one per context, in its order)."""
    param._data = arrays


def dataset_arrays(dataset):
    """The whole ``(data, label)`` of a Gluon vision dataset (MNIST, FashionMNIST) at once;
    its public interface gives one pair per ``__getitem__``."""
    return dataset._data, dataset._label


def barrier(kvstore):
    """Wait for every worker of a distributed kvstore (MXNet 1.9.1 names it privately)."""
    kvstore._barrier()
