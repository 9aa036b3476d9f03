"""Fused CPU kernels for the Bayes-by-Backprop step, compiled on first use.

MXNet 1.9.1 runs most elementwise operators on one thread, one pass over memory each; a
Bayes-by-Backprop step built from them needs some twenty passes over every weight, and
``nd.random.normal`` alone costs more than four plain training steps (see
``docs/benchmarks.md``). ``_kernels/fused.cc`` does the same arithmetic in OpenMP-parallel,
vectorised loops behind eight operators, and MXNet loads it as an operator library
(``mx.library.load``):

- ``bbb_normal``: N(0, 1) noise by Box-Muller from a counter-based hash of
  ``(seed, stream, counter, layer)``, so it is reproducible and resumable;
- ``bbb_sample``: :math:`w = \\mu + \\mathrm{softplus}(\\rho)\\,\\epsilon`;
- ``bbb_draw``: both in one call (the same numbers), as the training step uses them;
- ``bbb_grad``: the gradients with respect to :math:`\\mu` and :math:`\\rho` of the
  likelihood (given its gradient with respect to :math:`w`) plus the weighted complexity
  cost, written out by hand (the same estimator as :class:`bbb_gluon.BBBLoss`; tests check
  they agree);
- ``bbb_cost``: the complexity cost's value, for reports;
- ``bbb_lrt``: the first layer's pre-activations drawn from their mean and standard
  deviation (the local reparameterisation), relu included, for prediction;
- ``bbb_update``: ``bbb_grad`` and the optimiser's update (Adam, or SGD with or without
  momentum) in the same pass, on the Trainer's own state, so one call per layer replaces the
  gradient kernel and ``Trainer.step``;
- ``bbb_threads``: the OpenMP thread count of the engine thread (:mod:`bbb_gluon.threads`).

The library is built with the machine's C++ compiler (``$CXX`` or ``g++``) against the
headers that ship in the MXNet wheel, cached in ``$BBB_GLUON_CACHE`` (default
``~/.cache/bbb_gluon``) under a hash of the sources, compiler, MXNet version and CPU
flags, and rebuilt only when one of them changes. Without a compiler, or with
``BBB_GLUON_FUSED=0``, :func:`available` is False and training uses plain MXNet operators.
"""

import hashlib
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
from pathlib import Path

import mxnet as mx

from . import trainer as _trainer

__all__ = ["available", "unavailable_reason", "load", "prior_attrs"]

_SOURCE = Path(__file__).with_name("fused.cc")
_lock = threading.Lock()
_state = {"loaded": False, "reason": None, "path": None}

# bbb_update repeats MXNet's optimiser arithmetic in MXNet's order, so that it gives the
# Trainer's results to the bit: no reassociation, no reciprocals, no fused multiply-adds.
_EXACT_FLAGS = ("-fno-associative-math", "-fno-reciprocal-math", "-ffp-contract=off")

# Codes of the complexity kinds in fused.cc.
KIND_NONE, KIND_MIXTURE, KIND_GAUSSIAN_MC, KIND_GAUSSIAN_KL = 0, 1, 2, 3


def _mxnet_root():
    return Path(mx.__file__).parent


def _cpu_flags():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return ""


def _cache_dir():
    root = os.environ.get("BBB_GLUON_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "bbb_gluon")
    return Path(root)


def build(cxx, source, stem, mxnet_library=True, flags=()):
    """Compile ``source`` into a shared library cached under ``$BBB_GLUON_CACHE``; return
    its path. ``mxnet_library``: link MXNet's ``lib_api.cc`` so ``mx.library.load`` can
    load it (else a plain C ABI library, for ``ctypes``); ``flags``: more compiler flags
    for ``source``."""
    mx_root = _mxnet_root()
    lib_api = mx_root / "src" / "lib_api.cc"
    include = mx_root / "include"
    if mxnet_library and (not lib_api.is_file() or
                          not (include / "mxnet" / "lib_api.h").is_file()):
        raise RuntimeError("this MXNet wheel ships no lib_api.h/lib_api.cc")
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True,
                             check=True).stdout.splitlines()[0]
    key = hashlib.sha1()
    headers = sorted(Path(source).parent.glob("*.h"))  # included by the sources
    for part in (Path(source).read_bytes(), *(h.read_bytes() for h in headers),
                 lib_api.read_bytes() if mxnet_library else b"",
                 mx.__version__.encode(), version.encode(), _cpu_flags().encode(), b"v1",
                 " ".join(flags).encode()):
        key.update(part)
    target = _cache_dir() / f"lib{stem}-{key.hexdigest()[:16]}.so"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Once per machine and source (make setup builds them): a pause of seconds to a minute
    # at a first import or first bandit run should not look like a hang.
    print(f"bbb_gluon: compiling {Path(source).name} for this machine, once (cached in "
          f"{target.parent})", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        tmp = Path(tmp)
        # -ffast-math lets GCC call glibc's vectorised expf/logf/cosf; it is given to the
        # compile of our kernels only, never to the link, so crtfastmath.o (which would
        # switch the whole process to flush-to-zero) is not linked in.
        common = ["-std=c++17", "-fPIC", f"-I{include}"]
        objects = [str(tmp / "kernels.o")]
        steps = [[cxx, *common, "-O3", "-march=native", "-ffast-math", *flags, "-fopenmp",
                  "-c", str(source), "-o", objects[0]]]
        if mxnet_library:
            objects.append(str(tmp / "lib_api.o"))
            steps.append([cxx, *common, "-O2", "-c", str(lib_api), "-o", objects[1]])
        steps.append([cxx, "-shared", "-fopenmp", *objects, "-o", str(tmp / "lib.so")])
        for cmd in steps:
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"compiling {Path(source).name} failed: "
                                   f"{done.stderr[-500:]}")
        os.replace(tmp / "lib.so", target)
    return target


