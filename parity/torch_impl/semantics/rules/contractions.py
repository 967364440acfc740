"""Contractions: matmul, mm, bmm, linear, einsum -- JAX's
``_dot_general_sharding_rule`` (``parity.sharding_rules.contraction``).

Each call is lettered as an einsum; the algebra gives every operand's spec
(contracting dims sharded alike, a replicated side sliced) and the
output's. With one pending operand the call is linear:
``(sum_r p_r) @ b == sum_r (p_r @ b)``.
"""

from __future__ import annotations

from torch.distributed.tensor import DTensor

from parity import sharding_rules as R
from parity.torch_impl.semantics import specs as S
from parity.torch_impl.semantics.rules.registry import (
    Call,
    Locator,
    NotCovered,
    Plan,
    rule_for,
    torch_ops,
)


def _plan(call: Call, operands: list[tuple[Locator, DTensor]], letters, out_letters) -> Plan:
    result = R.contract([(S.spec_of(t), tuple(t.shape)) for _, t in operands], letters,
                        out_letters, call.sizes)
    inputs = {loc: spec for (loc, _), spec in zip(operands, result.inputs)}
    linear = sum(S.has_partial(t) for _, t in operands) <= 1
    return Plan(inputs, [result.output], linear=linear, chosen=result.chosen)


@rule_for(*torch_ops("matmul", "__matmul__", "__rmatmul__", "mm", "bmm"))
def matmul(call: Call) -> Plan:
    ops = call.tensors()
    if len(ops) != 2 or len(call.args) + len(call.kwargs) != 2:
        raise NotCovered  # a plain operand, or out=
    (la, a), (lb, b) = ops
    if call.name == "__rmatmul__":
        (la, a), (lb, b) = (lb, b), (la, a)
    if a.ndim < 1 or b.ndim < 1:
        raise NotCovered  # torch refuses 0-d operands itself
    lettered = R.matmul_letters(tuple(a.shape), tuple(b.shape))
    if lettered is None:
        raise NotCovered  # a broadcast batch dim
    letters, out = lettered
    return _plan(call, [(la, a), (lb, b)], letters, out)


@rule_for(*torch_ops("linear"))
def linear(call: Call) -> Plan:
    x, w, bias = call.arg(0, "input"), call.arg(1, "weight"), call.arg(2, "bias")
    if not isinstance(x, DTensor) or not isinstance(w, DTensor) or w.ndim != 2:
        raise NotCovered
    locs = {id(t): loc for loc, t in call.tensors()}
    lets_x = "ABCDEFGHIJ"[: x.ndim - 1] + "k"
    plan = _plan(call, [(locs[id(x)], x), (locs[id(w)], w)], [lets_x, "nk"], lets_x[:-1] + "n")
    if isinstance(bias, DTensor):
        out = plan.outputs[0]
        bias_names = S.spec_of(bias)[0]
        if not out[-1] and bias_names and not (set(bias_names) & {n for d in out for n in d}):
            out = out[:-1] + (bias_names,)
            plan.inputs[locs[id(w)]] = (bias_names, plan.inputs[locs[id(w)]][1])
            plan.outputs = [out]
        plan.inputs[locs[id(bias)]] = (out[-1],)
        plan.linear = False
    return plan


@rule_for(*torch_ops("einsum"))
def einsum(call: Call) -> Plan:
    eq = call.arg(0, "equation")
    if not isinstance(eq, str) or "..." in eq or "->" not in eq:
        raise NotCovered  # implicit output, ellipsis, or the sublist form
    ops = call.tensors()
    lhs, out_letters = eq.replace(" ", "").split("->")
    letters = lhs.split(",")
    if len(letters) != len(ops) or any(len(l) != t.ndim for l, (_, t) in zip(letters, ops)):
        raise NotCovered  # a plain operand among them, or a malformed equation
    if any(len(set(l)) != len(l) for l in letters):
        raise NotCovered  # a repeated letter (a diagonal)
    return _plan(call, ops, letters, out_letters)
