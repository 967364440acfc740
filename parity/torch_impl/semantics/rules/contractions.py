"""Contractions: matmul, mm, bmm, linear, einsum, inner, outer, tensordot, linalg.multi_dot -- JAX's
``_dot_general_sharding_rule`` (``parity.sharding_rules.contraction``).

Each call is lettered as an einsum; the algebra gives every operand's spec
(contracting dims sharded alike, a replicated side sliced) and the
output's. With one pending operand the call is linear:
``(sum_r p_r) @ b == sum_r (p_r @ b)``.
"""

from __future__ import annotations

import dataclasses

import torch
from torch.distributed.tensor import DTensor

from parity import sharding_rules as R
from parity.torch_impl.layouts import specs as S
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
    fix = None
    if result.chosen and all(inputs[loc] == S.spec_of(t) for loc, t in operands):
        # contracting dims sharded alike on both sides: JAX wants one side's
        # gathered (or an out_sharding=), the last operand's here
        (loc, t), lets = operands[-1], letters[-1]
        fix = {loc: R.replicate_dims(S.spec_of(t), [d for d, l in enumerate(lets)
                                                    if l not in out_letters])}
    return Plan(inputs, [result.output], linear=linear, chosen=result.chosen, fix=fix)


@rule_for(*torch_ops("outer", "ger"))
def outer(call: Call) -> Plan:
    """``outer(a, b)`` (``jnp.outer``: ``a[:, None] * b[None, :]``): each
    vector's spec on its own dim; one mesh axis on both is refused."""
    ops = call.tensors()
    if len(ops) != 2 or call.kwargs.get("out") is not None or any(t.ndim != 1 for _, t in ops):
        raise NotCovered  # a plain operand, out=, or a call torch refuses
    return _plan(call, ops, ["i", "j"], "ij")


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
    plan = _plan(call, [(la, a), (lb, b)], letters, out)
    # jnp.matmul wants a batch dim both operands have sharded alike, a
    # replicated one too ("Incompatible types for matmul arguments", a
    # ValueError), where dot_general would slice the replicated side
    spec_a, spec_b = S.spec_of(a), S.spec_of(b)
    batch_b = {l: d for d, l in enumerate(letters[1][:-2])}
    unlike = [(batch_b[l], spec_a[d]) for d, l in enumerate(letters[0][:-2])
              if l in batch_b and spec_a[d] != spec_b[batch_b[l]]]
    if not unlike or plan.chosen:
        return plan
    fix = list(spec_b)
    for d, names in unlike:
        fix[d] = names
    return dataclasses.replace(plan, chosen=True, fix={lb: tuple(fix)})


@rule_for(*torch_ops("linear"))
def linear(call: Call) -> Plan:
    x, w, bias = call.arg(0, "input"), call.arg(1, "weight"), call.arg(2, "bias")
    if not isinstance(x, DTensor) or not isinstance(w, DTensor) or w.ndim != 2:
        raise NotCovered
    # operand locations from the argument positions, never ``id()``: under
    # torch.compile an ``id()`` of a parameter is an identity guard on it,
    # and a frame shared by two layers (FSDP2's graph breaks around each
    # block) was recompiled for the second layer with symbolic shapes
    loc_x, loc_w = _loc(call, 0, "input"), _loc(call, 1, "weight")
    lets_x = "ABCDEFGHIJ"[: x.ndim - 1] + "k"
    plan = _plan(call, [(loc_x, x), (loc_w, w)], [lets_x, "nk"], lets_x[:-1] + "n")
    if not isinstance(bias, DTensor):
        return plan
    inputs, out = dict(plan.inputs), plan.outputs[0]
    bias_names = S.spec_of(bias)[0]
    if not out[-1] and bias_names and not (set(bias_names) & {n for d in out for n in d}):
        out = out[:-1] + (bias_names,)
        inputs[loc_w] = (bias_names, inputs[loc_w][1])
    inputs[_loc(call, 2, "bias")] = (out[-1],)
    return dataclasses.replace(plan, inputs=inputs, outputs=[out], linear=False)


def _loc(call: Call, index: int, name: str) -> tuple:
    """The location of the argument ``call.arg(index, name)`` reads."""
    return ("k", name) if name in call.kwargs else ("a", index)


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


@rule_for(*torch_ops("inner"))
def inner(call: Call) -> Plan:
    """``inner(a, b)``: the last dims contracted, ``a``'s other dims then
    ``b``'s in the output (``jnp.inner`` is that dot_general)."""
    ops = call.tensors()
    if len(ops) != 2 or call.kwargs.get("out") is not None:
        raise NotCovered
    (la, a), (lb, b) = ops
    if a.ndim < 1 or b.ndim < 1:
        raise NotCovered  # a scalar operand: elementwise, not a contraction
    lets_a = "abcdefgh"[: a.ndim - 1] + "k"
    lets_b = "pqrstuvw"[: b.ndim - 1] + "k"
    return _plan(call, [(la, a), (lb, b)], [lets_a, lets_b], lets_a[:-1] + lets_b[:-1])


