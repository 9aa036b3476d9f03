"""A network run with its layers under the estimators' rules (:mod:`.estimators`).

:class:`EstimatorForward` is what a training step runs: set up once per step object, it
traces the network once per shape of examples into one graph in which each layer under
Flipout or the local reparameterisation computes as its estimator says (the estimator's
extra inputs, perturbations or variances and per-example noise, are inputs of the
graph), and runs that graph as an MXNet ``CachedOp`` on every call: no block is patched,
no hybridization switched off, no parameter tree walked per call. A network that cannot
be traced (a plain ``Block`` with Python control flow, several outputs) runs as
:func:`perturbed` runs it: imperatively, its layers' forwards swapped for the call.

:func:`perturbed` and :func:`swapped` are the same forwards for a user's own code: inside
the block a plain ``net(X)`` runs the layers under their rules.
"""

import logging
from collections import Counter
from contextlib import ExitStack, contextmanager

import mxnet as mx
from mxnet.gluon import HybridBlock

from .._kernels import private as _private
from .estimators import KeptInputs, aux_arrays, key_modes
from .layer_forward import LayerForward
from .sampling import swapper, use_weights

__all__ = ["EstimatorForward", "perturbed", "swapped", "sample_noise"]

# The traced graph's input for the examples (a name no Gluon parameter takes).
_X_NAME = "bbb_gluon_examples"


class _Arrays(KeptInputs):
    """A layer's inputs as arrays, for one imperative call."""

    def __init__(self, aux, noise):
        self._aux, self._noise = aux, noise
        self._kept = {}

    def shapes(self, layer, x, mean):
        return x.shape, mean.shape

    def aux(self, key):
        return None if key is None else self._aux[key]

    def noise(self, layer, offset, shape, signs):
        return self._noise(layer.tag + offset, shape, signs)


class _Symbols(KeptInputs):
    """A layer's inputs as the graph's input variables, named by posterior key (aux) and
    by tag (noise: layers sharing a weight share its signs), with the traced shapes."""

    def __init__(self, shapes):
        self._shapes = shapes
        self.vars, self.aux_of, self.noise_of = {}, {}, {}
        self._kept = {}

    def _var(self, name):
        if name not in self.vars:
            self.vars[name] = mx.sym.var(name)
        return self.vars[name]

    def shapes(self, layer, x, mean):
        return self._shapes[id(layer.block)]

    def aux(self, key):
        if key is None:
            return None
        self.aux_of[f"bbb_aux{key}"] = key
        return self._var(f"bbb_aux{key}")

    def noise(self, layer, offset, shape, signs):
        name = f"bbb_noise{layer.tag + offset}"
        self.noise_of[name] = (layer, offset)
        return self._var(name)


def sample_noise(posterior, ctx, stream):
    """``noise(tag, shape, signs)`` for the estimators' per-example arrays: drawn beside
    the posterior's last weight block of ``stream`` (call it after ``sample``), so a
    resumed run draws the same."""
    source = posterior.noise
    counter = source.last_counter(stream)

    def noise(tag, shape, signs):
        return mx.nd.array(source.extra(stream, counter, tag, shape, signs), ctx=ctx)
    return noise


@contextmanager
def perturbed(net, posterior, rules, sample, noise):
    """Inside the block, ``net(X)`` runs each layer as its rule says, with the weight
    sample ``sample`` (a :class:`~bbb_gluon.core.posterior.WeightSample`, recorded by
    autograd) and ``noise(tag, shape, signs)`` for the per-example arrays; the network
    is restored on leaving. Where no rule draws per example this is ``use_weights``."""
    modes = key_modes(rules, len(posterior.keys))
    # Layers under Flipout or the local reparameterisation see the means; others the sample.
    weights = [w if mode == 0 else m for mode, w, m in
               zip(modes, sample.weights, sample.mus, strict=True)]
    with swapped(net, posterior, rules, weights, sample.ctx, aux_arrays(rules, sample),
                 noise):
        yield net


@contextmanager
def swapped(net, posterior, rules, weights, ctx, aux, noise, fused=False):
    """:func:`perturbed` on arrays: ``weights`` go into the network (the means for the
    layers under Flipout or the local reparameterisation), ``aux`` as
    :func:`aux_arrays` gives them; ``fused``: the layers may run the fused kernels' own
    operators (the fused engine; the reference engine runs MXNet's)."""
    special = [r for r in rules if r.estimator.per_example]
    with ExitStack() as stack:
        stack.enter_context(use_weights(net, posterior, weights, ctx))
        if special:
            stack.enter_context(_imperative(net))
        source = _Arrays(aux, noise)  # one for every layer: what one keeps, the next finds
        for r in special:
            stack.enter_context(_forward_of(r.block, LayerForward(r, source, fused)))
        yield net


