"""The program ``tests/distributed/test_distributed.py`` launches as each worker (not a test
module).

    python dist_worker.py MODE OUT MODEL ENGINE

    python dist_worker.py MODE OUT MODEL ENGINE [EPOCHS]

MODE: ``fit`` trains and saves this rank's parameters to ``OUT/rank<r>.npz``; ``stop``
trains into the run folder ``OUT/run`` and is interrupted after 7 batches; ``resume``
continues that run to the end (or to EPOCHS) and saves as ``fit`` does; ``long`` trains
into ``OUT/run`` for 1000 epochs (for a test to kill a peer in); ``die`` kills itself
(rank 1) while the others wait on a gradient exchange; ``hang`` never ends.
"""

import dataclasses
import json
import os
import signal
import sys
import time

import mxnet as mx
import numpy as np

from bbb_gluon.data import load_dataset
from bbb_gluon.training import MLP, RunOptions, TrainConfig, TrainingInterrupted, fit

CONFIG = dict(epochs=2, batch_size=64, eval_samples=0, seed=3, lr=0.01)
NET = MLP(hidden=(16,))  # the network of every run here


def config(model, engine):
    return TrainConfig(model=model, engine=engine, **CONFIG)


def data():
    return load_dataset("mnist", subset=600, num_valid=100)


def save(result, out, rank):
    if result.posterior is not None:
        arrays = [a.asnumpy() for a in result.posterior.mu() + result.posterior.rho()]
    else:
        arrays = [p.data().asnumpy()
                  for p in result.net._collect_params_with_prefix().values()]
    np.savez(os.path.join(out, f"rank{rank}.npz"), *arrays)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result.history, f)


def main():
    mode, out, model, engine = sys.argv[1:5]
    if mode == "hang":
        time.sleep(3600)
        return 0
    kv = mx.kv.create("dist_sync")
    if mode == "die":
        kv.init(7, mx.nd.zeros((2,)))
        if kv.rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        value = mx.nd.ones((2,))
        kv.pushpull(7, value)  # blocks for ever without rank 1
        value.wait_to_read()
        return 0
    splits = data()
    run_dir = os.path.join(out, "run") if mode in ("stop", "resume", "long") else None
    cfg = config(model, engine)
    if mode == "long":
        cfg = dataclasses.replace(cfg, epochs=1000)
    if len(sys.argv) > 5:
        cfg = dataclasses.replace(cfg, epochs=int(sys.argv[5]))
    try:
        result = fit(cfg, splits.train, splits.valid, net=dataclasses.replace(NET, ctx=mx.cpu(0)),
                     run_dir=run_dir, progress=False, resume=mode == "resume",
                     options=RunOptions(kvstore=kv,
                                        stop_after_batches=7 if mode == "stop" else None))
    except TrainingInterrupted:
        return 0
    save(result, out, kv.rank)
    return 0


if __name__ == "__main__":
    sys.exit(main())
