"""``bbb-gluon prune``: remove the weights of lowest signal-to-noise ratio and measure the
error at each fraction.
"""

from .common import (
    UsageError,
    add_run_options,
    check_writable,
    contexts_of,
    describe_checkpoint,
    refuse_to_overwrite,
    stored_run_config,
)


def _parse_fractions(text):
    if "" in [part.strip() for part in text.split(",")] and text.strip():
        raise UsageError(f"--fractions: an empty item in {text!r}; write the fractions like "
                         "0,0.5,0.95")
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--fractions: cannot read {text!r}; use numbers in [0, 1] like "
                         "0,0.5,0.95") from None
    if not values:
        raise UsageError("--fractions: give at least one fraction in [0, 1]")
    bad = [v for v in values if not (0.0 <= v <= 1.0)]  # NaN fails both comparisons
    if bad:
        raise UsageError(f"--fractions must lie in [0, 1], got {bad[0]!r}")
    return values

def cmd_prune(args):
    """Signal-to-noise pruning of a Bayes-by-Backprop run (the paper's Table 2)."""
    from ..reports import prune_run, pruning_files

    fractions = _parse_fractions(args.fractions)
    run_dir, which = args.run_dir, args.checkpoint
    from ..methods import learns_posterior

    model = stored_run_config(run_dir)["train"].get("model")
    if not learns_posterior(model):
        raise UsageError(f"{run_dir} is a {model!r} run; prune needs a bbb run (it ranks "
                         "weights by the posterior's signal-to-noise ratio)")
    paths = pruning_files(run_dir, which, fractions)
    refuse_to_overwrite(args, paths)
    check_writable(run_dir, "RUN_DIR", "prune writes its files there: prune a copy of the "
                   "run in a folder you can write")
    ctx = contexts_of(args.ctx)
    if len(ctx) != 1:
        raise UsageError("--ctx: prune runs on one device")
    done = prune_run(run_dir, fractions, which, ctx=ctx[0], data_dir=args.data_dir)

    where = describe_checkpoint(which, done)
    print(f"{done['dataset']} test error ({done['num_test']} images) with the means, "
          f"{where}, lowest weights removed:")
    print(f"{'removed':>8}  {'weights left':>12}  {'by |mu|/sigma':>13}  {'by |mu|':>8}")
    for r in done["table"]:
        print(f"{100 * r['fraction']:7.4g}%  {r['weights_left']:>12,}  "
              f"{100 * r['error_by_snr']:12.2f}%  {100 * r['error_by_abs_mu']:7.2f}%")
    info = done["export"]
    print(f"sparse export ({100 * max(fractions):g}% of the weights removed by |mu|/sigma, "
          f"{info['weights_left']:,} of {info['num_weights']:,} left): "
          f"{info['bytes']:,} bytes against {info['dense_bytes']:,} dense "
          f"({info['bytes'] / info['dense_bytes']:.3f}x)")
    print(f"sigma against |mu| ({where}), per weight array:")
    for r in done["statistics"]:
        print(f"  {r['key']:>10}: {r['count']:>9,} weights, median |mu| {r['median_abs_mu']:.4f}, "
              f"median sigma {r['median_sigma']:.4f} (10%-90%: {r['sigma_q10']:.4f}-"
              f"{r['sigma_q90']:.4f}), correlation of sigma with |mu| "
              f"{r['corr_abs_mu_sigma']:+.2f}")
    print(f"wrote {', '.join(paths[:-1])} and {paths[-1]}")
    return 0


# Its line in ``bbb-gluon --help``.
HELP = "signal-to-noise pruning of a bbb run (paper's Table 2)"


def add_parser(sub):
    p = sub.add_parser("prune", help=HELP,
                       description="Set the lowest fraction of the weights of a bbb run's best "
                                   "(or, with --checkpoint latest, its end-of-training) "
                                   "checkpoint (biases are kept) to zero, ranked globally "
                                   "by |mu|/sigma and, for comparison, by |mu|, and report "
                                   "the test error with the means. Writes pruning.csv, "
                                   "pruned_<largest fraction>.params (weights in sparse CSR "
                                   "storage; its size against dense is printed), "
                                   "weight_statistics.json (how sigma relates to |mu| per "
                                   "layer, also printed), snr_histogram.png and snr_cdf.png "
                                   "into the run folder.")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a bbb run folder")
    p.add_argument("--fractions", default="0,0.5,0.75,0.95,0.98",
                   help="comma-separated fractions of the weights to remove, each in [0, 1] "
                        "(default 0,0.5,0.75,0.95,0.98)")
    add_run_options(p, "overwrite an existing pruning.csv, sparse export, statistics and "
                        "plots (with --checkpoint latest: their _latest versions)")
    p.set_defaults(func=cmd_prune)
    return p
