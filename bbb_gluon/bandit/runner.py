"""``run_bandit``: the stacked engine driven through a whole experiment, with checkpoints,
exact resume, a stop at a whole chunk on Ctrl-C, and the files of a run folder.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import _files
from .._checks import check_int
from .._files import atomic_write_text
from .._kernels.machine import describe
from ..core.step import NotFiniteError
from ..signals import stop_requests
from .config import BanditConfig
from .engine import BanditCheckpointError, StackedAgents
from .environment import EAT, MushroomBandit

__all__ = ["BanditResult", "run_bandit", "BanditInterrupted", "BanditDiverged"]


class BanditDiverged(NotFiniteError):
    """An agent's weights became NaN or infinite (the run folder keeps its last
    checkpoint)."""


class BanditInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during :func:`run_bandit`: with a run folder, a checkpoint at
    step ``t`` was saved and ``resume=True`` continues; ``exit_status`` is the shell's
    status for the signal (130, 143)."""

    def __init__(self, message, t, signum):
        super().__init__(message)
        self.t = t
        self.exit_status = 128 + int(signum)


# ---------------------------------------------------------------- a run folder
@dataclass
class BanditResult:
    """Per-step records of every agent and seed, ``(seeds, agents, steps)`` each: the
    mushrooms shown (``rows``), the actions, rewards and regret; ``edible`` is the data
    set's ``(rows,)`` mask."""

    config: BanditConfig
    rows: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    regret: np.ndarray
    edible: np.ndarray
    seconds: float = 0.0
    out: Path | None = None

    @property
    def cumulative_regret(self):
        return np.cumsum(self.regret, axis=-1, dtype=np.float64)

    def summary(self):
        """Per agent: cumulative regret at the end (mean, std and per seed), in the first
        1,000 steps, and the shares of edible/poisonous mushrooms eaten in the last 10%."""
        c = self.config
        cum = self.cumulative_regret
        steps = self.regret.shape[-1]
        tail = slice(steps - max(1, steps // 10), steps)
        out = {}
        for j, spec in enumerate(c.agents):
            final = cum[:, j, -1]
            d = {"kind": spec.kind, "epsilon": spec.epsilon,
                 "cumulative_regret": float(final.mean()),
                 "cumulative_regret_std": float(final.std(ddof=1)) if len(final) > 1 else 0.0,
                 "cumulative_regret_per_seed": [float(x) for x in final],
                 "regret_first_1000": float(cum[:, j, min(steps, 1000) - 1].mean()),
                 "regret_last_10pct": float(self.regret[:, j, tail].sum(-1).mean())}
            ed = self.edible[self.rows[:, j, tail]]
            eat = self.actions[:, j, tail] == EAT
            d["eats_edible_last_10pct"] = float(eat[ed].mean()) if ed.any() else None
            d["eats_poisonous_last_10pct"] = float(eat[~ed].mean()) if (~ed).any() else None
            out[spec.name] = d
        return out


def _regret_steps(n):
    """The steps (1-based) at which regret.csv samples the curves: every step to 100,
    every 10th to 1,000, then every 100th, and the last."""
    s = list(range(1, min(n, 100) + 1)) + list(range(110, min(n, 1000) + 1, 10)) + \
        list(range(1100, n + 1, 100))
    if s[-1] != n:
        s.append(n)
    return np.array(s)


def _write_outputs(result, env, out, plot=True):
    c = result.config
    out = Path(out)
    seeds, agents = c.seeds, c.agents
    S, A, T = result.regret.shape
    cum = result.cumulative_regret
    # steps.csv.gz: one row per (seed, step); per agent its action, reward and regret.
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    header = ["seed", "step", "mushroom", "edible"]
    for spec in agents:
        header += [f"{spec.name}:action", f"{spec.name}:reward", f"{spec.name}:regret"]
    w.writerow(header)
    for s in range(S):
        rows = result.rows[s, 0]
        cols = [np.full(T, seeds[s]), np.arange(1, T + 1), rows, env.edible[rows]]
        for j in range(A):
            cols += [result.actions[s, j], result.rewards[s, j].astype(np.int64),
                     result.regret[s, j].astype(np.int64)]
        w.writerows(np.stack(cols, axis=1).tolist())
    data = gzip.compress(buf.getvalue().encode(), mtime=0)

    def write_bytes(tmp):
        with open(tmp, "wb") as f:
            f.write(data)

    _files.atomic_write(out / "steps.csv.gz", write_bytes)
    # regret.csv: mean (and min, max over seeds) cumulative regret per agent.
    at = _regret_steps(T)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    header = ["step"]
    for spec in agents:
        header += [f"{spec.name}:mean", f"{spec.name}:min", f"{spec.name}:max"]
    w.writerow(header)
    for t in at:
        row = [int(t)]
        for j in range(A):
            v = cum[:, j, t - 1]
            row += [f"{v.mean():.1f}", f"{v.min():.0f}", f"{v.max():.0f}"]
        w.writerow(row)
    atomic_write_text(out / "regret.csv", buf.getvalue())
    # The agents run side by side, one per OpenMP thread: their numbers do not depend on
    # the thread count, only on the CPU and the kernels' build.
    metrics = {"steps": T, "seeds": list(seeds), "seconds": round(result.seconds, 1),
               "agents": result.summary(), "machine": describe()}
    atomic_write_text(out / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    if plot:
        import matplotlib.pyplot as plt

        from ..plotting import plot_cumulative_regret

        curves = {spec.name: cum[:, j] for j, spec in enumerate(agents)}
        plt.close(plot_cumulative_regret(
            curves, path=out / "regret.png",
            title=f"Mushroom bandit: cumulative regret, mean of {S} seeds"))


def _read_checkpoint(path):
    try:
        with np.load(path, allow_pickle=False) as z:
            d = {k: z[k] for k in z.files}
    except Exception as e:  # any unreadable file
        raise BanditCheckpointError(f"{path} is unreadable ({type(e).__name__}: {e}); it was "
                                    "left as it is: move it away to start over") from e
    need = set(StackedAgents.STATE) | {"t", "actions", "rewards", "rows"}
    if not need <= set(d):
        raise BanditCheckpointError(f"{path} lacks {sorted(need - set(d))}; left as it is")
    return d


def _configuration_and_state(out, config, resume, force):
    """The run's configuration and, when resuming, its checkpoint's arrays (None if it
    has none yet); refuses a folder that holds another run."""
    state = None
    if out is not None:
        cfg_file, ckpt = out / "config.json", out / "checkpoint.npz"
        if resume:
            if not cfg_file.is_file():
                raise FileNotFoundError(f"nothing to resume: {cfg_file} does not exist")
            try:
                saved = BanditConfig.from_json(json.loads(cfg_file.read_text())["config"])
            except (ValueError, KeyError, TypeError) as e:  # JSONDecodeError is a ValueError
                raise BanditCheckpointError(f"{cfg_file} is not a bandit run's configuration "
                                            f"({type(e).__name__}: {e}); left as it is") from None
            if config is not None and config != saved:
                diff = [k for k in saved.to_json() if saved.to_json()[k] != config.to_json()[k]]
                raise ValueError(f"{out} holds a run with a different configuration "
                                 f"({', '.join(diff)} differ); resume it as it is, or start "
                                 "a new folder")
            config = saved
            if ckpt.is_file():
                state = _read_checkpoint(ckpt)
        elif not force and out.exists() and any(
                (out / f).exists() for f in ("config.json", "checkpoint.npz", "metrics.json")):
            raise FileExistsError(f"{out} already holds a bandit run: resume it (--resume), "
                                  "choose another folder, or pass --force to replace it")
    return config, state


# A user's entry point (and the command's): every keyword is documented with its default.
def run_bandit(config: BanditConfig, env: MushroomBandit, out=None, resume=False,
               force=False, progress=True, chunk=100, checkpoint_every=1000, threads=None,
               plot=True):
    """Run every agent of ``config`` for ``config.steps`` steps on every seed.

    Parameters
    ----------
    config : BanditConfig
    env : MushroomBandit
    out : path, optional
        A run folder: ``config.json``, ``checkpoint.npz`` (every ``checkpoint_every``
        steps, written atomically), and at the end ``steps.csv.gz`` (one row per seed and
        step: each agent's action, reward and regret), ``regret.csv`` (mean, min and max
        cumulative regret over seeds), ``metrics.json`` and ``regret.png``.
    resume : bool
        Continue the run in ``out`` from its checkpoint (``config`` None or equal to the
        folder's); the result is the one an uninterrupted run gives.
    force : bool
        Start afresh even if ``out`` holds a run (its files are replaced).
    threads : int, optional
        OpenMP threads of the kernels (default: ``OMP_NUM_THREADS``, else every core).

    Returns
    -------
    BanditResult
    """
    check_int(chunk, "chunk", 1)
    check_int(checkpoint_every, "checkpoint_every", 1)
    out = None if out is None else Path(out)
    config, state = _configuration_and_state(out, config, resume, force)
    if config is None:
        raise ValueError("config is required unless resuming")
    stacked = StackedAgents(config, env)
    S, A, T = len(config.seeds), len(config.agents), config.steps
    rows = np.zeros((S * A, T), np.int32)
    actions = np.zeros((S * A, T), np.uint8)
    rewards = np.zeros((S * A, T), np.float32)
    seconds = 0.0
    if state is not None:
        t = int(state["t"])
        if state["actions"].shape != (S * A, T) or not 0 <= t <= T:
            raise BanditCheckpointError(f"{out / 'checkpoint.npz'} does not match the run's "
                                        "configuration; left as it is")
        stacked.load_state_dict(state)
        rows[:, :t], actions[:, :t], rewards[:, :t] = (state["rows"][:, :t],
                                                       state["actions"][:, :t],
                                                       state["rewards"][:, :t])
        seconds = float(state.get("seconds", 0.0))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        if state is None:
            meta = {"config": config.to_json(), "context_width": env.context_width,
                    "engine": "stacked"}
            atomic_write_text(out / "config.json", json.dumps(meta, indent=2) + "\n")

    def save():
        def write(tmp):
            with open(tmp, "wb") as f:
                np.savez(f, rows=rows, actions=actions, rewards=rewards,
                         seconds=np.array(seconds), **stacked.state_dict())
        _files.atomic_write(out / "checkpoint.npz", write)

    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=T, initial=stacked.t, desc="bandit steps", unit="step")
    # Ctrl-C (or SIGTERM) is a flag read between chunks: the run stops at a whole chunk,
    # saves a checkpoint there, and raises BanditInterrupted.
    try:
        with stop_requests() as stop:
            while stacked.t < T:
                t0 = stacked.t
                n = min(chunk, T - t0, checkpoint_every - t0 % checkpoint_every)
                start = time.perf_counter()
                r, a, rw, _ = stacked.run(n, threads=threads)
                seconds += time.perf_counter() - start
                rows[:, t0:t0 + n], actions[:, t0:t0 + n], rewards[:, t0:t0 + n] = r, a, rw
                if not np.isfinite(stacked.mu).all():
                    raise BanditDiverged(f"an agent's weights became NaN or infinite by "
                                         f"step {stacked.t}; lower the learning rate")
                if bar is not None:
                    bar.update(n)
                if out is not None and (stacked.t % checkpoint_every == 0
                                        or stacked.t == T or stop.requested):
                    save()
                if stop.requested and stacked.t < T:
                    raise BanditInterrupted(
                        f"stopped at step {stacked.t:,} of {T:,}"
                        + (f"; checkpoint in {out}, continue with resume" if out else ""),
                        stacked.t, stop.signum)
    finally:
        if bar is not None:
            bar.close()
    shape = (S, A, T)
    rows, actions, rewards = rows.reshape(shape), actions.reshape(shape), rewards.reshape(shape)
    regret = np.stack([env.regret(rows[s, j], actions[s, j], env.draw(config.seeds[s], 0, T)[1])
                       for s in range(S) for j in range(A)]).reshape(shape)
    result = BanditResult(config, rows, actions, rewards, regret, env.edible.astype(bool),
                          seconds, out)
    if out is not None:
        _write_outputs(result, env, out, plot=plot)
    return result
