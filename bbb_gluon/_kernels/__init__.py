"""The compiled C++ kernels and what they need from MXNet: building and loading them
(``fused``), the thread counts they run with (``threads``), and their sources
(``fused.cc`` for training and prediction, ``bandit.cc`` for the Mushroom bandit's stacked
engine).
"""

import os


# Here, not in ``threads`` (which imports MXNet), so that the launcher reads it too.
def cores():
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
