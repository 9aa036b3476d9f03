"""Milliseconds of single operators over the 478,410 weights of a 784-400-400-10 net.

The figures behind "where the time goes" in docs/benchmarks.md: MXNet 1.9.1 operators
against the fused kernels of bbb_gluon. Mean of 50 calls after a warm-up, waitall around.

    python benchmarks/bench_ops.py
"""

import os
import sys
import time

import mxnet as mx
import numpy as np

import bbb_gluon.threads
from bbb_gluon._kernels import fused

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu import print_cpu  # noqa: E402

N = 478_410


def ms(fn, repeats=50):
    fn()
    mx.nd.waitall()
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    mx.nd.waitall()
    return (time.perf_counter() - t0) / repeats * 1e3


def main():
    print_cpu()
    bbb_gluon.threads.claim()  # every core, as the earlier rounds measured (docs/speed.md)
    nd = mx.nd
    rng = np.random.default_rng(0)
    rho = nd.array(rng.uniform(-8, 0, N))
    mu = nd.array(rng.normal(0, 0.1, N))
    gw = nd.array(rng.normal(0, 1e-3, N))
    rows = [
        ("nd.random.normal", lambda: nd.random.normal(shape=(N,))),
        ("numpy standard_normal (float32)", lambda: rng.standard_normal(N, dtype=np.float32)),
        ("nd.exp", lambda: nd.exp(rho)),
        ("nd.log", lambda: nd.log(-rho + 1)),
        ("nd.sum (whole array)", lambda: nd.sum(rho)),
        ("nd.dot(x, x) (a sum as a product)", lambda: nd.dot(rho, rho)),
        ("Activation softrelu (oneDNN)", lambda: nd.Activation(rho, act_type="softrelu")),
        ("Activation sigmoid (oneDNN)", lambda: nd.Activation(rho, act_type="sigmoid")),
        ("x * y", lambda: rho * mu),
        ("adam_update (incl. zeroed states)",
         lambda: nd.adam_update(mu, gw, mu.zeros_like(), mu.zeros_like(), lr=1e-3)),
    ]
    if fused.available():
        eps = nd.bbb_normal(mu, seed=1, stream=0, counter=0, layer=0)
        w = nd.bbb_sample(mu, rho, eps)
        rows += [
            ("fused bbb_normal", lambda: nd.bbb_normal(mu, seed=1, stream=0, counter=3,
                                                       layer=0)),
            ("fused bbb_sample", lambda: nd.bbb_sample(mu, rho, eps)),
            ("fused bbb_grad (MC, scale mixture)",
             lambda: nd.bbb_grad(gw, w, eps, mu, rho, kind=1, scale=1e-5, pi=0.5, sigma1=1.0,
                                 sigma2=0.0025)),
        ]
    else:
        print(f"fused kernels unavailable: {fused.unavailable_reason()}")
    print(f"{'operation on 478,410 float32':<40}{'ms':>8}")
    for name, fn in rows:
        print(f"{name:<40}{ms(fn):>8.2f}")


if __name__ == "__main__":
    main()
