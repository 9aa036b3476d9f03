"""What every command shares: exit statuses, the one-line usage error, the helpers that
turn a library ``ValueError`` about the user's input into one, the library's defaults that
options show, and the options of the commands that read a run folder.
"""

import argparse
import dataclasses
import inspect
import math
import os
import signal
import tempfile
from types import SimpleNamespace

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_DIVERGED = 3
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A problem with what the user asked for (reported as one line)."""


PROGRAM = {"running": False}  # main() runs as the program (not called from Python)


def stop_listening():
    """The program is stopping after Ctrl-C: more Ctrl-C (or SIGTERM) while it prints and
    exits changes nothing, instead of killing it half-way with another status. (Only as a
    program: a Python caller of main() keeps its handlers.)"""
    if PROGRAM["running"]:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)


def checked(function, *args, **kwargs):
    """``function(*args, **kwargs)`` for a call that turns the user's arguments into a
    configuration or reads their input: its ``ValueError`` is theirs to fix (a usage
    error). A ``ValueError`` anywhere else is a bug and keeps its traceback."""
    try:
        return function(*args, **kwargs)
    except UsageError:
        raise
    except ValueError as e:
        raise UsageError(str(e)) from e


def contexts_of(spec):
    import mxnet as mx

    ctxs = []
    for part in spec.split(","):
        kind, _, index = part.strip().partition(":")
        if kind not in ("cpu", "gpu") or (index and not index.isdigit()):
            raise UsageError(f"--ctx: cannot read {part!r}; use cpu, gpu, gpu:0,gpu:1 ...")
        index = int(index or 0)
        if kind == "gpu":
            if index >= mx.context.num_gpus():
                raise UsageError(f"--ctx: {part} requested but this machine has "
                                 f"{mx.context.num_gpus()} GPU(s) visible to MXNet")
            ctxs.append(mx.gpu(index))
        else:
            ctxs.append(mx.cpu(index))
    if len(set(ctxs)) != len(ctxs):
        raise UsageError(f"--ctx lists a device twice: {spec}")
    return ctxs


def add_prior_options(group, default):
    """``--prior`` and every prior's hyperparameters, spelled as each prior class says
    (:attr:`~bbb_gluon.core.priors.Prior.cli_options`), their defaults from ``default`` (a
    Prior, or a dict as :func:`~bbb_gluon.make_prior` takes it) where it is of that kind."""
    from ..core.priors import make_prior, prior_kinds

    if isinstance(default, dict):
        default = make_prior(**default)
    kinds = prior_kinds()
    spelled = "; ".join(f"{kind} ({', '.join(o.flag for o in cls.cli_options)})"
                        for kind, cls in kinds.items())
    group.add_argument("--prior", default=default.kind, choices=list(kinds),
                       help=f"the prior over the weights: {spelled} (default {default.kind})")
    for kind, cls in kinds.items():
        source = default if type(default) is cls else cls()
        for option in cls.cli_options:
            value = option.from_param(getattr(source, option.param))
            if option.from_param is not float:
                value = round(value, 6)
            group.add_argument(option.flag, type=float, default=value,
                               help=f"{option.help}, --prior {kind} (default {value:g})")


def prior_from_args(args):
    """The prior the options ask for, as ``{"kind": ..., hyperparameters...}``, or a
    usage error naming the options whose values the prior refuses."""
    from ..core.priors import make_prior, prior_kinds

    cls = prior_kinds()[args.prior]
    prior = {"kind": args.prior}
    for option in cls.cli_options:
        value = getattr(args, option.flag.lstrip("-").replace("-", "_"))
        try:
            param = option.to_param(value)
        except OverflowError:
            param = math.inf
        if option.to_param is not float and not (0 < param < math.inf) and math.isfinite(value):
            raise UsageError(f"{option.flag} must give a positive finite {option.param} "
                             f"(about -700 to 700), got {value!r}")
        prior[option.param] = param
    try:
        make_prior(**prior)
    except ValueError as e:  # the library's words, and the options that set the values
        flags = ", ".join(o.flag for o in cls.cli_options)
        raise UsageError(f"--prior {args.prior} ({flags}): {e}") from None
    return prior


def refuse_to_overwrite(args, paths):
    """A UsageError naming the first of ``paths`` that exists, unless ``--force``."""
    existing = [p for p in paths if os.path.exists(p)]
    if existing and not args.force:
        raise UsageError(f"{existing[0]} already exists; use --force to overwrite "
                         "(nothing was changed)")


def check_writable(folder, what, fix=None, file=None):
    """A UsageError, before any work, where ``folder`` (made later if missing) cannot be
    written: a scratch folder is made and removed in the nearest folder that exists, since
    permission bits do not stop root, and a read-only mount or /proc stops everyone.
    ``what`` names the option (or the argument), ``fix`` what to do (default: choose
    another ``what``); ``file``: a file to be written in ``folder``, the path shown."""
    fix = fix or f"choose another {what}"
    folder = os.path.abspath(folder)
    shown, near = file or folder, folder
    while not os.path.exists(near):
        near = os.path.dirname(near)
    if not os.path.isdir(near):
        raise UsageError(f"{what} {shown}: {near} is a file, not a folder; {fix} (nothing "
                         "was changed)")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".bbb-gluon-write-test-", dir=near))
    except OSError as e:
        raise UsageError(f"{what} {shown}: cannot write in {near} ({e.strerror}); {fix} "
                         "(nothing was changed)") from None


def comma_items(text, example):
    """The stripped items of an option's comma-separated value; an empty one (``400,,400``,
    a comma at an end) is refused: skipping it would run what was not written. An empty
    value is no items."""
    if not text.strip():
        return []
    items = [item.strip() for item in text.split(",")]
    if "" in items:
        raise argparse.ArgumentTypeError(f"an empty item in {text!r}; write the values like "
                                         f"{example}")
    return items


def close_figure(fig):
    """A command writes its figures to files; in-process callers (tests) must not
    accumulate them."""
    import matplotlib.pyplot as plt

    plt.close(fig)


def stored_run_config(run_dir):
    from ..runs import read_run_config

    return read_run_config(run_dir)


def print_table(table):
    import numpy as np

    widths = np.max([[len(c) for c in row] for row in table], axis=0)
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def describe_checkpoint(which, meta):
    epoch, batch = meta.get("epoch"), meta.get("batch") or 0
    where = (f"epoch {epoch}" if not batch
             else f"in epoch {epoch + 1}, after {batch} minibatches (interrupted)")
    return f"{which} checkpoint, {where}"


def defaults_of(cls):
    """The defaults of a dataclass's fields (``TrainConfig``, ``BanditConfig``), by name:
    what an option shows and starts from, read from the library, never copied."""
    return SimpleNamespace(**{
        f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
        for f in dataclasses.fields(cls)})


def defaults_of_function(function):
    """The defaults of a function's keyword parameters, by name."""
    return SimpleNamespace(**{name: p.default
                              for name, p in inspect.signature(function).parameters.items()
                              if p.default is not inspect.Parameter.empty})


