"""Embedding lookup (``F.embedding(ids, table)``, ``torch.embedding(table,
ids)``): JAX auto mode's gather (``parity.sharding_rules.gather``).

The table's row dim is gathered and the ids keep the axes the table's
feature dim does not use, so the lookup itself needs no communication and
DTensor never builds a row-masked partial (its ``MaskPartial`` fails when
the ids are sharded on another mesh dim: ``IndexError: The shape of the
mask ... does not match``). JAX's explicit mode refuses the lookup
(``chosen``) when the table's rows or the ids are sharded. Backward: ``redistribute``'s mirror brings the
table's gradient back to the table's own placement.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from parity.sharding_rules import fit_to_shape
from parity.sharding_rules.gather import take_rows
from parity.torch_impl.layouts import specs as S
from parity.torch_impl.semantics.rules.registry import Call, NotCovered, Plan, rule_for


def _plan(call: Call, ids_loc, table_loc) -> Plan:
    # Plain operands were replicated on the mesh before the rule runs
    # (``operands.promote``): both are DTensors unless the call is malformed.
    located = dict(call.tensors())
    table, ids = located.get(table_loc), located.get(ids_loc)
    if table is None or ids is None or table.ndim != 2:
        raise NotCovered
    ids_spec = S.spec_of(ids)
    table_before, ids_before, out, chosen = take_rows(S.spec_of(table), ids_spec)
    # JAX's explicit mode refuses jnp.take by sharded ids too (take_refused)
    refused = chosen or any(ids_spec)
    sizes = call.sizes
    return Plan({table_loc: table_before, ids_loc: ids_before},
                lambda outs: [fit_to_shape(out, outs[0].shape, sizes)], chosen=refused,
                fix={table_loc: table_before, ids_loc: ((),) * ids.ndim} if refused else None)


def _locator(call: Call, index: int, name: str):
    return ("k", name) if name in call.kwargs else ("a", index)


@rule_for(F.embedding)
def functional_embedding(call: Call) -> Plan:
    """``F.embedding(input, weight, padding_idx, max_norm, ...)``; ``max_norm``
    renormalizes the table in place (not covered)."""
    if call.arg(3, "max_norm") is not None:
        raise NotCovered
    return _plan(call, _locator(call, 0, "input"), _locator(call, 1, "weight"))


@rule_for((torch.embedding, "torch.embedding"))
def aten_embedding(call: Call) -> Plan:
    """``torch.embedding(weight, indices, padding_idx, scale_grad_by_freq,
    sparse)``."""
    return _plan(call, _locator(call, 1, "indices"), _locator(call, 0, "weight"))
