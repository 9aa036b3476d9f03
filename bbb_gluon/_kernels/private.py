"""The one door to private attributes of MXNet objects other than the Trainer's (those are
in :mod:`bbb_gluon._kernels.trainer`): each read or write is a function here, written for
MXNet 1.9.1 (``bbb_gluon._mxnet_build`` checks the version at import), so that a version
that renamed one fails here and nowhere else.
"""

import ctypes
import os
import sys

from mxnet import base
from mxnet.gluon.loss import _apply_weighting
from mxnet.ndarray.register import _make_ndarray_function
from mxnet.symbol.register import _make_symbol_function

__all__ = ["sparse_label", "is_hybridized", "set_hybridized", "act_type", "children",
           "own_params", "params_with_prefix", "input_width", "dense_settings",
           "conv_settings", "loss_settings", "apply_weighting", "parameter_arrays",
           "set_parameter_arrays", "dataset_arrays", "loader_examples", "barrier",
           "load_operator_library"]


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


def loader_examples(loader):
    """The examples a ``gluon.data.DataLoader`` reads in an epoch: its dataset's length
    (DataLoader keeps the dataset as ``_dataset``; with a sampler of its own, a
    ``batch_sampler``, it may read fewer)."""
    return len(loader._dataset)


def barrier(kvstore):
    """Wait for every worker of a distributed kvstore (MXNet 1.9.1 names it privately)."""
    kvstore._barrier()


def _operator_names():
    size, names = ctypes.c_uint(), ctypes.POINTER(ctypes.c_char_p)()
    base.check_call(base._LIB.MXListAllOpNames(ctypes.byref(size), ctypes.byref(names)))
    return {base.py_str(names[i]) for i in range(size.value)}


def load_operator_library(path):
    """``mx.library.load(path, verbose=False)``, making Python functions for the library's
    own operators only. MXNet's makes them again for every one of its ~1,200 operators in
    ``mx.nd`` and ``mx.sym`` (0.8 s here, paid by every process that loads the kernels:
    each worker of a launch, each notebook); the functions made here are the ones it
    would make for the new names, in the same modules."""
    path = str(path)
    if not (os.path.isabs(path) and os.path.isfile(path)
            and os.path.splitext(path)[1] in (".so", ".dll")):
        raise base.MXNetError(f"load path {path} is not an existing absolute path to a "
                              ".so or .dll library")
    before = _operator_names()
    base.check_call(base._LIB.MXLoadLib(ctypes.c_char_p(path.encode()), base.mx_uint(0)))
    new = sorted(_operator_names() - before)
    filed_elsewhere = [name for name in new
                       if base._is_np_op(name) or base._get_op_name_prefix(name)]
    if filed_elsewhere:  # the package's kernels are all bbb_* (and their _backward_)
        raise base.MXNetError(f"{path}: operators {filed_elsewhere} belong in MXNet's "
                              "submodules (contrib, linalg, numpy ...); load this library "
                              "with mx.library.load")
    for module, make in (("ndarray", _make_ndarray_function),
                         ("symbol", _make_symbol_function)):
        for name in new:
            handle = base.OpHandle()
            base.check_call(base._LIB.NNGetOpHandle(base.c_str(name), ctypes.byref(handle)))
            # As MXNet files them: "_backward_..." in _internal, the rest in op and the
            # module itself (mx.nd.bbb_draw).
            homes = [f"mxnet.{module}._internal"] if name.startswith("_") else \
                [f"mxnet.{module}.op", f"mxnet.{module}"]
            function = make(handle, name, name)
            function.__module__ = module  # as MXNet sets it
            for home in homes:
                setattr(sys.modules[home], name, function)
                sys.modules[home].__all__.append(name)
    return new
