"""Where a training step's time goes: MXNet's profiler over the plain step and the fused
Bayes-by-Backprop step of the 784-400-400-10 MLP (batch 128, Adam, scale mixture).

Prints, for each, the operators by total time over --steps steps (MXNet's aggregate
statistics), the wall time per step, and how much of it no operator accounts for
(Python dispatch, the Trainer's bookkeeping, waiting).

    python benchmarks/profile_step.py [--steps 200] [--threads 2]
"""

import argparse
import json
import math
import os
import sys
import tempfile
import time

import mxnet as mx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_epoch import bbb_epoch_fn, get_data, plain_epoch_fn  # noqa: E402
from cpu import print_cpu  # noqa: E402

import bbb_gluon.threads
from bbb_gluon._kernels.threads import cores, using_threads  # noqa: E402
from bbb_gluon.core.priors import ScaleMixturePrior  # noqa: E402
from bbb_gluon.data import ArrayLoader  # noqa: E402


def profile(run, steps, label):
    run()  # warm-up: one pass over the loader's first batches
    mx.nd.waitall()
    with tempfile.TemporaryDirectory() as tmp:
        mx.profiler.set_config(profile_all=True, aggregate_stats=True,
                               filename=os.path.join(tmp, "profile.json"))
        mx.profiler.set_state("run")
        t0 = time.perf_counter()
        run()
        mx.nd.waitall()
        wall = time.perf_counter() - t0
        mx.profiler.set_state("stop")
        stats = json.loads(mx.profiler.dumps(reset=True, format="json"))
    times = stats.get("Time", {})
    ops = sorted(((e["Total"] / 1000.0, e["Count"], name)  # the profiler's unit: ms
                  for name, e in times.get("operator", {}).items()), reverse=True)
    calls = times.get("MXNET_C_API", {}).get("MXImperativeInvokeEx", {}).get("Count", 0)
    busy = sum(t for t, _, _ in ops)
    print(f"\n{label}: {1000 * wall / steps:.2f} ms per step over {steps} steps; operators "
          f"{1000 * busy / steps:.2f} ms per step; the rest (Python, dispatch, waits) "
          f"{1000 * max(wall - busy, 0) / steps:.2f} ms; {calls / steps:.0f} operator calls "
          "from Python per step")
    print(f"{'operator':<40}{'calls/step':>11}{'ms/step':>9}")
    for total, count, name in ops[:12]:
        print(f"{name:<40}{count / steps:>11.1f}{1000 * total / steps:>9.3f}")


def main():
    print_cpu()
    bbb_gluon.threads.claim()  # every core, as the earlier rounds measured (docs/speed.md)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--threads", type=int, default=cores())
    args = p.parse_args()
    X, y, _, source = get_data(args.steps * 128)
    loader = ArrayLoader(X, y, 128, shuffle=True, seed=0, ctx=mx.cpu())
    print(f"data: {source}; {args.steps} steps of 128; {args.threads} threads")
    hidden = (400, 400)
    mixture = ScaleMixturePrior(0.5, 1.0, math.exp(-6))
    with using_threads(args.threads):
        profile(plain_epoch_fn(hidden, loader, None), args.steps, "plain step")
        profile(bbb_epoch_fn(hidden, loader, None, mixture, "mc", "uniform", "fused"),
                args.steps, "Bayes by Backprop, fused step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
