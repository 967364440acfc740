"""Contractions: JAX's ``_dot_general_sharding_rule`` over einsum letters.

Operands are lettered as in an einsum (``"bmk,bkn->bmn"``). Per letter the
spec is the first non-replicated spec among its operand dims (a batch
letter, shared by the operands and kept in the output, takes the first
operand's spec as dot_general does); a mesh axis already used by an earlier
output letter is dropped (from a contracted letter that only means the
operand is gathered there, which JAX does too). Output letters are assigned first, then the
contracted letters, then letters summed within one operand. JAX's explicit
mode refuses contracting dims sharded on both sides, conflicting specs and
reused axes: the answer is then marked ``chosen``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from parity.layout import Spec
from parity.sharding_rules.basics import AxisSizes, fit_to_shape


@dataclasses.dataclass(frozen=True)
class Contraction:
    """``inputs``: the spec each operand is laid out as before the op (so
    it needs no communication but a final sum); ``output``: the result's
    spec; ``chosen``: JAX's explicit mode refuses, this is auto mode's."""

    inputs: tuple[Spec, ...]
    output: Spec
    chosen: bool


def contract(
    operands: Sequence[tuple[Spec, Sequence[int]]],
    letters: Sequence[str],
    out_letters: str,
    sizes: AxisSizes,
) -> Contraction:
    """The contraction of ``(spec, shape)`` operands lettered ``letters``
    into ``out_letters``. Raises ``ValueError`` when a letter string does not
    match its operand's rank."""
    per_letter: dict[str, list[tuple[str, ...]]] = {}
    dim_size: dict[str, int] = {}
    for (spec, shape), lets in zip(operands, letters):
        if len(lets) != len(spec) or len(spec) != len(shape):
            raise ValueError(f"letters {lets!r} do not match an operand of shape {tuple(shape)}")
        for letter, names, size in zip(lets, spec, shape):
            per_letter.setdefault(letter, []).append(names)
            dim_size[letter] = max(dim_size.get(letter, 1), int(size))
    chosen = False
    used: set[str] = set()
    assign: dict[str, tuple[str, ...]] = {}

    def pick(letter: str, batch: bool = False, out: bool = False) -> tuple[str, ...]:
        nonlocal chosen
        options = [n for n in per_letter.get(letter, []) if n]
        if len(set(options)) > 1:
            chosen = True
        names = options[0] if options else ()
        if batch:  # dot_general: the batch spec is the lhs's
            names = per_letter[letter][0]
        kept = tuple(n for n in names if n not in used)
        if kept != names and out:
            chosen = True  # an axis on two output dims: JAX refuses
        kept = fit_to_shape((kept,), (dim_size[letter],), sizes)[0]
        used.update(kept)
        return kept

    for letter in out_letters:
        assign[letter] = pick(letter, batch=len(per_letter.get(letter, [])) > 1, out=True)
    shared = [l for l in per_letter if l not in assign and len(per_letter[l]) > 1]
    for letter in shared:
        sharded = [n for n in per_letter[letter] if n]
        if len(sharded) == len(per_letter[letter]) and sharded:
            chosen = True  # contracting dims sharded on both sides: ambiguous in JAX
        assign[letter] = pick(letter)
    for letter in per_letter:
        if letter not in assign:  # summed within one operand
            assign[letter] = pick(letter)
    inputs = tuple(tuple(assign[l] for l in lets) for lets in letters)
    return Contraction(inputs, tuple(assign[l] for l in out_letters), chosen)


_BATCH = "ABCDEFGHIJ"


def matmul_letters(a_shape: Sequence[int], b_shape: Sequence[int]) -> tuple[list[str], str] | None:
    """``torch.matmul`` / ``jnp.matmul`` as an einsum: ``(operand letters,
    output letters)``, or ``None`` for a broadcast (size-1) batch dim, which
    this rule does not letter. Raises ``ValueError`` on a 0-d operand."""
    na, nb = len(a_shape), len(b_shape)
    if na < 1 or nb < 1:
        raise ValueError("matmul needs operands of rank >= 1")
    if na == 1 and nb == 1:
        return ["k", "k"], ""
    if na == 1:
        lets_b = _BATCH[: nb - 2] + "kn"
        return ["k", lets_b], lets_b[:-2] + "n"
    if nb == 1:
        lets_a = _BATCH[: na - 2] + "mk"
        return [lets_a, "k"], lets_a[:-1]
    batch = max(na, nb) - 2
    letters = _BATCH[:batch]
    ba, bb = letters[batch - (na - 2):], letters[batch - (nb - 2):]
    off = na - nb
    if any(a_shape[i] != b_shape[i - off] for i in range(na - 2) if i - off >= 0):
        return None
    return [ba + "mk", bb + "kn"], letters + "mn"
