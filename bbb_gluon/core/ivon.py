r"""IVON: natural-gradient variational learning over the same mean-field posterior.

Bayes by Backprop learns a mean :math:`\mu` and a :math:`\rho` per weight by plain
gradients of the ELBO. IVON (Shen et al., 2024, Algorithm 1) learns the same factorised
Gaussian with a variational online-Newton update that costs about one Adam step: per weight
a mean :math:`m`, a Hessian estimate :math:`h` and a momentum :math:`g`, with the effective
sample size :math:`\lambda` (the training set's size) and the weight decay :math:`\delta`
(the prior :math:`N(0, 1/(\lambda\delta))`):

.. math::

    \sigma &= 1 / \sqrt{\lambda (h + \delta)}, \qquad
    \theta = m + \sigma \epsilon, \quad \epsilon \sim N(0, I) \\
    \hat g &= \nabla \bar\ell(\theta), \qquad \hat h = \hat g\, (\theta - m) / \sigma^2 \\
    g &\leftarrow \beta_1 g + (1 - \beta_1) \hat g \\
    h &\leftarrow \beta_2 h + (1 - \beta_2) \hat h
        + \tfrac12 (1 - \beta_2)^2 (h - \hat h)^2 / (h + \delta) \\
    m &\leftarrow m - \alpha\, \frac{g / (1 - \beta_1^t) + \delta m}{h + \delta}

with :math:`\bar\ell` the batch's mean negative log-likelihood, and :math:`\hat g`,
:math:`\hat h` averaged over the draws when there are several. Written from the paper's
equations (its official code is under the GPL and was not used).

What IVON learns is the package's posterior: :math:`m` is :math:`\mu`, and after each
step :math:`\rho = \mathrm{softplus}^{-1}(\sigma)` is written into the posterior, so
prediction, calibration, pruning by :math:`|\mu|/\sigma`, the weight plots and
``save_parameters`` read it unchanged.

References
----------
.. [1] Y. Shen, N. Daheim, B. Cong, P. Nickl, G. M. Marconi, C. Bazan, R. Yokota,
   I. Gurevych, D. Cremers, M. E. Khan, T. Möllenhoff. "Variational Learning is Effective
   for Large Deep Networks". ICML 2024. arXiv:2402.17641.
"""

import math
import os
import pickle

import mxnet as mx
from mxnet import autograd

from .._kernels import fused
from .._kernels import trainer as _trainer
from .engines import forward_with
from .step import batch_shapes_message, check_engine

__all__ = ["IVONStep"]


def _check_rate(name, value, low, high, closed_low=True):
    """``value`` a finite number in ``[low, high)`` (``(low, high)`` when not
    ``closed_low``); one line naming the setting otherwise."""
    ok = not isinstance(value, bool) and isinstance(value, int | float) \
        and math.isfinite(value) and (value >= low if closed_low else value > low) \
        and value < high
    if not ok:
        bounds = f"{'[' if closed_low else '('}{low:g}, {high:g})"
        raise ValueError(f"{name} must be a number in {bounds}, got {value!r}")
    return float(value)


def check_hessian_settings(hess_init, beta2):
    """``(hess_init, beta2)`` as floats, or one line naming the impossible one: the
    Hessian estimate's start :math:`h_0 > 0` and its rate in ``[0, 1)``."""
    return (_check_rate("hess_init", hess_init, 0.0, math.inf, closed_low=False),
            _check_rate("beta2", beta2, 0.0, 1.0))


