"""The fused update on its own: one call of ``bbb_update_layers`` for every setting it
compiles a loop for, against MXNet's own optimiser operators on the same arrays.

For the posterior of the 784-400-400-10 MLP (478,410 means and as many rho), each
optimiser (Adam; SGD; SGD with momentum 0.9), prior (scale mixture and Gaussian with the
Monte-Carlo cost, Gaussian with the closed-form KL) and estimator's ``aux`` (0 the
shared sample, 1 Flipout, 2 the local reparameterisation): the milliseconds of one call
(gradient of the cost and the optimiser's step for mu and rho of every layer), median of
``--repeats`` timings of ``--calls`` calls, and its ratio to the baseline measured in the
same run: MXNet's ``adam_update`` / ``sgd_update`` / ``sgd_mom_update`` on the same mu
and rho arrays (the step alone, without the gradient that ``bbb_update_layers`` also
computes). No gradient clipping (the clipped loops are not timed). Every setting does
about the same arithmetic per element, so a setting several times above MXNet's step is a
loop the compiler left scalar (docs/benchmarks.md, seventh round: before its fix 17 of
the 27 settings ran 3.4-7.9x MXNet's step).

    python benchmarks/bench_update.py [--threads 1] [--repeats 5] [--calls 50]
    python benchmarks/bench_update.py --tiny      # a few calls: proves it still runs
"""

import argparse
import os
import statistics
import sys
import time
from functools import partial

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu import print_cpu  # noqa: E402

LR = dict(lr=1e-3, wd=0.0, rescale_grad=1 / 128)


def mxnet_update(mx, name, layers, states):
    """MXNet's own step for mu and rho of every layer (the baseline)."""
    for (mu, rho, g_mu, g_rho), st in zip(layers, states, strict=True):
        for k, (w, g) in enumerate(((mu, g_mu), (rho, g_rho))):
            if name == "adam":
                mx.nd.adam_update(w, g, st[2 * k], st[2 * k + 1], out=w, **LR)
            elif name == "sgd":
                mx.nd.sgd_update(w, g, out=w, **LR)
            else:
                mx.nd.sgd_mom_update(w, g, st[k], momentum=0.9, out=w, **LR)


def main(argv=None):
    print_cpu()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1,
                        help="OpenMP threads (set before MXNet loads; default 1)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)

    import mxnet as mx
    import numpy as np

    from bbb_gluon._kernels import fused
    if not fused.load():
        sys.exit(f"fused kernels unavailable: {fused.unavailable_reason()}")
    repeats, calls = (1, 2) if args.tiny else (args.repeats, args.calls)
    shapes = [(400, 784), (400,), (400, 400), (400,), (10, 400), (10,)]
    rng = np.random.default_rng(0)

    def arrays(shape, count):
        return [mx.nd.array(rng.normal(size=shape).astype(np.float32)) for _ in range(count)]

    def seconds(run):
        run()
        mx.nd.waitall()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(calls):
                run()
            mx.nd.waitall()
            times.append((time.perf_counter() - start) / calls)
        return statistics.median(times)

    optimisers = {"adam": dict(adam=1, beta1="0.9", beta2="0.999", epsilon="1e-08"),
                  "sgd": dict(adam=0, momentum="0.0"),
                  "sgd-momentum": dict(adam=0, momentum="0.9")}
    states = {"adam": 4, "sgd": 0, "sgd-momentum": 2}
    priors = {"mixture-mc": 1, "gaussian-mc": 2, "gaussian-kl": 3}
    print(f"one call over {sum(int(np.prod(s)) for s in shapes):,} means and as many rho; "
          f"OMP_NUM_THREADS={args.threads}; median of {repeats} x {calls} calls")
    print(f"{'optimiser':>13} {'prior':>12} {'aux':>3} {'ms':>7} {'MXNet ms':>9} {'ratio':>7}")
    for name, attrs in optimisers.items():
        mine = [arrays(s, 4) for s in shapes]  # mu, rho, and their MXNet states below
        opt_states = [arrays(s, states[name]) for s in shapes]
        for st in opt_states:
            for a in st[1::2] if name == "adam" else ():
                a[:] = mx.nd.abs(a)  # Adam's second moments are not negative

        baseline = seconds(partial(mxnet_update, mx, name, mine, opt_states))
        for prior, kind in priors.items():
            for aux in (0, 1, 2):
                layers = []
                for s in shapes:
                    gw, w, eps, mu, rho = arrays(s, 5)
                    rho[:] = -5.0
                    st = arrays(s, states[name])
                    for a in st[1::2] if name == "adam" else ():
                        a[:] = mx.nd.abs(a)
                    layers += [gw, w, eps, mu, rho, *st, *(arrays(s, 1) if aux else [])]
                guard = mx.nd.array([0.0])
                count = len(shapes)
                kwargs = dict(
                    guard=1, layers=count, aux=",".join([str(aux)] * count),
                    lr_mu=",".join(["0.001"] * count), lr_rho=",".join(["0.001"] * count),
                    wd_mu=",".join(["0.0"] * count), wd_rho=",".join(["0.0"] * count),
                    rescale=repr(1 / 128), clip="-1.0", scale="0.01", kind=kind, sigma="1.0",
                    pi="0.5", sigma1="1.0", sigma2=repr(float(np.exp(-6))),
                    **attrs)
                took = seconds(partial(mx.nd.bbb_update_layers, *layers, guard, **kwargs))
                print(f"{name:>13} {prior:>12} {aux:>3} {took * 1e3:7.2f} "
                      f"{baseline * 1e3:9.2f} {took / baseline:6.2f}x", flush=True)


if __name__ == "__main__":
    main()
