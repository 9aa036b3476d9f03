"""The one door to private attributes of MXNet objects other than the Trainer's (those are
in :mod:`bbb_gluon._kernels.trainer`): each read or write is a function here, written for
MXNet 1.9.1, so that a version that renamed one fails here and nowhere else.
"""

__all__ = ["sparse_label"]


def sparse_label(loss):
    """Whether a ``gluon.loss.SoftmaxCrossEntropyLoss`` takes class indices (its
    ``sparse_label`` constructor argument, which Gluon keeps as ``_sparse_label``)."""
    return loss._sparse_label
