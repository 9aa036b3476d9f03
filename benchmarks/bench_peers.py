"""Seconds per epoch here against the PyTorch libraries, each contender in a process of its own.

The peers' workload of docs/benchmarks.md: Fashion-MNIST's 60,000 training images, a
784-400-400-10 MLP with relu, batch 128, Adam 1e-3, an N(0, 1) prior, the complexity cost
weighted 1/M (M batches per epoch). Contenders:

- ``gluon``: a plain hybridized Gluon MLP, the floor every ratio is taken against;
- ``bbb``, ``bbb-local``, ``bbb-flipout``: ``BBBStep`` with ``estimator="reparam"`` (one
  shared weight sample), ``"local"`` and ``"flipout"``, README's call ``step(X, y, i)``,
  after ``bbb_gluon.threads.claim()``;
- ``torch``: a plain PyTorch MLP (``nn.Linear``);
- ``bt-reparam``, ``bt-flipout``: bayesian-torch's ``LinearReparameterization`` and
  ``LinearFlipout`` layers (each returns its closed-form KL to the prior, added to the
  summed cross-entropy with weight 1/M).

The PyTorch contenders run under ``--torch-python``, a Python with PyTorch's CPU build and
bayesian-torch (``benchmarks/peers_env.sh`` builds one beside this project's environment,
from a local CPU wheel only); without it they are left out, and the output says so. Each
process loads the same arrays (written once by this script), sets its library's threads to
the cores it may use (ours through ``bbb_gluon.threads.claim()``, the idle ones), runs 20
steps to warm up and then times ``--epochs`` epochs; the contenders run in turn,
``--rounds`` times, and each figure is the median over rounds. The CPU is named on the
first line.

    python benchmarks/bench_peers.py --torch-python .venv-peers/bin/python   # about 4 min
    python benchmarks/bench_peers.py --tiny        # a few batches, no PyTorch: proves it runs
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
GLUON = ("gluon", "bbb", "bbb-local", "bbb-flipout")
TORCH = ("torch", "bt-reparam", "bt-flipout")
BATCH, LR, WARMUP = 128, 1e-3, 20
RHO_INIT = -5.0  # sigma about 0.0067 at the start, the same for every Bayesian contender


def batches(X, y, epoch):
    """The epoch's minibatches (a seeded shuffle, the same for every contender)."""
    order = np.random.default_rng(epoch + 1).permutation(len(y))
    for start in range(0, len(y), BATCH):
        take = order[start:start + BATCH]
        yield X[take], y[take]


def gluon_steps(name, num_batches):
    import mxnet as mx
    from mxnet import autograd, gluon
    from mxnet.gluon import nn

    import bbb_gluon.threads
    from bbb_gluon import BBBLoss, BBBStep, GaussianPrior, Posterior, trainable_params

    bbb_gluon.threads.claim()
    net = nn.HybridSequential()
    net.add(nn.Dense(400, activation="relu", in_units=784),
            nn.Dense(400, activation="relu", in_units=400), nn.Dense(10, in_units=400))
    mx.random.seed(0)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    likelihood = gluon.loss.SoftmaxCrossEntropyLoss()
    if name == "gluon":
        trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": LR})

        def step(Xb, yb, i):
            with autograd.record():
                cost = likelihood(net(Xb), yb)
            cost.backward()
            trainer.step(1)  # summed cost, as BBBLoss's
            return cost
        return step, lambda a: mx.nd.array(a), mx.nd.waitall
    posterior = Posterior(net, rho_init=RHO_INIT, seed=0)
    loss = BBBLoss(GaussianPrior(1.0), likelihood, num_batches=num_batches)
    trainer = gluon.Trainer(trainable_params(net, posterior, loss), "adam",
                            {"learning_rate": LR})
    estimator = {"bbb": "reparam", "bbb-local": "local", "bbb-flipout": "flipout"}[name]
    return BBBStep(net, posterior, loss, trainer, estimator=estimator), \
        lambda a: mx.nd.array(a), mx.nd.waitall


def torch_steps(name, num_batches):
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.set_num_threads(len(os.sched_getaffinity(0)))  # the cores it may use, as ours
    torch.manual_seed(0)
    if name == "torch":
        model = nn.Sequential(nn.Linear(784, 400), nn.ReLU(), nn.Linear(400, 400), nn.ReLU(),
                              nn.Linear(400, 10))
        forward = lambda x: (model(x), 0.0)  # noqa: E731
    else:
        from bayesian_torch.layers import LinearFlipout, LinearReparameterization

        layer = LinearFlipout if name == "bt-flipout" else LinearReparameterization
        layers = nn.ModuleList([layer(784, 400, prior_mean=0.0, prior_variance=1.0,
                                      posterior_rho_init=RHO_INIT),
                                layer(400, 400, prior_mean=0.0, prior_variance=1.0,
                                      posterior_rho_init=RHO_INIT),
                                layer(400, 10, prior_mean=0.0, prior_variance=1.0,
                                      posterior_rho_init=RHO_INIT)])
        model = layers

        def forward(x):
            kl = 0.0
            for k, lay in enumerate(layers):
                x, kl_k = lay(x)
                kl = kl + kl_k
                if k < len(layers) - 1:
                    x = F.relu(x)
            return x, kl
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    weight = 1.0 / num_batches

    def step(Xb, yb, i):
        optimizer.zero_grad()
        out, kl = forward(Xb)
        cost = F.cross_entropy(out, yb, reduction="sum") + weight * kl
        cost.backward()
        optimizer.step()
        return cost
    return step, lambda a: torch.from_numpy(np.ascontiguousarray(a)).long() \
        if a.dtype.kind in "iu" else torch.from_numpy(np.ascontiguousarray(a)), lambda: None


