r"""How a minibatch's forward pass sees the posterior: the gradient estimators.

- ``"reparam"`` (Blundell et al.): one weight sample :math:`w = \mu + \sigma \circ \epsilon`
  shared by the whole minibatch.
- ``"flipout"`` (Wen et al., 2018): the same shared perturbation
  :math:`\Delta = \sigma \circ \epsilon`, decorrelated between examples by random signs,
  :math:`W_n = \mu + \Delta \circ (r_n s_n^\top)`: each example sees a weight drawn from
  the posterior, at the cost of a second matrix product,
  :math:`y_n = x_n \mu + ((x_n \circ s_n) \Delta) \circ r_n`. For convolutions the signs
  are per (example, input channel) and per (example, output channel), the same at every
  spatial position, so the weight stays one weight across the image (per-pixel signs, as
  some libraries draw them, untie it: a different model). A covered bias is perturbed by
  :math:`\Delta_b \circ r_n`.
- ``"local"`` (the local reparameterisation, Kingma, Salimans & Welling, 2015) on Dense
  layers: each example's pre-activations drawn from their Gaussian, mean
  :math:`x \mu + \mu_b`, variance :math:`x^2 \sigma^2 + \sigma_b^2` (plus a floor of
  1e-12, so that a row of zeros, a dead ReLU, gives no NaN gradient); Flipout on
  convolutions, on a Dense layer applied at several positions (``flatten=False``), and on
  a Dense layer whose weight other layers share (weight tying), where independent draws
  per position or per use would untie the weight. Layers that share a weight draw the
  same signs for an example, so each example sees one weight in all of them.

Layers of other kinds, and layers whose weight has no posterior, keep the shared sample.
All three estimators are unbiased for the same objective. The complexity cost is taken at
the shared sample :math:`\mu + \sigma \circ \epsilon` (Flipout's own perturbation; under
the local reparameterisation a draw the forward pass never used, so independent of it),
or in closed form (``complexity="kl"``).

Each estimator is one :class:`Estimator` object (users name them ``"reparam"``,
``"local"``, ``"flipout"``) that decides which layers it runs on, what runs instead on
tied weights, and computes their output for arrays and symbols alike; :func:`plan` gives
every layer with a posterior its rule, and a step runs the network through one traced
graph (:class:`~bbb_gluon.core.estimator_forward.EstimatorForward`).
"""

from dataclasses import dataclass, field, replace

import mxnet as mx
from mxnet.gluon import nn

from .._kernels import private as _private

__all__ = ["ESTIMATORS", "Estimator", "SharedSample", "LocalReparameterization", "Flipout",
           "KeptInputs", "asks_per_example", "get_estimator", "LayerRule", "plan",
           "check_estimator"]

VARIANCE_FLOOR = 1e-12  # under the local reparameterisation's sqrt, infinitely steep at 0

_CONV_LAYERS = (nn.Conv1D, nn.Conv2D, nn.Conv3D)
_KINDS = {}


class Estimator:
    """How the layers an estimator covers see the posterior in a minibatch's forward pass.

    One instance per kind (:func:`get_estimator`); users name it by :attr:`name`. A
    subclass says which layers it runs on (:meth:`rule`), what it takes beside the means
    per posterior key (:meth:`aux`: a perturbation or a variance), which per-example
    noise a layer draws (:meth:`noise_shapes`) and the layer's output
    (:meth:`output`, written once for arrays and for symbols, so the same code runs
    imperatively and inside a step's hybridized graph); :attr:`mode` is what the fused
    kernels receive for its keys (``aux`` in ``fused.cc``), so adding an estimator is one
    class plus, for the fused engine, its kernel code.
    """

    name = None
    mode = 0
    #: each example sees a draw of its own (a per-example noise, a traced graph and the
    #: kernels' ``aux``); False for the shared sample, the network as it is
    per_example = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.name is not None:
            _KINDS[cls.name] = cls()

    def __repr__(self):
        return f"{type(self).__name__}()"

    def rule(self, block, weight):
        """``(estimator name, why)`` for one layer when every layer is asked to run this
        one (``why`` where another runs instead)."""
        if weight is None:
            return SharedSample.name, "its weight has no posterior"
        if type(block) is nn.Dense or type(block) in _CONV_LAYERS:
            return self.name, ""
        return SharedSample.name, f"no {self.name} estimator for {type(block).__name__}"

    def tied(self):
        """What runs instead on layers that share a weight: itself, unless its draws
        would untie the weight."""
        return self

    def per_position(self, block):
        """Whether on ``block`` it would draw anew at every position of one weight."""
        return False

    def aux(self, sigma, eps):
        """What a layer under this estimator takes beside the means, per posterior key
        (None: the layer takes the shared sample)."""
        return None

    def noise_shapes(self, layer, x_shape, out_shape):
        """``{tag offset: (shape, signs)}``: the per-example noise ``layer`` draws for an
        input of ``x_shape`` and a mean output of ``out_shape``."""
        return {}

    def output(self, F, layer, x, mean, inputs, fused):
        """``(output, relu_done)``: the layer's output given its mean output ``mean``
        (the means' forward), ``inputs`` (``aux_w``, ``aux_b`` and ``noise[offset]``)."""
        raise NotImplementedError


