"""``bbb-gluon prune``: remove the weights of lowest signal-to-noise ratio and measure the
error at each fraction.
"""

import json

from .common import (
    UsageError,
    _contexts,
    _describe_checkpoint,
    _for_checkpoint,
    _read_run_config,
    _refuse_to_overwrite,
)
from .evaluate import _load_test_data


def _parse_fractions(text):
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
    import matplotlib.pyplot as plt
    import numpy as np

    from .. import plotting
    from .._files import atomic_write_text
    from ..pruning import (
        evaluate_pruning,
        export_pruned,
        pruning_scores,
        thresholds,
        weight_statistics,
    )
    from ..training import load_run

    fractions = _parse_fractions(args.fractions)
    run_dir = args.run_dir
    stored = _read_run_config(run_dir)
    model = stored["train"].get("model")
    if model != "bbb":
        raise UsageError(f"{run_dir} is a {model!r} run; prune needs a bbb run (it ranks "
                         "weights by the posterior's signal-to-noise ratio)")
    largest = max(fractions)
    which = args.checkpoint
    csv_path = _for_checkpoint(run_dir, "pruning.csv", which)
    export_path = _for_checkpoint(run_dir, f"pruned_{largest:g}.params", which)
    stats_path = _for_checkpoint(run_dir, "weight_statistics.json", which)
    hist_path = _for_checkpoint(run_dir, "snr_histogram.png", which)
    cdf_path = _for_checkpoint(run_dir, "snr_cdf.png", which)
    _refuse_to_overwrite(args, [csv_path, export_path, stats_path, hist_path, cdf_path])
    data_dir = args.data_dir if args.data_dir is not None else stored["data"].get("data_dir")
    ctx = _contexts(args.ctx)
    if len(ctx) != 1:
        raise UsageError("--ctx: prune runs on one device")
    ctx = ctx[0]
    net, posterior, config, meta = load_run(run_dir, which, ctx=ctx)
    splits = _load_test_data(stored, config.seed, data_dir)
    Xt, yt = splits.test
    table = evaluate_pruning(net, posterior, Xt, yt, fractions, ctx=ctx,
                             likelihood=config.likelihood)

    lines = ["fraction,weights_left,error_by_snr,error_by_abs_mu"]
    lines += [f"{r['fraction']!r},{r['weights_left']},{r['error_by_snr']!r},"
              f"{r['error_by_abs_mu']!r}" for r in table]
    atomic_write_text(csv_path, "\n".join(lines) + "\n")
    print(f"{splits.name} test error ({len(yt)} images) with the means, "
          f"{_describe_checkpoint(which, meta)}, lowest weights removed:")
    print(f"{'removed':>8}  {'weights left':>12}  {'by |mu|/sigma':>13}  {'by |mu|':>8}")
    for r in table:
        print(f"{100 * r['fraction']:7.4g}%  {r['weights_left']:>12,}  "
              f"{100 * r['error_by_snr']:12.2f}%  {100 * r['error_by_abs_mu']:7.2f}%")

    info = export_pruned(export_path, posterior, largest, "snr", ctx=ctx)
    print(f"sparse export ({100 * largest:g}% of the weights removed by |mu|/sigma, "
          f"{info['weights_left']:,} of {info['num_weights']:,} left): "
          f"{info['bytes']:,} bytes against {info['dense_bytes']:,} dense "
          f"({info['bytes'] / info['dense_bytes']:.3f}x)")

    stats = weight_statistics(posterior, ctx)
    atomic_write_text(stats_path, json.dumps(stats, indent=1) + "\n")
    print(f"sigma against |mu| ({_describe_checkpoint(which, meta)}), per weight array:")
    for r in stats:
        print(f"  {r['key']:>10}: {r['count']:>9,} weights, median |mu| {r['median_abs_mu']:.4f}, "
              f"median sigma {r['median_sigma']:.4f} (10%-90%: {r['sigma_q10']:.4f}-"
              f"{r['sigma_q90']:.4f}), correlation of sigma with |mu| "
              f"{r['corr_abs_mu_sigma']:+.2f}")

    scores = pruning_scores(posterior, "snr", ctx)
    cutoffs = dict(zip(fractions, thresholds(scores, fractions), strict=True))
    snr = np.concatenate([s.reshape(-1) for s in scores.values()])
    for fig in (plotting.plot_snr_histogram(snr, cutoffs, hist_path),
                plotting.plot_snr_cdf(snr, cutoffs, cdf_path)):
        plt.close(fig)
    print(f"wrote {csv_path}, {export_path}, {stats_path}, {hist_path} and {cdf_path}")
    return 0