@contextmanager
def _forward_of(block, forward):
    """``block.hybrid_forward`` is ``forward`` inside the block (an attribute of this
    instance only, removed on leaving)."""
    had = "hybrid_forward" in vars(block)
    saved = vars(block).get("hybrid_forward")
    object.__setattr__(block, "hybrid_forward", forward)
    try:
        yield
    finally:
        if had:
            object.__setattr__(block, "hybrid_forward", saved)
        else:
            object.__delattr__(block, "hybrid_forward")


@contextmanager
def _imperative(net):
    """Run the network imperatively (the swapped forwards are Python), keeping every
    hybridized block's cached graph for the calls after the block."""
    active = []
    net.apply(lambda b: active.append(b) if isinstance(b, HybridBlock)
              and _private.is_hybridized(b) else None)
    for b in active:
        _private.set_hybridized(b, False)
    try:
        yield
    finally:
        for b in active:
            _private.set_hybridized(b, True)


_log = logging.getLogger(__name__)


class _Untraceable(Exception):
    """The network cannot run as one traced graph (see EstimatorForward)."""


class _Graph:
    """The network traced once for one shape of examples, with its layers under their
    rules, run as one CachedOp; the noise's shapes are read off the trace per batch
    shape (inferred once each)."""

    def __init__(self, forward, X):
        net, special = forward.net, forward.special
        params = forward.network_params()
        self._param_shapes = {n: p.shape for n, p in params.items()}
        self._layer_io = self._trace_plain(net, special)
        self._shapes, self._noise = {}, {}
        # the layers' shapes first: a network the graph could not run is refused here
        source = _Symbols(self._layer_shapes_of(X.shape))
        layers = [LayerForward(r, source, forward.fused) for r in special]
        by_block = {id(layer.block): layer for layer in layers}
        for block, after in self._chained(self._layer_io):
            by_block[block].successor = by_block[after]
        with ExitStack() as stack:
            for layer in layers:
                stack.enter_context(_forward_of(layer.block, layer))
            out = net(mx.sym.var(_X_NAME))
        if not isinstance(out, mx.sym.Symbol) or len(out.list_outputs()) != 1:
            raise _Untraceable("not one output")
        self._noise_of = source.noise_of
        keys = {p.name: i for i, p in enumerate(forward.parameters)}
        self._sources = []
        for name in out.list_inputs():
            if name == _X_NAME:
                self._sources.append((0, None))
            elif name in keys:
                self._sources.append((1, keys[name]))
            elif name in source.aux_of:
                self._sources.append((3, source.aux_of[name]))
            elif name in source.noise_of:
                self._sources.append((4, name))
            elif name in params:
                self._sources.append((2, params[name]))
            else:
                raise _Untraceable(f"unknown input {name!r}")
        self.symbol = out
        self._op = mx.nd.CachedOp(out)

    @staticmethod
    def _trace_plain(net, special):
        """The symbols of each covered layer's input and output in the plain network."""
        recorded = {}

        def recorder(block):
            own = type(block).hybrid_forward

            def record(F, x, *args, **kwargs):
                out = own(block, F, x, *args, **kwargs)
                recorded.setdefault(id(block), []).append((x, out))
                return out
            return record
        with ExitStack() as stack:
            for r in special:
                stack.enter_context(_forward_of(r.block, recorder(r.block)))
            net(mx.sym.var(_X_NAME))
        return [(id(r.block), recorded[id(r.block)]) for r in special]

    @staticmethod
    def _chained(layer_io):
        """``(block, next block)`` ids where a covered layer used once has its output go
        into one covered use only, that of a layer used once, in the plain network's
        trace (other consumers of the output may exist; they take it as it is)."""
        once = [(block, uses[0]) for block, uses in layer_io if len(uses) == 1]
        by_output = {id(out): block for block, (_, out) in once}
        takers = Counter(id(x) for _, uses in layer_io for x, _ in uses)
        return [(by_output[id(x)], block) for block, (x, _) in once
                if id(x) in by_output and takers[id(x)] == 1]

    def _layer_shapes_of(self, x_shape):
        """``{id(block): (input shape, output shape)}`` for examples of ``x_shape``."""
        if x_shape in self._shapes:
            return self._shapes[x_shape]
        symbols = [s for _, uses in self._layer_io for use in uses for s in use]
        group = mx.sym.Group(symbols)
        known = {_X_NAME: tuple(x_shape)}
        known.update({n: s for n, s in self._param_shapes.items()
                      if n in set(group.list_inputs())})
        _, shapes, _ = group.infer_shape(**known)
        if shapes is None or any(s is None or 0 in s for s in shapes):
            raise _Untraceable("shapes not inferred")
        out, k = {}, 0
        for block, uses in self._layer_io:
            pairs = {(tuple(shapes[k + 2 * u]), tuple(shapes[k + 2 * u + 1]))
                     for u in range(len(uses))}
            if len(pairs) > 1:  # a block used twice on different shapes: one noise each
                raise _Untraceable("one layer on two shapes")
            out[block] = pairs.pop()
            k += 2 * len(uses)
        self._shapes[x_shape] = out
        return out

    def noise_shapes(self, x_shape):
        """``{input name: (tag, shape, signs)}`` of the noise for examples of ``x_shape``."""
        layer_shapes = self._layer_shapes_of(x_shape)
        wanted = {}
        for name, (layer, offset) in self._noise_of.items():
            shape, signs = layer.estimator.noise_shapes(
                layer, *layer_shapes[id(layer.block)])[offset]
            wanted[name] = (layer.tag + offset, shape, signs)
        return wanted

    def __call__(self, weights, ctx, X, aux, noise):
        wanted = self._noise.get(X.shape)
        if wanted is None:
            wanted = self._noise[X.shape] = self.noise_shapes(X.shape)
        args = []
        for kind, key in self._sources:
            if kind == 0:
                args.append(X)
            elif kind == 1:
                args.append(weights[key])
            elif kind == 2:
                args.append(key.data(ctx))
            elif kind == 3:
                args.append(aux[key])
            else:
                args.append(noise(*wanted[key]))
        return self._op(*args)


