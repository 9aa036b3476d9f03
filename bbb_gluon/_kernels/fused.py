"""Fused CPU kernels for the Bayes-by-Backprop step, compiled on first use.

MXNet 1.9.1 runs most elementwise operators on one thread, one pass over memory each; a
Bayes-by-Backprop step built from them needs some twenty passes over every weight, and
``nd.random.normal`` alone costs more than four plain training steps (see
``docs/benchmarks.md``). ``_kernels/fused.cc`` does the same arithmetic in OpenMP-parallel,
vectorised loops behind sixteen operators, and MXNet loads it as an operator library
(as ``mx.library.load`` does: :func:`bbb_gluon._kernels.private.load_operator_library`):

- ``bbb_normal``: N(0, 1) noise by Box-Muller from a counter-based hash of
  ``(seed, stream, counter, layer)``, so it is reproducible and resumable (or, with
  ``signs=1``, Flipout's random signs, 64 from each hash);
- ``bbb_sample``: :math:`w = \\mu + \\mathrm{softplus}(\\rho)\\,\\epsilon`;
- ``bbb_draw``: both in one call (the same numbers), as the training step uses them;
- ``bbb_grad``: the gradients with respect to :math:`\\mu` and :math:`\\rho` of the
  likelihood (given its gradient with respect to :math:`w`) plus the weighted complexity
  cost, written out by hand (the same estimator as :class:`bbb_gluon.BBBLoss`; tests check
  they agree);
- ``bbb_cost``: the complexity cost's value, for a step whose update is not fused and
  for reports (float32 terms summed in float64, as ``bbb_update`` sums them);
- ``bbb_lrt``: the first layer's pre-activations drawn from their mean and standard
  deviation (the local reparameterisation), relu included, for prediction;
- ``bbb_lrt_combine``: the local reparameterisation's last step in training,
  act(mean + sqrt(var + floor) * zeta), with its backward (MXNet's operators take five
  passes and five more backward);
- ``bbb_flip``, ``bbb_flipout_combine``: Flipout's two elementwise steps in training,
  x * s and act(mean + z * r), with the signs compact (one per example and channel, as
  they are drawn) and their backward (MXNet's way broadcasts the signs first, and its
  broadcast operators' backward reduces on one thread);
- ``bbb_update``: ``bbb_grad`` and the optimiser's update (Adam, or SGD with or without
  momentum) in the same pass, on the Trainer's own state, so one call per layer replaces the
  gradient kernel and ``Trainer.step``; with ``cost=1`` it also returns the complexity
  cost's value, summed in that same pass (README's call asks for it at every step);
- ``bbb_draw_layers``, ``bbb_update_layers``: ``bbb_draw`` and ``bbb_update`` on every
  layer in one call (the same numbers), as the fused step runs them: on a small network
  the step's time goes to launching operators, one per layer before; with ``check=1`` the
  update also computes its guard, as ``bbb_finite`` does (one launch fewer a step); their
  attributes may come packed in one, ``args`` (:func:`packed`);
- ``bbb_finite``: 0 (or, with ``value=1``, its first input's value; with ``value=2``, its
  sum) when every element of its inputs is finite, else NaN: the step's cost and guard in
  one, so that a batch with a NaN never reaches :math:`\\mu` and :math:`\\rho`; it may
  also add the result to a running sum and zero other gradients' non-finite entries, in
  place (on a small network each operator saved is a good part of a step);
- ``bbb_keep_finite``: those gradients' non-finite entries (all of them where a guard is
  not finite) set to 0, in place, for the reference engine;
- ``ivon_update``: IVON's update of the mean, the Hessian estimate, the momentum and
  :math:`\\rho` on every layer in one pass (:class:`bbb_gluon.IVONStep`);
- ``bbb_threads``: the OpenMP thread count of the engine thread (:mod:`bbb_gluon.threads`).

The library is built with the machine's C++ compiler (``$CXX`` or ``g++``) against the
headers that ship in the MXNet wheel, cached in ``$BBB_GLUON_CACHE`` (default
``~/.cache/bbb_gluon``) under a hash of the sources, compiler, MXNet version and CPU
flags, and rebuilt only when one of them changes. Without a compiler, or with
``BBB_GLUON_FUSED=0``, :func:`available` is False and training uses plain MXNet operators.
"""

import os
import threading
import warnings
from pathlib import Path

from . import private
from .build import build, compiler

__all__ = ["available", "unavailable_reason", "load", "library_path", "packed"]

_SOURCE = Path(__file__).with_name("fused.cc")
_lock = threading.Lock()
_state = {"loaded": False, "reason": None, "path": None}

# bbb_update repeats MXNet's optimiser arithmetic in MXNet's order, so that it gives the
# Trainer's results to the bit: no reassociation, no reciprocals, no fused multiply-adds.
_EXACT_FLAGS = ("-fno-associative-math", "-fno-reciprocal-math", "-ffp-contract=off")


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
                private.load_operator_library(path)
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


def library_path():
    """The loaded library's file (None until :func:`load` succeeded)."""
    return _state["path"]


def packed(**attrs):
    """``attrs`` as the one attribute ``args`` of ``bbb_draw_layers`` and
    ``bbb_update_layers``: ``"key=value;key=value"``. MXNet's extension interface copies
    each attribute into every callback of every call: the update's twenty cost a quarter
    of its call on a small network (``benchmarks/bench_launch.py``). Values are written
    with ``str`` (give floats as ``repr`` strings); one holding ``;`` is refused, as it
    would end its entry early."""
    args = ";".join(f"{k}={v}" for k, v in attrs.items())
    if args.count(";") != max(len(attrs) - 1, 0):  # one count: the step calls this twice
        bad = next(k for k, v in attrs.items() if ";" in f"{k}{v}")
        raise ValueError(f"packed: attribute {bad!r} holds ';': it cannot be packed into args")
    return args
