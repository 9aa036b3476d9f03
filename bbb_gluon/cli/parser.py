"""The command line's arguments: one sub-command per task, their options and help, and the
named recipes of ``train``.
"""

import argparse
import math
import textwrap

from ..training.config import RECIPES
from .bandit import cmd_bandit
from .common import EXIT_USAGE
from .compare import cmd_compare
from .demo import cmd_demo
from .evaluate import cmd_evaluate
from .launch import cmd_launch
from .prune import cmd_prune
from .train import cmd_train
from .weights import cmd_weights


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
    _add_data_args(p)
    _add_model_args(p)
    _add_optimisation_args(p)
    _add_output_args(p)


def _add_data_args(p):
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


def _add_model_args(p):
    g = p.add_argument_group("model")
    g.add_argument("--model", default="bbb", help="bbb, plain or dropout (default bbb)")
    g.add_argument("--hidden", type=_hidden, default=[400, 400],
                   help="units per hidden layer, comma-separated (default 400,400)")
    g.add_argument("--activation", default="relu", help="relu, tanh, sigmoid, softrelu")
    g.add_argument("--dropout", type=float, default=0.5, help="drop rate of --model dropout")
    g = p.add_argument_group("prior and posterior (bbb)")
    g.add_argument("--prior", default="scale_mixture", choices=["scale_mixture", "gaussian"],
                   help="the paper's mixture of two zero-mean Gaussians (--pi, --log-sigma1, "
                        "--log-sigma2; default) or one (--prior-sigma)")
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


def _add_optimisation_args(p):
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
    g.add_argument("--batch-size", type=int, default=128,
                   help="examples per minibatch (default 128)")
    g.add_argument("--seed", type=int, default=0,
                   help="seed of the initialisation, the data order and the weight noise "
                        "(default 0)")
    g.add_argument("--engine", default="auto", choices=["auto", "fused", "reference"],
                   help="how a bbb step is computed: the compiled CPU kernels (fused), "
                        "MXNet operators with autograd (reference), or fused where it "
                        "builds (auto, default)")


def _add_output_args(p):
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
    g.add_argument("--resume", nargs="?", const=True, default=False, choices=("best",),
                   help="continue the run in --out from its latest checkpoint (its stored "
                        "settings are used; --epochs may extend it); if that is corrupt, "
                        "from the best one, which holds the optimiser state. --resume best: "
                        "from a best checkpoint that holds none (older runs), with a fresh "
                        "optimiser")
    g.add_argument("--no-progress", action="store_true",
                   help="no progress bar, only one line per epoch (what a log gets when the "
                        "output is not a terminal)")


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
    from ..bandit import BanditConfig

    return BanditConfig()


def _add_train(sub):
    p = sub.add_parser("train", help="train bbb / plain / dropout MLPs on (Fashion-)MNIST",
                       description="Train on (Fashion-)MNIST; writes config.json, metrics.json, "
                                   "history.csv/json, learning_curve.png and checkpoints/ "
                                   "into the run folder.")
    _add_train_args(p)
    p.set_defaults(func=cmd_train)
    return p


def _add_evaluate(sub):
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


def _add_prune(sub):
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


def _add_compare(sub):
    p = sub.add_parser("compare", help="one line per run folder: settings, best validation "
                                       "error, test errors",
                       description="Summarise run folders (finished, still training, or the "
                                   "copies under results/): the prior and training settings, "
                                   "epochs run of those planned, the best validation error "
                                   "and its epoch (from history.csv), and the test errors "
                                   "once training has finished (metrics.json).")
    p.add_argument("run_dirs", metavar="RUN_DIR", nargs="+",
                   help="run folders written by bbb-gluon train (or copies under results/)")
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


def _add_weights(sub):
    p = sub.add_parser("weights", help="density of the weights of several runs (paper's Fig. 3)",
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


def _add_bandit(sub):
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
    from ..bandit import GREEDY_LR

    d = bandit_defaults()
    g = p.add_argument_group("the protocol (the paper's)")
    g.add_argument("--buffer", type=int, default=d.capacity,
                   help=f"interactions kept ({d.capacity})")
    g.add_argument("--updates", type=int, default=d.updates, help=f"updates per step ({d.updates})")
    g.add_argument("--batch", type=int, default=d.batch, help=f"minibatch size ({d.batch})")
    g.add_argument("--hidden", type=int, default=d.hidden, help=f"units per layer ({d.hidden})")
    g.add_argument("--act-samples", type=int, default=d.act_samples,
                   help=f"weight samples averaged per Thompson decision ({d.act_samples})")
    g.add_argument("--agents", default=None, metavar="NAMES",
                   help="run only these agents, comma-separated (default: all four: "
                        "bayes-by-backprop, greedy, 1%%-greedy, 5%%-greedy)")
    g = p.add_argument_group("choices the paper leaves open (defaults: docs/RESULTS.md)")
    g.add_argument("--optimizer", choices=("adam", "sgd"), default=d.optimizer)
    g.add_argument("--lr", type=float, default=d.lr,
                   help=f"Bayes by Backprop's learning rate ({d.lr:g})")
    g.add_argument("--greedy-lr", type=float, default=None,
                   help="the epsilon-greedy agents' learning rate (default: their own, "
                        f"{GREEDY_LR:g})")
    g.add_argument("--greedy-optimizer", choices=("adam", "sgd"), default=None,
                   help="the epsilon-greedy agents' optimiser (default: --optimizer's)")
    g.add_argument("--rho-lr-mult", type=float, default=d.rho_lr_mult,
                   help=f"rho's learning rate as a multiple of the agent's ({d.rho_lr_mult:g})")
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
    g.add_argument("--adam-eps", type=float, default=d.adam_eps,
                   help=f"Adam's epsilon, every agent's ({d.adam_eps:g})")
    g.add_argument("--act-draws", choices=("shared", "independent"), default=d.act_draws,
                   help="a Thompson decision values both actions under the same weight draws "
                        f"(shared) or each under its own (independent) ({d.act_draws})")
    g.add_argument("--complexity-over", choices=("seen", "buffer", "blundell"),
                   default=d.complexity_over,
                   help="divide the complexity cost by the interactions seen so far, or by "
                        "the items in the buffer, or weight it across a step's updates as "
                        "the paper's eq. 9 (blundell)")
    p.set_defaults(func=cmd_bandit)


def _add_launch(sub):
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


def _add_demo(sub):
    p = sub.add_parser("demo", help="offline demo: two half-moons, about 20 s",
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


def build_parser():
    parser = _Parser(
        prog="bbb-gluon", description="Bayes by Backprop (Blundell et al. 2015) on MXNet Gluon.")
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"bbb_gluon {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    parser.commands = sub.choices  # name -> its parser: main() reports its errors there
    parser.train_parser = _add_train(sub)  # main() sets a --recipe's values as its defaults
    _add_evaluate(sub)
    _add_prune(sub)
    _add_compare(sub)
    _add_weights(sub)
    _add_bandit(sub)
    _add_launch(sub)
    _add_demo(sub)
    return parser