class SharedSample(Estimator):
    """One weight sample :math:`w = \\mu + \\sigma \\circ \\epsilon` for the whole minibatch
    (Blundell et al.): the network runs as it is, with the sample in its parameters."""

    name = "reparam"
    mode = 0
    per_example = False

    def rule(self, block, weight):
        return self.name, ""


class KeptInputs:
    """What a layer computed for the next one in its own pass, kept by its output (that
    object itself, on one call or one trace): a local layer's output's square
    (``"square"``, for any layer that takes that output), a Flipout layer's output times
    the next layer's input signs (``"flipped"``, for that layer only). The sources of a
    layer's inputs are these; each sets ``_kept = {}``."""

    def keep(self, kind, out, value, for_layer=None):
        self._kept[(kind, id(out))] = (out, value, for_layer)

    def kept(self, kind, x, layer=None):
        """What a layer kept of ``kind`` for its output ``x`` (and for ``layer``, where
        it was kept for one layer), else None."""
        entry = self._kept.get((kind, id(x)))
        if entry is None or entry[0] is not x or entry[2] not in (None, layer):
            return None
        return entry[1]


class LocalReparameterization(Estimator):
    """Each example's pre-activations drawn from their Gaussian (Dense layers applied once
    per example); Flipout where that would untie the weight."""

    name = "local"
    mode = 2

    def rule(self, block, weight):
        name, why = super().rule(block, weight)
        if name != self.name or not self.per_position(block):
            return name, why
        if type(block) in _CONV_LAYERS:
            return self.tied().name, "a convolution: one weight at every position"
        return self.tied().name, "flatten=False: one weight at every position"

    def tied(self):
        return _KINDS[Flipout.name]

    def per_position(self, block):
        return type(block) in _CONV_LAYERS or not _private.dense_settings(block)[1]

    def aux(self, sigma, eps):
        return mx.nd.square(sigma)

    def noise_shapes(self, layer, x_shape, out_shape):
        return {0: (tuple(out_shape), False)}

    def output(self, F, layer, x, mean, inputs, fused):
        zeta = inputs.noise[0]
        if not fused:
            var = layer.linear(F, F.square(x), inputs.aux_w, inputs.aux_b)
            return (F.elemwise_add(mean, F.elemwise_mul(F.sqrt(var + VARIANCE_FLOOR), zeta)),
                    False)
        # x's square as the layer before computed it, where it was a local layer too
        squared = layer.source.kept("square", x)
        var = layer.linear(F, F.square(x) if squared is None else squared, inputs.aux_w,
                           inputs.aux_b)
        # One pass where MXNet runs five operators; after a relu, the output's square too
        # (three operators fewer where the next layer is local as well).
        outs = F.bbb_lrt_combine(mean, var, zeta, floor=repr(VARIANCE_FLOOR),
                                 relu=int(layer.relu), square=int(layer.relu))
        if not layer.relu:
            return outs, False
        out = outs[0]  # once: each indexing of a Symbol makes a new object
        layer.source.keep("square", out, outs[1])
        return out, True


