"""The ``bbb-gluon`` command: ``train``, ``evaluate``, ``prune``, ``compare``, ``weights``,
``bandit``, ``demo`` (and ``python -m bbb_gluon``).

Every user error (unknown dataset, impossible hyperparameter, a folder that is not a run,
a corrupt checkpoint, missing data) ends with one line on stderr and exit status 2;
nothing already on disk is overwritten.
"""

import argparse
import json
import math
import os
import signal
import sys
import textwrap
import time

__all__ = ["main"]

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_DIVERGED = 3
EXIT_INTERRUPTED = 130

# Named sets of `train` options. An option given on the command line wins over the recipe.
RECIPES = {
    # The paper's update (plain SGD, lr 1e-3 on the summed minibatch cost of eq. 8) with the
    # remaining choices of the public reproduction that reported 1.31% at 2x1200
    # (JINKEHE/BayesByBackprop): 600 epochs, lr x0.1 after epoch 300, pi=3/4, sigma1=1,
    # sigma2=e^-8, uniform weighting, mu ~ U(-0.03, 0.03), rho ~ U(-3.5, -3), one sample,
    # all 60,000 training images; the end-of-training network is the one reported.
    "paper": {"optimizer": "sgd", "lr": 1e-3, "loss_reduction": "sum",
              "lr_decay_epochs": [300], "lr_decay_factor": 0.1, "epochs": 600,
              "prior": "scale_mixture", "pi": 0.75, "log_sigma1": 0.0, "log_sigma2": -8.0,
              "weighting": "uniform", "complexity": "mc", "samples": 1,
              "mu_init": "uniform", "mu_scale": 0.03, "rho_init": [-3.5, -3.0],
              "num_valid": 0, "monitor_test": True, "eval_samples": 0,
              "test_samples": 100},
}


class UsageError(Exception):
    """A problem with what the user asked for (reported as one line)."""


_PROGRAM = {"running": False}  # main() runs as the program (not called from Python)


def _stop_listening():
    """The program is stopping after Ctrl-C: more Ctrl-C (or SIGTERM) while it prints and
    exits changes nothing, instead of killing it half-way with another status. (Only as a
    program: a Python caller of main() keeps its handlers.)"""
    if _PROGRAM["running"]:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)


def _checked(function, *args, **kwargs):
    """``function(*args, **kwargs)`` for a call that turns the user's arguments into a
    configuration or reads their input: its ``ValueError`` is theirs to fix (a usage
    error). A ``ValueError`` anywhere else is a bug and keeps its traceback."""
    try:
        return function(*args, **kwargs)
    except UsageError:
        raise
    except ValueError as e:
        raise UsageError(str(e)) from e


class _HelpFormatter(argparse.HelpFormatter):
    """Help lines that never break inside an option name such as --lr-decay-epochs."""

    def _split_lines(self, text, width):
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad option is one line on stderr (no usage block) and exit 2."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


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


def _rho_init(text):
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) == 1:
        return values[0]
    if len(values) == 2 and values[0] <= values[1]:
        return values
    raise argparse.ArgumentTypeError(
        f"expected a number like -3 or a range LOW,HIGH like -3.5,-3, got {text!r}")


def _epoch_list(text):
    try:
        epochs = [int(e) for e in text.split(",") if e.strip()]
    except ValueError:
        epochs = [0]
    if any(e < 1 for e in epochs) or epochs != sorted(set(epochs)):
        raise argparse.ArgumentTypeError(
            f"expected increasing epoch numbers like 300 or 200,400, got {text!r}")
    return epochs


def _recipe_help(name):
    def option(key, value):
        flag = "--" + key.replace("_", "-")
        if value is True:
            return flag
        if isinstance(value, list):  # written with '=' so that argparse reads -3.5,-3
            return flag + "=" + ",".join(f"{v:g}" for v in value)
        return f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}"

    return ", ".join(option(k, v) for k, v in RECIPES[name].items())


