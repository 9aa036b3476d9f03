"""``bbb-gluon bandit``: the Mushroom contextual bandit, every agent and seed.
"""

import dataclasses
import sys

from .common import EXIT_DIVERGED, UsageError, _checked, _sigma, _stop_listening


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
            complexity_over=args.complexity_over, rho_lr_mult=args.rho_lr_mult,
            adam_eps=args.adam_eps, act_draws=args.act_draws,
            agents=_checked(_agents, bandit.PAPER_AGENTS, args.agents, args.greedy_lr,
                            args.greedy_optimizer))
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads must be >= 1, got {args.threads}")
    env = bandit.MushroomBandit(_checked(load_mushroom, args.data_dir))
    try:
        result = bandit.run_bandit(config, env, out=args.out, resume=args.resume,
                                   force=args.force, progress=not args.no_progress,
                                   threads=args.threads)
    except FileExistsError as e:
        raise UsageError(str(e)) from e
    except bandit.BanditDiverged as e:  # the weights diverged: the settings, not a bug
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
