"""What stops a run early and how it says so: a Ctrl-C or SIGTERM at the next report
(``TrainingInterrupted``), and a loss or parameter that is no longer finite
(``TrainingDiverged``), agreed by every worker of a distributed run.
"""

import math
import signal
import warnings

from ..core.step import NotFiniteError, first_not_finite
from .checkpoint import trained_arrays

__all__ = ["TrainingInterrupted", "TrainingDiverged", "CostGrowthWarning", "warn_if_cost_grew"]

GROWTH = 100.0  # the per-example cost this many times the first batch's: a warning


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during :func:`fit`: a checkpoint was saved;
    ``fit(..., resume=True)`` continues. ``signum`` is the signal (SIGINT also for
    ``stop_after_batches``), ``exit_status`` the shell's status for it (130, 143)."""

    signum = signal.SIGINT

    @property
    def exit_status(self):
        return 128 + int(self.signum)


class TrainingDiverged(NotFiniteError, RuntimeError):
    """A cost or parameter became NaN or infinite during :func:`fit`.

    Nothing of the epoch it happened in was saved: the run folder holds the last good
    epoch's checkpoint and history. Attributes ``epoch`` and ``batch`` (1-based; ``batch``
    is None when only a parameter was found non-finite at the epoch's end) say where.
    """

    def __init__(self, message, epoch, batch):
        super().__init__(message)
        self.epoch, self.batch = epoch, batch


def reduce_costs(group, acc_nll, acc_cplx):
    """The epoch's summed likelihood cost over all workers' shards, and the complexity
    cost's running sum averaged over the workers (each measures it on its own noise)."""
    nll, cplx = float(acc_nll.asscalar()), float(acc_cplx.asscalar())
    if not group.distributed:
        return nll, cplx
    nll, cplx = group.allreduce([nll, cplx])
    return float(nll), float(cplx) / group.num_workers


def first_nonfinite(running_cost, recent):
    """The batch (0-based) of the first cost that is not finite among ``recent``, the
    ``(batch, nll, complexity)`` of the steps since the last look (at least one), or -1 if
    there is none.

    A NaN or an infinity stays in a running sum, so one host read of ``running_cost``
    answers the usual case, and the steps' own costs are read only on the way to an error;
    tracking the first bad batch on the device took seven NDArray calls every step.
    """
    if math.isfinite(float(running_cost.asscalar())):
        return -1
    for batch, *costs in recent:
        if any(c is not None and not math.isfinite(float(c.asscalar())) for c in costs):
            return batch
    # Every cost finite and their sum not: it overflowed by the last step.
    return recent[-1][0]


def raise_if_diverged(bad, acc_nll, acc_cplx, epoch, run_dir, elsewhere=False):
    """Raise :class:`TrainingDiverged` if batch ``bad`` (0-based; -1: none) had a cost
    that is not finite here, or, with ``elsewhere``, on another worker."""
    if bad < 0 and elsewhere:
        raise TrainingDiverged(
            f"training diverged in epoch {epoch + 1}: the cost of another worker is not "
            f"finite; {_kept(epoch, run_dir)}. A smaller learning rate or a smaller initial "
            "sigma (rho_init) usually avoids it.", epoch + 1, None)
    if bad < 0:
        return
    raise TrainingDiverged(
        f"training diverged in epoch {epoch + 1}, batch {bad + 1}: the cost is not finite "
        f"(likelihood cost so far {float(acc_nll.asscalar())}, complexity "
        f"{float(acc_cplx.asscalar())}); {_kept(epoch, run_dir)}. A smaller learning rate "
        "or a smaller initial sigma (rho_init) usually avoids it.", epoch + 1, bad + 1)


def _kept(epoch, run_dir):
    if run_dir is None:
        return "nothing was saved"
    if epoch == 0:
        return "no epoch had finished, so no checkpoint was written"
    return (f"{run_dir} keeps the checkpoint and history of epoch {epoch}, the last "
            "good one")


def check_parameters(net, posterior, epoch, run_dir, loss=None):
    """Raise :class:`TrainingDiverged` naming the first parameter with a NaN or infinity
    (one pass per array, once an epoch)."""
    name = first_not_finite(trained_arrays(net, posterior, loss).items())
    if name is not None:
        raise TrainingDiverged(
            f"training diverged in epoch {epoch + 1}: parameter {name} holds NaN or "
            f"infinite values; {_kept(epoch, run_dir)}.", epoch + 1, None)


class CostGrowthWarning(UserWarning):
    """The likelihood cost of a fresh run's first steps grew by orders of magnitude while
    staying finite: the learning rate is likely too large (training goes on)."""


def warn_if_cost_grew(first, last, steps, lr):
    """Warn (:class:`CostGrowthWarning`) where the last of a fresh run's first ``steps``
    batches costs :data:`GROWTH` times the first per example. ``first`` and ``last``:
    ``(nll, examples)``, the batch's summed cost an NDArray; two host reads, once a run."""
    a = float(first[0].asscalar()) / first[1]
    b = float(last[0].asscalar()) / last[1]
    # a floor of 1 nat: a cost near 0 (a regression fit well at the start) may grow a lot
    if math.isfinite(b) and a > 0 and b > GROWTH * max(a, 1.0):
        warnings.warn(f"the likelihood cost grew from {a:.3g} to {b:.3g} per example in the "
                      f"first {steps} steps: the learning rate {lr:g} is likely too large",
                      CostGrowthWarning, stacklevel=2)
