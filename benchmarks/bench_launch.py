"""Microseconds per launch of the fused step's two kernels on a small network, as the step
passed their attributes and outputs before and as it passes them now.

On a network of a few thousand weights the kernels' arithmetic takes microseconds; a call's
time is MXNet's work on its attributes, inputs and outputs, on the Python thread. Two
changes, each timed here against the way before it, in the same process:

- ``bbb_update_layers``' twenty attributes one by one, against packed into one, ``args``
  (MXNet's extension interface hands every attribute to each callback of every call);
- ``bbb_draw_layers`` into new arrays at every call, against into arrays kept (``out=``).

The arrays are those of a 13-50-1 network (four posterior keys) under Adam; one thread;
each figure the median over rounds of the mean of ``--calls`` calls, the contenders in turn
(``timing.alternate``), and its ratio to ``adam_update`` on one 50x13 array (one built-in
operator's launch) the median of the rounds' own ratios.

    python benchmarks/bench_launch.py            # about ten seconds
    python benchmarks/bench_launch.py --tiny     # a few calls: proves it still runs
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one thread, before MXNet starts

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402

import mxnet as mx  # noqa: E402

from bbb_gluon._kernels import fused  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu import describe  # noqa: E402
from timing import alternate, median_ratio  # noqa: E402

SHAPES = [(50, 13), (50,), (1, 50), (1,)]  # 13-50-1: weight and bias of each layer
BASELINE = "adam_update (baseline)"


def contenders():
    shapes = SHAPES
    mus = [mx.nd.random.normal(shape=s) for s in shapes]
    rhos = [mx.nd.full(s, -5.0) for s in shapes]
    draw = dict(seed=0, stream=0, counter=1, layer=0, layers=len(shapes),
                aux=",".join("0" * len(shapes)))
    kept = [mx.nd.empty(s) for s in shapes + shapes]
    # per layer: gw, w, eps, mu, rho and Adam's four moments; then the guard
    layers = [[mx.nd.zeros(s) for _ in range(9)] for s in shapes]
    update = dict(guard=1, adam=1, layers=len(shapes), aux=draw["aux"], cost=1,
                  lr_mu=",".join(["0.001"] * len(shapes)),
                  lr_rho=",".join(["0.001"] * len(shapes)),
                  wd_mu=",".join(["0.0"] * len(shapes)), wd_rho=",".join(["0.0"] * len(shapes)),
                  rescale="0.03125", clip="-1.0", scale="0.001", kind=2, sigma="1.0",
                  beta1="0.9", beta2="0.999", epsilon="1e-08")
    flat = [a for layer in layers for a in layer]
    guard = mx.nd.zeros((1,))
    w, g, m, v = (mx.nd.zeros(SHAPES[0]) for _ in range(4))
    return {
        BASELINE: lambda: mx.nd.adam_update(w, g, m, v, lr=0.001, out=w),
        "update, attributes apart": lambda: mx.nd.bbb_update_layers(*flat, guard, **update),
        "update, packed in args": lambda: mx.nd.bbb_update_layers(
            *flat, guard, args=fused.packed(**update)),
        "draw, new outputs": lambda: mx.nd.bbb_draw_layers(*mus, *rhos,
                                                           args=fused.packed(**draw)),
        "draw, kept outputs": lambda: mx.nd.bbb_draw_layers(*mus, *rhos, out=kept,
                                                            args=fused.packed(**draw)),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500, help="calls per round")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.rounds < 1:
        parser.error("--calls and --rounds must be at least 1")
    calls, rounds = (3, 1) if args.tiny else (args.calls, args.rounds)
    if not fused.available():
        print(f"the fused kernels are unavailable: {fused.unavailable_reason()}")
        return 1
    print(f"cpu: {describe()}; one thread")
    runs = {name: (lambda i, run=run: run()) for name, run in contenders().items()}
    times = alternate(runs, calls, rounds, warmup=1 if args.tiny else 20)
    base = times[BASELINE]
    for name, t in times.items():
        us = statistics.median(t) * 1e3
        print(f"{name:<28}{us:8.1f} us  {median_ratio(t, base):5.2f}x adam_update")
    return 0


if __name__ == "__main__":
    sys.exit(main())
