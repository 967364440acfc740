"""Layer ops composed in JAX from primitives: softmax, normalisation
layers and the classification losses.

softmax/log_softmax keep the operand's spec with the softmax dim gathered;
layer_norm/rms_norm broadcast input, weight and bias (the normalized dims
gathered, weight and bias replicated); cross_entropy/nll_loss replicate
their operands; batch norm computes on the channel dim sharded as the
running statistics are (``batch_norm``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from parity import sharding_rules as R
from parity.torch_impl.layouts import specs as S
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


# Batch norm callables -> positions of (weight, bias, running_mean, running_var)
_BATCH_NORM = {
    "F.batch_norm": (3, 4, 1, 2),
    "batch_norm": (1, 2, 3, 4),
    "native_batch_norm": (1, 2, 3, 4),
    "_batch_norm_with_update": (1, 2, 3, 4),
}
_BATCH_NORM_KW = ("weight", "bias", "running_mean", "running_var")


@rule_for((F.batch_norm, "F.batch_norm"), (torch.batch_norm, "batch_norm"),
          (torch.native_batch_norm, "native_batch_norm"),
          (torch.ops.aten._batch_norm_with_update, "_batch_norm_with_update"),
          (torch.ops.aten._batch_norm_with_update.default, "_batch_norm_with_update"))
def batch_norm(call: Call) -> Plan:
    """Per-channel statistics over every other dim: the input is laid out
    with only its channel dim (1) sharded, as the running statistics are --
    which are never moved: they are updated in place, and a resharded copy
    would take the update instead of them. Weight and bias follow the
    statistics. (DTensor alone updates replicated running statistics from
    each rank's own batch block when the input is sharded on the batch dim:
    the ranks' copies then differ.) The output keeps the input's spec (JAX
    composes batch norm from reductions and elementwise ops); the saved
    per-channel statistics have the channel spec."""
    ops = call.tensors()
    if not ops or ops[0][0] != ("a", 0) or ops[0][1].ndim < 2:
        raise NotCovered
    x = ops[0][1]
    slots = _BATCH_NORM[call.name]
    locs = {loc: t for loc, t in ops}

    def located(k: int):
        pos, name = slots[k], _BATCH_NORM_KW[k]
        loc = ("k", name) if name in call.kwargs else ("a", pos)
        return loc, locs.get(loc)

    stats = [located(2)[1], located(3)[1]]
    stat_specs = {S.spec_of(t) for t in stats if t is not None}
    if len(stat_specs) > 1:
        raise NotCovered  # running mean and variance laid out differently
    chan = next(iter(stat_specs))[0] if stat_specs else ()
    spec, sizes, channels = S.spec_of(x), call.sizes, x.shape[1]
    inputs = {ops[0][0]: ((),) + (chan,) + ((),) * (x.ndim - 2)}
    for k in (0, 1):
        loc, t = located(k)
        if t is not None:
            inputs[loc] = (chan,)

    def outputs(outs):
        return [R.fit_to_shape(spec, o.shape, sizes) if o.ndim == x.ndim
                else (chan,) if o.ndim == 1 and o.shape[0] == channels else None for o in outs]

    return Plan(inputs, outputs, chosen=True)
