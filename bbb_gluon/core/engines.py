"""The two engines of a Bayes-by-Backprop step, side by side: the reference one (MXNet
operators and autograd through a ``BBBLoss``) and the fused one (the compiled kernels of
:mod:`bbb_gluon._kernels.fused`). Tests compare them on the same noise.
"""

from mxnet import autograd, gluon

from .._kernels import trainer as _trainer
from .estimator_forward import EstimatorForward, sample_noise
from .fused_engine import FusedBBBStep, prior_attrs
from .guard import batch_guard, first_not_finite, zero_nonfinite

__all__ = ["FusedBBBStep", "ReferenceBBBStep", "ENGINES", "forward_with", "first_not_finite",
           "prior_attrs"]


def forward_with(net, posterior, rules=(), fused=True):
    """The :class:`~bbb_gluon.core.estimator_forward.EstimatorForward` a step runs the
    network through: ``forward(weights, ctx, X, aux=None, noise=None)``, set up once."""
    return EstimatorForward(net, posterior, rules, fused)


def _draw(posterior, ctx, k, eps):
    """A weight sample on device ``k`` and the noise of the estimators' per-example arrays
    beside it; ``eps``: fixed noise, a flat array or a pair ``(flat, noise)``."""
    if eps is None:
        draw = posterior.sample(ctx)
        return draw, sample_noise(posterior, ctx, posterior.contexts.index(ctx))
    flat, noise = eps if isinstance(eps, tuple) else (eps, None)
    return posterior.sample(ctx, eps=flat), noise


class ReferenceBBBStep:
    """One Bayes-by-Backprop update with MXNet operators and autograd through the
    ``BBBLoss``: any prior, loss, optimiser and context. It takes what
    :class:`FusedBBBStep` takes and is called as it is."""

    @staticmethod
    def unavailable(posterior, loss):
        """Why this engine cannot run the step (None: it always can)."""
        return None

    def __init__(self, forward, posterior, trainer, loss, rules=()):
        self.forward, self.posterior, self.trainer, self.loss = forward, posterior, trainer, loss

    def __call__(self, X, y, batch_index, samples=1, eps=None, want_complexity=False,
                 step_size=None, batch_size=None, watch=None):
        """As :meth:`FusedBBBStep.__call__`; ``eps[k][s]`` a flat array (or a pair
        ``(flat, the estimators' noise)``), and the complexity cost always returned (the
        loss computes it anyway)."""
        ctxs = self.posterior.contexts
        Xs = gluon.utils.split_and_load(X, ctxs, even_split=False)
        ys = gluon.utils.split_and_load(y, ctxs, even_split=False)
        batch_size = X.shape[0] if batch_size is None else batch_size
        losses, nlls, complexity = [], [], None
        with autograd.record():
            for k, (xb, yb) in enumerate(zip(Xs, ys, strict=True)):
                ctx = xb.context
                draws, outs = [], []
                for s in range(samples):
                    draw, noise = _draw(self.posterior, ctx, k,
                                        None if eps is None else eps[k][s])
                    draws.append(draw)
                    outs.append(self.forward.with_sample(draw, xb, noise))
                if samples == 1:
                    outs, draws = outs[0], draws[0]
                nll, cost = self.loss.costs(outs, yb, draws, batch_index)
                losses.append(self.loss.combine(nll, cost, batch_index, batch_size))
                nlls.append(nll.sum())
                if k == 0:
                    complexity = cost
        autograd.backward(losses)
        # A batch with a NaN or an infinity: every gradient is zeroed, so no parameter moves
        # (but by Adam's momentum or weight decay), and the cost returned shows it, without
        # a host read.
        grads = [g for p in _trainer.params(self.trainer) if p.grad_req != "null"
                 for g in p.list_grad()]
        guards = [batch_guard(nll, xb, yb, [g for g in grads if g.context == xb.context])
                  for nll, xb, yb in zip(nlls, Xs, ys, strict=True)]
        total = guards[0].as_in_context(ctxs[0])
        for v in guards[1:]:
            total = total + v.as_in_context(ctxs[0])
        total = total.reshape((1,))
        zero_nonfinite(grads, total)  # as the fused kernels skip the update
        self.trainer.step(batch_size if step_size is None else step_size)
        if watch is not None:
            watch += total
        if complexity is not None:
            complexity = complexity.as_in_context(ctxs[0]).reshape((1,))
        return total, complexity


# The engines a step can run, by the name BBBStep, TrainConfig and the command line take.
ENGINES = {"fused": FusedBBBStep, "reference": ReferenceBBBStep}