_MISSING = object()


class EstimatorForward:
    """``forward(weights, ctx, X, aux=None, noise=None)``: ``net(X)`` with ``weights``
    (one array per posterior key: the sample's, or the means for a layer under Flipout or
    the local reparameterisation) in place of the posterior's parameters, and each
    layer run as its rule in ``rules`` says, with ``aux`` (``{key: perturbation or
    variance}``, :func:`~bbb_gluon.core.estimators.aux_arrays`) and ``noise(tag, shape,
    signs)`` for the per-example arrays.

    Set up once per training step object. With every layer on the shared sample it swaps
    the weights into the network, which runs as it is (its own hybridized graph, if it
    has one). Otherwise the network is traced into one graph per shape of examples
    (the first call with that shape) and that graph runs on every call; :attr:`traced`
    says whether the last call ran one. ``fused``: the layers may run the fused kernels'
    own operators (the fused engine, CPU; the reference engine runs MXNet's).
    """

    def __init__(self, net, posterior, rules=(), fused=False):
        self._said_imperative = False
        self.net, self.posterior, self.rules, self.fused = net, posterior, list(rules), fused
        self.special = [r for r in self.rules if r.estimator.per_example]
        self.modes = key_modes(self.rules, len(posterior.keys))
        named = posterior.check_net(net)
        self.parameters = [named[k] for k in posterior.keys]
        self._swap = swapper(net, posterior)
        self._graphs = {}
        self.traced = False

    def network_params(self):
        """The network's parameters by their full names (read once per trace)."""
        return {p.name: p for p in self.net.collect_params().values()}

    def __call__(self, weights, ctx, X, aux=None, noise=None):
        if not self.special:
            with self._swap(weights, ctx):
                return self.net(X)
        graph = self._graphs.get(X.shape[1:], _MISSING)
        if graph is _MISSING:
            graph = self._graphs[X.shape[1:]] = self._trace(X)
        self.traced = graph is not None
        if graph is None:
            with swapped(self.net, self.posterior, self.rules, weights, ctx, aux, noise,
                         self.fused):
                return self.net(X)
        return graph(weights, ctx, X, aux, noise)

    def symbol_for(self, example_shape):
        """The traced graph (an MXNet Symbol) for examples of ``example_shape``, or None
        where none was traced (not yet called with it, or the network runs imperatively)."""
        graph = self._graphs.get(tuple(example_shape))
        return None if graph is None or graph is _MISSING else graph.symbol

    def _trace(self, X):
        """The graph for examples shaped as ``X``'s, or None where the network cannot be
        traced (it then runs imperatively, as before tracing existed)."""
        try:
            return _Graph(self, X)
        except (_Untraceable, mx.base.MXNetError, AttributeError, TypeError, ValueError,
                KeyError, NotImplementedError) as e:
            if not self._said_imperative:  # once per forward: why it runs slower
                self._said_imperative = True
                why = " ".join(str(e).split())[:300] or type(e).__name__
                _log.info("%s runs imperatively under its estimators (it cannot be traced "
                          "as one graph: %s)", type(self.net).__name__, why)
            return None

    def with_sample(self, sample, X, noise):
        """The forward on a recorded :class:`~bbb_gluon.core.posterior.WeightSample`:
        the means for the layers under an estimator, their ``aux`` from the sample."""
        weights = [w if mode == 0 else m for mode, w, m in
                   zip(self.modes, sample.weights, sample.mus, strict=True)]
        return self(weights, sample.ctx, X, aux_arrays(self.rules, sample), noise)