def _add_train_args(p):
    p.add_argument("--recipe", choices=sorted(RECIPES), default=None,
                   help="a named set of options; options given beside it win. paper: "
                        + _recipe_help("paper"))
    g = p.add_argument_group("data")
    g.add_argument("--dataset", default="mnist", help="mnist or fashion-mnist (default mnist)")
    g.add_argument("--data-dir", default=None,
                   help="folder with mnist/ and fashion-mnist/ (default: $BBB_GLUON_DATA, "
                        "else MXNet's download)")
    g.add_argument("--transform", default="126", choices=["126", "255", "standardize"],
                   help="pixel scaling: divide by 126 (the paper's), by 255, or standardise")
    g.add_argument("--num-valid", type=int, default=10000,
                   help="training images held out for validation (default 10000: 50k/10k; "
                        "0: train on all 60,000 and report the end-of-training network)")
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
    g.add_argument("--mu-init", default="normal", choices=["normal", "uniform"],
                   help="mu ~ N(0, mu_scale^2) (normal, default) or U(-mu_scale, mu_scale)")
    g.add_argument("--mu-scale", type=float, default=0.1,
                   help="standard deviation (normal) or half-width (uniform) of mu's start")
    g.add_argument("--rho-init", type=_rho_init, default=-3.0,
                   help="initial rho: a constant (default -3: sigma 0.049) or a range "
                        "LOW,HIGH drawn uniformly (write --rho-init=-3.5,-3)")
    g = p.add_argument_group("optimisation")
    g.add_argument("--epochs", type=int, default=None,
                   help="epochs in all (default 10; with --resume: the stored count)")
    g.add_argument("--optimizer", default="adam", choices=["adam", "sgd"],
                   help="adam (default) or sgd: plain gradient descent, no momentum")
    g.add_argument("--lr", type=float, default=1e-3,
                   help="learning rate on the gradient of the batch cost that "
                        "--loss-reduction names (default 1e-3)")
    g.add_argument("--loss-reduction", default="mean", choices=["mean", "sum"],
                   help="the optimiser differentiates the batch's mean cost (default, "
                        "Gluon's convention) or its sum (the paper's eq. 8: SGD at lr 1e-3 "
                        "with sum equals lr 0.128 with mean at batch 128)")
    g.add_argument("--lr-decay-epochs", type=_epoch_list, default=[],
                   help="epochs after which the learning rate is multiplied by "
                        "--lr-decay-factor, e.g. 300 or 200,400 (default none)")
    g.add_argument("--lr-decay-factor", type=float, default=0.1,
                   help="factor of each learning-rate decay (default 0.1)")
    g.add_argument("--rho-lr-mult", type=float, default=1.0,
                   help="multiplier of the learning rate for rho (default 1: the same step "
                        "as mu)")
    g.add_argument("--batch-size", type=int, default=128)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--engine", default="auto", choices=["auto", "fused", "reference"],
                   help="how a bbb step is computed: the compiled CPU kernels (fused), "
                        "MXNet operators with autograd (reference), or fused where it "
                        "builds (auto, default)")
    g = p.add_argument_group("evaluation and output")
    g.add_argument("--eval-samples", type=int, default=10,
                   help="weight samples of the per-epoch Monte-Carlo validation error")
    g.add_argument("--test-samples", type=int, default=None,
                   help="weight samples of the final Monte-Carlo test error (default 10; "
                        "with --resume: the run's stored count)")
    g.add_argument("--monitor-test", action="store_true",
                   help="record the test error after every epoch (history columns test_error, "
                        "test_error_mc); it chooses nothing")
    g.add_argument("--ctx", default="cpu", help="cpu, gpu, gpu:0,gpu:1 or cpu:0,cpu:1")
    g.add_argument("--kvstore", default=None,
                   choices=("device", "local", "dist_sync", "dist_sync_device"),
                   help="how gradients are combined: across this process's devices (device, "
                        "the default; local), or across the workers of a run started by "
                        "bbb-gluon launch (dist_sync, dist_sync_device)")
    g.add_argument("--out", default=None,
                   help="run folder (default runs/<dataset>-<model>-<hidden>-s<seed>)")
    g.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its latest checkpoint "
                        "(its stored settings are used; --epochs may extend it)")
    g.add_argument("--no-progress", action="store_true", help="no progress bars")


def _sigma(log_sigma, option):
    """exp(log_sigma), or a usage error where it is not a positive finite number."""
    try:
        sigma = math.exp(log_sigma)
    except OverflowError:
        sigma = math.inf
    if not 0 < sigma < math.inf:
        raise UsageError(f"{option} must give a positive finite sigma (about -700 to 700), "
                         f"got {log_sigma!r}")
    return sigma


def _config_from_args(args):
    from .training import TrainConfig

    if args.prior == "gaussian":
        prior = {"kind": "gaussian", "sigma": args.prior_sigma}
    else:
        prior = {"kind": "scale_mixture", "pi": args.pi,
                 "sigma1": _sigma(args.log_sigma1, "--log-sigma1"),
                 "sigma2": _sigma(args.log_sigma2, "--log-sigma2")}
    return TrainConfig(
        model=args.model, hidden=tuple(args.hidden), activation=args.activation,
        epochs=10 if args.epochs is None else args.epochs, optimizer=args.optimizer,
        lr=args.lr, batch_size=args.batch_size,
        samples=args.samples, weighting=args.weighting, complexity=args.complexity,
        prior=prior, mu_init=args.mu_init, mu_scale=args.mu_scale, rho_init=args.rho_init,
        dropout=args.dropout, eval_samples=args.eval_samples, seed=args.seed,
        engine=args.engine, loss_reduction=args.loss_reduction,
        lr_decay_epochs=tuple(args.lr_decay_epochs), lr_decay_factor=args.lr_decay_factor,
        rho_lr_mult=args.rho_lr_mult)


