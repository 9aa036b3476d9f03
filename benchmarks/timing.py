"""Milliseconds per call of a step, for the benchmarks that alternate contenders in rounds
within one process (bench_floor.py, bench_small_step.py, bench_uci_step.py)."""

import statistics
import time

import mxnet as mx


def ms_per_step(step, steps):
    """Milliseconds per call of ``step(i)`` over ``steps`` calls, the queue drained before
    and after (MXNet runs operators asynchronously)."""
    mx.nd.waitall()
    t = time.perf_counter()
    for i in range(steps):
        step(i)
    mx.nd.waitall()
    return (time.perf_counter() - t) / steps * 1e3


def alternate(contenders, steps, rounds, warmup=20):
    """``{name: [ms per step of each round]}``: every contender warmed up, then ``rounds``
    rounds in which each runs ``steps`` calls back to back, so that a busy spell on the
    machine falls on every contender of a round alike."""
    for step in contenders.values():
        ms_per_step(step, warmup)
    times = {k: [] for k in contenders}
    for _ in range(rounds):
        for k, step in contenders.items():
            times[k].append(ms_per_step(step, steps))
    return times


def median_ratio(times, baseline):
    """The median of the rounds' own ratios ``times[r] / baseline[r]``: a busy spell on the
    machine slows one round of every contender alike, and drops out of its ratio."""
    return statistics.median(a / b for a, b in zip(times, baseline, strict=True))