def _chain(operands: list, sizes) -> tuple:
    """``(output spec, chosen)`` of a product of ``(spec, shape)`` matrices
    contracted pairwise in the order ``jnp.linalg.multi_dot`` (an einsum
    with opt_einsum's optimal path) takes: for three, the cheaper of
    ``(ab)c`` and ``a(bc)``; a tie whose orders give different specs is
    ``chosen``."""

    def mm(x, y):
        result = R.contract([x, y], ["mk", "kn"], "mn", sizes)
        return (result.output, (x[1][0], y[1][1])), result.chosen

    if len(operands) == 2:
        (spec, _), chosen = mm(*operands)
        return spec, chosen
    a, b, c = operands
    (p, q), r, s = a[1], b[1][1], c[1][1]
    left_cost, right_cost = p * q * r + p * r * s, q * r * s + p * q * s
    ab, c1 = mm(a, b)
    left, c2 = mm(ab, c)
    bc, c3 = mm(b, c)
    right, c4 = mm(a, bc)
    if left_cost < right_cost:
        return left[0], c1 or c2
    if right_cost < left_cost:
        return right[0], c3 or c4
    return left[0], c1 or c2 or left[0] != right[0]


@rule_for((torch.linalg.multi_dot, "multi_dot"))
def multi_dot(call: Call) -> Plan:
    """``linalg.multi_dot`` of two or three operands: the chained
    contraction's spec (a vector at either end is a one-row / one-column
    matrix, its extra dim dropped after). DTensor computes the product;
    the result is laid out on that spec."""
    seq = call.arg(0, "tensors")
    if (call.kwargs.get("out") is not None or not isinstance(seq, (list, tuple)) or not 2 <= len(seq) <= 3
            or not all(isinstance(t, DTensor) for t in seq)):
        raise NotCovered  # more operands (opt_einsum's search), or a plain one
    first, last = seq[0].ndim, seq[-1].ndim
    if first not in (1, 2) or last not in (1, 2) or any(t.ndim != 2 for t in seq[1:-1]):
        raise NotCovered  # torch refuses it
    mats = []
    for j, t in enumerate(seq):
        spec, shape = S.spec_of(t), tuple(t.shape)
        if t.ndim == 1:
            spec, shape = (((),) + spec, (1,) + shape) if j == 0 else (spec + ((),), shape + (1,))
        mats.append((spec, shape))
    out, chosen = _chain(mats, call.sizes)
    out = out[1 if first == 1 else 0: 1 if last == 1 else 2]
    sizes = call.sizes
    return Plan({}, lambda outs: [R.fit_to_shape(out, outs[0].shape, sizes)
                                  if outs[0].ndim == len(out) else None], chosen=chosen)


def tensordot_letters(a_ndim: int, b_ndim: int, dims) -> tuple[str, str, str] | None:
    """``tensordot(a, b, dims)`` as einsum letters ``(a's, b's, output's)``:
    an int contracts ``a``'s last ``dims`` dims with ``b``'s first, a pair
    of lists names them; the output is ``a``'s free dims then ``b``'s.
    ``None`` for a form this does not letter (a tensor ``dims``, repeated or
    out-of-range dims: torch's own errors then)."""
    if isinstance(dims, int) and not isinstance(dims, bool):
        if not 0 <= dims <= min(a_ndim, b_ndim):
            return None
        da, db = list(range(a_ndim - dims, a_ndim)), list(range(dims))
    elif (isinstance(dims, (list, tuple)) and len(dims) == 2
          and all(isinstance(d, (list, tuple)) for d in dims)):
        da, db = list(dims[0]), list(dims[1])
        if (len(da) != len(db) or not all(isinstance(d, int) and not isinstance(d, bool)
                                          for d in da + db)):
            return None
        if not all(-a_ndim <= d < a_ndim for d in da) or not all(-b_ndim <= d < b_ndim for d in db):
            return None
        da, db = [d % a_ndim for d in da], [d % b_ndim for d in db]
        if len(set(da)) != len(da) or len(set(db)) != len(db):
            return None
    else:
        return None
    if a_ndim + b_ndim - len(da) > 20:
        return None
    pool = iter("abcdefghijklmnopqrstuvwxyz")
    lets_a = [next(pool) for _ in range(a_ndim)]
    lets_b = [next(pool) for _ in range(b_ndim)]
    for i, j in zip(da, db):
        lets_b[j] = lets_a[i]
    out = [lets_a[i] for i in range(a_ndim) if i not in da] + [
        lets_b[j] for j in range(b_ndim) if j not in db]
    return "".join(lets_a), "".join(lets_b), "".join(out)


@rule_for(*torch_ops("tensordot"))
def tensordot(call: Call) -> Plan:
    """As the einsum it is (``local_ops`` runs it on each rank's blocks:
    DTensor's own tensordot strategy search takes minutes on a 3-d mesh)."""
    ops = call.tensors()
    if len(ops) != 2 or call.kwargs.get("out") is not None or [loc for loc, _ in ops] != [("a", 0), ("a", 1)]:
        raise NotCovered
    (la, a), (lb, b) = ops
    lettered = tensordot_letters(a.ndim, b.ndim, call.arg(2, "dims", default=2))
    if lettered is None:
        raise NotCovered
    lets_a, lets_b, out = lettered
    plan = _plan(call, [(la, a), (lb, b)], [lets_a, lets_b], out)
    return dataclasses.replace(plan, linear=False)  # local_ops completes pending operands first
