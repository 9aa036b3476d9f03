"""The ``bbb-gluon`` command: ``train``, ``demo`` (and ``python -m bbb_gluon``).

Every user error (unknown dataset, impossible hyperparameter, a folder that is not a run,
a corrupt checkpoint, missing data) ends with one line on stderr and exit status 2;
nothing already on disk is overwritten.
"""

import argparse
import json
import math
import os
import sys
import time

__all__ = ["main"]

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A problem with what the user asked for (reported as one line)."""


def _contexts(spec):
    import mxnet as mx

    ctxs = []
    for part in spec.split(","):
        kind, _, index = part.strip().partition(":")
        if kind not in ("cpu", "gpu") or (index and not index.isdigit()):
            raise UsageError(f"--ctx: cannot read {part!r}; use cpu, gpu, gpu:0,gpu:1 ...")
        index = int(index or 0)
        if kind == "gpu":
            if index >= mx.context.num_gpus():
                raise UsageError(f"--ctx: {part} requested but this machine has "
                                 f"{mx.context.num_gpus()} GPU(s) visible to MXNet")
            ctxs.append(mx.gpu(index))
        else:
            ctxs.append(mx.cpu(index))
    if len(set(ctxs)) != len(ctxs):
        raise UsageError(f"--ctx lists a device twice: {spec}")
    return ctxs


def _hidden(text):
    try:
        units = [int(u) for u in text.split(",") if u.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected units like 400,400, got {text!r}") from None
    if not units or min(units) < 1:
        raise argparse.ArgumentTypeError(f"expected positive units like 400,400, got {text!r}")
    return units


def _weighting(text):
    if text in ("uniform", "blundell"):
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"weighting must be uniform, blundell or a number, got {text!r}") from None


def _add_train_args(p):
    g = p.add_argument_group("data")
    g.add_argument("--dataset", default="mnist", help="mnist or fashion-mnist (default mnist)")
    g.add_argument("--data-dir", default=None,
                   help="folder with mnist/ and fashion-mnist/ (default: $BBB_GLUON_DATA, "
                        "else MXNet's download)")
    g.add_argument("--transform", default="126", choices=["126", "255", "standardize"],
                   help="pixel scaling: divide by 126 (the paper's), by 255, or standardise")
    g.add_argument("--num-valid", type=int, default=10000,
                   help="training images held out for validation (default 10000: 50k/10k)")
    g.add_argument("--subset", type=int, default=None,
                   help="use at most this many images of each split (quick runs)")
    g = p.add_argument_group("model")
    g.add_argument("--model", default="bbb", help="bbb, plain or dropout (default bbb)")
    g.add_argument("--hidden", type=_hidden, default=[400, 400],
                   help="units per hidden layer, comma-separated (default 400,400)")
    g.add_argument("--activation", default="relu", help="relu, tanh, sigmoid, softrelu")
    g.add_argument("--dropout", type=float, default=0.5, help="drop rate of --model dropout")
    g = p.add_argument_group("prior and posterior (bbb)")
    g.add_argument("--prior", default="scale_mixture", choices=["scale_mixture", "gaussian"])
    g.add_argument("--pi", type=float, default=0.5, help="mixture weight (default 0.5)")
    g.add_argument("--log-sigma1", type=float, default=0.0,
                   help="natural log of the wide component's sigma (default 0: sigma1=1)")
    g.add_argument("--log-sigma2", type=float, default=-6.0,
                   help="natural log of the narrow component's sigma (default -6)")
    g.add_argument("--prior-sigma", type=float, default=1.0, help="sigma of --prior gaussian")
    g.add_argument("--complexity", default="mc", choices=["mc", "kl"],
                   help="Monte-Carlo complexity cost, or closed-form KL (Gaussian prior)")
    g.add_argument("--weighting", type=_weighting, default="uniform",
                   help="complexity weighting: uniform, blundell, or a constant")
    g.add_argument("--samples", type=int, default=1, help="weight samples per step")
    g.add_argument("--mu-init", default="normal", choices=["normal", "copy"])
    g.add_argument("--mu-scale", type=float, default=0.1)
    g.add_argument("--rho-init", type=float, default=-3.0)
    g = p.add_argument_group("optimisation")
    g.add_argument("--epochs", type=int, default=10)
    g.add_argument("--optimizer", default="adam", choices=["adam", "sgd"])
    g.add_argument("--lr", type=float, default=1e-3)
    g.add_argument("--batch-size", type=int, default=128)
    g.add_argument("--seed", type=int, default=0)
    g = p.add_argument_group("evaluation and output")
    g.add_argument("--eval-samples", type=int, default=10,
                   help="weight samples of the per-epoch Monte-Carlo validation error")
    g.add_argument("--test-samples", type=int, default=10,
                   help="weight samples of the final Monte-Carlo test error (default 10)")
    g.add_argument("--ctx", default="cpu", help="cpu, gpu, gpu:0,gpu:1 or cpu:0,cpu:1")
    g.add_argument("--out", default=None,
                   help="run folder (default runs/<dataset>-<model>-<hidden>-s<seed>)")
    g.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its latest checkpoint "
                        "(its stored settings are used; --epochs may extend it)")
    g.add_argument("--no-progress", action="store_true", help="no progress bars")


def _config_from_args(args):
    from .training import TrainConfig

    if args.prior == "gaussian":
        prior = {"kind": "gaussian", "sigma": args.prior_sigma}
    else:
        prior = {"kind": "scale_mixture", "pi": args.pi, "sigma1": math.exp(args.log_sigma1),
                 "sigma2": math.exp(args.log_sigma2)}
    return TrainConfig(
        model=args.model, hidden=tuple(args.hidden), activation=args.activation,
        epochs=args.epochs, optimizer=args.optimizer, lr=args.lr, batch_size=args.batch_size,
        samples=args.samples, weighting=args.weighting, complexity=args.complexity,
        prior=prior, mu_init=args.mu_init, mu_scale=args.mu_scale, rho_init=args.rho_init,
        dropout=args.dropout, eval_samples=args.eval_samples, seed=args.seed)


def cmd_train(args):
    from . import data, plotting
    from .prediction import error_rate, predict_proba
    from .training import TrainConfig, TrainingInterrupted, fit, load_run

    if args.test_samples < 0:
        raise UsageError(f"--test-samples must be >= 0, got {args.test_samples}")
    if args.resume:
        if not args.out:
            raise UsageError("--resume needs --out RUN_DIR")
        stored = _read_run_config(args.out)
        config = TrainConfig.from_dict(stored["train"])
        if "--epochs" in sys.argv:
            config.epochs = args.epochs
            config.validate()
        data_args = stored["data"]
    else:
        config = _config_from_args(args)
        data_args = {"dataset": args.dataset, "transform": args.transform,
                     "num_valid": args.num_valid, "subset": args.subset,
                     "data_dir": args.data_dir}
        if data_args["dataset"] not in data.DATASETS:
            raise UsageError(f"unknown dataset {args.dataset!r}; choose one of {data.DATASETS}")
    out = args.out or os.path.join("runs", f"{data_args['dataset']}-{config.model}-"
                                   f"{'x'.join(map(str, config.hidden))}-s{config.seed}")
    if not args.resume and os.path.exists(os.path.join(out, "config.json")):
        raise UsageError(f"{out} already holds a run; use --resume or another --out "
                         "(nothing was changed)")
    ctxs = _contexts(args.ctx)
    splits = data.load_dataset(data_args["dataset"], root=data_args.get("data_dir"),
                               transform=data_args["transform"],
                               num_valid=data_args["num_valid"], seed=config.seed,
                               subset=data_args["subset"])
    print(f"{splits.name}: {len(splits.train[1])} train, {len(splits.valid[1])} validation, "
          f"{len(splits.test[1])} test images; run folder {out}")
    os.makedirs(out, exist_ok=True)
    t0 = time.perf_counter()
    try:
        result = fit(config, splits.train, splits.valid, run_dir=out, ctx=ctxs,
                     resume=args.resume, progress=not args.no_progress,
                     extra_config={"data": data_args})
    except TrainingInterrupted:
        print(f"interrupted: checkpoint saved in {out}/checkpoints; continue with "
              f"bbb-gluon train --out {out} --resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    wall = time.perf_counter() - t0
    history = result.history
    net, posterior, _, meta = load_run(out, "best", ctx=ctxs[0])
    Xt, yt = splits.test
    metrics = {"dataset": splits.name, "model": config.model, "hidden": list(config.hidden),
               "epochs": len(history), "best_epoch": meta["best"]["epoch"],
               "seconds_per_epoch": sum(r["seconds"] for r in history) / max(len(history), 1),
               "wall_seconds_this_invocation": wall,
               "test_error_means": error_rate(predict_proba(net, Xt, posterior, 0,
                                                            ctx=ctxs[0]), yt)}
    if posterior is not None and args.test_samples > 0:
        metrics["test_samples"] = args.test_samples
        metrics["test_error_mc"] = error_rate(
            predict_proba(net, Xt, posterior, args.test_samples, ctx=ctxs[0]), yt)
    if history and history[-1].get("valid_error") is not None:
        metrics["best_valid_error"] = min(r["valid_error"] for r in history)
    with open(os.path.join(out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
    plotting.plot_learning_curve(history, os.path.join(out, "learning_curve.png"),
                                 title=f"{splits.name} {config.model} {config.hidden}")
    line = f"test error {100 * metrics['test_error_means']:.2f}% with the means"
    if "test_error_mc" in metrics:
        line += (f", {100 * metrics['test_error_mc']:.2f}% with {args.test_samples} "
                 "weight samples")
    print(f"{line} (best epoch {metrics['best_epoch']} of {len(history)})")
    print(f"wrote {out}/config.json, metrics.json, history.csv, history.json, "
          f"learning_curve.png, checkpoints/")
    return 0


def _read_run_config(run_dir):
    path = os.path.join(run_dir, "config.json")
    if not os.path.isfile(path):
        raise UsageError(f"{run_dir} is not a run folder (no config.json)")
    try:
        with open(path) as f:
            stored = json.load(f)
        stored["train"], stored["data"]  # noqa: B018
    except (ValueError, KeyError, TypeError):
        raise UsageError(f"{path} is corrupt or not a bbb_gluon run configuration") from None
    return stored


def cmd_demo(args):
    """Bayes by Backprop on two half-moons, offline, in about a minute."""
    import mxnet as mx
    import numpy as np

    from . import data, plotting
    from .prediction import error_rate, predict_proba, predict_samples
    from .training import TrainConfig, fit

    if args.epochs < 1 or args.samples < 1:
        raise UsageError("--epochs and --samples must be >= 1")
    X, y = data.two_moons(1000, noise=0.2, seed=args.seed)
    X_train, y_train, X_test, y_test = X[:500], y[:500], X[500:], y[500:]
    config = TrainConfig(model="bbb", hidden=(5, 5), activation="tanh", num_inputs=2,
                         num_outputs=1, likelihood="bernoulli", epochs=args.epochs,
                         lr=0.01, batch_size=50, prior={"kind": "gaussian", "sigma": 1.0},
                         complexity="mc", mu_scale=0.5, rho_init=-3.0, eval_samples=0,
                         seed=args.seed)
    os.makedirs(args.out, exist_ok=True)
    print(f"Bayes by Backprop on two half-moons: 500 train / 500 test points, 2x5 tanh, "
          f"N(0,1) prior, {args.epochs} epochs")
    t0 = time.perf_counter()
    result = fit(config, (X_train, y_train), ctx=mx.cpu(), progress=not args.no_progress)
    seconds = time.perf_counter() - t0
    net, posterior = result.net, result.posterior
    acc_mc = 1 - error_rate(predict_proba(net, X_test, posterior, args.samples,
                                          likelihood="bernoulli"), y_test)
    acc_means = 1 - error_rate(predict_proba(net, X_test, posterior, 0,
                                             likelihood="bernoulli"), y_test)
    grid = np.linspace(-3, 3, 100, dtype=np.float32)
    xx, yy = np.meshgrid(grid, grid)
    points = np.stack([xx.ravel(), yy.ravel()], axis=1)
    p1 = predict_samples(net, posterior, points, args.samples, likelihood="bernoulli")[:, :, 1]
    mean, std = p1.mean(axis=0).reshape(xx.shape), p1.std(axis=0).reshape(xx.shape)
    mean_png = os.path.join(args.out, "demo_predictive_mean.png")
    std_png = os.path.join(args.out, "demo_predictive_std.png")
    plotting.plot_grid_map(xx, yy, mean, X_test, y_test, label="P(class 1)", vmin=0, vmax=1,
                           title=f"predictive mean ({args.samples} weight samples)",
                           path=mean_png)
    plotting.plot_grid_map(xx, yy, std, X_test, y_test, cmap="viridis", label="std",
                           title="predictive standard deviation", path=std_png)
    print(f"test accuracy {100 * acc_mc:.1f}% ({args.samples}-sample predictive), "
          f"{100 * acc_means:.1f}% with the means; trained in {seconds:.1f} s")
    print(f"wrote {mean_png} and {std_png}")
    return 0


def build_parser():
    parser = argparse.ArgumentParser(
        prog="bbb-gluon", description="Bayes by Backprop (Blundell et al. 2015) on MXNet Gluon.")
    from . import __version__

    parser.add_argument("--version", action="version", version=f"bbb_gluon {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train", help="train bbb / plain / dropout MLPs on (Fashion-)MNIST",
                       description="Train on (Fashion-)MNIST; writes config.json, metrics.json, "
                                   "history.csv/json, learning_curve.png and checkpoints/ "
                                   "into the run folder.")
    _add_train_args(p)
    p.set_defaults(func=cmd_train)
    p = sub.add_parser("demo", help="offline demo: two half-moons, about a minute",
                       description="Bayes by Backprop on two interleaved half-moons generated "
                                   "in code (1,000 points, noise 0.2, half held out; 2 hidden "
                                   "tanh layers of 5 units, N(0,1) prior). Prints the test "
                                   "accuracy and writes PNGs of the predictive mean and "
                                   "standard deviation over a grid.")
    p.add_argument("--out", default="runs/demo", help="folder for the PNGs (default runs/demo)")
    p.add_argument("--epochs", type=int, default=300)
    p.add_argument("--samples", type=int, default=500,
                   help="weight samples of the predictive (default 500)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    from .data import DataFileError, DatasetNotFoundError
    from .posterior import PosteriorMismatchError
    from .training import CheckpointError

    try:
        return args.func(args)
    except (UsageError, ValueError, CheckpointError, PosteriorMismatchError, DataFileError,
            DatasetNotFoundError, FileNotFoundError) as e:
        message = " ".join(str(e).split()) if not isinstance(e, DatasetNotFoundError) else str(e)
        print(f"bbb-gluon {args.command}: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
