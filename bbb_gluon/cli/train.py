"""``bbb-gluon train``: train one network and write its run folder.
"""

import os
import sys
import time

from .common import (
    EXIT_DIVERGED,
    UsageError,
    _checked,
    _contexts,
    _read_run_config,
    _sigma,
    _stop_listening,
)


def _config_from_args(args):
    from ..training import TrainConfig

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


def _resumed_settings(args):
    """The stored run's (config, data settings, test samples); --epochs may extend it."""
    from ..training import TrainConfig

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
    return config, data_args, test_samples


def _new_settings(args):
    """(config, data settings, test samples) from the command line."""
    from .. import data

    config = _checked(_config_from_args, args)
    data_args = {"dataset": args.dataset, "transform": args.transform,
                 "num_valid": args.num_valid, "subset": args.subset,
                 "data_dir": args.data_dir, "monitor_test": args.monitor_test}
    test_samples = 10 if args.test_samples is None else args.test_samples
    if data_args["dataset"] not in data.DATASETS:
        raise UsageError(f"unknown dataset {args.dataset!r}; choose one of {data.DATASETS}")
    return config, data_args, test_samples


def cmd_train(args):
    from .. import data
    from ..training import TrainingDiverged, TrainingInterrupted, fit
    from ..training.report import write_report

    if args.test_samples is not None and args.test_samples < 0:
        raise UsageError(f"--test-samples must be >= 0, got {args.test_samples}")
    if args.resume:
        if not args.out:
            raise UsageError("--resume needs --out RUN_DIR")
        if args.recipe:
            raise UsageError("--recipe with --resume: a resumed run keeps its stored settings")
        config, data_args, test_samples = _resumed_settings(args)
    else:
        config, data_args, test_samples = _new_settings(args)
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
                     resume=args.resume,
                     progress="lines" if args.no_progress else True,
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
