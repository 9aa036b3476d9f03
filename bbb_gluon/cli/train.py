"""``bbb-gluon train``: train one network and write its run folder. Its options show and
start from the library's defaults (``TrainConfig``'s fields, ``load_dataset``'s keywords).
"""

import argparse
import dataclasses
import math
import os
import sys
import time

from .advice import one_line_warnings, warn_if_implausible
from .common import (
    EXIT_DIVERGED,
    UsageError,
    add_prior_options,
    check_writable,
    checked,
    comma_items,
    contexts_of,
    defaults_of,
    defaults_of_function,
    epoch_list,
    prior_from_args,
    stop_listening,
    stored_run_config,
)

TEST_SAMPLES = 10  # of the final test error, when neither the option nor the run says


def _config_defaults():
    from types import SimpleNamespace

    from ..training import TrainConfig

    return SimpleNamespace(**TrainConfig.defaults())


# Its line in ``bbb-gluon --help``.
HELP = "train bbb / ivon / plain / dropout MLPs on (Fashion-)MNIST"


def add_parser(sub):
    from ..training.config import RECIPES

    p = sub.add_parser("train", help=HELP,
                       description="Train on (Fashion-)MNIST; writes config.json, metrics.json, "
                                   "history.csv/json, learning_curve.png and checkpoints/ "
                                   "into the run folder.")
    p.add_argument("--recipe", choices=sorted(RECIPES), default=None,
                   help="a named set of options; options given beside it win. paper: "
                        + _recipe_help(RECIPES["paper"]))
    d = _config_defaults()
    _add_data_args(p)
    _add_model_args(p, d)
    _add_prior_args(p, d)
    _add_optimisation_args(p, d)
    _add_output_args(p, d)
    p.set_defaults(func=cmd_train)
    return p


def _recipe_help(recipe):
    def option(key, value):
        flag = "--" + key.replace("_", "-")
        if value is True:
            return flag
        if isinstance(value, list):  # written with '=' so that argparse reads -3.5,-3
            return flag + "=" + ",".join(f"{v:g}" for v in value)
        return f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}"

    return ", ".join(option(k, v) for k, v in recipe.items())