def cmd_train(args):
    from . import data, plotting
    from ._files import atomic_write_text
    from .prediction import error_rate, predict_proba
    from .training import TrainConfig, TrainingDiverged, TrainingInterrupted, fit, load_run

    if args.test_samples is not None and args.test_samples < 0:
        raise UsageError(f"--test-samples must be >= 0, got {args.test_samples}")
    if args.resume:
        if not args.out:
            raise UsageError("--resume needs --out RUN_DIR")
        if args.recipe:
            raise UsageError("--recipe with --resume: a resumed run keeps its stored settings")
        stored = _read_run_config(args.out)
        config = _checked(TrainConfig.from_dict, stored["train"])
        if args.epochs is not None:
            config.epochs = args.epochs
            _checked(config.validate)
        data_args = stored["data"]
        # Runs written before the count was stored were evaluated with the default, 10.
        evaluation = stored.get("evaluation", {})
        stored_samples = evaluation.get("test_samples", 10) if isinstance(evaluation, dict) \
            else None
        if isinstance(stored_samples, bool) or not isinstance(stored_samples, int) \
                or stored_samples < 0:
            raise UsageError(f"{args.out}/config.json: evaluation.test_samples must be a "
                             f"count >= 0, got {stored_samples!r}")
        test_samples = stored_samples if args.test_samples is None else args.test_samples
    else:
        config = _checked(_config_from_args, args)
        data_args = {"dataset": args.dataset, "transform": args.transform,
                     "num_valid": args.num_valid, "subset": args.subset,
                     "data_dir": args.data_dir, "monitor_test": args.monitor_test}
        test_samples = 10 if args.test_samples is None else args.test_samples
        if data_args["dataset"] not in data.DATASETS:
            raise UsageError(f"unknown dataset {args.dataset!r}; choose one of {data.DATASETS}")
    out = args.out or os.path.join("runs", f"{data_args['dataset']}-{config.model}-"
                                   f"{'x'.join(map(str, config.hidden))}-s{config.seed}")
    # A config.json alone is a run that stopped (diverged) before its first checkpoint:
    # it holds nothing to keep, so a new run may take the folder.
    if not args.resume and os.path.exists(os.path.join(out, "config.json")) and any(
            os.path.exists(os.path.join(out, name))
            for name in ("checkpoints/latest.params", "history.json", "metrics.json")):
        raise UsageError(f"{out} already holds a run; use --resume or another --out "
                         "(nothing was changed)")
    ctxs = _contexts(args.ctx)
    group = _worker_group(args.kvstore)
    lead = group.rank == 0  # in a distributed run, rank 0 reports and writes the files
    splits = _checked(data.load_dataset, data_args["dataset"], root=data_args.get("data_dir"),
                      transform=data_args["transform"], num_valid=data_args["num_valid"],
                      seed=config.seed, subset=data_args["subset"])
    if lead:
        print(f"{splits.name}: {len(splits.train[1])} train, {len(splits.valid[1])} "
              f"validation, {len(splits.test[1])} test images; run folder {out}"
              + (f"; {group.num_workers} workers" if group.distributed else ""))
        os.makedirs(out, exist_ok=True)
    t0 = time.perf_counter()
    try:
        result = fit(config, splits.train, splits.valid, run_dir=out, ctx=ctxs,
                     kvstore=group.kvstore or args.kvstore,
                     resume=args.resume, progress=not args.no_progress,
                     extra_config={"data": data_args,
                                   "evaluation": {"test_samples": test_samples}},
                     test=splits.test if data_args.get("monitor_test") else None)
    except TrainingInterrupted as e:
        _stop_listening()
        if lead:
            print(f"interrupted: checkpoint saved in {out}/checkpoints; continue with "
                  f"bbb-gluon train --out {out} --resume"
                  + (" (under bbb-gluon launch, with the same workers)"
                     if group.distributed else ""), file=sys.stderr)
        return e.exit_status
    except TrainingDiverged as e:
        print(f"bbb-gluon train: error: {e}", file=sys.stderr)
        return EXIT_DIVERGED
    wall = time.perf_counter() - t0
    if not lead:
        return 0
    history = result.history
    Xt, yt = splits.test

    def test_errors(which):
        net, posterior, _, meta = load_run(out, which, ctx=ctxs[0])
        errors = {"epoch": meta["epoch"],
                  "test_error_means": error_rate(predict_proba(net, Xt, posterior, 0,
                                                               ctx=ctxs[0]), yt)}
        if posterior is not None and test_samples > 0:
            errors["test_samples"] = test_samples
            errors["test_error_mc"] = error_rate(
                predict_proba(net, Xt, posterior, test_samples, ctx=ctxs[0]), yt)
        return errors

    has_valid = bool(history) and history[-1].get("valid_error") is not None
    best = test_errors("best")
    end = test_errors("latest") if has_valid else dict(best)
    best_epoch = best.pop("epoch")
    metrics = {"dataset": splits.name, "model": config.model, "hidden": list(config.hidden),
               "epochs": len(history), "best_epoch": best_epoch,
               "selected_by": ("lowest validation error (means)" if has_valid
                               else "end of training (no validation split)"),
               "seconds_per_epoch": sum(r["seconds"] for r in history) / max(len(history), 1),
               "wall_seconds_this_invocation": wall, **best,
               "end_of_training": end}
    if has_valid:
        metrics["best_valid_error"] = min(r["valid_error"] for r in history)
    atomic_write_text(os.path.join(out, "metrics.json"), json.dumps(metrics, indent=1))
    _close(plotting.plot_learning_curve(history, os.path.join(out, "learning_curve.png"),
                                        title=f"{splits.name} {config.model} {config.hidden}"))
    line = f"test error {100 * metrics['test_error_means']:.2f}% with the means"
    if "test_error_mc" in metrics:
        line += (f", {100 * metrics['test_error_mc']:.2f}% with {test_samples} "
                 "weight samples")
    print(f"{line} (best epoch {metrics['best_epoch']} of {len(history)})")
    if has_valid:
        line = f"end of training: {100 * end['test_error_means']:.2f}% with the means"
        if "test_error_mc" in end:
            line += f", {100 * end['test_error_mc']:.2f}%"
        print(line)
    print(f"wrote {out}/config.json, metrics.json, history.csv, history.json, "
          f"learning_curve.png, checkpoints/")
    return 0


