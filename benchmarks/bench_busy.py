"""A busy machine: BBBStep's training loop beside busy loops that hold one core, or two.

Each measurement runs in a fresh process, so that each makes its own thread choice:

- ``bbb``: the package as the command line runs it: ``bbb_gluon.threads.claim()`` first
  (it takes the cores other programs leave idle), then a loop of ``BBBStep`` calls
  (README's call ``step(X, y, i)``);
- ``bbb 1-thread``: the same with ``OMP_NUM_THREADS=1`` (what ``claim`` takes on a busy
  machine, so that its slowdown can be told apart from the loss of the second core that
  ``claim`` takes on a quiet one);
- ``plain``: the same network without Bayes by Backprop, MXNet on one OpenMP thread
  (``OMP_NUM_THREADS=1``), the floor the package is held to on a busy machine.

For each load (0, 1 and 2 busy loops, plain Python ``while True``), the seconds of
``--steps`` steps of each workload and their ratio; then each one's slowdown, its
seconds under load over its seconds at 0 busy loops. ``tiny``: a 1-50-50-1 regression,
batch 32; ``2x400``: a 784-400-400-10 classifier, batch 128, synthetic data.

    python benchmarks/bench_busy.py               # a few minutes on 2 cores
    python benchmarks/bench_busy.py --tiny        # a few steps: proves it still runs
"""

import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu import print_cpu  # noqa: E402

CHILD = r"""
import sys, time
import numpy as np
MODE, WORKLOAD, STEPS = sys.argv[1], sys.argv[2], int(sys.argv[3])
if MODE == "bbb":
    import bbb_gluon.threads
    bbb_gluon.threads.claim()
import mxnet as mx
from mxnet import autograd, gluon
from mxnet.gluon import nn
import bbb_gluon as bbb
inputs, hidden, outputs, batch = (1, 50, 1, 32) if WORKLOAD == "tiny" else (784, 400, 10, 128)
net = nn.HybridSequential()
net.add(nn.Dense(hidden, activation="relu", in_units=inputs),
        nn.Dense(hidden, activation="relu", in_units=hidden), nn.Dense(outputs, in_units=hidden))
mx.random.seed(0)
net.initialize(mx.init.Xavier())
net.hybridize()
rng = np.random.default_rng(0)
X = mx.nd.array(rng.normal(size=(batch * 10, inputs)))
if WORKLOAD == "tiny":
    y = mx.nd.array(rng.normal(size=(batch * 10, 1)))
    likelihood = gluon.loss.L2Loss()
else:
    y = mx.nd.array(rng.integers(0, 10, batch * 10))
    likelihood = gluon.loss.SoftmaxCrossEntropyLoss()
if MODE == "bbb":
    posterior = bbb.Posterior(net, seed=0)
    loss = bbb.BBBLoss(bbb.GaussianPrior(1.0), likelihood, num_batches=10)
    trainer = gluon.Trainer(bbb.trainable_params(net, posterior, loss), "adam")
    step = bbb.BBBStep(net, posterior, loss, trainer)

    def one(i):
        step(X[i * batch:(i + 1) * batch], y[i * batch:(i + 1) * batch], i)  # README's call
else:
    trainer = gluon.Trainer(net.collect_params(), "adam")

    def one(i):
        with autograd.record():
            out = likelihood(net(X[i * batch:(i + 1) * batch]), y[i * batch:(i + 1) * batch])
        out.backward()
        trainer.step(batch)
for i in range(10):  # warm-up
    one(i)
mx.nd.waitall()
t0 = time.perf_counter()
for s in range(STEPS):
    one(s % 10)
mx.nd.waitall()
print(time.perf_counter() - t0)
"""


# Each mode: what the child runs, and its OpenMP threads (None: the package's own choice).
MODES = {"bbb": ("bbb", None), "bbb1": ("bbb", "1"), "plain": ("plain", "1")}


def timed(mode, workload, steps):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "BBB_GLUON_TRAIN_THREADS",
                        "BBB_GLUON_PREDICT_THREADS")}
    child, threads = MODES[mode]
    if threads:
        env["OMP_NUM_THREADS"] = threads
    done = subprocess.run([sys.executable, "-c", CHILD, child, workload, str(steps)],
                          capture_output=True, text=True, env=env, timeout=1800, check=True)
    return float(done.stdout.split()[-1])


def main(argv=None):
    print_cpu()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--tiny", action="store_true", help="a few steps, one load")
    args = parser.parse_args(argv)
    steps, loads = (5, (1,)) if args.tiny else (args.steps, (0, 1, 2))
    print(f"{os.cpu_count()} cores; {steps} steps per measurement; seconds, and bbb / plain")
    print(f"{'busy loops':>10} {'workload':>8} {'bbb s':>8} {'bbb 1-thread s':>15} "
          f"{'plain 1-thread s':>17} {'ratio':>6} {'1-thread ratio':>15}")
    # --tiny only proves that the script runs: its busy loop yields to every other process
    # (nice 19), so that beside a test suite it takes only time no one else wants.
    hog = "import os\nos.nice(19)\nwhile True: pass" if args.tiny else "while True: pass"
    seconds = {}
    for load in loads:
        hogs = [subprocess.Popen([sys.executable, "-c", hog]) for _ in range(load)]
        try:
            time.sleep(0.5)
            for workload in ("tiny", "2x400"):
                t = {mode: timed(mode, workload, steps) for mode in MODES}
                seconds[load, workload] = t
                print(f"{load:>10} {workload:>8} {t['bbb']:>8.2f} {t['bbb1']:>15.2f} "
                      f"{t['plain']:>17.2f} {t['bbb'] / t['plain']:>6.2f} "
                      f"{t['bbb1'] / t['plain']:>15.2f}", flush=True)
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
    if 0 not in loads:
        return
    print("slowdown: seconds under load / seconds at 0 busy loops")
    print(f"{'busy loops':>10} {'workload':>8} {'bbb':>6} {'bbb 1-thread':>13} "
          f"{'plain 1-thread':>15}")
    for (load, workload), t in seconds.items():
        if load:
            quiet = seconds[0, workload]
            print(f"{load:>10} {workload:>8} " + " ".join(
                f"{t[m] / quiet[m]:>{w}.2f}" for m, w in zip(MODES, (6, 13, 15), strict=True)))

if __name__ == "__main__":
    main()