def epoch_list(text):
    """An option's increasing epoch numbers, ``300`` or ``200,400``."""
    try:
        epochs = [int(e) for e in comma_items(text, "300 or 200,400")]
    except ValueError:
        epochs = [0]
    if any(e < 1 for e in epochs) or epochs != sorted(set(epochs)):
        raise argparse.ArgumentTypeError(
            f"expected increasing epoch numbers like 300 or 200,400, got {text!r}")
    return epochs


def add_run_options(p, force_help):
    """Options shared by the commands that read a finished run folder."""
    p.add_argument("--checkpoint", choices=("best", "latest"), default="best",
                   help="best: the lowest validation error (in a run without a validation "
                        "split, the last finished epoch); latest: the last one written (the "
                        "end of training, the last finished epoch of a run still training, "
                        "or where an interrupted run stopped). The latest's files get a "
                        "_latest suffix (e.g. pruning_latest.csv), beside the best's "
                        "(default best)")
    p.add_argument("--data-dir", default=None,
                   help="folder with mnist/ and fashion-mnist/ (default: the run's, else "
                        "$BBB_GLUON_DATA)")
    p.add_argument("--ctx", default="cpu", help="one device: cpu or gpu:0 (default cpu)")
    p.add_argument("--force", action="store_true", help=force_help)