def _refuse_to_overwrite(args, paths):
    """A UsageError naming the first of ``paths`` that exists, unless ``--force``."""
    existing = [p for p in paths if os.path.exists(p)]
    if existing and not args.force:
        raise UsageError(f"{existing[0]} already exists; use --force to overwrite "
                         "(nothing was changed)")


def _close(fig):
    """A command writes its figures to files; in-process callers (tests) must not
    accumulate them."""
    import matplotlib.pyplot as plt

    plt.close(fig)


def _worker_group(kvstore):
    """This process's WorkerGroup; a distributed kvstore outside a launched run is a usage
    error, not a hang while MXNet looks for a scheduler."""
    from .distributed import DIST_TYPES, WorkerGroup

    if kvstore in DIST_TYPES and os.environ.get("DMLC_ROLE") != "worker":
        raise UsageError(f"--kvstore {kvstore} runs under bbb-gluon launch (DMLC_ROLE=worker "
                         "and the scheduler's address are not set)")
    return WorkerGroup(kvstore if kvstore in DIST_TYPES else None)


def _launch_argv(command):
    """A ``bbb-gluon`` subcommand runs as ``python -m bbb_gluon ...`` (``train`` gets
    ``--kvstore=dist_sync`` unless it names one); anything else as given."""
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("give the workers' command after --, e.g. "
                         "bbb-gluon launch -n 2 -- train --epochs 1")
    if command[0] == "train":
        kv = [a for a in command if a == "--kvstore" or a.startswith("--kvstore=")]
        if not kv:
            command = [*command, "--kvstore=dist_sync"]
        else:
            i = command.index(kv[0])
            value = kv[0].split("=", 1)[1] if "=" in kv[0] else (
                command[i + 1] if i + 1 < len(command) else "")
            if not value.startswith("dist_sync"):
                raise UsageError(f"launched workers need --kvstore dist_sync or "
                                 f"dist_sync_device, not {value!r}")
        return [sys.executable, "-m", "bbb_gluon", *command]
    if command[0] in ("evaluate", "prune", "compare", "weights", "bandit", "demo", "launch"):
        raise UsageError(f"{command[0]} does not train on several workers; launch runs "
                         "train or a program of yours")
    return list(command)


def cmd_launch(args):
    from .distributed import LaunchError, LaunchInterrupted, launch, launch_commands

    argv = _launch_argv(args.command)
    for name in ("workers", "servers"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads must be >= 1, got {args.threads}")
    if args.timeout is not None and not args.timeout > 0:
        raise UsageError(f"--timeout must be > 0 seconds, got {args.timeout}")
    hosts = None
    if args.host_file:
        try:
            with open(args.host_file) as f:
                hosts = [line.split("#")[0].strip() for line in f]
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"--host-file {args.host_file}: cannot read it ({e})") from None
        hosts = [h for h in hosts if h]
        if not hosts:
            raise UsageError(f"{args.host_file} names no host (one per line)")
    if args.print_commands:
        for host, role, text in launch_commands(argv, args.workers, args.servers,
                                                hosts or [args.host], port=args.port or 9091,
                                                threads=args.threads or 1):
            print(f"# {role} on {host}\n{text}")
        return 0
    try:
        return launch(argv, args.workers, args.servers, timeout=args.timeout,
                      threads=args.threads, host=args.host, port=args.port, ssh_hosts=hosts)
    except LaunchError as e:
        print(f"bbb-gluon launch: error: {e}", file=sys.stderr)
        return EXIT_FAILURE
    except LaunchInterrupted as e:
        _stop_listening()
        print("bbb-gluon launch: interrupted; every process of the run has stopped",
              file=sys.stderr)
        return e.exit_status


def _read_run_config(run_dir):
    from .runs import read_run_config

    return read_run_config(run_dir)


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
    # 300 short epochs: a bar per epoch would only scroll; --progress shows them.
    result = fit(config, (X_train, y_train), ctx=mx.cpu(),
                 progress=args.progress and not args.no_progress)
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
    _close(plotting.plot_grid_map(xx, yy, mean, X_test, y_test, label="P(class 1)", vmin=0,
                                  vmax=1, title=f"predictive mean ({args.samples} weight "
                                  "samples)", path=mean_png))
    _close(plotting.plot_grid_map(xx, yy, std, X_test, y_test, cmap="viridis", label="std",
                                  title="predictive standard deviation", path=std_png))
    print(f"test accuracy {100 * acc_mc:.1f}% ({args.samples}-sample predictive), "
          f"{100 * acc_means:.1f}% with the means; trained in {seconds:.1f} s")
    print(f"wrote {mean_png} and {std_png}")
    return 0


def _other_dataset(name):
    from . import data

    others = [d for d in data.DATASETS if d != name]
    return others[0] if others else None


def _load_test_data(stored, seed, data_dir):
    """The run's test split (as it was trained) and its pixel transform."""
    from . import data

    try:
        settings = {k: stored["data"][k] for k in ("dataset", "transform", "num_valid",
                                                   "subset")}
    except KeyError:
        raise UsageError("config.json has no usable data settings (dataset, transform, "
                         "num_valid, subset)") from None
    return _checked(data.load_dataset, settings["dataset"], root=data_dir,
                    transform=settings["transform"], num_valid=settings["num_valid"],
                    seed=seed, subset=settings["subset"])


