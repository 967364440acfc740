"""Layer ops composed in JAX from primitives: softmax, normalisation
layers and the classification losses.

softmax/log_softmax keep the operand's spec with the softmax dim gathered;
layer_norm/rms_norm broadcast input, weight and bias (the normalized dims
gathered, weight and bias replicated); cross_entropy/nll_loss replicate
their operands.
"""

from __future__ import annotations

from parity import sharding_rules as R
from parity.torch_impl.semantics import specs as S
from parity.torch_impl.semantics.rules.registry import Call, NotCovered, Plan, rule_for, torch_ops


@rule_for(*torch_ops("softmax", "log_softmax"))
def softmax(call: Call) -> Plan:
    loc, x = call.only_self()
    dim = call.arg(1, "dim", "axis")
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise NotCovered  # softmax(x) with an implicit dim
    spec = S.spec_of(x)
    return Plan({loc: R.replicate_dims(spec, [dim % x.ndim])}, [spec])


@rule_for(*torch_ops("layer_norm", "rms_norm"))
def norm_layer(call: Call) -> Plan:
    ops = call.tensors()
    if not ops or ops[0][0] != ("a", 0):
        raise NotCovered
    x = ops[0][1]
    shape = call.arg(1, "normalized_shape")
    if shape is None:
        raise NotCovered
    k = 1 if isinstance(shape, int) else len(shape)
    spec, chosen = R.broadcast(
        [(S.spec_of(t), tuple(t.shape)) for _, t in ops], tuple(x.shape), call.sizes
    )
    inputs = {ops[0][0]: R.replicate_dims(spec, range(x.ndim - k, x.ndim))}
    for loc, t in ops[1:]:
        inputs[loc] = ((),) * t.ndim
    return Plan(inputs, [spec], chosen=chosen)


@rule_for(*torch_ops("cross_entropy", "nll_loss"))
def classification_loss(call: Call) -> Plan:
    return Plan({loc: ((),) * t.ndim for loc, t in call.tensors()}, None)
