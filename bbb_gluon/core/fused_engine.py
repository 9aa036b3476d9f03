"""The fused engine of a Bayes-by-Backprop step: :class:`FusedBBBStep`, the compiled
kernels of :mod:`bbb_gluon._kernels.fused` (:mod:`bbb_gluon.core.engines` holds it beside
the reference engine). Tests compare the two on the same noise.
"""

import math
import os

import mxnet as mx

from .._kernels import fused as _kernels
from .._kernels import trainer as _trainer
from .._kernels.fused import packed
from . import ops
from .estimators import key_estimators
from .guard import all_float32, fused_guard

__all__ = ["FusedBBBStep", "prior_attrs"]


def prior_attrs(prior, complexity):
    """Keyword attributes of ``bbb_grad``/``bbb_cost`` for a prior and a complexity kind
    (the prior's own :meth:`~bbb_gluon.core.priors.Prior.fused_attrs`)."""
    attrs = prior.fused_attrs(complexity)
    if attrs is None:
        raise ValueError(f"no fused kernel for {prior!r} with complexity {complexity!r}")
    return attrs


class FusedBBBStep:
    """One Bayes-by-Backprop update with the fused kernels (CPU contexts only).

    Same estimator as ``BBBLoss`` + ``backward`` + ``Trainer.step``: for each device the
    weights are sampled, the network's likelihood gradient with respect to them comes from
    autograd (the weights are marked as leaves), and the gradients with respect to
    :math:`\\mu` and :math:`\\rho`, complexity cost included, come from ``bbb_grad``.

    Parameters
    ----------
    forward : callable
        ``forward(weights, ctx, X, aux=None, noise=None)``: the network's output on ``X``
        with ``weights`` (one array per posterior key, on ``ctx``) in place of its own and
        what the estimators' layers take beside them, recorded by autograd (built by
        :func:`bbb_gluon.core.engines.forward_with`; the kernels never touch the network).
    posterior, trainer
        The trainer trains the posterior's parameters and may train others (the
        network's deterministic ones, a learned noise scale): those get their gradients
        from the same backward pass and the trainer's ordinary update.
    loss : BBBLoss
        Its prior, complexity kind and weighting, and its ``nll`` (the likelihood, one
        negative log-likelihood per example).

    One thread at a time: a step draws into arrays it keeps and marks the posterior's
    means as its leaves for the call.
    """

    @staticmethod
    def unavailable(posterior, loss):
        """Why the fused kernels cannot run a step of ``posterior`` under ``loss`` (None
        where they can): the one place these conditions are written."""
        if any(c.device_type != "cpu" for c in posterior.contexts):
            return "the fused kernels run on CPU contexts only"
        if loss.prior.fused_attrs(loss.complexity) is None:
            return f"no fused kernel for {loss.prior!r} with complexity {loss.complexity!r}"
        if loss.global_weight is not None or loss.batch_axis != 0:
            return "the fused kernels take a BBBLoss without a global weight, batch axis 0"
        if not _kernels.available():
            return f"the kernels are unavailable ({_kernels.unavailable_reason()})"
        return None

    def __init__(self, forward, posterior, trainer, loss, rules=()):
        why = self.unavailable(posterior, loss)
        if why is not None:
            raise ValueError(f"the fused engine cannot run here: {why}")
        self.forward, self.posterior, self.trainer = forward, posterior, trainer
        self.attrs = prior_attrs(loss.prior, loss.complexity)
        self.weight_of = loss.weight_of
        self.skip_below = loss.skip_below
        self.nll = loss.nll
        ours = {id(p) for p in posterior.mu_parameters + posterior.rho_parameters}
        self.others = [p for p in _trainer.params(trainer)
                       if id(p) not in ours and p.grad_req != "null"]
        self._buffers, self._drawn = {}, {}
        self._update, self._sums = None, []  # the update's plan (at the first step); the
        # other parameters' gradients summed over a step's samples
        # Per key: 0 shared sample, 1 Flipout, 2 local reparameterisation (bbb_draw's aux)
        self.estimators = key_estimators(rules, len(posterior.keys))
        self.modes = [e.mode for e in self.estimators]
        self._aux_list = ",".join(map(str, self.modes))  # the *_layers kernels' aux
        self._means_marked = [k for k, mode in enumerate(self.modes) if mode]

    def _likelihood_backward(self, ctx, xb, yb, drawn, grads):
        """The likelihood's costs on ``(xb, yb)``, and their backward into ``grads``
        (``gws, g2s``) w.r.t. the weights in ``drawn``, or for layers under an estimator the
        means (marked back afterwards, even after a failure; copied where grad_req is
        'null') and the perturbations or variances."""
        (ws, mus, aux, extra), (gws, g2s) = drawn, grads
        direct = self._direct_means()
        leaves = [w if mode == 0 else (m if j in direct else m.copy())
                  for j, (w, m, mode) in enumerate(zip(ws, mus, self.modes, strict=True))]
        marked = [(a, g) for a, g in zip(aux, g2s, strict=True) if a is not None]
        mx.autograd.mark_variables(leaves + [a for a, _ in marked], gws + [g for _, g in marked])
        try:
            with mx.autograd.record():
                out = self.forward(leaves, ctx, xb, dict(enumerate(aux)), extra)
                nll = self.nll(out, yb)
            nll.backward()
        finally:
            if direct:
                self._mark_means(ctx, mus, direct)
        return nll

    def _direct_means(self):
        """Keys under an estimator whose means are the leaves (with a gradient to restore)."""
        params = self.posterior.mu_parameters
        return [k for k in self._means_marked if params[k].grad_req != "null"]

    def _mark_means(self, ctx, mus, keys):
        """The means of ``keys`` marked again with their Parameters' own gradients (the step
        marked them with its buffers), as Gluon left them for a user's autograd."""
        params = self.posterior.mu_parameters
        mx.autograd.mark_variables([mus[k] for k in keys], [params[k].grad(ctx) for k in keys],
                                   [params[k].grad_req for k in keys])

    def _grad_buffers(self, ctx):
        """Per key on ``ctx``: the likelihood's gradient w.r.t. the weights (or the means),
        two buffers for a second sample's mu and rho gradients, and the gradient w.r.t.
        the estimator's perturbation or variance (None for the shared sample)."""
        if ctx not in self._buffers:
            self._buffers[ctx] = (
                [mx.nd.zeros(s, ctx=ctx) for s in self.posterior.shapes],
                [mx.nd.zeros(s, ctx=ctx) for s in self.posterior.shapes],
                [mx.nd.zeros(s, ctx=ctx) for s in self.posterior.shapes],
                [mx.nd.zeros(s, ctx=ctx) if mode else None
                 for s, mode in zip(self.posterior.shapes, self.modes, strict=True)])
        return self._buffers[ctx]

    def _average_others(self, ctx, s, samples):
        """Each sample's backward writes the other parameters' gradients anew: keep their
        running sum, and leave its mean in the gradients after the last sample."""
        grads = [p.grad(ctx) for p in self.others if p.grad_req == "write"]
        if s == 0:
            self._sums = [g.copy() for g in grads]
            return
        for acc, g in zip(self._sums, grads, strict=True):
            acc += g
            if s == samples - 1:
                g[:] = acc / samples

    def noise(self, ctx, stream):
        """Fresh per-layer noise on ``ctx`` from the posterior's noise counters."""
        source = self.posterior.noise
        counter = source.advance(stream)
        return [mx.nd.bbb_normal(mu, seed=source.seed, stream=source.global_stream(stream),
                                 counter=counter, layer=k)
                for k, mu in enumerate(self.posterior.mu(ctx))]

    def draw(self, ctx, stream, mus, rhos):
        """``(noise, weights, aux, extra)``: per layer in one kernel call each, the noise
        :meth:`noise` draws, the weights ``bbb_sample`` makes from it and, for layers
        under an estimator, the perturbation or variance (else None); ``extra``: the
        estimators' per-example noise, drawn beside them. The first three are arrays the
        step keeps: the next draw on ``ctx`` writes over them."""
        source = self.posterior.noise
        counter = source.advance(stream)
        seed, global_stream = source.seed, source.global_stream(stream)
        # Every layer in one operator: on a small network a step's time goes to launching
        # operators, and a busy machine makes each launch longer.
        num = len(mus)
        # Into the same arrays at every step: MXNet's allocation of eight or more outputs
        # cost about a third of the call on a small network (benchmarks/bench_launch.py).
        # The engine orders this write after the last step's reads of them.
        if ctx not in self._drawn:
            shapes = self.posterior.shapes
            self._drawn[ctx] = [mx.nd.empty(s, ctx=ctx) for s in shapes + shapes] + [
                mx.nd.empty(s, ctx=ctx)
                for s, mode in zip(shapes, self.modes, strict=True) if mode]
        outs = self._drawn[ctx]
        mx.nd.bbb_draw_layers(*mus, *rhos, out=outs, args=packed(
            seed=seed, stream=global_stream, counter=counter, layer=0, layers=num,
            aux=self._aux_list))
        aux = iter(outs[2 * num:])
        first = num  # the extra arrays' keys follow the layers'

        def extra(tag, shape, signs):
            return mx.nd.bbb_normal(mx.nd.empty(shape, ctx=ctx), seed=seed,
                                    stream=global_stream, counter=counter,
                                    layer=first + tag, signs=int(signs))
        return (outs[:num], outs[num:2 * num],
                [next(aux) if mode else None for mode in self.modes], extra)

    def _given(self, ctx, given, mus, rhos):
        """:meth:`draw`'s four from fixed noise: a list of per-layer arrays, or a pair
        ``(that list, extra)`` (tests)."""
        noise, extra = given if isinstance(given, tuple) else (given, None)
        noise = [e.as_in_context(ctx) for e in noise]
        ws = [mx.nd.bbb_sample(m, r, e) for m, r, e in zip(mus, rhos, noise, strict=True)]
        aux = [None if est.mode == 0 else est.aux(ops.softplus(r), e)
               for r, e, est in zip(rhos, noise, self.estimators, strict=True)]
        return noise, ws, aux, extra

    def _update_plan(self):
        """``(adam, [(mu index, rho index)] per layer)`` when the optimiser's update can
        run inside the gradient kernel, else False: one context and no kvstore (nothing
        to all-reduce), float32 Adam or SGD (with or without momentum); the trainer's
        other parameters then get its ordinary update. ``BBB_GLUON_FUSED_UPDATE=0`` turns it off."""
        if self._update is not None:
            return self._update
        trainer, post = self.trainer, self.posterior
        plan = False
        if os.environ.get("BBB_GLUON_FUSED_UPDATE", "1") != "0" and len(post.contexts) == 1:
            _trainer.start_kvstore(trainer)
            opt = _trainer.optimizer(trainer)
            kind = type(opt)
            ours = [id(p) for p in post.mu_parameters + post.rho_parameters]
            trained = _trainer.params(trainer)
            if (_trainer.kvstore(trainer) is None and set(ours) <= set(map(id, trained))
                    and all(p.grad_req != "null" for p in post.mu_parameters + post.rho_parameters)
                    and not getattr(opt, "multi_precision", False)
                    and kind in (mx.optimizer.Adam, mx.optimizer.SGD)):
                index = _trainer.param_index(trainer)
                plan = (kind is mx.optimizer.Adam,
                        [(index[m.name], index[r.name])
                         for m, r in zip(post.mu_parameters, post.rho_parameters, strict=True)])
        self._update = plan
        return plan

    # Eleven parameters: the plan, each array one input of bbb_update (``grads``: d weights
    # and, under an estimator, d its perturbation or variance), and the two switches.
    def _fused_update(self, plan, grads, ws, noise, mus, rhos, scale, step_size, guard,
                      cost=False, check=None):
        """The gradient kernel and the optimiser's step on every layer: the bookkeeping
        of ``Trainer.step`` / ``Optimizer.update`` (update counts, learning rate with its
        multipliers and schedule, Adam's bias correction, state creation) in Python, the
        arithmetic in ``bbb_update_layers`` (``bbb_update`` on every layer). With ``cost``,
        returns the complexity cost's value (shape (1,), from mu and rho before the update),
        which the kernel sums in the same pass; else its output is 0.

        ``check``: ``(nll, X, y, keep, watch)`` in place of ``guard`` (None): the kernel
        computes the guard itself, as :func:`~bbb_gluon.core.guard.batch_guard` would with
        these, and returns ``(guard, cost)``."""
        adam, layers = plan
        trainer = self.trainer
        opt = _trainer.optimizer(trainer)
        states_of, synced = _trainer.states(trainer)
        opt.rescale_grad = _trainer.scale(trainer) / step_size
        # MXNet's optimisers clip only when clip_gradient is truthy (0 and None: no clip).
        clip = float(opt.clip_gradient) if opt.clip_gradient else -1.0
        gws, g2s = grads
        # the counts Adam's bias correction reads are per device, as the Trainer keeps them
        _trainer.use_context(opt, mus[0].context)
        # every index counted, then every rate read, in one call each: the numbers of
        # Optimizer.update's count-then-read per index (the schedule reads the largest count)
        indices = [idx for pair in layers for idx in pair]
        _trainer.count_update(opt, indices)
        lrs, wds = _trainer.lrs_wds(opt, indices)
        if adam:
            b1, b2 = opt.beta1, opt.beta2
            counts = [_trainer.update_count(opt, idx) for idx in indices]
            lrs = [lr * math.sqrt(1.0 - b2 ** t) / (1.0 - b1 ** t)
                   for lr, t in zip(lrs, counts, strict=True)]
        inputs = []
        for k, (gw, w, e, m, r, g2, mode) in enumerate(zip(gws, ws, noise, mus, rhos, g2s,
                                                           self.modes, strict=True)):
            states = []
            if adam or opt.momentum:
                for idx, weight in ((indices[2 * k], m), (indices[2 * k + 1], r)):
                    if idx not in states_of:
                        states_of[idx] = opt.create_state_multi_precision(idx, weight)
                        synced[idx] = True
                    state = states_of[idx]  # Adam: (mean, var); SGD: the momentum
                    states.extend(state if adam else [state])
            inputs += [gw, w, e, m, r, *states, *([g2] if mode else [])]
        lrs, wds = [repr(v) for v in lrs], [repr(v) for v in wds]
        extra = {"beta1": repr(opt.beta1), "beta2": repr(opt.beta2),
                 "epsilon": repr(opt.epsilon)} if adam else {"momentum": repr(opt.momentum)}
        if check is None:
            tail, more = [guard], {"guard": 1}
        else:  # the guard in the same operator: one launch fewer a step
            nll, X, y, keep, watch = check
            tail = [nll, X, y, *keep, *([] if watch is None else [watch])]
            more = {"check": 1, "keep": len(keep), "watch": int(watch is not None)}
        # Every layer in one operator (see draw); lists hold one entry per layer.
        return mx.nd.bbb_update_layers(*inputs, *tail, args=packed(
            **more, layers=len(layers), cost=int(cost), aux=self._aux_list, adam=int(adam),
            lr_mu=",".join(lrs[0::2]), lr_rho=",".join(lrs[1::2]),
            wd_mu=",".join(wds[0::2]), wd_rho=",".join(wds[1::2]),
            rescale=repr(opt.rescale_grad), clip=repr(clip), scale=repr(scale), **extra,
            **self.attrs))

    def _cost(self, ws, noise, mus, rhos):
        """The complexity cost's value over every layer, a pass of its own (``bbb_cost``)."""
        cost = None
        for w, e, m, r in zip(ws, noise, mus, rhos, strict=True):
            c = mx.nd.bbb_cost(w, e, m, r, **self.attrs)
            cost = c if cost is None else cost + c
        return cost

    # Ten parameters: the arrays of one sample's bbb_grad on every layer.
    def _grads(self, s, grads, ws, noise, mus, rhos, params, tmp, scale, guard):
        """Sample ``s``'s gradients w.r.t. mu and rho by ``bbb_grad`` on every layer, into
        the parameters' gradients (``params``: the mu and rho lists) for the first sample,
        else into ``tmp`` and added to them (the update left to ``Trainer.step``)."""
        gws, g2s = grads
        targets_mu, targets_rho = params if s == 0 else tmp
        for gw, w, e, m, r, gm, gr, g2, mode in zip(
                gws, ws, noise, mus, rhos, targets_mu, targets_rho, g2s, self.modes,
                strict=True):
            mx.nd.bbb_grad(gw, w, e, m, r, *([g2] if mode else []), guard, guard=1,
                           aux=mode, scale=repr(scale), out=[gm, gr], **self.attrs)
        if s > 0:
            for gm, gr, tm, tr in zip(*params, *tmp, strict=True):
                gm += tm
                gr += tr

    def __call__(self, X, y, batch_index, samples=1, eps=None, want_complexity=False,
                 step_size=None, batch_size=None, watch=None):
        """Update on batch ``(X, y)``; returns ``(nll_sum, complexity)`` as NDArrays of
        shape (1,) on the first context (``complexity`` is the unweighted cost :math:`C`
        of the first device's first sample, computed only if ``want_complexity``, else
        None).

        ``eps[k][s]``: per-layer noise (list of arrays) for device ``k``, sample ``s``.
        ``step_size`` goes to ``trainer.step`` (default the batch size). ``batch_size``:
        the examples of the whole batch when ``X`` is one worker's shard of it (default
        ``X.shape[0]``); the complexity cost is shared out by it. ``watch``: an array of
        shape (1,) on the first context that each sample's likelihood cost (NaN where a
        batch was skipped) is added to.
        """
        ctxs = self.posterior.contexts
        Xs = mx.gluon.utils.split_and_load(X, ctxs, even_split=False)
        ys = mx.gluon.utils.split_and_load(y, ctxs, even_split=False)
        batch_size = X.shape[0] if batch_size is None else batch_size
        step_size = batch_size if step_size is None else step_size
        pi = self.weight_of(batch_index)
        plan = self._update_plan() if samples == 1 else False
        nll_sums, complexities = [], []
        for k, (xb, yb) in enumerate(zip(Xs, ys, strict=True)):
            ctx = xb.context
            mus, rhos = self.posterior.mu(ctx), self.posterior.rho(ctx)
            scale = pi * xb.shape[0] / batch_size if pi > self.skip_below else 0.0
            gws, tmp_mu, tmp_rho, g2s = self._grad_buffers(ctx)
            if not plan:  # bbb_grad writes the parameters' gradients
                params_mu = [p.grad(ctx) for p in self.posterior.mu_parameters]
                params_rho = [p.grad(ctx) for p in self.posterior.rho_parameters]
            for s in range(samples):
                noise, ws, aux, extra = self.draw(ctx, k, mus, rhos) if eps is None \
                    else self._given(ctx, eps[k][s], mus, rhos)
                nll = self._likelihood_backward(ctx, xb, yb, (ws, mus, aux, extra), (gws, g2s))
                # the watch lives on the first context, which is the first shard's
                here = watch if k == 0 else None
                keep = [p.grad(ctx) for p in self.others]
                wanted = want_complexity and k == 0 and s == 0
                if plan and all_float32(nll, xb, yb, *keep):
                    # the guard, the update and the cost's value in one operator
                    guard, cost = self._fused_update(plan, (gws, g2s), ws, noise, mus, rhos,
                                                     scale, step_size, None, cost=wanted,
                                                     check=(nll, xb, yb, keep, here))
                    nll_sums.append(guard)
                    if wanted:
                        complexities.append(cost)
                    continue
                g2 = [g for a, g in zip(aux, g2s, strict=True) if a is not None]
                guard = fused_guard(nll, xb, yb, gws + g2, here, keep)
                if watch is not None and here is None:
                    watch += guard.as_in_context(watch.context).reshape((1,))
                if samples > 1:
                    self._average_others(ctx, s, samples)
                # the guard as the cost: a batch skipped for a NaN shows as one
                first = guard if k == 0 else guard.as_in_context(ctxs[0])
                nll_sums.append(first / samples if samples > 1 else first)
                if plan:
                    # the cost's value, if wanted, from the update's own pass over the arrays
                    cost = self._fused_update(plan, (gws, g2s), ws, noise, mus, rhos, scale,
                                              step_size, guard, cost=wanted)
                    if wanted:
                        complexities.append(cost)
                    continue
                if wanted:  # before bbb_grad's update below changes mu and rho in place
                    complexities.append(self._cost(ws, noise, mus, rhos))
                self._grads(s, (gws, g2s), ws, noise, mus, rhos, (params_mu, params_rho),
                            (tmp_mu, tmp_rho), scale, guard)
            if samples > 1:
                for g in params_mu + params_rho:
                    g /= samples
        if plan:
            if self.others:
                _trainer.step_fresh(self.trainer, step_size, self.others)
        else:
            for p in self.posterior.mu_parameters + self.posterior.rho_parameters:
                for data in p.list_data():
                    _trainer.mark_fresh(data)
            self.trainer.step(step_size)
        total = nll_sums[0]
        for v in nll_sums[1:]:
            total = total + v
        if total.shape != (1,):
            total = total.reshape((1,))
        return total, (complexities[0] if complexities else None)
