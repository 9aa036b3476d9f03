"""Training on several processes, on one machine or several, with MXNet's parameter server.

:class:`WorkerGroup` (``group``) is the worker's side, used inside ``fit``;
:func:`launch` (``launcher``) is the other side, which starts and watches the processes.
Each loads on first use of one of its names: training, which imports this package, never
imports the code that starts processes, and the launcher never imports MXNet, which the
group needs (docs/architecture.md).
"""

__all__ = ["DIST_TYPES", "WorkerGroup", "LaunchError", "LaunchInterrupted", "launch", "free_port",
           "launch_commands"]

_LAUNCHER = ("LaunchError", "LaunchInterrupted", "launch", "free_port", "launch_commands")


def __getattr__(name):
    if name in _LAUNCHER:
        from . import launcher
        return getattr(launcher, name)
    if name in ("DIST_TYPES", "WorkerGroup"):
        from . import group
        return getattr(group, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *__all__})
