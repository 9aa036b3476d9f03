"""``launch``: start the scheduler, the servers and the workers of a ``dist_sync`` run (on
this machine, or print or run the commands for several), watch them, and stop every
process it started when one fails, a time limit passes or the user presses Ctrl-C.

The processes find each other through ``DMLC_*`` environment variables; there is no
authentication, so run them on a trusted network only. Only the command line imports
this module (docs/architecture.md).
"""

from __future__ import annotations

import collections
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time

from .._kernels import cores
from ..signals import signals_blocked, stop_requests

__all__ = ["LaunchError", "LaunchInterrupted", "launch", "free_port", "launch_commands"]


# Exit statuses of a worker that stopped on a forwarded Ctrl-C or SIGTERM: saved, or ended
# by the signal itself (a program that does not catch it).
_STOPPED = (0, 130, 143, -signal.SIGINT, -signal.SIGTERM)


# --------------------------------------------------------------------------- the launcher


class LaunchError(RuntimeError):
    """A process of a launched run failed, or the run passed its time limit; every
    process the launcher started has been stopped."""


def free_port(host="127.0.0.1"):
    """A TCP port nobody listens on right now (the scheduler's)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _roles(num_workers, num_servers, hosts):
    """``(role, index, host)`` for the scheduler, the servers and the workers; servers
    and workers go round-robin over ``hosts``, the scheduler to the first."""
    roles = [("scheduler", 0, hosts[0])]
    roles += [("server", i, hosts[i % len(hosts)]) for i in range(num_servers)]
    roles += [("worker", i, hosts[i % len(hosts)]) for i in range(num_workers)]
    return roles


def _address(host):
    """The IP address of ``host`` (``user@host`` for ssh: the host part): MXNet's processes
    bind to addresses, not names. Resolved here, on the launching machine: give addresses
    in a host file where names resolve differently on the machines themselves."""
    host = host.rsplit("@", 1)[-1]
    try:
        return socket.gethostbyname(host)
    except (OSError, UnicodeError):  # UnicodeError: a label longer than 63 characters
        return host


def _environment(role, host, scheduler, port, num_workers, num_servers, threads):
    return {"DMLC_ROLE": role, "DMLC_PS_ROOT_URI": _address(scheduler),
            "DMLC_PS_ROOT_PORT": str(port), "DMLC_NUM_SERVER": str(num_servers),
            "DMLC_NUM_WORKER": str(num_workers), "DMLC_NODE_HOST": _address(host),
            "OMP_NUM_THREADS": str(threads if role == "worker" else 1)}


def _check_counts(num_workers, num_servers, threads):
    for name, value in (("workers", num_workers), ("servers", num_servers)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"the number of {name} must be a positive integer, got {value!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise ValueError(f"threads must be a positive integer, got {threads!r}")


def _program(role, argv, server_optimizer):
    """What a process runs: the workers' command; MXNet's own import for a server that may
    be sent an optimizer; otherwise ``node.py``, which skips the import's 2 s (its docstring)."""
    if role == "worker":
        return argv
    if role == "server" and server_optimizer:
        return [sys.executable, "-c", "import mxnet"]
    return [sys.executable, "-m", "bbb_gluon.distributed.node"]


def launch_commands(command, num_workers, num_servers, hosts, port=9091, threads=1,
                    cwd=None, server_optimizer=True):
    """The shell command each process of a several-machine run needs, one per line as
    ``(host, role, command)``: run each on its host (the scheduler's first), from a folder
    that holds the same files on every host (``cwd``, default this one).
    ``server_optimizer`` as in :func:`launch`."""
    _check_counts(num_workers, num_servers, threads)
    if not command:
        raise ValueError("launch needs a command for the workers")
    argv = list(command)
    cwd = cwd or os.getcwd()
    lines = []
    for role, _, host in _roles(num_workers, num_servers, hosts):
        env = _environment(role, host, hosts[0], port, num_workers, num_servers, threads)
        prog = _program(role, argv, server_optimizer)
        text = "cd " + shlex.quote(cwd) + " && " + " ".join(
            f"{k}={shlex.quote(v)}" for k, v in env.items()) + " " + shlex.join(prog)
        lines.append((host, role, text))
    return lines


class _Process:
    def __init__(self, role, index, popen, tail):
        self.role, self.index, self.popen = role, index, popen
        self.tail = collections.deque(maxlen=tail)
        self.reader = None

    @property
    def name(self):
        return self.role if self.role == "scheduler" else f"{self.role} {self.index}"


class LaunchInterrupted(KeyboardInterrupt):
    """``launch`` stopped on Ctrl-C (or SIGTERM) once every process had stopped;
    ``signum`` is the signal, ``exit_status`` the shell's status for it (130, 143)."""

    def __init__(self, message, signum):
        super().__init__(message)
        self.signum = signum
        self.exit_status = 128 + int(signum)


