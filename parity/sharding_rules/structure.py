"""Reductions, transposes, joins, splits, indexing, sorting and padding.

Each mirrors JAX's rule for the ``lax`` primitive: a reduction drops the
reduced dims' names (``keepdim``: they become replicated); a transpose
permutes the spec; concatenation keeps the operands' common spec with the
joined dim gathered; stacking adds a replicated dim; splitting, slicing and
padding keep the operand's spec with the touched dims gathered (whether a
changed size still divides: ``slicing``); indexing a sharded dim and
sorting along one are refused by JAX's explicit mode (``chosen``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from parity.layout import Spec
from parity.sharding_rules.basics import replicate_dims


def reduce(spec: Spec, dims: Iterable[int] | None, keepdim: bool) -> Spec:
    """The spec of a reduction of ``spec`` over ``dims`` (non-negative;
    ``None``: all dims)."""
    reduced = set(range(len(spec)) if dims is None else dims)
    if keepdim:
        return replicate_dims(spec, reduced)
    return tuple(n for d, n in enumerate(spec) if d not in reduced)


def permute(spec: Spec, perm: Sequence[int]) -> Spec:
    """The spec of ``x.permute(perm)``; raises ``ValueError`` when ``perm``
    is not a permutation of ``spec``'s dims."""
    if sorted(perm) != list(range(len(spec))):
        raise ValueError(f"{list(perm)} is not a permutation of {len(spec)} dims")
    return tuple(spec[p] for p in perm)


def swap_perm(ndim: int, d0: int, d1: int) -> list[int]:
    """The permutation of ``transpose(d0, d1)`` (negative dims allowed)."""
    perm = list(range(ndim))
    perm[d0 % ndim], perm[d1 % ndim] = perm[d1 % ndim], perm[d0 % ndim]
    return perm


def movedim_perm(ndim: int, source: Sequence[int], destination: Sequence[int]) -> list[int]:
    """The permutation of ``movedim(source, destination)``; raises
    ``ValueError`` on repeated or mismatched dims."""
    src, dst = [s % ndim for s in source], [d % ndim for d in destination]
    if len(src) != len(dst) or len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ValueError(f"movedim({list(source)}, {list(destination)}) on {ndim} dims")
    perm: list[int | None] = [None] * ndim
    for s, d in zip(src, dst):
        perm[d] = s
    rest = iter(i for i in range(ndim) if i not in src)
    return [p if p is not None else next(rest) for p in perm]


def concat(specs: Sequence[Spec], dim: int) -> tuple[Spec, Spec, bool]:
    """``(each operand's spec before the op, output spec, chosen)`` of a
    concatenation along ``dim`` (non-negative): the first operand's spec,
    the joined dim gathered. ``chosen``: the operands' specs differ (JAX
    refuses)."""
    first = specs[0]
    chosen = any(s != first for s in specs[1:])
    return replicate_dims(first, [dim]), first, chosen


def stack(specs: Sequence[Spec], dim: int) -> tuple[Spec, Spec, bool]:
    """As ``concat``, for stacking at new dim ``dim`` (non-negative, at
    most the operands' rank): the new dim is replicated."""
    first = specs[0]
    chosen = any(s != first for s in specs[1:])
    return first, first[:dim] + ((),) + first[dim:], chosen


def split(spec: Spec, dim: int, keep_dim: bool = True) -> tuple[Spec, Spec]:
    """``(operand spec before the op, each piece's spec)`` of splitting
    along ``dim`` (``keep_dim=False``: unbind, the dim disappears)."""
    before = replicate_dims(spec, [dim])
    return before, before if keep_dim else spec[:dim] + spec[dim + 1:]


def index(spec: Spec, items: Sequence, shape: Sequence[int]) -> tuple[Spec, Spec, bool] | None:
    """``(operand spec before the op, output spec, chosen)`` of basic
    indexing of an operand of ``shape`` by ``items`` (ints, slices, ``None``,
    at most one ``Ellipsis``): an indexed dim is gathered, an int removes
    it, a slice covering the whole dim keeps it as it is, ``None`` inserts a
    replicated dim. ``chosen``: an indexed dim is sharded (``jnp`` indexes
    through a gather, whose sharding JAX's explicit mode calls ambiguous)
    and the result has elements: an empty result is JAX's ``full_like`` of
    the output shape with the kept spec, never ambiguous. ``None`` for
    anything else (advanced indexing, more indices than dims): not this
    rule's case."""
    ndim = len(spec)
    if any(isinstance(i, bool) or not (isinstance(i, (int, slice)) or i is None or i is Ellipsis)
           for i in items):
        return None
    if sum(i is Ellipsis for i in items) > 1:
        return None
    consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
    if consumed > ndim:
        return None
    items = tuple(items)
    if Ellipsis in items:
        k = items.index(Ellipsis)
        items = items[:k] + (slice(None),) * (ndim - consumed) + items[k + 1:]
    else:
        items = items + (slice(None),) * (ndim - consumed)
    touched, out, d, empty = [], [], 0, False
    for i in items:
        if i is None:
            out.append(())
            continue
        if isinstance(i, int):
            touched.append(d)
        elif i.indices(shape[d]) != (0, shape[d], 1):
            touched.append(d)
            out.append(spec[d])
            empty = empty or len(range(*i.indices(shape[d]))) == 0
        else:
            out.append(spec[d])
            empty = empty or shape[d] == 0
        d += 1
    chosen = not empty and any(spec[t] for t in touched)
    return replicate_dims(spec, touched), tuple(out), chosen


def advanced_dims(items: Sequence, ndim: int, rank_of) -> list[int] | None:
    """The operand dims that ``items`` index (ints, slices that are not
    ``slice(None)``, and advanced indices: ``rank_of(item)`` gives the
    number of dims an index consumes -- a bool mask its rank, any other
    index 1 -- or ``None`` for an item that is not an index), for an operand
    of rank ``ndim``; ``None`` when ``items`` do not fit the rank."""
    ranks = []
    for i in items:
        if i is None or i is Ellipsis:
            ranks.append(0)
        elif isinstance(i, (int, slice)):
            ranks.append(1)
        else:
            r = rank_of(i)
            if r is None:
                return None
            ranks.append(r)
    if sum(i is Ellipsis for i in items) > 1 or sum(ranks) > ndim:
        return None
    touched, d = [], 0
    for i, r in zip(items, ranks):
        if i is Ellipsis:
            d += ndim - sum(ranks)
        elif i is not None and i != slice(None):
            touched.extend(range(d, d + r))
        d += r
    return touched


def sort_along(spec: Spec, dim: int) -> tuple[Spec, bool]:
    """``(operand spec before the op, chosen)`` of an op that needs a whole
    dim (non-negative) on each device -- sort, argsort, top_k, the cumulative
    scans, median: JAX's explicit mode refuses a sharded ``dim`` ("should
    be unsharded over the axis"); the dim is gathered before the op and the
    output keeps the operand's other dims."""
    before = replicate_dims(spec, [dim])
    return before, before != spec


def pad_dims(ndim: int, widths: Sequence[int]) -> list[int]:
    """The dims ``torch.nn.functional.pad(x, widths)`` pads (``widths``
    pairs run from the last dim backwards): those to gather first."""
    return sorted({ndim - 1 - k // 2 for k, w in enumerate(widths) if w})
