"""Peak memory of prediction and evaluation on large inputs: it must grow with what they
return, not with what they read.

Each measurement runs in a fresh process: the 784-400-400-10 Bayesian MLP (random
posterior; memory does not depend on training), N inputs made from the MNIST test images
repeated (or random ones if MNIST is not found), then one call, and the process's peak
resident memory above what it held just before the call. Measured for N = 10,000 (the test
set, the baseline) and for N = 10x that, with S weight samples:

- ``predict_proba``: returns N x 10 floats. Bound: the baseline plus the 10x output.
- ``predict_samples``: returns S x N x 10 floats, which it must hold; bound: the baseline
  plus the 10x output.
- ``evaluate_model`` (the numbers ``bbb-gluon evaluate`` reports, with OOD inputs of the
  same size): returns N-long arrays. Bound: the baseline plus 10x its per-example arrays.

Prints each peak, the bound, and the ratio of the 10x peak to the baseline peak, all
measured in this run.

    python benchmarks/bench_memory.py [--samples 10] [--scale 10] [--tiny]
"""

import argparse
import json
import os
import resource
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu import print_cpu  # noqa: E402

CHILD = r"""
import json, os, sys
import numpy as np
import mxnet as mx
from mxnet.gluon import nn
import bbb_gluon.threads
from bbb_gluon import Posterior, predict_proba, predict_samples
from bbb_gluon.evaluation import evaluate_model

bbb_gluon.threads.claim()  # every core, as the earlier rounds measured
what, n, samples, hidden = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(0)
try:
    from bbb_gluon.data import load_raw
    images, yt = load_raw("mnist", train=False)
    Xt = images.reshape(len(yt), -1).astype(np.float32) / 126.0
except Exception:  # no data here: random images (memory does not depend on them)
    Xt = rng.random((10000, 784), dtype=np.float32)
    yt = rng.integers(0, 10, 10000).astype(np.int32)
reps = -(-n // len(yt))
X = np.tile(Xt, (reps, 1))[:n].copy()
y = np.tile(yt, reps)[:n].copy()
net = nn.HybridSequential()
net.add(nn.Dense(hidden, activation="relu", in_units=784),
        nn.Dense(hidden, activation="relu", in_units=hidden), nn.Dense(10, in_units=hidden))
net.initialize(mx.init.Normal(0.05))
posterior = Posterior(net, seed=0)
X_ood = X[::-1].copy() if what == "evaluate" else None
# Everything up to here is the caller's; warm the operators up on a few rows.
predict_proba(net, posterior, X[:100], 2)
mx.nd.waitall()
def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))
# Reset the peak (VmHWM) to what the process holds now: the call's own peak is read after.
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status("VmRSS:")
if what == "predict_proba":
    out = predict_proba(net, posterior, X, samples)
    returned = out.nbytes
elif what == "predict_samples":
    out = predict_samples(net, posterior, X, samples)
    returned = out.nbytes
else:
    ev = evaluate_model(net, posterior, X, y, samples=samples, X_ood=X_ood)
    returned = ev.probs.nbytes + sum(v.nbytes for u in (ev.uncertainty_in, ev.uncertainty_out)
                                     for v in u.values())
mx.nd.waitall()
peak = status("VmHWM:")
print(json.dumps({"extra": peak - before, "returned": returned}))
"""


def measure(what, n, samples, hidden):
    done = subprocess.run([sys.executable, "-c", CHILD, what, str(n), str(samples),
                           str(hidden)], capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "OMP_NUM_THREADS": os.environ.get(
                              "OMP_NUM_THREADS", "2")})
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    print_cpu()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--tiny", action="store_true",
                        help="a quick check that the script runs (1,000 and 2,000 inputs)")
    args = parser.parse_args()
    base, hidden = (1000, 32) if args.tiny else (10000, 400)
    big = base * (2 if args.tiny else args.scale)
    mib = 2 ** 20
    print(f"784-{hidden}-{hidden}-10 posterior, {args.samples} weight samples; "
          f"peak resident memory above what the process held before the call (VmHWM, "
          "reset just before it)")
    print(f"{'call':16s} {'N':>8s} {'peak extra':>11s} {'returned':>10s} {'bound':>10s} "
          f"{'ratio to N=' + str(base):>16s}")
    failed = False
    for what in ("predict_proba", "predict_samples", "evaluate"):
        small = measure(what, base, args.samples, hidden)
        large = measure(what, big, args.samples, hidden)
        # The bound: what the baseline needed beyond its output, plus the large output.
        bound = max(small["extra"] - small["returned"], 0) + large["returned"] + 64 * mib
        for n, m in ((base, small), (big, large)):
            print(f"{what:16s} {n:8,d} {m['extra'] / mib:9.0f} MiB {m['returned'] / mib:6.0f} "
                  f"MiB {bound / mib if n == big else float('nan'):6.0f} MiB "
                  f"{m['extra'] / max(small['extra'], 1):15.2f}x")
        failed |= large["extra"] > bound
    print("every peak within its bound" if not failed else "A PEAK EXCEEDS ITS BOUND")
    print(f"(this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} "
          "MiB)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
