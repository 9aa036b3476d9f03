"""Training on several processes, on one machine or several, with MXNet's parameter server.

:class:`WorkerGroup` (``group``) is the worker's side, used inside ``fit``;
:func:`launch` (``launcher``) is the other side, which starts and watches the processes.
The launcher loads on first use of one of its names, so that training, which imports this
package, never imports the code that starts processes (docs/architecture.md).
"""

from .group import DIST_TYPES, WorkerGroup

__all__ = ["DIST_TYPES", "WorkerGroup", "LaunchError", "LaunchInterrupted", "launch", "free_port",
           "launch_commands"]

_LAUNCHER = ("LaunchError", "LaunchInterrupted", "launch", "free_port", "launch_commands")


def __getattr__(name):
    if name in _LAUNCHER:
        from . import launcher
        return getattr(launcher, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