def compiler():
    """The C++ compiler to build kernels with (``$CXX``, g++ or c++), or None."""
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")


def load():
    """Build (if needed) and load the kernels; True on success. Safe to call repeatedly."""
    with _lock:
        if _state["loaded"] or _state["reason"] is not None:
            return _state["loaded"]
        if os.environ.get("BBB_GLUON_FUSED", "1") == "0":
            _state["reason"] = "disabled by BBB_GLUON_FUSED=0"
            return False
        cxx = compiler()
        if cxx is None:
            _state["reason"] = "no C++ compiler found (install g++ or set CXX)"
        else:
            try:
                path = build(cxx, _SOURCE, "bbb_fused", flags=_EXACT_FLAGS)
                mx.library.load(str(path), verbose=False)
                _state.update(loaded=True, path=str(path))
            except Exception as e:  # a failed build must never stop training
                _state["reason"] = f"{type(e).__name__}: {e}"
        if not _state["loaded"]:
            warnings.warn(f"bbb_gluon: fused CPU kernels unavailable ({_state['reason']}); "
                          "training uses plain MXNet operators (slower, same results)",
                          RuntimeWarning, stacklevel=2)
        return _state["loaded"]


def available():
    """Whether the fused kernels are loaded (building them on the first call)."""
    return load()


def unavailable_reason():
    """Why :func:`available` is False (None if it is True or was not asked yet)."""
    return _state["reason"]


def prior_attrs(prior, complexity):
    """Keyword attributes of ``bbb_grad``/``bbb_cost`` for a prior and a complexity kind."""
    from ..core.priors import GaussianPrior, ScaleMixturePrior

    if isinstance(prior, ScaleMixturePrior) and complexity == "mc":
        return {"kind": KIND_MIXTURE, "pi": repr(prior.pi), "sigma1": repr(prior.sigma1),
                "sigma2": repr(prior.sigma2)}
    if isinstance(prior, GaussianPrior):
        kind = KIND_GAUSSIAN_KL if complexity == "kl" else KIND_GAUSSIAN_MC
        return {"kind": kind, "sigma": repr(prior.sigma)}
    raise ValueError(f"no fused kernel for {prior!r} with complexity {complexity!r}")


def _mark_fresh(array):
    """Tell ``gluon.Trainer`` this gradient is new.

    The fused step writes gradients with its own kernels instead of ``backward()``, and
    the Trainer refuses (or silently skips, with ``ignore_stale_grad``) parameters whose
    ``_fresh_grad`` flag backward did not set. NDArray has no public setter for it.
    """
    array._fresh_grad = True