class IVONStep:
    r"""One IVON update of a :class:`~bbb_gluon.Posterior` per call, from your own loop:
    the counterpart of :class:`~bbb_gluon.BBBStep` for the natural-gradient method.

    The update is IVON's own (module docstring): it needs no Gluon Trainer for the
    posterior. Parameters outside the posterior (BatchNorm, layers left out, a learned
    noise scale of the loss) get their gradients from the same backward pass, averaged
    over the draws, and ``trainer``'s ordinary update.

    Parameters
    ----------
    net : gluon.Block
        The network the posterior was built from.
    posterior : Posterior
        Its means are IVON's :math:`m` (their initialisation is the start); its
        :math:`\rho` are written from :math:`\sigma` after every step.
    loss : gluon.loss.Loss
        The likelihood: one negative log-likelihood per example (for instance
        ``SoftmaxCrossEntropyLoss()``).
    ess : float
        :math:`\lambda > 0`, the effective sample size: the number of training examples.
    lr : float, default 0.1
        :math:`\alpha`; IVON's rates are far larger than Adam's (0.1 to 2.5 in the paper).
    weight_decay : float, default 1e-4
        :math:`\delta \ge 0`; the prior is :math:`N(0, 1/(\lambda\delta))`.
    hess_init : float, default 1.0
        :math:`h_0 > 0`, which sets the starting spread :math:`1/\sqrt{\lambda(h_0 + \delta)}`.
    beta1, beta2 : float, default 0.9, 0.99999
        The momentum's and the Hessian estimate's rates, each in ``[0, 1)``.
    samples : int, default 1
        Weight draws per step.
    trainer : gluon.Trainer, optional
        Trains the network's parameters outside the posterior; it must not hold the
        posterior's own.
    engine : {"auto", "fused", "reference"}, default "auto"
        "fused": the draw and the update in the package's compiled kernels, one call each
        for every layer (CPU contexts, one draw a step); "reference": MXNet's operators,
        the equations as written; "auto": fused where it can run. Both draw their noise
        from the posterior's counter-based streams, so a resume continues exactly.

    Attributes
    ----------
    engine : str
        What this step runs.
    """

    def __init__(self, net, posterior, loss, ess, lr=0.1, weight_decay=1e-4, hess_init=1.0,
                 beta1=0.9, beta2=0.99999, samples=1, trainer=None, engine="auto"):
        self.ess = _check_rate("ess", ess, 0.0, math.inf, closed_low=False)
        self.lr = _check_rate("lr", lr, 0.0, math.inf, closed_low=False)
        self.weight_decay = _check_rate("weight_decay", weight_decay, 0.0, math.inf)
        self.hess_init, self.beta2 = check_hessian_settings(hess_init, beta2)
        self.beta1 = _check_rate("beta1", beta1, 0.0, 1.0)
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
            raise ValueError(f"samples must be an integer >= 1, got {samples!r}")
        if len(posterior.contexts) != 1:
            raise ValueError(f"IVONStep trains a posterior on one context, and this one "
                             f"lives on {posterior.contexts}")
        if trainer is not None:
            own = {id(p) for p in posterior.mu_parameters + posterior.rho_parameters}
            if any(id(p) in own for p in _trainer.params(trainer)):
                raise ValueError("the trainer holds the posterior's own mu or rho: IVON "
                                 "updates those; give the trainer the other parameters "
                                 "(posterior.deterministic_params(net))")
        check_engine(engine)
        self.net, self.posterior, self.loss, self.trainer = net, posterior, loss, trainer
        self.samples = samples
        self.ctx = posterior.contexts[0]
        why_not = "the fused update takes one draw a step" if samples != 1 else \
            "the fused kernels run on CPU contexts only" if self.ctx.device_type != "cpu" \
            else None if engine == "reference" or fused.available() \
            else f"the kernels are unavailable ({fused.unavailable_reason()})"
        if engine == "fused" and why_not is not None:
            raise ValueError(f"engine='fused' cannot run here: {why_not}")
        self.engine = "fused" if engine != "reference" and why_not is None else "reference"
        self.forward = forward_with(net, posterior, fused=self.engine == "fused")
        self.others = [p for p in (_trainer.params(trainer) if trainer is not None else [])
                       if p.grad_req != "null"]
        shapes = [p.shape for p in posterior.mu_parameters]
        self.hess = [mx.nd.full(s, self.hess_init, ctx=self.ctx) for s in shapes]
        self.momentum = [mx.nd.zeros(s, ctx=self.ctx) for s in shapes]
        # on the device, so that a fused step never waits for the host to count
        self._counts = mx.nd.zeros((2,), ctx=self.ctx)  # updates made, batches skipped
        self._drawn = None
        self._write_rho()

    @property
    def num_updates(self):
        """The updates made (:math:`t`)."""
        return int(self._counts[0].asscalar())

    @property
    def skipped(self):
        """The batches skipped because their likelihood or gradients were not finite."""
        return int(self._counts[1].asscalar())

    # ---------------------------------------------------------------- the posterior
    def sigma(self):
        r""":math:`\sigma = 1/\sqrt{\lambda(h + \delta)}`, one array per posterior key."""
        return [mx.nd.rsqrt((h + self.weight_decay) * self.ess) for h in self.hess]

    def _write_rho(self):
        # rho = softplus^-1(sigma) = log(expm1(sigma)): softplus(rho) gives sigma back
        for p, s in zip(self.posterior.rho_parameters, self.sigma(), strict=True):
            p.set_data(mx.nd.log(mx.nd.expm1(s)))

    def state_dict(self):
        r"""What a resume needs beside the posterior's means: ``h``, ``g``, the counts, the
        noise, and the :math:`\rho` last written (the fused update writes it in its own
        arithmetic: a resume reads it back bit for bit), as NumPy arrays and numbers."""
        return {"hess": [h.asnumpy() for h in self.hess],
                "momentum": [g.asnumpy() for g in self.momentum],
                "rho": [p.data(self.ctx).asnumpy() for p in self.posterior.rho_parameters],
                "num_updates": self.num_updates, "skipped": self.skipped,
                "noise": self.posterior.noise.state_dict()}

    def load_state_dict(self, state):
        """Continue from :meth:`state_dict` (the means come with the posterior's file)."""
        keys = ("hess", "momentum") + (("rho",) if "rho" in state else ())
        targets = {"hess": self.hess, "momentum": self.momentum,
                   "rho": [p.data(self.ctx) for p in self.posterior.rho_parameters]}
        for key in keys:
            dst = targets[key]
            if len(state[key]) != len(dst) or any(
                    tuple(a.shape) != d.shape for a, d in zip(state[key], dst, strict=True)):
                raise ValueError(f"the saved IVON state's {key} does not fit this posterior")
        self.hess = [mx.nd.array(a, ctx=self.ctx) for a in state["hess"]]
        self.momentum = [mx.nd.array(a, ctx=self.ctx) for a in state["momentum"]]
        self._counts = mx.nd.array([state["num_updates"], state["skipped"]], ctx=self.ctx)
        self.posterior.noise.load_state_dict(state["noise"])
        if "rho" not in state:  # a state written before it held rho
            self._write_rho()
            return
        for p, a in zip(self.posterior.rho_parameters, state["rho"], strict=True):
            p.set_data(mx.nd.array(a, ctx=self.ctx))

    # ------------------------------------------ the shape of a gluon.Trainer (for fit)
    @property
    def learning_rate(self):
        r""":math:`\alpha`, as ``gluon.Trainer.learning_rate``."""
        return self.lr

    def set_learning_rate(self, lr):
        r"""Set :math:`\alpha` (a schedule's, as ``gluon.Trainer.set_learning_rate``); the
        other parameters' trainer keeps its own rate."""
        self.lr = _check_rate("lr", lr, 0.0, math.inf, closed_low=False)

    def save_states(self, fname):
        """Write :meth:`state_dict` and the other parameters' trainer's states to
        ``fname``, as ``gluon.Trainer.save_states`` does."""
        state = self.state_dict()
        if self.trainer is not None:
            tmp = f"{fname}.trainer"
            try:
                self.trainer.save_states(tmp)
                with open(tmp, "rb") as f:
                    state["trainer"] = f.read()
            finally:
                if os.path.exists(tmp):
                    os.remove(tmp)
        with open(fname, "wb") as f:
            pickle.dump(state, f)

    def load_states(self, fname):
        """Continue from :meth:`save_states`'s file."""
        with open(fname, "rb") as f:
            state = pickle.load(f)  # noqa: S301 - a checkpoint this package wrote
        if (self.trainer is None) != ("trainer" not in state):  # before anything changes
            raise ValueError("the saved IVON state's trainer does not fit this step's")
        self.load_state_dict(state)
        if self.trainer is not None:
            tmp = f"{fname}.trainer"
            with open(tmp, "wb") as f:
                f.write(state["trainer"])
            try:
                self.trainer.load_states(tmp)
            finally:
                os.remove(tmp)

    # ---------------------------------------------------------------- one step
    def _noise(self, means):
        """The next block of the posterior's noise stream, one array per key."""
        flat, start, eps = self.posterior.noise.next(self.ctx, 0), 0, []
        for m in means:
            eps.append(flat[start:start + m.size].reshape(m.shape))
            start += m.size
        return eps

    def _draw_grads(self, X, y, sigmas, fixed):
        """The draws' mean gradient and Hessian estimate per key, the batch's summed NLL
        (averaged over the draws), and the other parameters' summed gradients."""
        means = [p.data(self.ctx) for p in self.posterior.mu_parameters]
        grad_sum = hess_sum = others_sum = None
        nll_sum = None
        for s in range(self.samples):
            eps = self._noise(means) if fixed is None else \
                [mx.nd.array(e, ctx=self.ctx) for e in fixed[s]]
            theta = [m + s * e for m, s, e in zip(means, sigmas, eps, strict=True)]
            for t in theta:
                t.attach_grad()
            with autograd.record():
                nll = self.loss(self.forward(theta, self.ctx, X), y).sum()
            nll.backward()
            scale = 1.0 / X.shape[0]  # the gradient of the batch's mean NLL
            grads = [t.grad * scale for t in theta]
            # h-hat = g-hat (theta - m) / sigma^2 = g-hat eps / sigma
            hess = [g * e / s for g, e, s in zip(grads, eps, sigmas, strict=True)]
            others = [p.grad(self.ctx).copy() for p in self.others]
            if grad_sum is None:
                grad_sum, hess_sum, others_sum, nll_sum = grads, hess, others, nll
            else:
                grad_sum = [a + b for a, b in zip(grad_sum, grads, strict=True)]
                hess_sum = [a + b for a, b in zip(hess_sum, hess, strict=True)]
                others_sum = [a + b for a, b in zip(others_sum, others, strict=True)]
                nll_sum = nll_sum + nll
        k = 1.0 / self.samples
        return ([g * k for g in grad_sum], [h * k for h in hess_sum],
                nll_sum.reshape((1,)) * k, [g * k for g in others_sum])

    def __call__(self, X, y, eps=None):
        """Update on the batch ``(X, y)`` (on the posterior's context); returns the
        batch's summed negative log-likelihood, shape ``(1,)`` (averaged over the draws).

        ``eps`` (for tests and replays): the draws' noise instead of fresh noise,
        ``eps[s][k]`` for draw ``s`` and posterior key ``k``.

        A batch whose likelihood or gradients are not finite changes nothing (``m``,
        ``h``, ``g`` and the other parameters keep their values) and counts in
        :attr:`skipped`.
        """
        # NumPy batches copied to the context once; shapes checked before any work (no
        # host sync: a NaN in a batch shows as a skip)
        X, y = (a.as_in_context(self.ctx) if isinstance(a, mx.nd.NDArray)
                else mx.nd.array(a, ctx=self.ctx, dtype="float32") for a in (X, y))
        if not X.shape or X.shape[0] == 0 or not y.shape or y.shape[0] != X.shape[0]:
            raise ValueError(batch_shapes_message(X.shape, y.shape))
        if self.engine == "fused" and eps is None:
            return self._fused_step(X, y)
        sigmas = self.sigma()
        g_hat, h_hat, nll, others = self._draw_grads(X, y, sigmas, eps)
        total = nll + sum(mx.nd.sum(g) for g in g_hat) + sum(mx.nd.sum(h) for h in h_hat)
        if not math.isfinite(float(total.asscalar())):  # one host sync a step
            self._counts += mx.nd.array([0, 1], ctx=self.ctx)
            return nll
        self._counts += mx.nd.array([1, 0], ctx=self.ctx)
        b1, b2, wd, lr = self.beta1, self.beta2, self.weight_decay, self.lr
        correction = 1.0 - b1 ** self.num_updates
        for k, m_param in enumerate(self.posterior.mu_parameters):
            g, h = self.momentum[k], self.hess[k]
            g[:] = b1 * g + (1 - b1) * g_hat[k]
            h[:] = b2 * h + (1 - b2) * h_hat[k] \
                + (0.5 * (1 - b2) ** 2) * mx.nd.square(h - h_hat[k]) / (h + wd)
            m = m_param.data(self.ctx)
            m[:] = m - lr * (g / correction + wd * m) / (h + wd)
        self._write_rho()
        if self.trainer is not None:
            for p, g in zip(self.others, others, strict=True):
                p.grad(self.ctx)[:] = g
            self.trainer.step(X.shape[0])
        return nll

    def _fused_step(self, X, y):
        """The draw (``bbb_draw_layers``, from the posterior's rho, which holds IVON's
        sigma) and the update (``ivon_update``), one kernel call each for every layer."""
        mus = [p.data(self.ctx) for p in self.posterior.mu_parameters]
        rhos = [p.data(self.ctx) for p in self.posterior.rho_parameters]
        num = len(mus)
        if self._drawn is None:  # the same arrays (and gradients) at every step
            self._drawn = [mx.nd.empty(m.shape, ctx=self.ctx) for m in mus + mus]
            for t in self._drawn[num:]:
                t.attach_grad()
        source = self.posterior.noise
        mx.nd.bbb_draw_layers(*mus, *rhos, out=self._drawn, args=fused.packed(
            seed=source.seed, stream=source.global_stream(0), counter=source.advance(0),
            layer=0, layers=num, aux=",".join(["0"] * num)))
        eps, theta = self._drawn[:num], self._drawn[num:]
        with autograd.record():
            nll = self.loss(self.forward(theta, self.ctx, X), y).sum()
        nll.backward()
        inputs = []
        for k in range(num):
            inputs += [theta[k].grad, eps[k], mus[k], self.hess[k], self.momentum[k], rhos[k]]
        guard = mx.nd.ivon_update(
            *inputs, self._counts[0:1], self._counts[1:2], layers=num,
            scale=repr(1.0 / X.shape[0]), ess=repr(self.ess), wd=repr(self.weight_decay),
            lr=repr(self.lr), beta1=repr(self.beta1), beta2=repr(self.beta2))
        if self.trainer is not None:
            grads = [p.grad(self.ctx) for p in self.others]
            mx.nd.bbb_keep_finite(guard, *grads, num_arrays=1 + len(grads))
            self.trainer.step(X.shape[0])
        return nll.reshape((1,))
