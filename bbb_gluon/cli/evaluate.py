"""``bbb-gluon evaluate``: test error, calibration and out-of-distribution detection of a
trained run.
"""

import json
import os
import time

from .common import (
    UsageError,
    _checked,
    _contexts,
    _describe_checkpoint,
    _for_checkpoint,
    _json_safe,
    _read_run_config,
    _refuse_to_overwrite,
)


def _other_dataset(name):
    from .. import data

    others = [d for d in data.DATASETS if d != name]
    return others[0] if others else None


def _load_test_data(stored, seed, data_dir):
    """The run's test split (as it was trained) and its pixel transform."""
    from .. import data

    try:
        settings = {k: stored["data"][k] for k in ("dataset", "transform", "num_valid",
                                                   "subset")}
    except KeyError:
        raise UsageError("config.json has no usable data settings (dataset, transform, "
                         "num_valid, subset)") from None
    return _checked(data.load_dataset, settings["dataset"], root=data_dir,
                    transform=settings["transform"], num_valid=settings["num_valid"],
                    seed=seed, subset=settings["subset"])


def cmd_evaluate(args):
    """Test error, calibration, and OOD detection of a trained run."""
    import matplotlib.pyplot as plt

    from .. import data, plotting
    from .._files import atomic_write_text
    from ..evaluation import evaluate_model
    from ..training import load_run

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