def _json_safe(value):
    """NaN (an empty reliability bin) as null: json.dump would write invalid JSON."""
    import numpy as np

    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [_json_safe(v) for v in (value.tolist() if isinstance(value, np.ndarray)
                                        else value)]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    return value


def _for_checkpoint(run_dir, name, which):
    """The path of an output file: ``name`` for the best checkpoint, ``stem_latest.ext`` for
    the latest, so the two sets of results sit side by side in the run folder."""
    if which == "latest":
        stem, ext = os.path.splitext(name)
        name = f"{stem}_latest{ext}"
    return os.path.join(run_dir, name)


def cmd_evaluate(args):
    """Test error, calibration, and OOD detection of a trained run."""
    import matplotlib.pyplot as plt

    from . import data, plotting
    from ._files import atomic_write_text
    from .evaluation import evaluate_model
    from .training import load_run

    if args.samples < 1:
        raise UsageError(f"--samples must be >= 1, got {args.samples}")
    if args.bins < 1:
        raise UsageError(f"--bins must be >= 1, got {args.bins}")
    run_dir = args.run_dir
    stored = _read_run_config(run_dir)
    which = args.checkpoint
    out_json = _for_checkpoint(run_dir, "evaluation.json", which)
    dataset = stored["data"].get("dataset")
    ood = args.ood if args.ood is not None else _other_dataset(dataset)
    if ood == "none":
        ood = None
    _refuse_to_overwrite(args, [out_json] + [
        _for_checkpoint(run_dir, name, which) for name in ("reliability.png",
                                                           "least_certain.png")
        + (("entropy_histograms.png",) if ood else ())])
    if ood is not None and ood not in data.DATASETS:
        raise UsageError(f"--ood: unknown dataset {ood!r}; choose one of {data.DATASETS} "
                         "or none")
    if ood is not None and ood == dataset:
        raise UsageError(f"--ood {ood} is the run's own dataset; choose another or none")
    data_dir = args.data_dir if args.data_dir is not None else stored["data"].get("data_dir")
    ctx = _contexts(args.ctx)
    if len(ctx) != 1:
        raise UsageError("--ctx: evaluate runs on one device")
    ctx = ctx[0]
    net, posterior, config, meta = load_run(run_dir, which, ctx=ctx)
    splits = _load_test_data(stored, config.seed, data_dir)
    Xt, yt = splits.test
    X_ood = None
    if ood is not None:
        images, _ = _checked(data.load_raw, ood, train=False, root=data_dir)
        # As many OOD images as in-distribution ones (a --subset run has fewer), through
        # the run's own transform: the network sees them as it would see its own data.
        X_ood = splits.transform(images[:len(yt)])

    kind = config.model
    t0 = time.perf_counter()
    evaluation = evaluate_model(net, Xt, yt, posterior, kind, args.samples, X_ood, args.bins,
                                ctx=ctx, likelihood=config.likelihood)
    result = {"run_dir": os.path.abspath(run_dir), "dataset": splits.name, "model": kind,
              "hidden": list(config.hidden), "checkpoint": which,
              "epoch": meta.get("epoch"), "batch": meta.get("batch") or 0,
              "best_epoch": meta.get("best", {}).get("epoch"), **evaluation.summary,
              "seconds": time.perf_counter() - t0}
    if result["ood"] is not None:
        result["ood"] = {"dataset": ood, **result["ood"]}
    u_in, u_out = evaluation.uncertainty_in, evaluation.uncertainty_out
    probs, reliability = evaluation.probs, evaluation.summary["reliability"]

    plots = {"reliability": _for_checkpoint(run_dir, "reliability.png", which),
             "least_certain": _for_checkpoint(run_dir, "least_certain.png", which)}
    name = f"{splits.name} {kind} {'x'.join(map(str, config.hidden))}"
    figs = [plotting.plot_reliability_diagram(reliability, plots["reliability"],
                                              title=f"{name}: {result['predictive']}",
                                              ece=result["ece"]),
            plotting.plot_least_certain(Xt, probs.argmax(axis=1), u_in["predictive_entropy"],
                                        labels=yt, path=plots["least_certain"],
                                        title=f"{name}: least certain test images")]
    if u_out is not None:
        plots["entropy_histograms"] = _for_checkpoint(run_dir, "entropy_histograms.png", which)
        with_mi = kind != "plain"
        figs.append(plotting.plot_entropy_histograms(
            u_in["predictive_entropy"], u_out["predictive_entropy"],
            u_in["mutual_information"] if with_mi else None,
            u_out["mutual_information"] if with_mi else None,
            path=plots["entropy_histograms"], labels=(f"{splits.name} (in)", f"{ood} (out)"),
            title=name))
    for fig in figs:
        plt.close(fig)
    result["plots"] = {k: os.path.basename(v) for k, v in plots.items()}
    atomic_write_text(out_json, json.dumps(_json_safe(result), indent=1) + "\n")

    pct = 100.0
    line = f"test error {pct * result['test_error_means']:.2f}% with the means"
    if kind != "plain":
        what = "weight samples" if kind == "bbb" else "dropout masks"
        line += f", {pct * result['test_error_mc']:.2f}% with {args.samples} {what}"
    print(f"{splits.name} {kind}, {_describe_checkpoint(which, meta)}: {line} "
          f"({len(yt)} test images)")
    print(f"{result['predictive']}: NLL {result['nll']:.4f}, Brier {result['brier']:.4f}, "
          f"ECE {pct * result['ece']:.2f}% ({args.bins} bins)")
    if result["ood"] is not None:
        o = result["ood"]
        text = f"OOD ({ood}, {o['num_examples']} images): AUROC {o['auroc_entropy']:.4f} " \
               "by predictive entropy"
        if o["auroc_mutual_information"] is not None:
            text += f", {o['auroc_mutual_information']:.4f} by mutual information"
        print(text)
    print(f"wrote {out_json} and {', '.join(result['plots'].values())}")
    return 0


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

    from . import plotting
    from ._files import atomic_write_text
    from .pruning import (
        evaluate_pruning,
        export_pruned,
        pruning_scores,
        thresholds,
        weight_statistics,
    )
    from .training import load_run

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


