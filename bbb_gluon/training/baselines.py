"""The plain and dropout baselines' training step: a network trained as it is, with
:class:`~bbb_gluon.BBBStep`'s call and return, so that ``fit`` runs every model through
one loop."""

from mxnet import autograd, gluon

from ..core.step import StepCosts, check_loss_reduction

__all__ = ["PlainStep"]


class PlainStep:
    """One update of a network without a posterior (the plain baseline; the dropout
    baseline is the same step on a network with Dropout layers).

    ``step(X, y, batch_index=0, want_complexity=True, batch_size=None)`` computes
    ``loss`` on ``net``'s outputs, data-parallel over ``ctxs``, and updates with
    ``trainer``; it returns a :class:`~bbb_gluon.StepCosts` whose ``nll`` is the batch's
    summed loss (shape (1,), on the first context) and whose complexity is None, weighted
    0. ``batch_index`` and ``want_complexity`` are taken for ``BBBStep``'s call and have
    no effect; ``batch_size``: the whole batch's examples when ``X`` is one worker's
    shard of it (default ``X.shape[0]``). ``loss_reduction``: what the optimiser
    differentiates, the batch's mean loss (``trainer.step(batch_size)``) or its sum.
    """

    engine = "plain"

    def __init__(self, net, loss, trainer, ctxs, loss_reduction="mean"):
        check_loss_reduction(loss_reduction)
        self.net, self.loss, self.trainer = net, loss, trainer
        self.ctxs, self.loss_reduction = list(ctxs), loss_reduction

    def __call__(self, X, y, batch_index=0, want_complexity=True, batch_size=None):
        batch_size = X.shape[0] if batch_size is None else batch_size
        Xs = gluon.utils.split_and_load(X, self.ctxs, even_split=False)
        ys = gluon.utils.split_and_load(y, self.ctxs, even_split=False)
        with autograd.record():
            losses = [self.loss(self.net(xb), yb) for xb, yb in zip(Xs, ys, strict=True)]
        autograd.backward(losses)
        self.trainer.step(batch_size if self.loss_reduction == "mean" else 1)
        total = losses[0].sum().as_in_context(self.ctxs[0])
        for part in losses[1:]:
            total = total + part.sum().as_in_context(self.ctxs[0])
        return StepCosts(total.reshape((1,)), None, 0.0)
