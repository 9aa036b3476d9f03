"""The ``bbb-gluon`` program: its subcommands, each added by its own module (which owns its
options and its run), under one parser whose errors are one line.
"""

import argparse
import textwrap

from . import bandit, compare, demo, evaluate, launch, prune, regress, train, weights
from .common import EXIT_USAGE

COMMANDS = (train, regress, evaluate, prune, compare, weights, bandit, launch, demo)


class _HelpFormatter(argparse.HelpFormatter):
    """Help lines that never break inside an option name such as --lr-decay-epochs."""

    def _split_lines(self, text, width):
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad option is one line on stderr (no usage block) and exit 2."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(command=None):
    """The program's parser; with ``command`` (a name, or "" for none), only that command
    gets its options, and the others their line of help: the options of train, evaluate
    ... show the library's defaults, which loads MXNet, and launch or ``--help`` need
    none of it."""
    parser = _Parser(
        prog="bbb-gluon", description="Bayes by Backprop (Blundell et al. 2015) on MXNet Gluon.")
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"bbb_gluon {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for module in COMMANDS:
        name = module.__name__.rpartition(".")[2]
        if command is None or command == name:
            module.add_parser(sub)
        else:
            sub.add_parser(name, help=module.HELP)
    parser.commands = sub.choices  # name -> its parser: main() reports its errors there
    parser.train_parser = sub.choices["train"]  # main() sets a --recipe's values on it
    return parser
