"""``bbb-gluon compare``: several run folders side by side.
"""

import os

from .common import (
    UsageError,
    check_writable,
    epoch_list,
    print_table,
    refuse_to_overwrite,
    stored_run_config,
)


def _pct(value):
    return "-" if value is None else f"{100 * value:.2f}%"


def _setting(value):
    if isinstance(value, list | tuple):
        return "..".join(f"{v:g}" for v in value)
    return "-" if value is None else f"{value:g}"


def cmd_compare(args):
    """One line per run folder (settings, epochs, best validation error, test errors)."""
    from ..runs import summarize_run

    refuse_to_overwrite(args, [p for p in (args.csv, args.plot) if p])
    if args.plot and not args.plot.lower().endswith(".png"):
        raise UsageError(f"--plot must name a .png file, got {args.plot!r}")
    for flag, path in (("--csv", args.csv), ("--plot", args.plot)):
        if path:
            check_writable(os.path.dirname(os.path.abspath(path)), flag, file=path)
    dirs_rows = [(d, summarize_run(d)) for d in args.run_dirs]
    for d, r in dirs_rows:  # train's --subset: a run on a few images is not a full one
        r.setdefault("subset", stored_run_config(d)["data"].get("subset"))
    if args.sort == "valid":
        dirs_rows.sort(key=lambda dr: (dr[1]["best_valid_error"] is None,
                                       dr[1]["best_valid_error"] or 0))
    run_dirs = [d for d, _ in dirs_rows]
    rows = [r for _, r in dirs_rows]
    print_table(_summary_table(rows))
    if args.at:
        print()
        print_table(_errors_at_table(run_dirs, rows, args.at))
    if args.csv:
        _write_csv(args.csv, rows)
    if args.plot:
        _plot_curves(args.plot, run_dirs, rows)
    return 0


def _summary_table(rows):
    """One line a run; a subset column where a run trained on a --subset of the data."""
    subsets = any(r["subset"] for r in rows)
    table = [("run", *(["subset"] if subsets else []), "model", "hidden", "prior",
              "weighting", "rho0", "optimizer", "lr", "epochs", "best", "valid", "test means",
              "test MC")]
    for r in rows:
        subset = [str(r["subset"] or "all")] if subsets else []
        table.append((r["run"], *subset, r["model"], r["hidden"], r["prior_label"] or "-",
                      r["weighting"] or "-",
                      _setting(r["rho_init"]),
                      f"{r['optimizer']}" + ("/sum" if r["loss_reduction"] == "sum" else ""),
                      _setting(r["lr"]), f"{r['epochs_run']}/{r['epochs_planned']}",
                      str(r["best_epoch"] or "-"), _pct(r["best_valid_error"]),
                      _pct(r["test_error_means"]), _pct(r["test_error_mc"])))
    return table


def _errors_at_table(run_dirs, rows, epochs):
    """Each run's error (as --plot draws it) at ``epochs``, and over its last 10."""
    from ..runs import curve_column, errors_at, read_history

    table = [("run", "error", *[f"epoch {e}" for e in epochs], "last 10")]
    for run_dir, r in zip(run_dirs, rows, strict=True):
        history = read_history(run_dir)
        column = curve_column(history)
        values = errors_at(history, epochs, column) if column else [None] * len(epochs)
        last10 = r["last10_test_error"] if column == "test_error" else None
        table.append((r["run"], (column or "-").replace("_error", ""),
                      *[_pct(v) for v in values], _pct(last10)))
    return table


def _write_csv(path, rows):
    from .._files import atomic_write_text
    from ..runs import SUMMARY_COLUMNS

    lines = [",".join(SUMMARY_COLUMNS)]
    lines += [",".join("" if r[c] is None else str(r[c]) for c in SUMMARY_COLUMNS)
              for r in rows]
    atomic_write_text(path, "\n".join(lines) + "\n")
    print(f"wrote {path}")


def _plot_curves(path, run_dirs, rows):
    import matplotlib.pyplot as plt

    from .. import plotting
    from ..runs import curve_column, read_history

    names = [r["run"] for r in rows]
    # Folders of one name in different places (runs/x, results/x) keep their paths.
    labels = names if len(set(names)) == len(names) else run_dirs
    curves, kinds = {}, set()
    for run_dir, label in zip(run_dirs, labels, strict=True):
        history = read_history(run_dir)
        column = curve_column(history)
        if column:
            kinds.add(column)
            history = [h for h in history if h.get(column) is not None]
            curves[label] = ([h["epoch"] for h in history], [h[column] for h in history])
    if not curves:
        raise UsageError("--plot: no run has validation or recorded test errors to draw")
    title = {"valid_error": "Validation error (means)",
             "test_error": "Test error recorded during training (means)"}
    plt.close(plotting.plot_validation_curves(
        curves, path, title=title[kinds.pop()] if len(kinds) == 1 else
        "Validation error, or test error where a run has no validation split (means)"))
    print(f"wrote {path}")


# Its line in ``bbb-gluon --help``.
HELP = "one line per run folder: settings, best validation error, test errors"


def add_parser(sub):
    p = sub.add_parser("compare", help=HELP,
                       description="Summarise run folders (finished, still training, or the "
                                   "copies under results/): the prior and training settings, "
                                   "epochs run of those planned, the best validation error "
                                   "and its epoch (from history.csv), and the test errors "
                                   "once training has finished (metrics.json).")
    p.add_argument("run_dirs", metavar="RUN_DIR", nargs="+",
                   help="run folders written by bbb-gluon train (or copies under results/)")
    p.add_argument("--sort", choices=("none", "valid"), default="none",
                   help="order: as given (none) or by best validation error (valid)")
    p.add_argument("--csv", default=None, help="also write every summary column to this CSV")
    p.add_argument("--plot", default=None,
                   help="also draw the runs' error over epochs into this PNG (validation "
                        "error, or the test error recorded with --monitor-test where a run "
                        "has no validation split)")
    p.add_argument("--at", default=None, type=epoch_list,
                   help="also print each run's error (as --plot draws it) at these epochs, "
                        "e.g. 100,200,300,600")
    p.add_argument("--force", action="store_true",
                   help="overwrite an existing --csv or --plot file")
    p.set_defaults(func=cmd_compare)
    return p
