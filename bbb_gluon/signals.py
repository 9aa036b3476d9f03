"""Ctrl-C and SIGTERM as a flag that a loop reads, never as an exception that lands anywhere.

Python turns SIGINT into ``KeyboardInterrupt`` wherever the main thread happens to be:
inside ``Popen.poll()`` between taking and releasing the lock that guards ``waitpid`` (a
later ``wait()`` then blocks for ever), inside a thread pool's wait, half-way through a
checkpoint. Code that must stop cleanly (the training loop, the bandit runner, the
launcher) runs under :func:`stop_requests` instead: the handler only records the signal,
and the loop looks at :attr:`StopRequest.requested` where stopping is safe.

A launcher starts its workers with SIGINT blocked (:func:`signals_blocked`): a Ctrl-C that
reaches a worker while it is still starting up waits, pending, until the worker's own
:func:`stop_requests` unblocks it, so it stops with a checkpoint instead of dying in an
import.
"""

import contextlib
import signal
import threading

__all__ = ["StopRequest", "stop_requests", "signals_blocked", "STOP_SIGNALS"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """What :func:`stop_requests` saw: the first signal and how many arrived."""

    def __init__(self):
        self.signum = None
        self.count = 0

    @property
    def requested(self):
        """True once SIGINT or SIGTERM has arrived."""
        return self.signum is not None

    @property
    def exit_status(self):
        """The shell's status for the first signal (130 for Ctrl-C, 143 for SIGTERM)."""
        return 128 + int(self.signum) if self.signum is not None else 0

    def request(self, signum=signal.SIGINT):
        """Ask to stop as a signal would (for callers that stop for reasons of their own)."""
        self.count += 1
        if self.signum is None:
            self.signum = signum


@contextlib.contextmanager
def stop_requests(signals=STOP_SIGNALS):
    """Within the block, ``signals`` set a flag on the :class:`StopRequest` it yields.

    Only the main thread can install handlers; elsewhere the request never fires. Within
    the block the flag handler replaces whatever was there, an inherited ``SIG_IGN`` too (a
    job started with ``&`` from a script ignores SIGINT; its training loop still stops on
    it, as ``fit`` always has). On exit the previous handlers and signal mask come back
    (the mask first, so that a signal in between is held rather than handed to the old
    handler half-way).
    """
    state = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return
    previous = {s: signal.signal(s, lambda signum, frame: state.request(signum))
                for s in signals}
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, signals)
    try:
        yield state
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)


@contextlib.contextmanager
def signals_blocked(signals=(signal.SIGINT,)):
    """Block ``signals`` in this thread within the block: a child started here inherits
    the mask, so what it is sent before it installs its handlers stays pending."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
