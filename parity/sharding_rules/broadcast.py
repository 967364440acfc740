"""Elementwise ops: JAX's ``broadcasting_sharding_rule``.

Operands are right-aligned as numpy broadcasts them. Per output dim the
spec is the one non-replicated spec among the operands' dims; JAX refuses
two different ones (and an axis on two dims) -- here the first operand's
wins and the answer is marked ``chosen``, as JAX's auto mode and Keras do.
"""

from __future__ import annotations

from collections.abc import Sequence

from parity.layout import Spec
from parity.sharding_rules.basics import AxisSizes, dedupe, fit_to_shape


def broadcast_shape(shapes: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """numpy's broadcast shape of ``shapes`` (operands assumed compatible)."""
    ndim = max(len(s) for s in shapes)
    out = []
    for d in range(ndim):
        size = 1
        for s in shapes:
            k = d - (ndim - len(s))
            if k >= 0 and s[k] != 1:
                size = s[k]
        out.append(size)
    return tuple(out)


def broadcast(
    operands: Sequence[tuple[Spec, Sequence[int]]], out_shape: Sequence[int], sizes: AxisSizes
) -> tuple[Spec, bool]:
    """``(output spec, chosen)`` of an elementwise op over ``(spec, shape)``
    operands. ``chosen``: JAX's explicit mode refuses (conflicting specs, an
    axis on two dims, or a spec that does not divide the output)."""
    ndim = len(out_shape)
    result: list[tuple[str, ...]] = []
    chosen = False
    for d in range(ndim):
        pick: tuple[str, ...] | None = None
        for spec, shape in operands:
            k = d - (ndim - len(shape))
            if k < 0:
                continue
            names = spec[k]
            if not names:
                continue
            if pick is None:
                pick = names
            elif names != pick:
                chosen = True
        result.append(pick or ())
    deduped = dedupe(result)
    fitted = fit_to_shape(deduped, out_shape, sizes)
    return fitted, chosen or deduped != tuple(result) or fitted != deduped


def aligned(out_spec: Spec, out_shape: Sequence[int], shape: Sequence[int]) -> Spec:
    """The spec an operand of ``shape`` takes so that the op needs no
    communication for output ``out_spec``: the output's spec on its
    right-aligned dims, replicated where the operand broadcasts (size 1)."""
    off = len(out_shape) - len(shape)
    return tuple(
        () if (size == 1 and out_shape[off + k] != 1) else out_spec[off + k]
        for k, size in enumerate(shape)
    )


def select(
    operands: Sequence[tuple[Spec, Sequence[int]]], out_shape: Sequence[int], sizes: AxisSizes
) -> tuple[Spec, bool]:
    """``(output spec, chosen)`` of ``jnp.where`` / ``torch.where`` over
    ``(spec, shape)`` operands (the condition, unless it is 0-d, and both
    branches; a Python scalar is a 0-d operand). Operands of one shape go
    to ``lax.select`` as they are, whose rule wants one sharding for all
    (``select cases must have the same shardings``); operands of several
    shapes are broadcast first to their ``broadcast`` spec."""
    if len({tuple(shape) for _, shape in operands}) > 1:
        return broadcast(operands, out_shape, sizes)
    first = operands[0][0]
    spec, _ = broadcast(operands, out_shape, sizes)
    return spec, any(s != first for s, _ in operands[1:])