def _pct(value):
    return "-" if value is None else f"{100 * value:.2f}%"


def _setting(value):
    if isinstance(value, list | tuple):
        return "..".join(f"{v:g}" for v in value)
    return "-" if value is None else f"{value:g}"


def cmd_compare(args):
    """One line per run folder (settings, epochs, best validation error, test errors)."""

    from ._files import atomic_write_text
    from .runs import SUMMARY_COLUMNS, summarize_run

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
        from .runs import curve_column, errors_at, read_history

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

        from . import plotting
        from .runs import read_history

        names = [r["run"] for r in rows]
        # Folders of one name in different places (runs/x, results/x) keep their paths.
        labels = names if len(set(names)) == len(names) else run_dirs
        from .runs import curve_column

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


def _print_table(table):
    import numpy as np

    widths = np.max([[len(c) for c in row] for row in table], axis=0)
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def cmd_weights(args):
    """Density of the Dense weights of several runs on one axis (the paper's Figure 3)."""
    import matplotlib.pyplot as plt
    import numpy as np

    from . import plotting
    from .runs import run_weights, summarize_run

    if not args.out.lower().endswith(".png"):
        raise UsageError(f"--out must name a .png file, got {args.out!r}")
    _refuse_to_overwrite(args, [args.out])
    if args.bins < 1:
        raise UsageError(f"--bins must be >= 1, got {args.bins}")
    labels = [s.strip() for s in args.labels.split(",")] if args.labels else None
    if labels is not None and len(labels) != len(args.run_dirs):
        raise UsageError(f"--labels gives {len(labels)} labels for {len(args.run_dirs)} runs")
    ctx = _contexts(args.ctx)
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


def cmd_bandit(args):
    """Thompson sampling against epsilon-greedy agents on the Mushroom bandit (§5.3)."""
    from . import bandit
    from .data import load_mushroom

    if args.resume and args.force:
        raise UsageError("--resume continues the run in --out and --force replaces it: "
                         "give one")
    config = None
    if not args.resume:
        if args.seeds < 1:
            raise UsageError(f"--seeds must be >= 1, got {args.seeds}")
        config = _checked(
            bandit.BanditConfig,
            steps=args.steps, seeds=tuple(range(args.first_seed, args.first_seed + args.seeds)),
            hidden=args.hidden, capacity=args.buffer, updates=args.updates, batch=args.batch,
            act_samples=args.act_samples, optimizer=args.optimizer, lr=args.lr,
            prior=args.prior, prior_pi=args.pi,
            prior_sigma1=_sigma(args.log_sigma1, "--log-sigma1"),
            prior_sigma2=_sigma(args.log_sigma2, "--log-sigma2"), prior_sigma=args.prior_sigma,
            noise_sigma=args.noise_sigma, mu_init=args.mu_init, rho_init=args.rho_init,
            complexity_over=args.complexity_over)
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads must be >= 1, got {args.threads}")
    env = bandit.MushroomBandit(_checked(load_mushroom, args.data_dir))
    try:
        result = bandit.run_bandit(config, env, out=args.out, resume=args.resume,
                                   force=args.force, progress=not args.no_progress,
                                   threads=args.threads)
    except FileExistsError as e:
        raise UsageError(str(e)) from e
    except FloatingPointError as e:  # the weights diverged: the settings, not a bug
        print(f"bbb-gluon bandit: error: {e}", file=sys.stderr)
        return EXIT_DIVERGED
    except bandit.BanditInterrupted as e:
        _stop_listening()
        print(f"interrupted: {e}; continue with bbb-gluon bandit --out {args.out} --resume",
              file=sys.stderr)
        return e.exit_status
    summary = result.summary()
    print(f"{'agent':<20} {'cumulative regret (mean ± sd over seeds)':>42} "
          f"{'first 1000 steps':>17}")
    for name, d in summary.items():
        print(f"{name:<20} {d['cumulative_regret']:>31,.0f} ± {d['cumulative_regret_std']:<8,.0f} "
              f"{d['regret_first_1000']:>17,.0f}")
    print(f"{result.regret.shape[-1]:,} steps × {len(result.config.seeds)} seeds in "
          f"{result.seconds:.0f} s of kernel time; wrote {args.out}/regret.png, regret.csv, "
          "steps.csv.gz, metrics.json")
    return 0


def _describe_checkpoint(which, meta):
    epoch, batch = meta.get("epoch"), meta.get("batch") or 0
    where = (f"epoch {epoch}" if not batch
             else f"in epoch {epoch + 1}, after {batch} minibatches (interrupted)")
    return f"{which} checkpoint, {where}"


