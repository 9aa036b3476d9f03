"""``bbb-gluon weights``: the distribution of a run's weights and signal-to-noise ratios.
"""

import os

from .common import UsageError, check_writable, contexts_of, refuse_to_overwrite


def cmd_weights(args):
    """Density of the Dense weights of several runs on one axis (the paper's Figure 3)."""
    import matplotlib.pyplot as plt
    import numpy as np

    from .. import plotting
    from ..runs import run_weights, summarize_run

    if not args.out.lower().endswith(".png"):
        raise UsageError(f"--out must name a .png file, got {args.out!r}")
    refuse_to_overwrite(args, [args.out])
    check_writable(os.path.dirname(os.path.abspath(args.out)), "--out", file=args.out)
    if args.bins < 1:
        raise UsageError(f"--bins must be >= 1, got {args.bins}")
    labels = [s.strip() for s in args.labels.split(",")] if args.labels else None
    if labels is not None and len(labels) != len(args.run_dirs):
        raise UsageError(f"--labels gives {len(labels)} labels for {len(args.run_dirs)} runs")
    ctx = contexts_of(args.ctx)
    if len(ctx) != 1:
        raise UsageError("--ctx: weights runs on one device")
    weights = {}
    for i, run_dir in enumerate(args.run_dirs):
        summary = summarize_run(run_dir)
        w = run_weights(run_dir, "best", draw=args.draw, seed=args.seed, ctx=ctx[0])
        label = labels[i] if labels else f"{summary['model']} ({summary['run']})"
        if label in weights:
            raise UsageError(f"two runs have the label {label!r}; give --labels")
        weights[label] = w
        print(f"{label}: {w.size:,} weights, std {np.std(w):.4f}, "
              f"|w| < 0.01: {100 * np.mean(np.abs(w) < 0.01):.1f}%, "
              f"|w| > 0.2: {100 * np.mean(np.abs(w) > 0.2):.2f}%")
    what = "one posterior sample" if args.draw == "sample" else "posterior means"
    fig = plotting.plot_weight_density(weights, bins=args.bins,
                                       title=f"Density of the weights (bbb: {what})")
    plotting.save(fig, args.out)
    plt.close(fig)
    print(f"wrote {args.out}")
    return 0


# Its line in ``bbb-gluon --help``.
HELP = "density of the weights of several runs (paper's Fig. 3)"


def add_parser(sub):
    p = sub.add_parser("weights", help=HELP,
                       description="Plot the density of every Dense weight (biases left out) "
                                   "of each run's best checkpoint on one axis: one draw from "
                                   "the posterior of a bbb run (or its means with --draw "
                                   "means), the weights of plain and dropout runs. Prints "
                                   "the spread of each.")
    p.add_argument("run_dirs", metavar="RUN_DIR", nargs="+",
                   help="run folders written by bbb-gluon train")
    p.add_argument("--out", required=True, help="PNG file to write")
    p.add_argument("--labels", default=None, help="comma-separated legend labels, one per run")
    p.add_argument("--draw", choices=("sample", "means"), default="sample",
                   help="bbb runs: one posterior sample (default) or the means")
    p.add_argument("--seed", type=int, default=0, help="seed of the posterior sample")
    p.add_argument("--bins", type=int, default=200,
                   help="histogram bins of the density (default 200)")
    p.add_argument("--ctx", default="cpu", help="one device: cpu or gpu:0 (default cpu)")
    p.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    p.set_defaults(func=cmd_weights)
    return p