def _hidden(text):
    try:
        units = [int(u) for u in comma_items(text, "400,400")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected units like 400,400, got {text!r}") from None
    if not units or min(units) < 1:
        raise argparse.ArgumentTypeError(f"expected positive units like 400,400, got {text!r}")
    return units


def _weighting(text):
    from ..core.loss import WEIGHTINGS

    if text in WEIGHTINGS:
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


def _shown(value):
    """A default as an option writes it: 400,400 for a tuple, -3.5,-3 for a range."""
    if isinstance(value, list | tuple):
        return ",".join(f"{v:g}" for v in value) or "none"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _add_data_args(p):
    from ..data import load_dataset

    d = defaults_of_function(load_dataset)
    g = p.add_argument_group("data")
    g.add_argument("--dataset", default=d.name,
                   help=f"mnist or fashion-mnist (default {d.name})")
    g.add_argument("--data-dir", default=None,
                   help="folder with mnist/ and fashion-mnist/ (default: $BBB_GLUON_DATA, "
                        "else MXNet's download)")
    g.add_argument("--transform", default=d.transform, choices=["126", "255", "standardize"],
                   help="pixel scaling: divide by 126 (the paper's), by 255, or standardise "
                        f"(default {d.transform})")
    g.add_argument("--num-valid", type=int, default=d.num_valid,
                   help=f"training images held out for validation (default {d.num_valid}; "
                        "0: train on all 60,000 and report the end-of-training network)")
    g.add_argument("--subset", type=int, default=d.subset,
                   help="use at most this many images of each split (quick runs)")


def _add_model_args(p, d):
    from ..training import MLP

    m = defaults_of(MLP)  # the network's settings are the MLP's own
    g = p.add_argument_group("model")
    from ..methods import METHODS

    starts = "; ".join(f"{name} starts from " + " ".join(
        f"--{k.replace('_', '-')} {getattr(v, 'kind', v)}" for k, v in m_.defaults.items())
        for name, m_ in METHODS.items() if m_.defaults)
    g.add_argument("--model", default=d.model,
                   help=f"the training method: {', '.join(METHODS)} (default {d.model}); "
                        f"{starts}")
    g.add_argument("--hidden", type=_hidden, default=list(m.hidden),
                   help=f"units per hidden layer, comma-separated (default {_shown(m.hidden)})")
    g.add_argument("--activation", default=m.activation,
                   help=f"relu, tanh, sigmoid, softrelu (default {m.activation})")
    g.add_argument("--dropout", type=float, default=m.dropout,
                   help=f"drop rate of --model dropout (default {m.dropout:g})")
    g.add_argument("--hess-init", type=float, default=d.hess_init,
                   help=f"--model ivon: the Hessian estimate's start h0 (default "
                        f"{d.hess_init:g})")
    g.add_argument("--beta2", type=float, default=d.beta2,
                   help=f"--model ivon: the Hessian estimate's rate (default {d.beta2:g})")


def _add_prior_args(p, d):
    from ..core.loss import COMPLEXITIES

    g = p.add_argument_group("prior and posterior (bbb)")
    add_prior_options(g, d.prior)
    g.add_argument("--complexity", default=d.complexity, choices=list(COMPLEXITIES),
                   help="Monte-Carlo complexity cost, or closed-form KL (Gaussian prior) "
                        f"(default {d.complexity})")
    g.add_argument("--weighting", type=_weighting, default=d.weighting,
                   help="complexity weighting: uniform, blundell, or a constant (default "
                        f"{_shown(d.weighting)})")
    g.add_argument("--complexity-warmup", type=int, default=d.complexity_warmup,
                   help="epochs at the start without the complexity cost (default "
                        f"{d.complexity_warmup})")
    g.add_argument("--complexity-ramp", type=int, default=d.complexity_ramp,
                   help="epochs after the warm-up over which the complexity cost rises "
                        f"linearly to its full weight (default {d.complexity_ramp})")
    g.add_argument("--complexity-scale", type=float, default=d.complexity_scale,
                   help="the complexity cost's weight once ramped in: 1 the paper's free "
                        "energy, below 1 a tempered posterior (default "
                        f"{d.complexity_scale:g})")
    g.add_argument("--samples", type=int, default=d.samples,
                   help=f"weight samples per step (default {d.samples})")
    from ..core.posterior import MU_INITS

    g.add_argument("--mu-init", default=d.mu_init, choices=list(MU_INITS),
                   help="mu ~ N(0, mu_scale^2) (normal), U(-mu_scale, mu_scale) (uniform), "
                        f"or the network's Xavier initialisation (copy) (default "
                        f"{d.mu_init})")
    g.add_argument("--mu-scale", type=float, default=d.mu_scale,
                   help="standard deviation (normal) or half-width (uniform) of mu's start "
                        f"(default {d.mu_scale:g})")
    rho = d.rho_init
    g.add_argument("--rho-init", type=_rho_init,
                   default=list(rho) if isinstance(rho, list | tuple) else rho,
                   help=f"initial rho: a constant (default {_shown(rho)}"
                        + ("" if isinstance(rho, list | tuple)
                           else f": sigma {math.log1p(math.exp(rho)):.2g}")
                        + ") or a range LOW,HIGH drawn uniformly (write --rho-init=-3.5,-3)")


def _add_optimisation_args(p, d):
    from ..core.step import LOSS_REDUCTIONS
    from ..training.config import OPTIMIZERS

    g = p.add_argument_group("optimisation")
    g.add_argument("--epochs", type=int, default=None,
                   help=f"epochs in all (default {d.epochs}; with --resume: the stored count)")
    g.add_argument("--optimizer", default=d.optimizer, choices=list(OPTIMIZERS),
                   help="adam or sgd: plain gradient descent, no momentum (default "
                        f"{d.optimizer})")
    g.add_argument("--lr", type=float, default=d.lr,
                   help="learning rate on the gradient of the batch cost that "
                        f"--loss-reduction names (default {d.lr:g}; --model ivon: its "
                        "alpha)")
    g.add_argument("--loss-reduction", default=d.loss_reduction, choices=list(LOSS_REDUCTIONS),
                   help="the optimiser differentiates the batch's mean cost (Gluon's "
                        "convention) or its sum (the paper's eq. 8: SGD at lr 1e-3 with sum "
                        "equals lr 0.128 with mean at batch 128) (default "
                        f"{d.loss_reduction})")
    g.add_argument("--lr-decay-epochs", type=epoch_list, default=list(d.lr_decay_epochs),
                   help="epochs after which the learning rate is multiplied by "
                        "--lr-decay-factor, e.g. 300 or 200,400 (default "
                        f"{_shown(d.lr_decay_epochs)})")
    g.add_argument("--lr-decay-factor", type=float, default=d.lr_decay_factor,
                   help=f"factor of each learning-rate decay (default {d.lr_decay_factor:g})")
    g.add_argument("--rho-lr-mult", type=float, default=d.rho_lr_mult,
                   help="multiplier of the learning rate for rho (default "
                        f"{d.rho_lr_mult:g}; 1: the same step as mu)")
    g.add_argument("--batch-size", type=int, default=d.batch_size,
                   help=f"examples per minibatch (default {d.batch_size})")
    g.add_argument("--seed", type=int, default=d.seed,
                   help="seed of the initialisation, the data order and the weight noise "
                        f"(default {d.seed})")
    from ..core.estimators import ESTIMATORS
    from ..core.step import ENGINES

    g.add_argument("--estimator", default=d.estimator, choices=list(ESTIMATORS),
                   help="how a minibatch sees the posterior: one weight sample shared by the "
                        "batch (reparam), the local reparameterisation (local: Dense layers, "
                        "lower-variance gradients), or Flipout (flipout) (default "
                        f"{d.estimator})")
    g.add_argument("--engine", default=d.engine, choices=list(ENGINES),
                   help="how a bbb step is computed: the compiled CPU kernels (fused), "
                        "MXNet operators with autograd (reference), or fused where it "
                        f"builds (auto) (default {d.engine})")


def _add_output_args(p, d):
    g = p.add_argument_group("evaluation and output")
    g.add_argument("--eval-samples", type=int, default=d.eval_samples,
                   help="weight samples of the per-epoch Monte-Carlo validation error "
                        f"(default {d.eval_samples})")
    g.add_argument("--test-samples", type=int, default=None,
                   help="weight samples of the final Monte-Carlo test error (default "
                        f"{TEST_SAMPLES}; with --resume: the run's stored count)")
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
    g.add_argument("--resume", nargs="?", const=True, default=False, choices=("best",),
                   help="continue the run in --out from its latest checkpoint (its stored "
                        "settings are used; --epochs may extend it); if that is corrupt, "
                        "from the best one, which holds the optimiser state. --resume best: "
                        "from a best checkpoint that holds none (older runs), with a fresh "
                        "optimiser")
    g.add_argument("--no-progress", action="store_true",
                   help="no progress bar, only one line per epoch (what a log gets when the "
                        "output is not a terminal)")


def _config_from_args(args):
    from ..training import TrainConfig

    prior = prior_from_args(args)
    return TrainConfig(
        model=args.model,
        epochs=_config_defaults().epochs if args.epochs is None else args.epochs,
        optimizer=args.optimizer,
        lr=args.lr, batch_size=args.batch_size,
        samples=args.samples, estimator=args.estimator, weighting=args.weighting,
        complexity=args.complexity,
        complexity_warmup=args.complexity_warmup, complexity_ramp=args.complexity_ramp,
        complexity_scale=args.complexity_scale,
        prior=prior, mu_init=args.mu_init, mu_scale=args.mu_scale, rho_init=args.rho_init,
        eval_samples=args.eval_samples, seed=args.seed,
        engine=args.engine, loss_reduction=args.loss_reduction,
        lr_decay_epochs=tuple(args.lr_decay_epochs), lr_decay_factor=args.lr_decay_factor,
        rho_lr_mult=args.rho_lr_mult, hess_init=args.hess_init, beta2=args.beta2)


def _resumed_settings(args):
    """The stored run's (config, MLP, data settings, test samples); --epochs may extend
    it."""
    from ..training import MLP, TrainConfig
    from ..training.checkpoint import stored_mlp

    stored = stored_run_config(args.out)
    config = checked(TrainConfig.from_dict, stored["train"])
    mlp = checked(MLP.from_dict, stored_mlp(stored) or {})
    if args.epochs is not None:
        config = dataclasses.replace(config, epochs=args.epochs)
        checked(config.validate)
    data_args = stored["data"]
    # Runs written before the count was stored were evaluated with the default.
    evaluation = stored.get("evaluation", {})
    stored_samples = (evaluation.get("test_samples", TEST_SAMPLES)
                      if isinstance(evaluation, dict) else None)
    if isinstance(stored_samples, bool) or not isinstance(stored_samples, int) \
            or stored_samples < 0:
        raise UsageError(f"{args.out}/config.json: evaluation.test_samples must be a "
                         f"count >= 0, got {stored_samples!r}")
    test_samples = stored_samples if args.test_samples is None else args.test_samples
    return config, mlp, data_args, test_samples


def _new_settings(args):
    """(config, MLP, data settings, test samples) from the command line."""
    from .. import data
    from ..training import MLP

    config = checked(_config_from_args, args)
    mlp = checked(MLP, hidden=tuple(args.hidden), activation=args.activation,
                  dropout=args.dropout)
    data_args = {"dataset": args.dataset, "transform": args.transform,
                 "num_valid": args.num_valid, "subset": args.subset,
                 "data_dir": args.data_dir, "monitor_test": args.monitor_test}
    test_samples = TEST_SAMPLES if args.test_samples is None else args.test_samples
    if data_args["dataset"] not in data.DATASETS:
        raise UsageError(f"unknown dataset {args.dataset!r}; choose one of {data.DATASETS}")
    return config, mlp, data_args, test_samples


def _settings(args):
    """(config, MLP, data settings, test samples, run folder): the stored run's with
    --resume, else the command line's for a folder that holds no run."""
    if args.test_samples is not None and args.test_samples < 0:
        raise UsageError(f"--test-samples must be >= 0, got {args.test_samples}")
    if args.resume:
        if not args.out:
            raise UsageError("--resume needs --out RUN_DIR")
        if args.recipe:
            raise UsageError("--recipe with --resume: a resumed run keeps its stored settings")
        config, mlp, data_args, test_samples = _resumed_settings(args)
    else:
        config, mlp, data_args, test_samples = _new_settings(args)
    out = args.out or os.path.join("runs", f"{data_args['dataset']}-{config.model}-"
                                   f"{'x'.join(map(str, mlp.hidden))}-s{config.seed}")
    # A config.json alone is a run that stopped (diverged) before its first checkpoint:
    # it holds nothing to keep, so a new run may take the folder.
    if not args.resume and os.path.exists(os.path.join(out, "config.json")) and any(
            os.path.exists(os.path.join(out, name))
            for name in ("checkpoints/latest.params", "history.json", "metrics.json")):
        raise UsageError(f"{out} already holds a run; use --resume or another --out "
                         "(nothing was changed)")
    return config, mlp, data_args, test_samples, out


def cmd_train(args):
    from .. import data
    from ..reports import write_report
    from ..training import RunOptions, TrainingDiverged, TrainingInterrupted, fit
    from ..training.guards import CostGrowthWarning

    config, mlp, data_args, test_samples, out = _settings(args)
    ctxs = contexts_of(args.ctx)
    group = _worker_group(args.kvstore)
    lead = group.rank == 0  # in a distributed run, rank 0 reports and writes the files
    if lead:
        check_writable(out, "--out")
        if not args.resume:  # a resumed run was warned when it started
            warn_if_implausible(config)
    splits = checked(data.load_dataset, data_args["dataset"], root=data_args.get("data_dir"),
                      transform=data_args["transform"], num_valid=data_args["num_valid"],
                      seed=config.seed, subset=data_args["subset"])
    if lead:
        print(f"{splits.name}: {len(splits.train[1])} train, {len(splits.valid[1])} "
              f"validation, {len(splits.test[1])} test images; run folder {out}"
              + (f"; {group.num_workers} workers" if group.distributed else ""))
        os.makedirs(out, exist_ok=True)
    t0 = time.perf_counter()
    try:
        with one_line_warnings("train", {CostGrowthWarning: "lower --lr"}):
            options = RunOptions(
                test=splits.test if data_args.get("monitor_test") else None,
                kvstore=group.kvstore or args.kvstore,
                record={"data": data_args, "evaluation": {"test_samples": test_samples}})
            result = fit(config, splits.train, splits.valid,
                         net=dataclasses.replace(mlp, ctx=ctxs), run_dir=out,
                         resume=args.resume, progress="lines" if args.no_progress else True,
                         options=options)
    except TrainingInterrupted as e:
        stop_listening()
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
    metrics = write_report(result, splits.test, test_samples, ctx=ctxs[0], name=splits.name,
                           wall_seconds=wall)
    _print_report(metrics, test_samples, out)
    return 0


def _print_report(metrics, test_samples, out):
    end, has_valid = metrics["end_of_training"], "best_valid_error" in metrics
    line = f"test error {100 * metrics['test_error_means']:.2f}% with the means"
    if "test_error_mc" in metrics:
        line += (f", {100 * metrics['test_error_mc']:.2f}% with {test_samples} "
                 "weight samples")
    print(f"{line} (best epoch {metrics['best_epoch']} of {metrics['epochs']})")
    if has_valid:
        line = f"end of training: {100 * end['test_error_means']:.2f}% with the means"
        if "test_error_mc" in end:
            line += f", {100 * end['test_error_mc']:.2f}%"
        print(line)
    print(f"wrote {out}/config.json, metrics.json, history.csv, history.json, "
          f"learning_curve.png, checkpoints/")


def _worker_group(kvstore):
    """This process's WorkerGroup; a distributed kvstore outside a launched run is a usage
    error, not a hang while MXNet looks for a scheduler."""
    from ..distributed import DIST_TYPES, WorkerGroup

    if kvstore in DIST_TYPES and os.environ.get("DMLC_ROLE") != "worker":
        raise UsageError(f"--kvstore {kvstore} runs under bbb-gluon launch (DMLC_ROLE=worker "
                         "and the scheduler's address are not set)")
    return WorkerGroup(kvstore if kvstore in DIST_TYPES else None)
