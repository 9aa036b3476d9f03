"""``bbb-gluon evaluate``: test error, calibration and out-of-distribution detection of a
trained run.
"""

import sys

from .common import (
    UsageError,
    add_run_options,
    check_writable,
    contexts_of,
    describe_checkpoint,
    refuse_to_overwrite,
    stored_run_config,
)


def cmd_evaluate(args):
    """Test error, calibration, and OOD detection of a trained run."""
    from .. import data
    from .._files import FileWriteError
    from ..reports import evaluate_run, evaluation_files
    from ..runs import default_ood

    if args.samples < 1:
        raise UsageError(f"--samples must be >= 1, got {args.samples}")
    if args.bins < 1:
        raise UsageError(f"--bins must be >= 1, got {args.bins}")
    run_dir, which = args.run_dir, args.checkpoint
    stored = stored_run_config(run_dir)["data"]
    ood = args.ood if args.ood is not None else default_ood(run_dir)
    if ood == "none":
        ood = None
    if ood is not None and ood not in data.DATASETS:
        raise UsageError(f"--ood: unknown dataset {ood!r}; choose one of {data.DATASETS} "
                         "or none")
    if ood is not None and ood == stored.get("dataset"):
        raise UsageError(f"--ood {ood} is the run's own dataset; choose another or none")
    data_dir = args.data_dir if args.data_dir is not None else stored.get("data_dir")
    skipped = ood is not None and _skipped(ood, data_dir, given=args.ood is not None)
    if skipped:
        ood = None
    refuse_to_overwrite(args, evaluation_files(run_dir, which, ood))
    check_writable(run_dir, "RUN_DIR", "evaluate writes its files there: evaluate a copy "
                   "of the run in a folder you can write")
    ctx = contexts_of(args.ctx)
    if len(ctx) != 1:
        raise UsageError("--ctx: evaluate runs on one device")
    try:
        report = evaluate_run(run_dir, which, args.samples, ood, args.bins, ctx=ctx[0],
                              data_dir=args.data_dir)
    except FileWriteError as e:
        _print_results(e.report, args, which, ood)  # computed all the same: not lost
        raise
    _print_results(report, args, which, ood)
    print(f"wrote {evaluation_files(run_dir, which)[0]} and "
          f"{', '.join(report['plots'].values())}")
    if skipped:
        print(f"bbb-gluon evaluate: note: {skipped}", file=sys.stderr)
    return 0


def _print_results(report, args, which, ood):
    from ..methods import method_of

    pct, kind = 100.0, report["model"]
    line = f"test error {pct * report['test_error_means']:.2f}% with the means"
    what = method_of(kind).sample_noun
    if what is not None:
        line += f", {pct * report['test_error_mc']:.2f}% with {args.samples} {what}"
    print(f"{report['dataset']} {kind}, {describe_checkpoint(which, report)}: {line} "
          f"({report['num_test']} test images)")
    print(f"{report['predictive']}: NLL {report['nll']:.4f}, Brier {report['brier']:.4f}, "
          f"ECE {pct * report['ece']:.2f}% ({args.bins} bins)")
    if report["ood"] is not None:
        o = report["ood"]
        text = f"OOD ({ood}, {o['num_examples']} images): AUROC {o['auroc_entropy']:.4f} " \
               "by predictive entropy"
        if o["auroc_mutual_information"] is not None:
            text += f", {o['auroc_mutual_information']:.4f} by mutual information"
        print(text)


def _skipped(ood, data_dir, given):
    """Why the out-of-distribution test is skipped, or None: the default dataset is
    skipped where the data folder lacks it, with a note naming --ood none; a dataset of
    the user's choice is a usage error instead. (Without a data folder MXNet may
    download it.)"""
    from ..data import DatasetNotFoundError, find_data_root, require_datasets

    root = find_data_root(data_dir)
    if root is None or not root.is_dir():  # the run's own data are reported first
        return None
    try:
        require_datasets(ood, root=root)
    except DatasetNotFoundError as e:
        if given:
            raise UsageError(f"--ood {ood}: {e} Or evaluate without the "
                             "out-of-distribution test: --ood none") from None
        return (f"{ood} is not in the data folder {root} (docs/data.md says how to add "
                "it), so the out-of-distribution test was skipped; --ood none skips it "
                "without this note")
    return None


# Its line in ``bbb-gluon --help``.
HELP = "test error, calibration and OOD detection of a run"


def add_parser(sub):
    p = sub.add_parser("evaluate", help=HELP,
                       description="Evaluate a run folder's best (or, with --checkpoint latest, "
                                   "its end-of-training) checkpoint on its test split "
                                   "(the data settings stored in config.json): test error with "
                                   "the means and with the Monte-Carlo predictive (weight "
                                   "samples for bbb, MC dropout for dropout, the softmax for "
                                   "plain), NLL, Brier score, expected calibration error, and "
                                   "the AUROC of predictive entropy and mutual information "
                                   "separating the test images from another dataset's. Writes "
                                   "evaluation.json, reliability.png, least_certain.png and "
                                   "entropy_histograms.png into the run folder.")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run folder written by bbb-gluon train")
    p.add_argument("--samples", type=int, default=100,
                   help="weight samples (bbb) or dropout masks (dropout) of the predictive "
                        "(default 100)")
    p.add_argument("--ood", default=None,
                   help="out-of-distribution dataset: mnist, fashion-mnist or none (default: "
                        "the one the run was not trained on)")
    p.add_argument("--bins", type=int, default=15,
                   help="equal-width confidence bins of the ECE and reliability diagram "
                        "(default 15)")
    add_run_options(p, "overwrite an existing evaluation.json and plots (with --checkpoint "
                        "latest: their _latest versions)")
    p.set_defaults(func=cmd_evaluate)
    return p
