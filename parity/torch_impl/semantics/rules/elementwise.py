"""Elementwise ops: JAX's ``broadcasting_sharding_rule``
(``parity.sharding_rules.broadcast``).

Every operand is laid out as the output's spec on its right-aligned dims
(replicated where it broadcasts), so the op itself needs no communication.
In-place ops keep ``self``'s spec. ``where`` is typed as ``jnp.where``:
operands of one shape must be sharded alike (``lax.select``). add/sub of
alike pending values, and mul/div of one pending value by scalars, are
linear (``defer``). Adding a scalar to a pending sum is not: ``p - 1``
completes ``p`` first, one all_reduce over its pending axes' flattened
group, as without ``defer`` (left to DTensor it reduce-scattered and
gathered, or launched one all_reduce per axis).
"""

from __future__ import annotations

import dataclasses

import torch
from torch.distributed.tensor import DTensor

from parity import sharding_rules as R
from parity.torch_impl.layouts import specs as S
from parity.torch_impl.semantics.rules.registry import Call, Plan, rule_for, torch_ops

_LINEAR = frozenset(
    "add __add__ __radd__ add_ __iadd__ sub __sub__ __rsub__ sub_ __isub__ subtract "
    "mul __mul__ __rmul__ mul_ __imul__ multiply div __truediv__ true_divide div_ "
    "__itruediv__ neg __neg__ negative clone contiguous".split()
)
# Scaling by scalars: linear with one tensor operand (dividing *by* a
# pending value is not).
_SCALING = frozenset("mul __mul__ __rmul__ mul_ __imul__ div __truediv__ true_divide div_ "
                     "__itruediv__".split())
_DIVIDING = frozenset("div __truediv__ true_divide div_".split())
_UNARY_LINEAR = frozenset("neg __neg__ negative clone contiguous".split())

ELEMENTWISE_NAMES = """add __add__ __radd__ add_ __iadd__ sub __sub__ __rsub__ sub_ __isub__ subtract
    rsub mul __mul__ __rmul__ mul_ __imul__ multiply div __truediv__ true_divide div_
    divide floor_divide __floordiv__ __rfloordiv__ remainder __mod__ fmod
    pow __pow__ __rpow__ pow_ __ipow__ float_power maximum minimum fmax fmin clamp clip
    clamp_ clamp_min clamp_max neg __neg__ negative abs __abs__ exp exp2 expm1 log log2 log10
    log1p sqrt rsqrt square tanh sigmoid relu relu_ gelu silu mish softplus elu leaky_relu
    hardtanh relu6 sin cos tan asin acos atan atan2 sinh cosh erf erfc reciprocal sign
    floor ceil round trunc frac eq ne lt le gt ge __eq__ __ne__ __lt__ __le__ __gt__ __ge__
    logical_and logical_or logical_not logical_xor __and__ __or__ __xor__ __invert__
    bitwise_and bitwise_or bitwise_not isnan isinf isfinite nan_to_num lerp addcmul addcdiv
    masked_fill copy_ fill_ zero_ float double half bfloat16 int long bool to type_as
    clone contiguous detach sigmoid_ tanh_ exp_
    hardswish hardsigmoid logsigmoid log_sigmoid softshrink hardshrink selu celu softsign
    tanhshrink threshold""".split()


def _inplace(name: str) -> bool:
    return (name.endswith("_") and not name.endswith("__")) or name.startswith("__i")


@rule_for(*torch_ops(*ELEMENTWISE_NAMES))
def elementwise(call: Call) -> Plan:
    ops = call.tensors()
    shapes = [tuple(t.shape) for _, t in ops]
    specs = [S.spec_of(t) for _, t in ops]
    out_shape = R.broadcast_shape(shapes)
    if _inplace(call.name) and ops[0][0] == ("a", 0):
        out_spec, chosen, out_shape = specs[0], False, shapes[0]
    else:
        out_spec, chosen = R.broadcast(list(zip(specs, shapes)), out_shape, call.sizes)
    inputs = {loc: R.aligned(out_spec, out_shape, shape) for (loc, _), shape in zip(ops, shapes)}
    linear = call.name in _LINEAR and _linear_operands(call)
    return Plan(inputs, [out_spec], linear=linear, chosen=chosen)


@rule_for((torch.where, "where"), (torch.Tensor.where, "Tensor.where"))
def where(call: Call) -> Plan:
    """``where(condition, x, y)`` / ``x.where(condition, y)``: the
    elementwise plan, ``chosen`` also where ``jnp.where`` refuses
    (``sharding_rules.select``: operands of one shape sharded differently;
    a Python scalar is a 0-d operand, a 0-d condition is not broadcast)."""
    plan = elementwise(call)
    names = ("condition", "input", "other") if call.name == "where" else ("self", "condition",
                                                                          "other")
    values = [call.arg(i, name) for i, name in enumerate(names)]
    if call.name == "Tensor.where":
        values = [values[1], values[0], values[2]]
    if any(v is None for v in values) or plan.chosen:
        return plan  # where(condition) is nonzero's: the broadcast rule's answer
    operands = [(S.spec_of(v), tuple(v.shape)) if isinstance(v, DTensor) else ((), ())
                for v in values]
    if not operands[0][1]:
        operands = operands[1:]
    out_shape = R.broadcast_shape([shape for _, shape in operands])
    return dataclasses.replace(plan, chosen=R.select(operands, out_shape, call.sizes)[1])


def _linear_operands(call: Call) -> bool:
    """add/sub: both addends tensors, pending alike (a scalar addend is
    added on every rank); mul/div: one tensor and scalars, not divided by."""
    ops = call.tensors()
    if call.name in _SCALING:
        return len(ops) == 1 and not (call.name in _DIVIDING and ops[0][0] != ("a", 0))
    if call.name in _UNARY_LINEAR:
        return True
    addends = (call.arg(0, "input", "self"), call.arg(1, "other"))
    if not all(isinstance(a, DTensor) for a in addends):
        return False
    placements = {tuple(t.placements) for _, t in ops}
    return len(placements) == 1 and all(S.has_partial(t) for _, t in ops)
