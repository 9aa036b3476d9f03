"""``main``: parse, run the command, and turn the user's mistakes into one line and exit 2.
"""

import sys

from .common import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    PROGRAM,
    UsageError,
    stop_listening,
)
from .parser import build_parser

__all__ = ["main"]

# Commands whose process runs no MXNet operator (launch only starts and watches others): it
# is neither checked for nor given its threads, and they start without importing it.
WITHOUT_MXNET = ("launch",)


def _method_defaults(args):
    """The options ``bbb-gluon train --model M`` starts from where M's defaults differ
    from the options' (``Method.defaults``; a prior as its kind and hyperparameters)."""
    if getattr(args, "command", None) != "train" or getattr(args, "resume", False):
        return {}
    from ..methods import METHODS

    method = METHODS.get(args.model)
    out = {}
    for name, value in (method.defaults if method is not None else {}).items():
        if name == "prior":
            out["prior"] = value.kind
            out.update({o.flag.lstrip("-").replace("-", "_"): o.from_param(
                getattr(value, o.param)) for o in value.cli_options})
        else:
            out[name] = value
    return out


def main(argv=None):
    # The console script and ``python -m bbb_gluon`` call main() with no arguments.
    PROGRAM["running"] = argv is None
    words = sys.argv[1:] if argv is None else list(argv)
    # The first word that is not an option names the command: only its options are built.
    command = next((w for w in words if not w.startswith("-")), "")
    if command and command not in WITHOUT_MXNET:  # its options show the library's defaults
        from .._mxnet_build import check
        check([])  # one that cannot be imported is named, with what to install
    parser = build_parser(command)
    args = _parse(parser, argv)
    defaults = _method_defaults(args)
    if getattr(args, "recipe", None):
        from ..training.config import RECIPES

        defaults.update(RECIPES[args.recipe])
    if defaults:
        # The method's and the recipe's values become the defaults, so options given
        # beside them still win.
        parser.train_parser.set_defaults(**defaults)
        args = _parse(parser, argv)
    if PROGRAM["running"] and args.command not in WITHOUT_MXNET:
        # Before any MXNet operator, or the thread count can no longer go up (quietly:
        # main() called in a process that already ran operators keeps MXNet's count). A
        # resumed run claims the threads it recorded, not the idle cores: the same count
        # gives the same numbers.
        from ..threads import claim
        claim(warn=False, threads=_resumed_threads(args))
    # Errors in what the user gave (arguments, files, run folders) are one line and exit 2;
    # a failing disk is one line and exit 1. Anything else is a bug: it keeps its traceback.
    try:
        return args.func(args)
    except Exception as e:  # noqa: BLE001 - sorted by _one_line, re-raised if a bug
        status = _one_line(args, e)
        if status is None:
            raise
        return status
    except KeyboardInterrupt as e:
        stop_listening()
        print("interrupted", file=sys.stderr)
        return getattr(e, "exit_status", EXIT_INTERRUPTED)


def _resumed_threads(args):
    """The threads a ``train --resume`` run recorded (None for anything else)."""
    if args.command != "train" or not args.resume or not args.out:
        return None
    from .._kernels.machine import recorded_threads

    return recorded_threads(args.out)


# The library's errors a command reports in one line, by the module that defines each. They
# are looked up in sys.modules, not imported: an instance exists only once its module is
# loaded, and launch loads none of the library (tests/cli checks each home).
ERROR_HOMES = {"DatasetNotFoundError": "data.folder", "DataFileError": "data.folder",
               "FileWriteError": "_files", "CheckpointError": "training.checkpoint",
               "PosteriorMismatchError": "core.posterior", "RunFolderError": "runs",
               "BanditCheckpointError": "bandit.engine"}


def _error_class(name):
    return getattr(sys.modules.get(f"bbb_gluon.{ERROR_HOMES[name]}"), name, type(None))


def _one_line(args, e):
    """Print ``e`` as the command's one-line error and return the exit status, or None if
    it is a bug."""
    if isinstance(e, UsageError):
        return _report(args, " ".join(str(e).split()), EXIT_USAGE)
    if isinstance(e, _error_class("DatasetNotFoundError")):  # says where to put the files
        return _report(args, str(e), EXIT_USAGE)
    if isinstance(e, _error_class("FileWriteError")):  # a failing disk
        return _report(args, str(e), EXIT_FAILURE)
    if not isinstance(e, (FileNotFoundError, *map(_error_class, (
            "CheckpointError", "PosteriorMismatchError", "DataFileError", "RunFolderError",
            "BanditCheckpointError")))):
        return None
    message = " ".join(str(e).split())
    if isinstance(e, _error_class("CheckpointError")) \
            and getattr(args, "checkpoint", None) == "latest" and " is corrupt" in message:
        message += "; --checkpoint best reads the best checkpoint instead"
    return _report(args, message, EXIT_USAGE)


def _report(args, message, status):
    print(f"bbb-gluon {args.command}: error: {message}", file=sys.stderr)
    return status


def _parse(parser, argv):
    """The arguments; one the command does not know is reported by that command's parser
    (its name and its --help), not by the top level's."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        parser.commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    return args
