"""What ``fit`` shows while it trains: where a resumed run starts, a bar per epoch where
someone watches (a terminal, a notebook), and one line per finished epoch with its
validation error, which reads the same on a screen and in a log.
"""

import sys

MODES = (True, False, "lines")


def progress_mode(progress):
    """``(bar, lines)`` for ``fit``'s ``progress``: True shows a bar per epoch on a terminal
    or in a notebook and a line per epoch everywhere; "lines" the lines only; False
    nothing."""
    if progress not in MODES:
        raise ValueError(f"progress must be True, False or 'lines', got {progress!r}")
    if progress is False:
        return False, False
    return progress is True and watched(sys.stderr), True


def watched(stream):
    """Whether ``stream`` (where tqdm draws) is a terminal or a notebook's output; a bar's
    frames in a file or a pipe would only fill a log."""
    shell = sys.modules.get("IPython")
    if shell is not None:
        ip = shell.get_ipython()
        if ip is not None and "IPKernelApp" in getattr(ip, "config", {}):
            return True
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # replaced or closed streams
        return False


def say_resume(run_dir, epochs, done, num_batches):
    """One line: where a resumed run continues, and to how many epochs."""
    if done.batch:
        where = f"in epoch {done.epoch + 1}, after {done.batch} of {num_batches} minibatches"
    else:
        where = f"after epoch {done.epoch}"
    print(f"resuming {run_dir} {where}, to {epochs} epochs", flush=True)


def say_estimators(step):
    """One line: what each layer with a posterior runs under the step's estimator, and
    why where it is not the one asked for."""
    parts = [f"{r.name} {r.layer} {r.rule}" + (f" ({r.why})" if r.why else "")
             for r in step.rules]
    print(f"estimator {step.estimator}: " + "; ".join(parts), flush=True)


def say_epoch(row, config):
    """One line for a finished epoch: its costs, the validation (and test) error or loss
    the history recorded, and its seconds."""
    parts = [f"nll/example {row['nll_per_example']:.4f}"]
    if row.get("complexity_cost"):
        parts.append(f"complexity {row['complexity_cost']:.4g}")
    for split, name in (("valid", "validation"), ("test", "test")):
        if row.get(f"{split}_loss") is not None:
            parts.append(f"{name} loss {row[f'{split}_loss']:.4g}")
        elif row.get(f"{split}_error") is not None:
            text = f"{name} error {100 * row[f'{split}_error']:.2f}%"
            if row.get(f"{split}_error_mc") is not None:
                text += (f" with the means, {100 * row[f'{split}_error_mc']:.2f}% with "
                         f"{config.eval_samples} samples")
            parts.append(text)
    print(f"epoch {row['epoch']}/{config.epochs}: {', '.join(parts)} "
          f"({row['seconds']:.1f} s)",
          flush=True)
