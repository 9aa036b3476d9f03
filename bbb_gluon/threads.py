"""How many cores MXNet's CPU operators use, in training and in prediction.

By default the package changes nothing at import: MXNet's own count applies
(``OMP_NUM_THREADS``, else half the logical cores) as a ceiling. :func:`claim` lets
training and prediction use every core of an otherwise idle machine; it must run before
the process's first MXNet operator (creating an array counts), which is why it is a call
of its own (docs/speed.md). ``bbb-gluon`` does it.
"""

from ._kernels.threads import (
    claim,
    configure,
    cores,
    current,
    predict_threads,
    set_threads,
    train_threads,
    using_threads,
)

__all__ = ["claim", "configure", "cores", "current", "predict_threads", "set_threads",
           "train_threads", "using_threads"]