def child(name, data, epochs, max_batches):
    arrays = np.load(data)
    X, y = arrays["X"], arrays["y"]
    make = torch_steps if name in TORCH else gluon_steps
    step, to_array, wait = make(name, -(-len(y) // BATCH))
    for i, (Xb, yb) in enumerate(batches(X, y, -1)):
        if i == WARMUP:
            break
        step(to_array(Xb), to_array(yb), i)
    wait()
    seconds = []
    for epoch in range(epochs):
        t0 = time.perf_counter()
        for i, (Xb, yb) in enumerate(batches(X, y, epoch)):
            if i == max_batches:
                break
            step(to_array(Xb), to_array(yb), i)
        wait()
        seconds.append(time.perf_counter() - t0)
    print(json.dumps({"name": name, "seconds": seconds}))


def run_child(python, name, data, epochs, max_batches):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} if name in TORCH \
        else dict(os.environ)
    done = subprocess.run([python, __file__, "--child", name, "--data", data,
                           "--epochs", str(epochs), "--max-batches", str(max_batches)],
                          capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["seconds"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--torch-python", help="a Python with torch (CPU build) and bayesian-torch")
    p.add_argument("--contenders", default=",".join(GLUON + TORCH))
    p.add_argument("--epochs", type=int, default=1, help="timed epochs per process")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    p.add_argument("--max-batches", type=int, default=-1, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child, args.data, args.epochs, args.max_batches)
        return 0

    names = [n for n in args.contenders.split(",") if n]
    unknown = sorted(set(names) - set(GLUON + TORCH))
    if not names:
        p.error(f"--contenders names none; choose from {', '.join(GLUON + TORCH)}")
    if unknown:
        p.error(f"unknown contenders {unknown}; choose from {', '.join(GLUON + TORCH)}")
    if args.epochs < 1 or args.rounds < 1:
        p.error("--epochs and --rounds must be at least 1")
    sys.path.insert(0, str(HERE))
    from cpu import describe

    from bbb_gluon.data import load_dataset

    if args.torch_python is None and any(n in TORCH for n in names):
        print("no --torch-python: the PyTorch contenders are left out "
              "(benchmarks/peers_env.sh builds a Python with them)")
        names = [n for n in names if n not in TORCH]
    rounds, max_batches = (1, 4) if args.tiny else (args.rounds, -1)
    splits = load_dataset("fashion-mnist", num_valid=0)
    X, y = splits.train
    if args.tiny:
        X, y = X[:2048], y[:2048]
    print(f"cpu: {describe()}")
    print(f"Fashion-MNIST {X.shape[0]} images, 784-400-400-10, batch {BATCH}, Adam {LR:g}, "
          f"N(0, 1) prior; {rounds} rounds of {args.epochs} timed epoch(s) per process"
          + (f", {max_batches} batches per epoch (--tiny)" if args.tiny else ""))
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data.npz")
        np.savez(data, X=X.reshape(len(y), -1).astype(np.float32), y=y.astype(np.int64))
        times = {n: [] for n in names}
        for r in range(rounds):
            for name in names:
                python = args.torch_python if name in TORCH else sys.executable
                seconds = run_child(python, name, data, args.epochs, max_batches)
                times[name].append(statistics.median(seconds))
                print(f"  round {r + 1}: {name:<12} {times[name][-1]:7.2f} s per epoch",
                      flush=True)
    median = {n: statistics.median(t) for n, t in times.items()}
    floor = median.get("gluon")
    print(f"{'contender':<12}{'s/epoch':>9}{'x gluon':>9}  per round")
    for name in names:
        ratio = f"{median[name] / floor:9.2f}" if floor else f"{'-':>9}"
        print(f"{name:<12}{median[name]:9.2f}{ratio}  "
              + ", ".join(f"{t:.2f}" for t in times[name]))
    for ours, theirs in (("bbb-flipout", "bt-flipout"), ("bbb", "bt-reparam")):
        if ours in median and theirs in median:
            print(f"{theirs} / {ours}: {median[theirs] / median[ours]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