def _add_run_options(p, force_help):
    """Options shared by the commands that read a finished run folder."""
    p.add_argument("--checkpoint", choices=("best", "latest"), default="best",
                   help="best: the lowest validation error (in a run without a validation "
                        "split, the last finished epoch); latest: the last one written (the "
                        "end of training, the last finished epoch of a run still training, "
                        "or where an interrupted run stopped). The latest's files get a "
                        "_latest suffix (e.g. pruning_latest.csv), beside the best's "
                        "(default best)")
    p.add_argument("--data-dir", default=None,
                   help="folder with mnist/ and fashion-mnist/ (default: the run's, else "
                        "$BBB_GLUON_DATA)")
    p.add_argument("--ctx", default="cpu", help="one device: cpu or gpu:0 (default cpu)")
    p.add_argument("--force", action="store_true", help=force_help)


def bandit_defaults():
    from .bandit import BanditConfig

    return BanditConfig()


def build_parser():
    parser = _Parser(
        prog="bbb-gluon", description="Bayes by Backprop (Blundell et al. 2015) on MXNet Gluon.")
    from . import __version__

    parser.add_argument("--version", action="version", version=f"bbb_gluon {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser("train", help="train bbb / plain / dropout MLPs on (Fashion-)MNIST",
                       description="Train on (Fashion-)MNIST; writes config.json, metrics.json, "
                                   "history.csv/json, learning_curve.png and checkpoints/ "
                                   "into the run folder.")
    _add_train_args(p)
    p.set_defaults(func=cmd_train)
    parser.train_parser = p  # main() sets a --recipe's values as its defaults
    p = sub.add_parser("evaluate", help="test error, calibration and OOD detection of a run",
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
    _add_run_options(p, "overwrite an existing evaluation.json and plots (with --checkpoint "
                        "latest: their _latest versions)")
    p.set_defaults(func=cmd_evaluate)
    p = sub.add_parser("prune", help="signal-to-noise pruning of a bbb run (paper's Table 2)",
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
    _add_run_options(p, "overwrite an existing pruning.csv, sparse export, statistics and "
                        "plots (with --checkpoint latest: their _latest versions)")
    p.set_defaults(func=cmd_prune)
    p = sub.add_parser("compare", help="one line per run folder: settings, best validation "
                                       "error, test errors",
                       description="Summarise run folders (finished, still training, or the "
                                   "copies under results/): the prior and training settings, "
                                   "epochs run of those planned, the best validation error "
                                   "and its epoch (from history.csv), and the test errors "
                                   "once training has finished (metrics.json).")
    p.add_argument("run_dirs", metavar="RUN_DIR", nargs="+")
    p.add_argument("--sort", choices=("none", "valid"), default="none",
                   help="order: as given (none) or by best validation error (valid)")
    p.add_argument("--csv", default=None, help="also write every summary column to this CSV")
    p.add_argument("--plot", default=None,
                   help="also draw the runs' error over epochs into this PNG (validation "
                        "error, or the test error recorded with --monitor-test where a run "
                        "has no validation split)")
    p.add_argument("--at", default=None, type=_epoch_list,
                   help="also print each run's error (as --plot draws it) at these epochs, "
                        "e.g. 100,200,300,600")
    p.add_argument("--force", action="store_true",
                   help="overwrite an existing --csv or --plot file")
    p.set_defaults(func=cmd_compare)
    p = sub.add_parser("weights", help="density of the weights of several runs (paper's Fig. 3)",
                       description="Plot the density of every Dense weight (biases left out) "
                                   "of each run's best checkpoint on one axis: one draw from "
                                   "the posterior of a bbb run (or its means with --draw "
                                   "means), the weights of plain and dropout runs. Prints "
                                   "the spread of each.")
    p.add_argument("run_dirs", metavar="RUN_DIR", nargs="+")
    p.add_argument("--out", required=True, help="PNG file to write")
    p.add_argument("--labels", default=None, help="comma-separated legend labels, one per run")
    p.add_argument("--draw", choices=("sample", "means"), default="sample",
                   help="bbb runs: one posterior sample (default) or the means")
    p.add_argument("--seed", type=int, default=0, help="seed of the posterior sample")
    p.add_argument("--bins", type=int, default=200)
    p.add_argument("--ctx", default="cpu", help="one device: cpu or gpu:0 (default cpu)")
    p.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    p.set_defaults(func=cmd_weights)
    p = sub.add_parser("bandit", help="Thompson sampling on the Mushroom bandit (paper's §5.3)",
                       description="Bayes by Backprop with Thompson sampling against greedy, "
                                   "1%- and 5%-greedy agents on the UCI Mushroom bandit, every "
                                   "agent and seed advanced together by compiled kernels. "
                                   "Writes config.json, checkpoint.npz (resumable), and at the "
                                   "end steps.csv.gz, regret.csv, metrics.json, regret.png. "
                                   "Needs mushroom/agaricus-lepiota.data in the data folder.")
    p.add_argument("--out", default="runs/bandit", help="run folder (default runs/bandit)")
    p.add_argument("--data-dir", default=None,
                   help="folder with mushroom/ (default $BBB_GLUON_DATA)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its checkpoint, with its settings")
    p.add_argument("--force", action="store_true", help="replace a run already in --out")
    p.add_argument("--steps", type=int, default=50000, help="interactions (default 50,000)")
    p.add_argument("--seeds", type=int, default=5, help="runs per agent (default 5)")
    p.add_argument("--first-seed", type=int, default=0, help="seeds are FIRST.. (default 0)")
    p.add_argument("--threads", type=int, default=None,
                   help="OpenMP threads (default $OMP_NUM_THREADS, else every core)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    d = bandit_defaults()
    g = p.add_argument_group("the protocol (the paper's)")
    g.add_argument("--buffer", type=int, default=d.capacity, help="interactions kept (4096)")
    g.add_argument("--updates", type=int, default=d.updates, help="updates per step (64)")
    g.add_argument("--batch", type=int, default=d.batch, help="minibatch size (64)")
    g.add_argument("--hidden", type=int, default=d.hidden, help="units per layer (100)")
    g.add_argument("--act-samples", type=int, default=d.act_samples,
                   help="weight samples averaged per Thompson decision (2)")
    g = p.add_argument_group("choices the paper leaves open (defaults: docs/RESULTS.md)")
    g.add_argument("--optimizer", choices=("adam", "sgd"), default=d.optimizer)
    g.add_argument("--lr", type=float, default=d.lr)
    g.add_argument("--prior", choices=("mixture", "gaussian"), default=d.prior)
    g.add_argument("--pi", type=float, default=d.prior_pi, help="scale-mixture weight")
    g.add_argument("--log-sigma1", type=float, default=round(math.log(d.prior_sigma1), 6))
    g.add_argument("--log-sigma2", type=float, default=round(math.log(d.prior_sigma2), 6))
    g.add_argument("--prior-sigma", type=float, default=d.prior_sigma,
                   help="Gaussian prior's sigma")
    g.add_argument("--noise-sigma", type=float, default=d.noise_sigma,
                   help="the Gaussian likelihood's noise (rewards as they are)")
    g.add_argument("--mu-init", type=float, default=d.mu_init, help="mu ~ N(0, MU_INIT^2)")
    g.add_argument("--rho-init", type=float, default=d.rho_init)
    g.add_argument("--complexity-over", choices=("seen", "buffer"), default=d.complexity_over,
                   help="divide the complexity cost by the interactions seen so far, or by "
                        "the items in the buffer")
    p.set_defaults(func=cmd_bandit)
    p = sub.add_parser("launch", help="train on several processes or machines (MXNet's "
                                      "parameter server, dist_sync)",
                       description="Start MXNet's scheduler, SERVERS servers and WORKERS "
                                   "workers running the command after --, watch them, and "
                                   "stop every one of them when one fails, on Ctrl-C (after "
                                   "the workers have saved a checkpoint) or after --timeout. "
                                   "A train command gets --kvstore=dist_sync. The processes "
                                   "talk without authentication: use a trusted network.",
                       epilog="example: bbb-gluon launch -n 2 -s 1 -- train --epochs 1 "
                              "--out runs/two-workers")
    p.add_argument("-n", "--workers", type=int, default=2, help="workers (default 2)")
    p.add_argument("-s", "--servers", type=int, default=1, help="servers (default 1)")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds the whole run may take before every process is stopped")
    p.add_argument("--threads", type=int, default=None,
                   help="OMP_NUM_THREADS of each worker (default: the cores divided among "
                        "the workers of a machine)")
    p.add_argument("--host", default="127.0.0.1",
                   help="interface to bind on this machine (default 127.0.0.1: loopback)")
    p.add_argument("--port", type=int, default=None,
                   help="the scheduler's port (default a free one; 9091 with --host-file)")
    p.add_argument("--host-file", default=None,
                   help="machines to run on, one address per line (the scheduler on the "
                        "first), reached by ssh; each needs this folder and environment")
    p.add_argument("--print-commands", action="store_true",
                   help="print the command each process needs on its machine instead of "
                        "running anything")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="-- then the workers' command: train ... or a program of yours")
    p.set_defaults(func=cmd_launch)
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
    p.add_argument("--progress", action="store_true", help="a progress bar per epoch")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bars (the default; kept for symmetry with train)")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv=None):
    # The console script and ``python -m bbb_gluon`` call main() with no arguments.
    _PROGRAM["running"] = argv is None
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "recipe", None):
        # The recipe's values become the defaults, so options given beside it still win.
        parser.train_parser.set_defaults(**RECIPES[args.recipe])
        args = parser.parse_args(argv)
    from ._files import FileWriteError
    from .bandit import BanditCheckpointError
    from .data import DataFileError, DatasetNotFoundError
    from .posterior import PosteriorMismatchError
    from .runs import RunFolderError
    from .training import CheckpointError

    # Errors in what the user gave (arguments, files, run folders) are one line and exit 2;
    # a failing disk is one line and exit 1. Anything else is a bug: it keeps its traceback.
    try:
        return args.func(args)
    except (UsageError, CheckpointError, PosteriorMismatchError, DataFileError,
            DatasetNotFoundError, FileNotFoundError, RunFolderError,
            BanditCheckpointError) as e:
        message = " ".join(str(e).split()) if not isinstance(e, DatasetNotFoundError) else str(e)
        print(f"bbb-gluon {args.command}: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    except FileWriteError as e:
        print(f"bbb-gluon {args.command}: error: {e}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt as e:
        _stop_listening()
        print("interrupted", file=sys.stderr)
        return getattr(e, "exit_status", EXIT_INTERRUPTED)


if __name__ == "__main__":
    sys.exit(main())
