"""Do MXNet's results depend on the OpenMP thread count? One plain Gluon step and five
Bayes-by-Backprop steps (both engines) of the 784-400-400-10 network at batch 128, run in
two fresh processes with 2 and 1 threads; prints the largest difference of each output.

    python experiments/thread_count_bits.py

docs/reliability.md ("Same seed, same numbers") quotes its output.
"""

import os
import subprocess
import sys
import tempfile

import numpy as np

ONE_RUN = r"""
import sys
import numpy as np
from bbb_gluon import threads
threads.configure(train=int(sys.argv[1]), predict=int(sys.argv[1]))
threads.claim()
import mxnet as mx
from mxnet import autograd, gluon
from mxnet.gluon import nn
import bbb_gluon as bbb

def network():
    mx.random.seed(0)
    net = nn.HybridSequential()
    net.add(nn.Dense(400, activation="relu", in_units=784),
            nn.Dense(400, activation="relu", in_units=400), nn.Dense(10, in_units=400))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    return net

rng = np.random.RandomState(1)
X = mx.nd.array(rng.rand(128, 784)); y = mx.nd.array(rng.randint(0, 10, 128))
out = {}
net = network()
with autograd.record():
    loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(X), y)
loss.backward()
out["plain: per-example loss"] = loss.asnumpy()
out["plain: first layer's weight gradient"] = net[0].weight.grad().asnumpy()
for engine in ("fused", "reference"):
    net = network()
    posterior = bbb.Posterior(net, rho_init=-3.0, seed=0)
    cost = bbb.BBBLoss(bbb.ScaleMixturePrior(0.5, 1.0, 2.5e-3),
                       gluon.loss.SoftmaxCrossEntropyLoss(), num_batches=391)
    trainer = gluon.Trainer(bbb.trainable_params(net, posterior, cost), "adam",
                            {"learning_rate": 1e-3})
    step = bbb.BBBStep(net, posterior, cost, trainer, engine=engine)
    for i in range(5):
        step(X, y, i)
    out[f"{engine} engine: mu after 5 steps"] = np.concatenate(
        [m.asnumpy().ravel() for m in posterior.mu()])
np.savez(sys.argv[2], **out)
"""


def main():
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        env = {k: v for k, v in os.environ.items()
               if k not in ("OMP_NUM_THREADS", "BBB_GLUON_TRAIN_THREADS",
                            "BBB_GLUON_PREDICT_THREADS")}
        for n in (2, 1):
            paths[n] = os.path.join(tmp, f"t{n}.npz")
            subprocess.run([sys.executable, "-c", ONE_RUN, str(n), paths[n]], check=True,
                           env=env)
        a, b = np.load(paths[2]), np.load(paths[1])
        for key in a.files:
            diff = float(np.abs(a[key] - b[key]).max())
            print(f"{key}: largest difference between 2 and 1 threads {diff:.2g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
