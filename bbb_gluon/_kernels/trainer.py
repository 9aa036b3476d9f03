"""The one door to ``gluon.Trainer``'s and the optimisers' private attributes.

Two things need what MXNet does not expose: the fused update, which runs the optimiser's
step inside the gradient kernel and so must do ``Trainer.step``'s bookkeeping itself, and
the start of a distributed run, which initialises the kvstore before the first step
(``bbb_gluon.distributed.group``). Every private name they read is here, written for
MXNet 1.9.1 (the last release); another version fails with a clear error at first use
instead of a wrong update.
"""

import mxnet as mx

__all__ = ["check_version", "start_kvstore", "kvstore", "params", "param_index",
           "optimizer", "states", "scale", "count_update", "lr_wd", "lrs_wds", "update_count",
           "mark_fresh", "step_fresh"]

MXNET_VERSION = "1.9.1"


def check_version(version=None):
    """Raise RuntimeError unless MXNet is the version these attributes were read from."""
    version = mx.__version__ if version is None else version
    if version != MXNET_VERSION:
        raise RuntimeError(
            f"bbb_gluon reads private attributes of gluon.Trainer as MXNet {MXNET_VERSION} "
            f"has them (the fused update, the start of a distributed run); MXNet {version} "
            f"is installed. Install mxnet=={MXNET_VERSION} (a one-process run also works with "
            "BBB_GLUON_FUSED_UPDATE=0; a distributed one needs that version).")


def start_kvstore(trainer, init_params=False):
    """Create the Trainer's kvstore now (``Trainer.step`` does it lazily), and with
    ``init_params`` send the parameters to it."""
    check_version()
    if not trainer._kv_initialized:
        trainer._init_kvstore()
    if init_params and trainer._params_to_init:
        trainer._init_params()


def kvstore(trainer):
    return trainer._kvstore


def params(trainer):
    """The Trainer's parameters, in its order."""
    return trainer._params


def param_index(trainer):
    """Parameter name → the index the optimiser and its states know it by."""
    return trainer._param2idx


def optimizer(trainer):
    # Looked up each time by callers: Trainer.load_states replaces the optimiser.
    return trainer._optimizer


def states(trainer):
    """The first updater's ``states`` and ``states_synced`` dictionaries."""
    updater = trainer._updaters[0]
    return updater.states, updater.states_synced


def scale(trainer):
    return trainer._scale


def use_context(opt, ctx):
    """Count updates on ``ctx``'s device, as MXNet's updater does before each update: the
    optimiser keeps one count per device id (so on ``cpu(1)`` the Trainer's own updates
    count elsewhere than on ``cpu(0)``)."""
    opt._set_current_context(ctx.device_id)


def count_update(opt, index):
    """Count one update of ``index`` (or of each index of a list), as
    ``Optimizer.update`` does before it steps."""
    opt._update_count(index)


def update_count(opt, index):
    """How many updates ``index`` has had (Adam's bias correction needs it)."""
    return opt._index_update_count[index]


def lr_wd(opt, index):
    """The learning rate and weight decay of ``index``, with their multipliers and the
    schedule applied."""
    return opt._get_lr(index), opt._get_wd(index)


def lrs_wds(opt, indices):
    """:func:`lr_wd` of each of ``indices``, as two lists, in one call each."""
    return opt._get_lrs(indices), opt._get_wds(indices)


def mark_fresh(array):
    """Tell ``gluon.Trainer`` this gradient is new.

    The fused step writes gradients with its own kernels instead of ``backward()``, and
    the Trainer refuses (or silently skips, with ``ignore_stale_grad``) parameters whose
    ``_fresh_grad`` flag backward did not set. NDArray has no public setter for it.
    """
    array._fresh_grad = True


def step_fresh(trainer, step_size, params):
    """``trainer.step(step_size)`` on the parameters whose gradients backward wrote since
    the last step, after the fused update has done the posterior's (whose gradients it
    never writes). Each of ``params`` must be among them: otherwise raise as
    ``Trainer.step`` does, instead of skipping it silently.

    With one context, no kvstore and no AMP loss scaler (where the fused update runs),
    what ``Trainer.step`` does for these parameters alone: the rescale, the updater on
    their (index, gradient, weight), the gradients marked used; its loop over every
    parameter of the Trainer (the posterior's too) cost a good part of a small network's
    step."""
    for p in params:
        if not all(data._fresh_grad for data in p.list_data()):
            raise UserWarning(
                f"Gradient of Parameter `{p.name}` on context {p.list_ctx()[0]} has not been "
                "updated by backward since last `step`: the network does not use it. Set "
                "its grad_req to 'null' to leave it out of training.")
    if (trainer._kvstore is not None or len(trainer._updaters) != 1
            or getattr(trainer, "_amp_loss_scaler", None) is not None):
        trainer.step(step_size, ignore_stale_grad=True)
        return
    start_kvstore(trainer, init_params=True)
    trainer._check_and_rescale_grad(trainer._scale / step_size)
    index = trainer._param2idx
    # in the Trainer's order, as its _update hands them to the updater
    todo = sorted((index[p.name], p) for p in params if p.grad_req != "null")
    if not todo:
        return
    indices, grads, weights = [], [], []
    for i, p in todo:
        weight, grad = p.list_data()[0], p.list_grad()[0]
        indices.append(i)
        grads.append(grad)
        weights.append(weight)
        weight._fresh_grad = False
    trainer._updaters[0](indices, grads, weights)
