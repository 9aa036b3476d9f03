"""IVON in ``fit``: :class:`~bbb_gluon.IVONStep` with the call and return of
:class:`~bbb_gluon.BBBStep`, so that ``fit`` runs every method through one loop."""

from ..core.step import StepCosts

__all__ = ["IVONRunStep"]


class IVONRunStep:
    """``step(X, y, batch_index=0, want_complexity=True, batch_size=None)`` runs
    ``ivon(X, y)`` and returns a :class:`~bbb_gluon.StepCosts` whose ``nll`` is the batch's
    summed likelihood cost and whose complexity is None, weighted 0 (IVON's update has the
    prior in it and computes no complexity cost). ``batch_index``, ``want_complexity`` and
    ``batch_size`` are taken for ``BBBStep``'s call (one device: the batch is whole)."""

    def __init__(self, ivon):
        self.ivon = ivon
        self.engine = ivon.engine

    def __call__(self, X, y, batch_index=0, want_complexity=True, batch_size=None):
        return StepCosts(self.ivon(X, y), None, 0.0)
