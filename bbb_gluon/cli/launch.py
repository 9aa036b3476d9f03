"""``bbb-gluon launch``: start a ``dist_sync`` run's processes on this machine (or print the
commands for several).
"""

import argparse
import sys

from .common import EXIT_FAILURE, UsageError, stop_listening


def _launch_argv(command):
    """A ``bbb-gluon`` subcommand runs as ``python -m bbb_gluon ...`` (``train`` gets
    ``--kvstore=dist_sync`` unless it names one); anything else as given."""
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("give the workers' command after --, e.g. "
                         "bbb-gluon launch -n 2 -- train --epochs 1")
    if command[0] == "train":
        kv = [a for a in command if a == "--kvstore" or a.startswith("--kvstore=")]
        if not kv:
            command = [*command, "--kvstore=dist_sync"]
        else:
            i = command.index(kv[0])
            value = kv[0].split("=", 1)[1] if "=" in kv[0] else (
                command[i + 1] if i + 1 < len(command) else "")
            if not value.startswith("dist_sync"):
                raise UsageError(f"launched workers need --kvstore dist_sync or "
                                 f"dist_sync_device, not {value!r}")
        return [sys.executable, "-m", "bbb_gluon", *command]
    if command[0] in ("evaluate", "prune", "compare", "weights", "bandit", "demo", "launch"):
        raise UsageError(f"{command[0]} does not train on several workers; launch runs "
                         "train or a program of yours")
    return list(command)


def cmd_launch(args):
    from ..distributed import LaunchError, LaunchInterrupted, launch, launch_commands

    argv = _launch_argv(args.program)
    # train's workers update their own parameters (fit's Trainer: update_on_kvstore=False),
    # so its servers need no optimizer; a program of the user's own may send one.
    server_optimizer = argv[1:4] != ["-m", "bbb_gluon", "train"]
    for name in ("workers", "servers"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads must be >= 1, got {args.threads}")
    if args.timeout is not None and not args.timeout > 0:
        raise UsageError(f"--timeout must be > 0 seconds, got {args.timeout}")
    hosts = None
    if args.host_file:
        try:
            with open(args.host_file) as f:
                hosts = [line.split("#")[0].strip() for line in f]
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"--host-file {args.host_file}: cannot read it ({e})") from None
        hosts = [h for h in hosts if h]
        if not hosts:
            raise UsageError(f"{args.host_file} names no host (one per line)")
    if args.print_commands:
        for host, role, text in launch_commands(argv, args.workers, args.servers,
                                                hosts or [args.host], port=args.port or 9091,
                                                threads=args.threads or 1,
                                                server_optimizer=server_optimizer):
            print(f"# {role} on {host}\n{text}")
        return 0
    try:
        return launch(argv, args.workers, args.servers, timeout=args.timeout,
                      threads=args.threads or _resumed_threads(args.program),
                      host=args.host, port=args.port, ssh_hosts=hosts,
                      server_optimizer=server_optimizer)
    except LaunchError as e:
        print(f"bbb-gluon launch: error: {e}", file=sys.stderr)
        return EXIT_FAILURE
    except LaunchInterrupted as e:
        stop_listening()
        print("bbb-gluon launch: interrupted; every process of the run has stopped",
              file=sys.stderr)
        return e.exit_status


def _resumed_threads(command):
    """The threads per worker a resumed ``train`` run recorded (its workers' default, so
    that the continuation is exact), else None."""
    command = command[1:] if command and command[0] == "--" else command
    if not command or command[0] != "train" or not any(
            a == "--resume" or a.startswith("--resume=") for a in command):
        return None
    out = next((a.split("=", 1)[1] for a in command if a.startswith("--out=")), None)
    if out is None and "--out" in command[:-1]:
        out = command[command.index("--out") + 1]
    if out is None:
        return None
    from .._kernels.machine import recorded_threads

    return recorded_threads(out)


# Its line in ``bbb-gluon --help``.
HELP = "train on several processes or machines (MXNet's parameter server, dist_sync)"


def add_parser(sub):
    p = sub.add_parser("launch", help=HELP,
                       description="Start MXNet's scheduler, SERVERS servers and WORKERS "
                                   "workers running the command after --, watch them, and "
                                   "stop every one of them when one fails, on Ctrl-C (after "
                                   "the workers have saved a checkpoint) or after --timeout. "
                                   "A train command gets --kvstore=dist_sync. The processes "
                                   "talk without authentication: use a trusted network.",
                       epilog="example: bbb-gluon launch -n 2 -s 1 -- train --epochs 1 "
                              "--out runs/two-workers")
    p.add_argument("-n", "--workers", type=int, default=2, help="workers (default 2)")
    p.add_argument("-s", "--servers", type=int, default=1, help="servers (default 1)")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds the whole run may take before every process is stopped")
    p.add_argument("--threads", type=int, default=None,
                   help="OMP_NUM_THREADS of each worker (default: a resumed train run's "
                        "recorded count, else the cores divided among the workers of a "
                        "machine)")
    p.add_argument("--host", default="127.0.0.1",
                   help="interface to bind on this machine (default 127.0.0.1: loopback)")
    p.add_argument("--port", type=int, default=None,
                   help="the scheduler's port (default a free one; 9091 with --host-file)")
    p.add_argument("--host-file", default=None,
                   help="machines to run on, one address per line (the scheduler on the "
                        "first), reached by ssh; each needs this folder and environment")
    p.add_argument("--print-commands", action="store_true",
                   help="print the command each process needs on its machine instead of "
                        "running anything")
    # dest "program": "command" is the subcommand's name (launch), which errors print
    p.add_argument("program", metavar="command", nargs=argparse.REMAINDER,
                   help="-- then the workers' command: train ... or a program of yours")
    p.set_defaults(func=cmd_launch)
    return p
