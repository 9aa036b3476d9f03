"""``bbb-gluon demo``: a small network on the two-moons problem, in about a minute.
"""

import os
import time

from .common import UsageError, check_writable, close_figure


def cmd_demo(args):
    """Bayes by Backprop on two half-moons, offline, in about a minute."""
    import mxnet as mx
    import numpy as np

    from .. import data, plotting
    from ..prediction import error_rate, predict_proba, predict_samples
    from ..training import MLP, TrainConfig, fit

    if args.epochs < 1 or args.samples < 1:
        raise UsageError("--epochs and --samples must be >= 1")
    X, y = data.two_moons(1000, noise=0.2, seed=args.seed)
    X_train, y_train, X_test, y_test = X[:500], y[:500], X[500:], y[500:]
    config = TrainConfig(model="bbb", likelihood="bernoulli", epochs=args.epochs,
                         lr=0.01, batch_size=50, prior={"kind": "gaussian", "sigma": 1.0},
                         complexity="mc", mu_scale=0.5, rho_init=-3.0, eval_samples=0,
                         seed=args.seed)
    mlp = MLP(hidden=(5, 5), activation="tanh", num_inputs=2, num_outputs=1, ctx=mx.cpu())
    check_writable(args.out, "--out")
    os.makedirs(args.out, exist_ok=True)
    print(f"Bayes by Backprop on two half-moons: 500 train / 500 test points, 2x5 tanh, "
          f"N(0,1) prior, {args.epochs} epochs")
    t0 = time.perf_counter()
    # 300 short epochs: a bar per epoch would only scroll; --progress shows them.
    result = fit(config, (X_train, y_train), net=mlp,
                 progress=args.progress and not args.no_progress)
    seconds = time.perf_counter() - t0
    net, posterior = result.net, result.posterior
    acc_mc = 1 - error_rate(predict_proba(net, posterior, X_test, args.samples,
                                          likelihood="bernoulli"), y_test)
    acc_means = 1 - error_rate(predict_proba(net, posterior, X_test, 0,
                                             likelihood="bernoulli"), y_test)
    grid = np.linspace(-3, 3, 100, dtype=np.float32)
    xx, yy = np.meshgrid(grid, grid)
    points = np.stack([xx.ravel(), yy.ravel()], axis=1)
    p1 = predict_samples(net, posterior, points, args.samples, likelihood="bernoulli")[:, :, 1]
    mean, std = p1.mean(axis=0).reshape(xx.shape), p1.std(axis=0).reshape(xx.shape)
    mean_png = os.path.join(args.out, "demo_predictive_mean.png")
    std_png = os.path.join(args.out, "demo_predictive_std.png")
    close_figure(plotting.plot_grid_map(xx, yy, mean, X_test, y_test, label="P(class 1)", vmin=0,
                                  vmax=1, title=f"predictive mean ({args.samples} weight "
                                  "samples)", path=mean_png))
    close_figure(plotting.plot_grid_map(xx, yy, std, X_test, y_test, cmap="viridis", label="std",
                                  title="predictive standard deviation", path=std_png))
    print(f"test accuracy {100 * acc_mc:.1f}% ({args.samples}-sample predictive), "
          f"{100 * acc_means:.1f}% with the means; trained in {seconds:.1f} s")
    print(f"wrote {mean_png} and {std_png}")
    return 0


# Its line in ``bbb-gluon --help``.
HELP = "offline demo: two half-moons, about 20 s"


def add_parser(sub):
    p = sub.add_parser("demo", help=HELP,
                       description="Bayes by Backprop on two interleaved half-moons generated "
                                   "in code (1,000 points, noise 0.2, half held out; 2 hidden "
                                   "tanh layers of 5 units, N(0,1) prior). Prints the test "
                                   "accuracy and writes PNGs of the predictive mean and "
                                   "standard deviation over a grid.")
    p.add_argument("--out", default="runs/demo", help="folder for the PNGs (default runs/demo)")
    p.add_argument("--epochs", type=int, default=300, help="epochs (default 300)")
    p.add_argument("--samples", type=int, default=500,
                   help="weight samples of the predictive (default 500)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the half-moons, the initialisation and the weight noise "
                        "(default 0)")
    p.add_argument("--progress", action="store_true",
                   help="a progress bar per epoch and a line after each")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bars (the default; kept for symmetry with train)")
    p.set_defaults(func=cmd_demo)
    return p
