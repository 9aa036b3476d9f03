"""``bbb-gluon bandit``: the Mushroom contextual bandit, every agent and seed.
"""

import dataclasses
import sys

from .common import (
    EXIT_DIVERGED,
    UsageError,
    add_prior_options,
    check_writable,
    checked,
    defaults_of,
    prior_from_args,
    stop_listening,
)


def _agents(agents, names, greedy_lr, greedy_optimizer=None):
    """The paper's agents named in ``names`` (comma-separated; None: all), the ε-greedy
    ones at ``greedy_lr`` and with ``greedy_optimizer`` if given."""
    if names is not None:
        wanted = [n.strip() for n in names.split(",")]
        known = {a.name for a in agents}
        unknown = [n for n in wanted if n not in known]
        if unknown or not wanted:
            raise UsageError(f"--agents takes names from {', '.join(sorted(known))}; got "
                             f"{names!r}")
        agents = tuple(a for a in agents if a.name in wanted)
    if greedy_lr is not None:
        agents = tuple(dataclasses.replace(a, lr=greedy_lr) if a.kind == "greedy" else a
                       for a in agents)
    if greedy_optimizer is not None:
        agents = tuple(dataclasses.replace(a, optimizer=greedy_optimizer)
                       if a.kind == "greedy" else a for a in agents)
    return agents


def cmd_bandit(args):
    """Thompson sampling against epsilon-greedy agents on the Mushroom bandit (§5.3)."""
    from .. import bandit
    from ..data import load_mushroom
    from ..training.progress import watched

    if args.resume and args.force:
        raise UsageError("--resume continues the run in --out and --force replaces it: "
                         "give one")
    config = None
    if not args.resume:
        if args.seeds < 1:
            raise UsageError(f"--seeds must be >= 1, got {args.seeds}")
        config = checked(
            bandit.BanditConfig,
            steps=args.steps, seeds=tuple(range(args.first_seed, args.first_seed + args.seeds)),
            hidden=args.hidden, capacity=args.buffer, updates=args.updates, batch=args.batch,
            act_samples=args.act_samples, optimizer=args.optimizer, lr=args.lr,
            prior=prior_from_args(args), noise_sigma=args.noise_sigma, mu_init=args.mu_init,
            rho_init=args.rho_init,
            complexity_over=args.complexity_over, rho_lr_mult=args.rho_lr_mult,
            adam_eps=args.adam_eps, act_draws=args.act_draws,
            agents=checked(_agents, bandit.PAPER_AGENTS, args.agents, args.greedy_lr,
                            args.greedy_optimizer))
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads must be >= 1, got {args.threads}")
    check_writable(args.out, "--out")
    env = bandit.MushroomBandit(checked(load_mushroom, args.data_dir))
    try:
        result = bandit.run_bandit(config, env, out=args.out, resume=args.resume,
                                   force=args.force,
                                   progress=not args.no_progress and watched(sys.stderr),
                                   threads=args.threads)
    except FileExistsError as e:
        raise UsageError(str(e)) from e
    except bandit.BanditDiverged as e:  # the weights diverged: the settings, not a bug
        print(f"bbb-gluon bandit: error: {e}", file=sys.stderr)
        return EXIT_DIVERGED
    except bandit.BanditInterrupted as e:
        stop_listening()
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


# Its line in ``bbb-gluon --help``.
HELP = "Thompson sampling on the Mushroom bandit (paper's §5.3)"


