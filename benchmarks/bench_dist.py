"""What a distributed step costs: one process against workers on MXNet's parameter server.

For the 784-400-400-10 MLP (or --hidden), batch 128, Adam, one thread per process:

- milliseconds per training step of ``fit`` in one process (the baseline), and of ``fit``
  with ``kvstore="dist_sync"`` on --workers workers and one server started by
  ``bbb_gluon.distributed.launch`` on this machine's loopback (each worker computes its
  shard of every batch, then the gradients go through the server);
- the ratio of the two, and the bytes each worker pushes and pulls per step.

Each step time is the median over epochs (after the first, which includes start-up) of
an epoch's seconds over its batches, from ``fit``'s history. On a machine with fewer
cores than processes the workers share cores, so the ratio here is an upper bound on the
overhead; docs/benchmarks.md turns the bytes per step into an estimate for real networks.

    python benchmarks/bench_dist.py                   # bbb and plain, about 2 minutes
    python benchmarks/bench_dist.py --tiny            # a few batches: proves it still runs
"""

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu import print_cpu  # noqa: E402


def get_data(num_train):
    from bbb_gluon.data import load_dataset

    try:
        X, y = load_dataset("mnist", num_valid=0).train
        source = "real MNIST (BBB_GLUON_DATA)"
    except Exception:
        rng = np.random.default_rng(0)
        X = rng.uniform(0, 255 / 126, (num_train, 784)).astype(np.float32)
        y = rng.integers(0, 10, num_train).astype(np.int32)
        source = "synthetic arrays of MNIST's shape"
    return X[:num_train], y[:num_train], source


def train(args, kvstore):
    """Train as the arguments say; returns (ms per step, parameters exchanged per step)."""
    import mxnet as mx

    from bbb_gluon.training import MLP, RunOptions, TrainConfig, fit

    X, y, _ = get_data(args.batches * 128)
    config = TrainConfig(model=args.model, epochs=args.epochs, batch_size=128,
                         eval_samples=0, seed=0, log_every=10**6)
    result = fit(config, (X, y), net=MLP(hidden=tuple(args.hidden), ctx=mx.cpu()),
                 options=RunOptions(kvstore=kvstore), progress=False)
    per_step = [row["seconds"] / args.batches * 1000 for row in result.history[1:]]
    if result.posterior is not None:
        exchanged = 2 * sum(int(np.prod(s)) for s in result.posterior.shapes)
    else:
        exchanged = sum(p.data().size for p in result.net.collect_params().values())
    return statistics.median(per_step), exchanged


def worker(args):
    import mxnet as mx

    kv = mx.kv.create("dist_sync")
    ms, exchanged = train(args, kv)
    if kv.rank == 0:
        print(json.dumps({"ms_per_step": ms, "exchanged": exchanged}), flush=True)


def main():
    print_cpu()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hidden", default="400,400")
    p.add_argument("--models", default="bbb,plain")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batches", type=int, default=100, help="batches per epoch")
    p.add_argument("--epochs", type=int, default=4, help="epochs (the first is a warm-up)")
    p.add_argument("--tiny", action="store_true", help="3 batches, 2 epochs, 32 units")
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--as-worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.tiny:
        args.batches, args.epochs, args.hidden = 3, 2, "32"
    args.hidden = [int(h) for h in args.hidden.split(",")]
    if args.as_worker:
        worker(args)
        return 0
    os.environ["OMP_NUM_THREADS"] = "1"
    from bbb_gluon.distributed import launch

    _, _, source = get_data(args.batches * 128)
    print(f"data: {source}; {args.batches} batches of 128 per epoch, median of "
          f"{args.epochs - 1} epochs after a warm-up; one thread per process; "
          f"{os.cpu_count()} cores")
    rows = []
    for model in args.models.split(","):
        args.model = model
        single, exchanged = train(args, None)
        t0 = time.perf_counter()
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            launch([sys.executable, os.path.abspath(__file__), "--as-worker", "--model", model,
                    "--hidden", ",".join(map(str, args.hidden)), "--batches",
                    str(args.batches), "--epochs", str(args.epochs)],
                   args.workers, 1, timeout=1800, threads=1)
        wall = time.perf_counter() - t0
        lines = [line.split("] ", 1)[1] for line in buf.getvalue().splitlines()
                 if "ms_per_step" in line]
        dist = json.loads(lines[0])["ms_per_step"]
        mb = exchanged * 4 / 1e6
        rows.append({"model": model, "hidden": args.hidden, "single_ms": single,
                     "dist_ms": dist, "workers": args.workers, "ratio": dist / single,
                     "floats_per_step": exchanged, "launch_wall_s": wall})
        print(f"{model:5} {'x'.join(map(str, args.hidden))}: one process {single:6.2f} ms/step; "
              f"{args.workers} workers + 1 server on loopback {dist:6.2f} ms/step "
              f"({dist / single:.2f}x one process); each worker pushes and pulls "
              f"{exchanged:,} floats ({mb:.1f} MB each way) per step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
