"""``bbb-gluon compare``: several run folders side by side.
"""

from .common import UsageError, _print_table, _refuse_to_overwrite


def _pct(value):
    return "-" if value is None else f"{100 * value:.2f}%"


def _setting(value):
    if isinstance(value, list | tuple):
        return "..".join(f"{v:g}" for v in value)
    return "-" if value is None else f"{value:g}"


def cmd_compare(args):
    """One line per run folder (settings, epochs, best validation error, test errors)."""

    from .._files import atomic_write_text
    from ..runs import SUMMARY_COLUMNS, summarize_run

    _refuse_to_overwrite(args, [p for p in (args.csv, args.plot) if p])
    if args.plot and not args.plot.lower().endswith(".png"):
        raise UsageError(f"--plot must name a .png file, got {args.plot!r}")
    dirs_rows = [(d, summarize_run(d)) for d in args.run_dirs]
    if args.sort == "valid":
        dirs_rows.sort(key=lambda dr: (dr[1]["best_valid_error"] is None,
                                       dr[1]["best_valid_error"] or 0))
    run_dirs = [d for d, _ in dirs_rows]
    rows = [r for _, r in dirs_rows]
    header = ("run", "model", "hidden", "prior", "weighting", "rho0", "optimizer", "lr", "epochs",
              "best", "valid", "test means", "test MC")
    table = [header]
    for r in rows:
        if r["prior"] == "scale_mixture":
            prior = (f"pi={r['pi']:g} ls1={r['log_sigma1']:.3g} "
                     f"ls2={r['log_sigma2']:.3g}")
        elif r["prior"] == "gaussian":
            prior = f"N(0,{r['prior_sigma']:g}^2)"
        else:
            prior = "-"
        epochs = f"{r['epochs_run']}/{r['epochs_planned']}"
        table.append((r["run"], r["model"], r["hidden"], prior, r["weighting"] or "-",
                      _setting(r["rho_init"]),
                      f"{r['optimizer']}" + ("/sum" if r["loss_reduction"] == "sum" else ""),
                      _setting(r["lr"]), epochs,
                      str(r["best_epoch"] or "-"), _pct(r["best_valid_error"]),
                      _pct(r["test_error_means"]), _pct(r["test_error_mc"])))
    _print_table(table)
    if args.at:
        from ..runs import curve_column, errors_at, read_history

        table = [("run", "error", *[f"epoch {e}" for e in args.at], "last 10")]
        for run_dir, r in zip(run_dirs, rows, strict=True):
            history = read_history(run_dir)
            column = curve_column(history)
            values = errors_at(history, args.at, column) if column else [None] * len(args.at)
            last10 = r["last10_test_error"] if column == "test_error" else None
            table.append((r["run"], (column or "-").replace("_error", ""),
                          *[_pct(v) for v in values], _pct(last10)))
        print()
        _print_table(table)
    if args.csv:
        lines = [",".join(SUMMARY_COLUMNS)]
        lines += [",".join("" if r[c] is None else str(r[c]) for c in SUMMARY_COLUMNS)
                  for r in rows]
        atomic_write_text(args.csv, "\n".join(lines) + "\n")
        print(f"wrote {args.csv}")
    if args.plot:
        import matplotlib.pyplot as plt

        from .. import plotting
        from ..runs import read_history

        names = [r["run"] for r in rows]
        # Folders of one name in different places (runs/x, results/x) keep their paths.
        labels = names if len(set(names)) == len(names) else run_dirs
        from ..runs import curve_column

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
            curves, args.plot, title=title[kinds.pop()] if len(kinds) == 1 else
            "Validation error, or test error where a run has no validation split (means)"))
        print(f"wrote {args.plot}")
    return 0
