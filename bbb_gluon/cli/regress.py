"""``bbb-gluon regress``: Bayes by Backprop on a regression table (a UCI benchmark split or a
CSV file of your own), with the test scores and an interval plot.
"""

import json
import os
import time

from .common import UsageError, check_writable, checked, close_figure

LEVELS = (0.5, 0.9, 0.95)


def _data(args):
    from .. import data

    if (args.uci is None) == (args.csv is None):
        raise UsageError("give one of --uci NAME (a UCI benchmark set) and --csv FILE")
    if args.csv is not None:
        if args.target is None:
            raise UsageError("--csv needs --target COLUMN, the column to predict")
        return checked(data.load_table, args.csv, args.target,
                       test_fraction=args.test_fraction, seed=args.seed)
    if args.target is not None:
        raise UsageError("--target goes with --csv; a UCI set knows its target")
    if args.uci not in data.UCI_DATASETS:
        raise UsageError(f"unknown UCI set {args.uci!r}; choose one of "
                         f"{', '.join(data.UCI_DATASETS)}")
    splits = data.UCI_DATASETS[args.uci][2]
    if not 0 <= args.split < splits:
        raise UsageError(f"--split {args.split}: {args.uci} has splits 0 to {splits - 1}")
    return checked(data.load_uci, args.uci, args.split, root=args.data_dir)


def cmd_regress(args):
    for name in ("epochs", "batch_size", "hidden", "samples"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got "
                             f"{getattr(args, name)}")
    check_writable(args.out, "--out")
    if os.path.exists(os.path.join(args.out, "config.json")):
        raise UsageError(f"{args.out} already holds a run; choose another --out (nothing was "
                         "changed)")
    split = _data(args)
    import numpy as np

    from .. import plotting
    from .._files import atomic_write_text
    from ..core.likelihood import likelihood_of
    from ..intervals import predict_intervals
    from ..training import MLP, RunOptions, TrainConfig, fit

    outputs = likelihood_of(args.likelihood).outputs_for(1)
    mlp = MLP(hidden=(args.hidden,), activation="relu", num_inputs=split.X_train.shape[1],
              num_outputs=outputs)
    config = checked(TrainConfig, likelihood=args.likelihood, epochs=args.epochs,
                     batch_size=args.batch_size, eval_samples=0, seed=args.seed)
    print(f"{split!r}; {args.likelihood} likelihood, one hidden layer of {args.hidden} relu "
          f"units, {args.epochs} epochs; run folder {args.out}")
    record = {"data": {"uci": args.uci, "split": args.split, "csv": args.csv,
                       "target": args.target, "test_fraction": args.test_fraction},
              "evaluation": {"samples": args.samples, "levels": list(LEVELS)}}
    t0 = time.perf_counter()
    result = fit(config, (split.X_train, split.y_train), net=mlp, run_dir=args.out,
                 progress="lines" if args.no_progress else True,
                 options=RunOptions(record=record))
    seconds = time.perf_counter() - t0
    bars = predict_intervals(result.net, result.posterior, split.X_test, result.loss,
                             samples=args.samples, levels=LEVELS, y_mean=split.y_mean,
                             y_std=split.y_std)
    truth = split.to_original(split.y_test)
    scores = bars.scores(truth, level=0.95)
    metrics = {"rmse": scores["rmse"], "log_likelihood": scores["log_likelihood"],
               "coverage": {f"{level:g}": bars.scores(truth, level=level)["coverage"]
                            for level in LEVELS},
               "test_rows": len(truth), "samples": args.samples,
               "noise_std_median": float(np.median(bars.noise_std)),
               "weights_std_median": float(np.median(bars.weights_std)),
               "seconds": round(seconds, 1)}
    atomic_write_text(os.path.join(args.out, "metrics.json"), json.dumps(metrics, indent=1))
    png = os.path.join(args.out, "intervals.png")
    lower, upper = bars.intervals[0.95]
    close_figure(plotting.plot_predictive_intervals(
        truth, bars.mean, lower, upper, path=png,
        title=f"{split.name}: predictive mean and 95% interval, {len(truth)} test rows"))
    print(f"test RMSE {scores['rmse']:.3f}, log-likelihood {scores['log_likelihood']:.3f}, "
          f"95% interval coverage {100 * metrics['coverage']['0.95']:.1f}% "
          f"({len(truth)} test rows, {args.samples} weight samples); trained in "
          f"{seconds:.1f} s")
    print(f"wrote {args.out}/metrics.json, {png}, config.json, history.csv and checkpoints/")
    return 0


# Its line in ``bbb-gluon --help``.
HELP = "regression with error bars: a UCI benchmark split or a CSV file of your own"


def add_parser(sub):
    from ..core.likelihood import LIKELIHOODS, likelihood_of

    p = sub.add_parser(
        "regress", help=HELP,
        description="Train Bayes by Backprop on a regression table: a split of a UCI "
                    "benchmark set (--uci NAME --split K) or a CSV file with a header "
                    "(--csv FILE --target COLUMN, 10%% of its rows held out for testing). "
                    "One hidden layer of ReLU units; the regression's defaults of "
                    "TrainConfig (docs/regression.md). Writes the run folder (config.json, "
                    "history, checkpoints), metrics.json (test RMSE, log-likelihood and "
                    "interval coverage on the targets' own scale) and intervals.png.",
        epilog="example: bbb-gluon regress --uci yacht --split 0 --out runs/yacht-0")
    g = p.add_argument_group("data")
    g.add_argument("--uci", metavar="NAME", default=None,
                   help="a UCI benchmark set: boston, concrete, energy, kin8nm, naval, "
                        "power, protein, wine or yacht")
    g.add_argument("--split", type=int, default=0,
                   help="its standard split (0-19, protein 0-4; default 0)")
    g.add_argument("--data-dir", default=None,
                   help="the data folder holding uci/ (default $BBB_GLUON_DATA)")
    g.add_argument("--csv", metavar="FILE", default=None,
                   help="a CSV file of your own: a header row, numbers only")
    g.add_argument("--target", metavar="COLUMN", default=None,
                   help="the CSV column to predict (every other column is an input)")
    g.add_argument("--test-fraction", type=float, default=0.1,
                   help="the CSV rows held out for testing, drawn with --seed (default 0.1)")
    g = p.add_argument_group("model and training")
    g.add_argument("--likelihood", default="gaussian",
                   choices=[n for n in LIKELIHOODS if not likelihood_of(n).classifies],
                   help="gaussian: one learned noise scale; heteroscedastic: a noise scale "
                        "per input (default gaussian)")
    g.add_argument("--hidden", type=int, default=50, help="hidden units (default 50)")
    g.add_argument("--epochs", type=int, default=400, help="epochs (default 400)")
    g.add_argument("--batch-size", type=int, default=32,
                   help="examples per minibatch (default 32)")
    g.add_argument("--samples", type=int, default=100,
                   help="weight samples of the test predictive (default 100)")
    g.add_argument("--seed", type=int, default=0,
                   help="seed of the initialisation, data order, weight noise and CSV split "
                        "(default 0)")
    g.add_argument("--out", required=True, help="the run folder (must hold no run)")
    g.add_argument("--no-progress", action="store_true",
                   help="no progress bar, one line per epoch")
    p.set_defaults(func=cmd_regress)
    return p
