"""Row gather from a 2-D table -- ``jnp.take(table, ids, axis=0)``, what a
Keras ``Embedding`` computes -- as JAX's auto mode (the mode Keras runs)
shards it.

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

from parity.layout import Spec


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