def add_parser(sub):
    from ..bandit import BanditConfig

    d = defaults_of(BanditConfig)
    p = sub.add_parser("bandit", help=HELP,
                       description="Bayes by Backprop with Thompson sampling against greedy, "
                                   "1%- and 5%-greedy agents on the UCI Mushroom bandit, "
                                   "every agent and seed advanced together by compiled "
                                   "kernels. Writes config.json, checkpoint.npz (resumable), "
                                   "and at the end steps.csv.gz, regret.csv, metrics.json, "
                                   "regret.png. Needs mushroom/agaricus-lepiota.data in the "
                                   "data folder.")
    p.add_argument("--out", default="runs/bandit", help="run folder (default runs/bandit)")
    p.add_argument("--data-dir", default=None,
                   help="folder with mushroom/ (default $BBB_GLUON_DATA)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its checkpoint, with its settings")
    p.add_argument("--force", action="store_true", help="replace a run already in --out")
    p.add_argument("--steps", type=int, default=d.steps,
                   help=f"interactions (default {d.steps:,})")
    p.add_argument("--seeds", type=int, default=len(d.seeds),
                   help=f"runs per agent (default {len(d.seeds)})")
    p.add_argument("--first-seed", type=int, default=d.seeds[0],
                   help=f"seeds are FIRST.. (default {d.seeds[0]})")
    p.add_argument("--threads", type=int, default=None,
                   help="OpenMP threads (default $OMP_NUM_THREADS, else every core)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (there is none where the output is not a terminal)")
    _add_protocol_args(p, d)
    _add_open_choices(p, d)
    p.set_defaults(func=cmd_bandit)
    return p


def _add_protocol_args(p, d):
    g = p.add_argument_group("the protocol (the paper's)")
    g.add_argument("--buffer", type=int, default=d.capacity,
                   help=f"interactions kept ({d.capacity})")
    g.add_argument("--updates", type=int, default=d.updates, help=f"updates per step ({d.updates})")
    g.add_argument("--batch", type=int, default=d.batch, help=f"minibatch size ({d.batch})")
    g.add_argument("--hidden", type=int, default=d.hidden, help=f"units per layer ({d.hidden})")
    g.add_argument("--act-samples", type=int, default=d.act_samples,
                   help=f"weight samples averaged per Thompson decision ({d.act_samples})")
    g.add_argument("--agents", default=None, metavar="NAMES",
                   help="run only these agents, comma-separated (default: all: "
                        + ", ".join(a.name for a in d.agents).replace("%", "%%") + ")")


def _add_open_choices(p, d):
    from ..bandit import GREEDY_LR

    g = p.add_argument_group("choices the paper leaves open (defaults: docs/RESULTS.md)")
    g.add_argument("--optimizer", choices=("adam", "sgd"), default=d.optimizer,
                   help=f"every agent's optimiser ({d.optimizer})")
    g.add_argument("--lr", type=float, default=d.lr,
                   help=f"Bayes by Backprop's learning rate ({d.lr:g})")
    g.add_argument("--greedy-lr", type=float, default=None,
                   help="the epsilon-greedy agents' learning rate (default: their own, "
                        f"{GREEDY_LR:g})")
    g.add_argument("--greedy-optimizer", choices=("adam", "sgd"), default=None,
                   help="the epsilon-greedy agents' optimiser (default: --optimizer's)")
    g.add_argument("--rho-lr-mult", type=float, default=d.rho_lr_mult,
                   help=f"rho's learning rate as a multiple of the agent's ({d.rho_lr_mult:g})")
    add_prior_options(g, d.prior)
    g.add_argument("--noise-sigma", type=float, default=d.noise_sigma,
                   help="the Gaussian likelihood's noise (rewards as they are) "
                        f"({d.noise_sigma:g})")
    g.add_argument("--mu-init", type=float, default=d.mu_init,
                   help=f"mu ~ N(0, MU_INIT^2) ({d.mu_init:g})")
    g.add_argument("--rho-init", type=float, default=d.rho_init,
                   help=f"every rho's start ({d.rho_init:g})")
    g.add_argument("--adam-eps", type=float, default=d.adam_eps,
                   help=f"Adam's epsilon, every agent's ({d.adam_eps:g})")
    g.add_argument("--act-draws", choices=("shared", "independent"), default=d.act_draws,
                   help="a Thompson decision values both actions under the same weight draws "
                        f"(shared) or each under its own (independent) ({d.act_draws})")
    g.add_argument("--complexity-over", choices=("seen", "buffer", "blundell"),
                   default=d.complexity_over,
                   help="divide the complexity cost by the interactions seen so far, or by "
                        "the items in the buffer, or weight it across a step's updates as "
                        f"the paper's eq. 9 (blundell) ({d.complexity_over})")
