"""Gathers: a row gather from a 2-D table -- ``jnp.take(table, ids,
axis=0)``, what a Keras ``Embedding`` computes -- as JAX's auto mode (the
mode Keras runs) shards it (``take_rows``); when JAX's explicit mode refuses
a gather (``take_refused``); ``take_along_axis`` (``take_along``); the
diagonal (``diagonal``).

JAX's explicit mode calls a gather from a table whose rows are sharded
ambiguous; auto mode (XLA's sharding propagation) answers, and what it gives
is, measured on a (2, 4) ``("batch", "model")`` mesh:

* the table's row (vocabulary) dim is gathered; its feature dim keeps its
  axes;
* the output is ``ids' spec + (feature spec,)``, where each ids dim keeps the
  longest leading run of its axes that the feature dim does not use (a mesh
  axis shards one dim only; the table's feature dim wins):

  =====================  ===================  ==============================
  table                  ids                  output
  =====================  ===================  ==============================
  ("model", "batch")     ("batch", None)      (None, None, "batch")
  ("batch", "model")     ("batch", None)      ("batch", None, "model")
  (None, "model")        (("batch","model"),) (("batch",), None, "model")
  (None, "batch")        (("batch","model"),) (None, None, "batch")
  ("model", None)        (None, "model")      (None, "model", None)
  =====================  ===================  ==============================

``tests/test_keras_embedding.py`` checks these against JAX.
"""

from __future__ import annotations

from collections.abc import Iterable

from parity.layout import Spec
from parity.sharding_rules.basics import dedupe


def take_rows(table: Spec, ids: Spec) -> tuple[Spec, Spec, Spec, bool]:
    """``(table_before, ids_before, output, chosen)`` for gathering rows of a
    2-D ``table`` at ``ids``: the specs to lay the operands out as before the
    gather (which then needs no communication), the output's spec, and
    whether JAX's explicit mode would refuse the gather (rows sharded, or an
    ids axis given up to the feature dim) so that this is auto mode's choice.

    Raises ``ValueError`` when ``table`` is not 2-D (a caller's bug).
    """
    if len(table) != 2:
        raise ValueError(f"take_rows needs a 2-D table spec, got {table!r}")
    rows, features = (tuple(names) for names in table)
    taken = set(features)
    ids_before = []
    for names in ids:
        kept: tuple[str, ...] = ()
        for name in names:
            if name in taken:
                break
            kept = kept + (name,)
        ids_before.append(kept)
    ids_before_spec = tuple(ids_before)
    chosen = bool(rows) or ids_before_spec != tuple(tuple(n) for n in ids)
    return ((), features), ids_before_spec, ids_before_spec + (features,), chosen


def take_refused(spec: Spec, dims: Iterable[int], index_specs: Iterable[Spec]) -> bool:
    """Whether JAX's explicit mode refuses a gather (``jnp.take``,
    ``x[index]``) from an operand laid out as ``spec`` along ``dims``
    (non-negative) by indices laid out as ``index_specs``: a gathered dim
    is sharded, or an index is sharded at all -- measured on JAX 0.10.2:
    ``jnp.take(P(), ids@data)`` and ``x[ids@data]`` are refused ("out
    sharding could not be resolved unambiguously")."""
    dims = set(dims)
    if any(spec[d] for d in dims):
        return True
    return any(any(names) for index in index_specs for names in index)


def diagonal(spec: Spec, dim1: int, dim2: int) -> tuple[Spec, Spec, bool]:
    """``(operand spec before, output spec, chosen)`` of ``diagonal`` over
    the dims ``dim1``, ``dim2`` (non-negative, distinct): the other dims
    keep their spec and the diagonal becomes the last dim, replicated. JAX
    takes the diagonal with a gather, which it refuses when ``dim1`` or
    ``dim2`` is sharded."""
    before = tuple(() if d in (dim1, dim2) else names for d, names in enumerate(spec))
    out = tuple(names for d, names in enumerate(spec) if d not in (dim1, dim2)) + ((),)
    return before, out, before != spec


def take_along(spec: Spec, index: Spec, dim: int) -> tuple[Spec, Spec, bool]:
    """``(spec before the op of the operand and of the index, output spec,
    chosen)`` of ``take_along_axis`` / ``torch.gather`` along ``dim``
    (non-negative) with an index of the operand's shape: the other dims
    take the one non-replicated spec of the two (the output's), ``dim`` is
    gathered in both. JAX refuses (measured on 0.10.2) ``dim`` sharded in
    either, the two sharded differently on another dim, or one mesh axis on
    two dims of the output (then it is deduplicated, the first dim keeping
    the axis)."""
    out = tuple(() if d == dim else (a or b) for d, (a, b) in enumerate(zip(spec, index)))
    chosen = bool(spec[dim] or index[dim]) or any(
        a and b and a != b for d, (a, b) in enumerate(zip(spec, index)) if d != dim)
    deduped = dedupe(out)
    return deduped, deduped, chosen or deduped != out