class Flipout(Estimator):
    """The shared perturbation decorrelated between examples by random signs (Wen et al.,
    2018), per (example, channel) on convolutions."""

    name = "flipout"
    mode = 1

    def aux(self, sigma, eps):
        return sigma * eps

    def noise_shapes(self, layer, x_shape, out_shape):
        s, r = layer.sign_shapes(x_shape, out_shape)
        return {1: (s, True), 2: (r, True)}

    def output(self, F, layer, x, mean, inputs, fused):
        s, r = inputs.noise[1], inputs.noise[2]
        shapes = inputs.x_shape, inputs.out_shape
        # x * s, made by the layer before for this one
        flipped = layer.source.kept("flipped", x, layer) if fused else None
        if layer.flatten:
            x = x.reshape((0, -1))
        if fused and layer.compact(*shapes):
            # The signs stay compact, and the output side (multiply, add, relu) is one
            # operator, with the next layer's x * s where it is Flipout's too.
            flipped = F.bbb_flip(x, s) if flipped is None else flipped
            z = layer.linear(F, flipped, inputs.aux_w, inputs.aux_b)
            nxt = self._next_signs(layer, shapes)
            if nxt is None:
                return F.bbb_flipout_combine(mean, z, r, relu=int(layer.relu)), layer.relu
            outs = F.bbb_flipout_combine(mean, z, r, nxt, relu=1, flip=1)
            out = outs[0]  # once: each indexing of a Symbol makes a new object
            layer.source.keep("flipped", out, outs[1], for_layer=layer.successor)
            return out, True
        # The bias perturbation goes in as the operator's bias, and the signs as full
        # arrays into elementwise operators: NDArray's * and + are MXNet's broadcast ones,
        # whose backward reduces, single-threaded (it took longer than the convolutions'
        # on LeNet).
        z = layer.linear(F, F.elemwise_mul(x, layer.spread(F, s, "s", *shapes)),
                         inputs.aux_w, inputs.aux_b)
        return F.elemwise_add(mean, F.elemwise_mul(z, layer.spread(F, r, "r", *shapes))), False

    @staticmethod
    def _next_signs(layer, shapes):
        """The next layer's input signs where this layer's relu'd output (its input and mean
        output of ``shapes``) goes straight into a layer under Flipout whose signs have this
        layer's output signs' shape (so that
        ``bbb_flipout_combine(flip=1)`` can flip it here), else None. Only a traced graph
        links a layer to its successor: its source knows every layer's shapes up front."""
        nxt = layer.successor
        if not layer.relu or nxt is None or nxt.estimator.mode != Flipout.mode:
            return None
        r_shape = layer.sign_shapes(*shapes)[1]  # this layer's output signs
        next_shapes = layer.source.shapes(nxt, None, None)
        s_shape = nxt.sign_shapes(*next_shapes)[0]
        if not nxt.fused or not nxt.compact(*next_shapes) or tuple(s_shape) != tuple(r_shape):
            return None
        return layer.source.noise(nxt, 1, s_shape, True)


ESTIMATORS = tuple(_KINDS)


def check_estimator(estimator):
    """``estimator`` if it is one of :data:`ESTIMATORS`, or a dict of layer names to
    them (see :func:`plan`), else ``ValueError``."""
    if isinstance(estimator, dict):
        for name, rule in estimator.items():
            if rule not in ESTIMATORS:
                raise ValueError(f"estimator[{name!r}] must be one of {ESTIMATORS}, got "
                                 f"{rule!r}")
        return estimator
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS} (or a dict of layer names "
                         f"to them), got {estimator!r}")
    return estimator


def asks_per_example(estimator):
    """Whether ``estimator`` (a name, or a dict of them) asks a layer for per-example
    draws."""
    names = estimator.values() if isinstance(estimator, dict) else [estimator]
    return any(_KINDS[n].per_example for n in names)


def get_estimator(name):
    """The :class:`Estimator` users name ``name`` ("reparam", "local", "flipout")."""
    check_estimator(name)
    return _KINDS[name]


@dataclass(frozen=True)
class LayerRule:
    """What one layer with a posterior runs.

    Attributes
    ----------
    name : str
        The layer's structural name (``"0"``, ``"features.3"``); the prefix of its keys
        unless it shares its parameters with an earlier layer (weight tying).
    layer : str
        Its class name (``"Dense"``, ``"Conv2D"``).
    rule : {"reparam", "local", "flipout"}
    weight, bias : int or None
        Indices of its weight and bias in ``posterior.keys`` (None: no posterior).
    why : str
        Why this rule, where it is not the estimator asked for.
    block : gluon.Block
        The layer itself (left out of the repr).
    """

    name: str
    layer: str
    rule: str
    weight: object
    bias: object
    why: str = ""
    block: object = field(default=None, repr=False, compare=False)

    @property
    def estimator(self):
        """The :class:`Estimator` object of :attr:`rule`."""
        return _KINDS[self.rule]


def _layers(block, prefix=""):
    yield prefix, block
    for name, child in _private.children(block).items():
        yield from _layers(child, f"{prefix}{name}.")


def plan(net, posterior, estimator):
    """One :class:`LayerRule` per layer of ``net`` that holds a parameter of the
    posterior, in the network's order.

    ``estimator``: one of :data:`ESTIMATORS` for every layer (the local reparameterisation
    where it keeps the model: Dense layers applied once per example), or a dict
    ``{layer name: estimator}`` naming layers explicitly (the others keep the shared
    sample). Only the dict form runs the local reparameterisation on a convolution or a
    ``flatten=False`` Dense layer: per position, so each position draws its own weight, a
    different model from the network's (its objective is not the shared weight's
    evidence lower bound).
    """
    check_estimator(estimator)
    # By the Parameter itself, not by name: a Parameter that layers share (weight tying)
    # is one posterior key, held by each of them.
    index = {id(p): i for i, p in enumerate(posterior.check_net(net).values())}
    rules = []
    for prefix, block in _layers(net):
        mine = {attr: index[id(p)] for attr, p in _private.own_params(block).items()
                if id(p) in index}
        if not mine:
            continue
        name = prefix.rstrip(".")
        weight, bias = mine.get("weight"), mine.get("bias")
        if isinstance(estimator, dict):
            rule, why = _asked(estimator.get(name, SharedSample.name), name, block, weight)
        else:
            rule, why = _KINDS[estimator].rule(block, weight)
        rules.append(LayerRule(name, type(block).__name__, rule, weight, bias, why, block))
    rules = _one_rule_per_key(rules, estimator)
    if isinstance(estimator, dict):
        unknown = set(estimator) - {r.name for r in rules}
        if unknown:
            raise ValueError(f"estimator names layers without a posterior: {sorted(unknown)}; "
                             f"the layers with one are {[r.name for r in rules]}")
    return rules


