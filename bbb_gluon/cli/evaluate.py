"""``bbb-gluon evaluate``: test error, calibration and out-of-distribution detection of a
trained run.
"""

from .common import (
    UsageError,
    _contexts,
    _describe_checkpoint,
    _read_run_config,
    _refuse_to_overwrite,
)


def cmd_evaluate(args):
    """Test error, calibration, and OOD detection of a trained run."""
    from .. import data
    from ..runs import default_ood, evaluate_run, evaluation_files

    if args.samples < 1:
        raise UsageError(f"--samples must be >= 1, got {args.samples}")
    if args.bins < 1:
        raise UsageError(f"--bins must be >= 1, got {args.bins}")
    run_dir, which = args.run_dir, args.checkpoint
    dataset = _read_run_config(run_dir)["data"].get("dataset")
    ood = args.ood if args.ood is not None else default_ood(run_dir)
    if ood == "none":
        ood = None
    _refuse_to_overwrite(args, evaluation_files(run_dir, which, ood))
    if ood is not None and ood not in data.DATASETS:
        raise UsageError(f"--ood: unknown dataset {ood!r}; choose one of {data.DATASETS} "
                         "or none")
    if ood is not None and ood == dataset:
        raise UsageError(f"--ood {ood} is the run's own dataset; choose another or none")
    ctx = _contexts(args.ctx)
    if len(ctx) != 1:
        raise UsageError("--ctx: evaluate runs on one device")
    report = evaluate_run(run_dir, which, args.samples, ood, args.bins, ctx=ctx[0],
                          data_dir=args.data_dir)

    pct, kind = 100.0, report["model"]
    line = f"test error {pct * report['test_error_means']:.2f}% with the means"
    if kind != "plain":
        what = "weight samples" if kind == "bbb" else "dropout masks"
        line += f", {pct * report['test_error_mc']:.2f}% with {args.samples} {what}"
    print(f"{report['dataset']} {kind}, {_describe_checkpoint(which, report)}: {line} "
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
    print(f"wrote {evaluation_files(run_dir, which)[0]} and "
          f"{', '.join(report['plots'].values())}")
    return 0