def _pump(proc, echo, lock):
    for raw in iter(proc.popen.stdout.readline, b""):
        line = raw.decode("utf-8", "replace").rstrip("\n")
        proc.tail.append(line)
        if echo:
            with lock:
                print(f"[{proc.name}] {line}", flush=True)
    proc.popen.stdout.close()


def _signal_group(proc, sig):
    try:
        os.killpg(proc.popen.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stop(processes, grace=5.0):
    """SIGTERM every process group, SIGKILL what is left after ``grace``; a group whose
    leader has exited may still hold children (its session is its own). Every wait is
    bounded: a process that outlives SIGKILL (stuck in the kernel) is left to init."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in processes if p.popen.poll() is None]
        for p in processes:
            _signal_group(p, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(p.popen.poll() is None for p in alive):
            time.sleep(0.05)
    for p in processes:
        try:
            p.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        if p.reader is not None:
            p.reader.join(timeout=2)


# A user's entry point (and the command's): every keyword is documented with its default.
def launch(command, num_workers=2, num_servers=1, timeout=None, threads=None,
           host="127.0.0.1", port=None, ssh_hosts=None, echo=True, tail=20, env=None,
           interrupt_grace=120.0, server_optimizer=True):
    """Run ``command`` as ``num_workers`` workers of one ``dist_sync`` run, with its
    scheduler and ``num_servers`` servers, and wait for it.

    Parameters
    ----------
    command : list of str
        The workers' program and its arguments: ``[sys.executable, "-m", "bbb_gluon",
        "train", "--kvstore", "dist_sync", ...]``, or a script of yours that calls
        ``fit(..., options=RunOptions(kvstore="dist_sync"))``.
    num_workers, num_servers : int
    timeout : float, optional
        Seconds the whole run may take; then every process is stopped and
        :class:`LaunchError` raised.
    threads : int, optional
        ``OMP_NUM_THREADS`` of each worker (servers and the scheduler get 1); default the
        machine's cores divided among the workers on it.
    host : str
        The interface to bind on one machine (default loopback, reachable only here).
    port : int, optional
        The scheduler's port (default a free one).
    ssh_hosts : list of str, optional
        Run on these machines through ``ssh`` instead (the scheduler on the first); each
        must hold the same files at the same path and reach the others.
    echo : bool
        Print the workers' output, each line prefixed with ``[worker i]`` (i: the order
        of starting, not the rank).
    tail : int
        Lines kept of each process's output for the error message.
    env : dict, optional
        More environment variables for every process.
    interrupt_grace : float
        After Ctrl-C, seconds the workers get to save a checkpoint and stop.
    server_optimizer : bool
        Whether the servers must be able to run an optimizer the workers send them (a
        Gluon ``Trainer`` with ``update_on_kvstore=True``, Gluon's default for
        ``dist_sync``): this needs MXNet's Python package in each server. ``False`` starts
        them without it, about 2 CPU-seconds sooner each (``fit`` and ``bbb-gluon train``
        update on the workers, and the command line's ``train`` passes ``False``); a server
        sent an optimizer then exits with a message. The scheduler never needs it.

    Returns
    -------
    int
        0 when every worker exited with status 0.

    Raises
    ------
    LaunchError
        A process exited with a non-zero status, or the time limit passed; the message
        names the process and holds its last lines.
    LaunchInterrupted
        After Ctrl-C (or SIGTERM), once every process has stopped. The signal only sets a
        flag that the watching loop reads (:mod:`bbb_gluon.signals`); the loop forwards
        SIGINT to the workers, which save one checkpoint together and stop. More signals
        while they do so change nothing; ``interrupt_grace`` bounds the wait.
    """
    _check_counts(num_workers, num_servers, threads)
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
    if not command:
        raise ValueError("launch needs a command for the workers")
    argv = list(command)
    hosts = list(ssh_hosts) if ssh_hosts else [host]
    port = port or (free_port(host) if not ssh_hosts else 9091)
    if threads is None:
        per_host = -(-num_workers // len(hosts))
        threads = max(1, cores() // per_host)
    lock = threading.Lock()
    processes = []
    base_env = dict(os.environ)
    base_env.update(env or {})
    base_env["PYTHONUNBUFFERED"] = "1"
    with stop_requests() as stop:
        try:
            # Every process is started even after a Ctrl-C here (it takes milliseconds):
            # the workers of a half-started run would wait for the others for ever.
            for role, index, where in _roles(num_workers, num_servers, hosts):
                role_env = _environment(role, where, hosts[0], port, num_workers,
                                        num_servers, threads)
                prog = _program(role, argv, server_optimizer)
                if ssh_hosts:
                    # The remote shell gets the run's variables (and env=), not this one's.
                    remote_env = {**(env or {}), "PYTHONUNBUFFERED": "1", **role_env}
                    remote = "cd " + shlex.quote(os.getcwd()) + " && " + " ".join(
                        f"{k}={shlex.quote(v)}" for k, v in remote_env.items()) + " " + \
                        shlex.join(prog)
                    full, proc_env = ["ssh", "-tt", where, remote], base_env
                else:
                    full, proc_env = prog, {**base_env, **role_env}
                # Started with SIGINT blocked: a Ctrl-C forwarded before the worker's
                # training loop listens for it waits until then (bbb_gluon.signals).
                with signals_blocked():
                    popen = subprocess.Popen(full, env=proc_env, stdout=subprocess.PIPE,
                                             stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL,
                                             start_new_session=True)
                proc = _Process(role, index, popen, tail)
                proc.reader = threading.Thread(target=_pump,
                                               args=(proc, echo and role == "worker", lock),
                                               daemon=True)
                proc.reader.start()
                processes.append(proc)
            return _watch(processes, timeout, interrupt_grace, stop)
        except BaseException:
            _stop(processes)
            raise


def _failure(proc, why):
    lines = "\n".join(f"    {line}" for line in proc.tail) or "    (no output)"
    return LaunchError(f"{proc.name} (pid {proc.popen.pid}) {why}; every process of the run "
                       f"was stopped. Its last lines:\n{lines}")


def _first_death(dead):
    """The process to blame among those found dead in one look: one killed by a signal
    before one that exited on its own (a peer's death makes the others fail), then the
    scheduler, the servers, the workers."""
    rank = {"scheduler": 0, "server": 1, "worker": 2}
    return min(dead, key=lambda p: (p.popen.returncode >= 0, rank[p.role], p.index))


def _watch(processes, timeout, interrupt_grace, stop):
    """Poll the processes until the workers are done, one fails, the time runs out or a
    stop is requested. Only this loop acts on a signal, between two looks."""
    start = time.monotonic()
    workers = [p for p in processes if p.role == "worker"]
    others = [p for p in processes if p.role != "worker"]
    interrupted_at = None
    forwarded = 0  # signals forwarded to the workers
    while True:
        if stop.count >= 2 and forwarded == 1:
            # Ctrl-C again: SIGTERM, which a worker that never listened (a program of the
            # user's own, where the SIGINT stays held) cannot hold; fit takes it as the
            # same request.
            forwarded = 2
            for p in workers:
                if p.popen.poll() is None:
                    _signal_group(p, signal.SIGTERM)
        if stop.requested and interrupted_at is None:
            # Ctrl-C: the workers save a checkpoint at their next report and stop together.
            interrupted_at = time.monotonic()
            forwarded = 1
            for p in workers:
                if p.popen.poll() is None:
                    _signal_group(p, signal.SIGINT)
        if interrupted_at is None:
            for p in workers:
                if p.popen.poll() == 130:
                    # A worker stopped on a Ctrl-C of its own: the others stop at the
                    # same report; give rank 0 the time to write its checkpoint.
                    stop.request(signal.SIGINT)
                    interrupted_at = time.monotonic()
        done = all(p.popen.poll() is not None for p in workers)
        if interrupted_at is None:
            dead = [p for p in (workers if done else processes)
                    if p.popen.poll() not in (None, 0)]
            if dead:
                culprit = _first_death(dead)
                _stop(processes)
                raise _failure(culprit, f"exited with status {culprit.popen.returncode}")
        if done:
            if interrupted_at is not None:
                # A worker that failed while stopping (its checkpoint could not be
                # written) is a failure, not a clean stop.
                failed = [p for p in workers if p.popen.returncode not in _STOPPED]
                _stop(processes)
                if failed:
                    raise _failure(failed[0], "exited with status "
                                   f"{failed[0].popen.returncode} while stopping on Ctrl-C")
                raise LaunchInterrupted("launch interrupted", stop.signum)
            # The scheduler and the servers leave once the last worker has; give them
            # a moment, then make sure.
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and any(p.popen.poll() is None
                                                      for p in others):
                time.sleep(0.05)
            _stop(processes)
            return 0
        now = time.monotonic()
        if interrupted_at is not None and now - interrupted_at > interrupt_grace:
            _stop(processes)
            raise LaunchInterrupted("launch interrupted; the workers did not stop within "
                                    f"{interrupt_grace:g} s", stop.signum)
        if timeout is not None and now - start > timeout and interrupted_at is None:
            slow = next((p for p in workers if p.popen.poll() is None), workers[0])
            _stop(processes)
            raise _failure(slow, f"was still running after the time limit of {timeout:g} s")
        time.sleep(0.05)
