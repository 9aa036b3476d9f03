"""``main``: parse, run the command, and turn the user's mistakes into one line and exit 2.
"""

import sys

from ..training.config import RECIPES
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


def main(argv=None):
    # The console script and ``python -m bbb_gluon`` call main() with no arguments.
    PROGRAM["running"] = argv is None
    parser = build_parser()
    args = _parse(parser, argv)
    if getattr(args, "recipe", None):
        # The recipe's values become the defaults, so options given beside it still win.
        parser.train_parser.set_defaults(**RECIPES[args.recipe])
        args = _parse(parser, argv)
    if PROGRAM["running"]:
        # Before any MXNet operator, or the thread count can no longer go up (quietly:
        # main() called in a process that already ran operators keeps MXNet's count).
        from ..threads import claim
        claim(warn=False)
    from .._files import FileWriteError
    from ..bandit import BanditCheckpointError
    from ..core.posterior import PosteriorMismatchError
    from ..data import DataFileError, DatasetNotFoundError
    from ..runs import RunFolderError
    from ..training import CheckpointError

    # Errors in what the user gave (arguments, files, run folders) are one line and exit 2;
    # a failing disk is one line and exit 1. Anything else is a bug: it keeps its traceback.
    try:
        return args.func(args)
    except (UsageError, CheckpointError, PosteriorMismatchError, DataFileError,
            DatasetNotFoundError, FileNotFoundError, RunFolderError,
            BanditCheckpointError) as e:
        message = " ".join(str(e).split()) if not isinstance(e, DatasetNotFoundError) else str(e)
        if isinstance(e, CheckpointError) and getattr(args, "checkpoint", None) == "latest" \
                and " is corrupt" in message:
            message += "; --checkpoint best reads the best checkpoint instead"
        print(f"bbb-gluon {args.command}: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    except FileWriteError as e:
        print(f"bbb-gluon {args.command}: error: {e}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt as e:
        stop_listening()
        print("interrupted", file=sys.stderr)
        return getattr(e, "exit_status", EXIT_INTERRUPTED)


def _parse(parser, argv):
    """The arguments; one the command does not know is reported by that command's parser
    (its name and its --help), not by the top level's."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        parser.commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    return args