def _one_rule_per_key(rules, estimator):
    """The layers that hold one posterior key (weight tying) under one rule: a step draws
    one sample, perturbation or variance per key. The local reparameterisation would draw
    per use and untie the weight, so such layers run Flipout instead (with the same signs
    for an example in every use), and a dict asking for it is refused; a dict that gives
    them different rules is refused; with one estimator for all, a group whose layers
    still differ falls back to the shared sample (e.g. an Embedding tied to a Dense
    layer: Flipout cannot run on the Embedding)."""
    while True:
        holders = {}
        for k, r in enumerate(rules):
            for i in (r.weight, r.bias):
                if i is not None:
                    holders.setdefault(i, []).append(k)
        group = next((ks for ks in holders.values() if len(ks) > 1 and (
            len({rules[k].rule for k in ks}) > 1
            or rules[ks[0]].estimator.tied() is not rules[ks[0]].estimator)), None)
        if group is None:
            return rules
        names = [rules[k].name for k in group]
        asked = isinstance(estimator, dict)
        for k in group:
            r, others = rules[k], ", ".join(n for n in names if n != rules[k].name)
            tied = r.estimator.tied()
            if tied is r.estimator:
                continue
            if asked:
                raise ValueError(f"estimator {r.rule!r} cannot run on layer {r.name!r}: it "
                                 f"shares a parameter with {others}, and a draw per use "
                                 f"would untie it; give these layers {tied.name!r}")
            rules[k] = replace(r, rule=tied.name, why=f"its weight is shared with "
                                                      f"{others}: one weight for every use")
        if len({rules[k].rule for k in group}) > 1:
            if asked:
                raise ValueError(f"layers {names} share a parameter, so they must run one "
                                 f"estimator; the dict gives them "
                                 f"{[rules[k].rule for k in group]}")
            for k in group:
                others = ", ".join(n for n in names if n != rules[k].name)
                rules[k] = replace(rules[k], rule=SharedSample.name,
                                   why=f"shares a parameter with {others}, which cannot run "
                                       f"{estimator}")


def _asked(rule, name, block, weight):
    """The rule a dict asked for one layer, refused where it cannot run."""
    estimator = _KINDS[rule]
    if not estimator.per_example:
        return rule, ""
    if weight is None or not (type(block) is nn.Dense or type(block) in _CONV_LAYERS):
        raise ValueError(f"estimator {rule!r} cannot run on layer {name!r} "
                         f"({type(block).__name__}"
                         f"{', whose weight has no posterior' if weight is None else ''}): "
                         "it runs on Dense and Conv1D/2D/3D layers")
    return rule, ("per position (asked for): a different model"
                  if estimator.per_position(block) else "")


def aux_arrays(rules, sample):
    """Per posterior key of a layer under Flipout, its perturbation
    :math:`\\sigma \\circ \\epsilon`, or under the local reparameterisation its
    variance :math:`\\sigma^2`, from a recorded sample: ``{key index: NDArray}``."""
    out = {}
    for r in rules:
        for i in (r.weight, r.bias):
            if i is None or not r.estimator.per_example or i in out:  # a shared key: once
                continue
            out[i] = r.estimator.aux(sample.sigmas[i], sample.eps[i])
    return out


def key_estimators(rules, num_keys):
    """Per posterior key, the :class:`Estimator` its layers run (the shared sample for a
    key no layer covers); ``ValueError`` where a key's layers were given two."""
    found = [None] * num_keys
    for r in rules:
        for i in (r.weight, r.bias):
            if i is None:
                continue
            if found[i] not in (None, r.estimator):  # plan() gives a key's layers one rule
                raise ValueError(f"posterior key {i} is given two estimators")
            found[i] = r.estimator
    return [_KINDS[SharedSample.name] if e is None else e for e in found]


def key_modes(rules, num_keys):
    """Per posterior key, its estimator's :attr:`~Estimator.mode`: 0 where its layer
    takes the shared sample, 1 under Flipout, 2 under the local reparameterisation (the
    fused kernels' ``aux``)."""
    return [e.mode for e in key_estimators(rules, num_keys)]