class FusedBBBStep:
    """One Bayes-by-Backprop update with the fused kernels (CPU contexts only).

    Same estimator as ``BBBLoss`` + ``backward`` + ``Trainer.step``: for each device the
    weights are sampled, the network's likelihood gradient with respect to them comes from
    autograd (the weights are marked as leaves), and the gradients with respect to
    :math:`\\mu` and :math:`\\rho`, complexity cost included, come from ``bbb_grad``.

    Parameters
    ----------
    forward : callable
        ``forward(weights, ctx, X)``: the network's output on ``X`` with ``weights`` (one
        array per posterior key, on ``ctx``) in place of its own, recorded by autograd
        (:func:`bbb_gluon.core.step.forward_with` builds it). The kernels never touch the
        network itself.
    posterior, trainer
    prior : Prior
    complexity : {"mc", "kl"}
    likelihood : {"softmax", "bernoulli"} or gluon.loss.Loss
        A Gluon loss returning one negative log-likelihood per example.
    weight_of : callable
        ``batch_index -> pi_i``.
    skip_below : float
        As in ``BBBLoss``: a ``pi_i`` at or below it contributes no complexity gradient.
    """

    def __init__(self, forward, posterior, trainer, prior, complexity, likelihood, weight_of,
                 skip_below=2.0**-60):
        if not load():
            raise RuntimeError(f"fused kernels unavailable: {unavailable_reason()}")
        if any(c.device_type != "cpu" for c in posterior.contexts):
            raise ValueError("the fused kernels run on CPU contexts only")
        self.forward, self.posterior, self.trainer = forward, posterior, trainer
        self.attrs = prior_attrs(prior, complexity)
        self.weight_of = weight_of
        self.skip_below = skip_below
        if isinstance(likelihood, mx.gluon.loss.Loss):
            self.nll = likelihood
        elif likelihood == "bernoulli":
            self.nll = mx.gluon.loss.SigmoidBCELoss()
        elif likelihood == "softmax":
            self.nll = mx.gluon.loss.SoftmaxCrossEntropyLoss()
        else:
            raise ValueError(f"the fused step takes 'softmax', 'bernoulli' or a Gluon loss "
                             f"as the likelihood, got {likelihood!r}")
        self.likelihood = likelihood
        self._buffers = {}
        self._update = None  # the fused update's plan, decided at the first step

    def _grad_buffers(self, ctx):
        if ctx not in self._buffers:
            self._buffers[ctx] = (
                [mx.nd.zeros(s, ctx=ctx) for s in self.posterior.shapes],
                [mx.nd.zeros(s, ctx=ctx) for s in self.posterior.shapes],
                [mx.nd.zeros(s, ctx=ctx) for s in self.posterior.shapes])
        return self._buffers[ctx]

    def noise(self, ctx, stream):
        """Fresh per-layer noise on ``ctx`` from the posterior's noise counters."""
        source = self.posterior.noise
        counter = source.advance(stream)
        return [mx.nd.bbb_normal(mu, seed=source.seed, stream=source.global_stream(stream),
                                 counter=counter, layer=k)
                for k, mu in enumerate(self.posterior.mu(ctx))]

    def draw(self, ctx, stream, mus, rhos):
        """``(noise, weights)`` per layer in one kernel call each: the noise
        :meth:`noise` draws, and the weights ``bbb_sample`` makes from it."""
        source = self.posterior.noise
        counter = source.advance(stream)
        pairs = [mx.nd.bbb_draw(m, r, seed=source.seed, stream=source.global_stream(stream),
                                counter=counter, layer=k)
                 for k, (m, r) in enumerate(zip(mus, rhos, strict=True))]
        return [p[0] for p in pairs], [p[1] for p in pairs]

    def _update_plan(self):
        """``(adam, [(mu index, rho index)] per layer)`` when the optimiser's update can
        run inside the gradient kernel, else False: one context and no kvstore (nothing
        to all-reduce), a Trainer over exactly the posterior's parameters, float32 Adam or
        SGD (with or without momentum). ``BBB_GLUON_FUSED_UPDATE=0`` turns it off."""
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
            if (_trainer.kvstore(trainer) is None and sorted(map(id, trained)) == sorted(ours)
                    and all(p.grad_req != "null" for p in trained)
                    and not getattr(opt, "multi_precision", False)
                    and kind in (mx.optimizer.Adam, mx.optimizer.SGD)):
                index = _trainer.param_index(trainer)
                plan = (kind is mx.optimizer.Adam,
                        [(index[m.name], index[r.name])
                         for m, r in zip(post.mu_parameters, post.rho_parameters, strict=True)])
        self._update = plan
        return plan

    # Nine parameters: the arrays of one update, each one input of the bbb_update kernel.
    def _fused_update(self, plan, gws, ws, noise, mus, rhos, scale, step_size, ctx):
        """The gradient kernel and the optimiser's step on every layer: the bookkeeping
        of ``Trainer.step`` / ``Optimizer.update`` (update counts, learning rate with its
        multipliers and schedule, Adam's bias correction, state creation) in Python, the
        arithmetic in ``bbb_update``."""
        adam, layers = plan
        trainer = self.trainer
        opt = _trainer.optimizer(trainer)
        states_of, synced = _trainer.states(trainer)
        opt.rescale_grad = _trainer.scale(trainer) / step_size
        # MXNet's optimisers clip only when clip_gradient is truthy (0 and None: no clip).
        clip = float(opt.clip_gradient) if opt.clip_gradient else -1.0
        for (imu, irho), gw, w, e, m, r in zip(layers, gws, ws, noise, mus, rhos,
                                               strict=True):
            lrs, wds, states = [], [], []
            for idx, weight in ((imu, m), (irho, r)):
                _trainer.count_update(opt, idx)
                lr, wd = _trainer.lr_wd(opt, idx)
                if adam:
                    t = _trainer.update_count(opt, idx)
                    lr *= math.sqrt(1.0 - opt.beta2 ** t) / (1.0 - opt.beta1 ** t)
                if adam or opt.momentum:
                    if idx not in states_of:
                        states_of[idx] = opt.create_state_multi_precision(idx, weight)
                        synced[idx] = True
                    state = states_of[idx]  # Adam: (mean, var); SGD: the momentum
                    states.extend(state if adam else [state])
                lrs.append(lr)
                wds.append(wd)
            extra = {"beta1": repr(opt.beta1), "beta2": repr(opt.beta2),
                     "epsilon": repr(opt.epsilon)} if adam else {"momentum": repr(opt.momentum)}
            mx.nd.bbb_update(gw, w, e, m, r, *states, adam=int(adam), lr_mu=repr(lrs[0]),
                             lr_rho=repr(lrs[1]), wd_mu=repr(wds[0]), wd_rho=repr(wds[1]),
                             rescale=repr(opt.rescale_grad), clip=repr(clip),
                             scale=repr(scale), **extra, **self.attrs)

    def __call__(self, X, y, batch_index, samples=1, eps=None, want_complexity=False,
                 step_size=None, batch_size=None):
        """Update on batch ``(X, y)``; returns ``(nll_sum, complexity)`` as NDArrays of
        shape (1,) on the first context (``complexity`` is the unweighted cost :math:`C`
        of the first device's first sample, computed only if ``want_complexity``, else
        None).

        ``eps[k][s]``: per-layer noise (list of arrays) for device ``k``, sample ``s``.
        ``step_size`` goes to ``trainer.step`` (default the batch size). ``batch_size``:
        the examples of the whole batch when ``X`` is one worker's shard of it (default
        ``X.shape[0]``); the complexity cost is shared out by it.
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
            gws, tmp_mu, tmp_rho = self._grad_buffers(ctx)
            params_mu = [p.grad(ctx) for p in self.posterior.mu_parameters]
            params_rho = [p.grad(ctx) for p in self.posterior.rho_parameters]
            for s in range(samples):
                if eps is None:
                    noise, ws = self.draw(ctx, k, mus, rhos)
                else:
                    noise = [e.as_in_context(ctx) for e in eps[k][s]]
                    ws = [mx.nd.bbb_sample(m, r, e)
                          for m, r, e in zip(mus, rhos, noise, strict=True)]
                mx.autograd.mark_variables(ws, gws)
                with mx.autograd.record():
                    out = self.forward(ws, ctx, xb)
                    nll = self.nll(out, yb)
                nll.backward()
                nll_sums.append(nll.sum().as_in_context(ctxs[0]) / samples)
                if want_complexity and k == 0 and s == 0:
                    # Before the update below changes mu and rho in place.
                    cost = None
                    for w, e, m, r in zip(ws, noise, mus, rhos, strict=True):
                        c = mx.nd.bbb_cost(w, e, m, r, **self.attrs)
                        cost = c if cost is None else cost + c
                    complexities.append(cost)
                if plan:
                    self._fused_update(plan, gws, ws, noise, mus, rhos, scale, step_size, ctx)
                    continue
                targets_mu = params_mu if s == 0 else tmp_mu
                targets_rho = params_rho if s == 0 else tmp_rho
                for gw, w, e, m, r, gm, gr in zip(gws, ws, noise, mus, rhos, targets_mu,
                                                  targets_rho, strict=True):
                    mx.nd.bbb_grad(gw, w, e, m, r, scale=repr(scale), out=[gm, gr],
                                   **self.attrs)
                if s > 0:
                    for gm, gr, tm, tr in zip(params_mu, params_rho, tmp_mu, tmp_rho,
                                              strict=True):
                        gm += tm
                        gr += tr
            if samples > 1:
                for g in params_mu + params_rho:
                    g /= samples
        if not plan:
            for p in self.posterior.mu_parameters + self.posterior.rho_parameters:
                for data in p.list_data():
                    _mark_fresh(data)
            self.trainer.step(step_size)
        total = nll_sums[0]
        for v in nll_sums[1:]:
            total = total + v
        return total.reshape((1,)), (complexities[0] if complexities else None)

