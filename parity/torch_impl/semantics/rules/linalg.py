"""Batched linear algebra: batch-parallel, as in JAX (eigh; ldl_solve below).

JAX's ``eigh`` primitive keeps the batch dims' sharding and needs the two
matrix dims unsharded (it refuses them sharded): ``eigvalsh`` of a
``(b, n, n)`` operand sharded ``(x, None, None)`` is ``(x, None)``, and
``eigh``'s eigenvectors are ``(x, None, None)``. Here the matrix dims are
gathered first, and every output keeps the batch dims' specs with its own
trailing dims replicated (fitted to its shape).
"""

from __future__ import annotations

import torch

from parity import sharding_rules as R
from parity.torch_impl.layouts import specs as S
from parity.torch_impl.semantics.rules.registry import Call, NotCovered, Plan, rule_for


@rule_for((torch.linalg.eigvalsh, "eigvalsh"), (torch.linalg.eigh, "eigh"))
def eigh(call: Call) -> Plan:
    if call.kwargs.get("out") is not None:
        raise NotCovered
    loc, x = call.only_self()
    if x.ndim < 2:
        raise NotCovered  # torch refuses it
    spec, sizes = S.spec_of(x), call.sizes
    batch = spec[:-2]
    chosen = bool(spec[-2] or spec[-1])  # JAX refuses sharded matrix dims

    def outputs(outs):
        return [R.fit_to_shape(batch + ((),) * (o.ndim - len(batch)), o.shape, sizes)
                if o.ndim >= len(batch) else None for o in outs]

    return Plan({loc: R.replicate_dims(spec, [x.ndim - 2, x.ndim - 1])}, outputs, chosen=chosen)


@rule_for((torch.linalg.ldl_solve, "ldl_solve"))
def ldl_solve(call: Call) -> Plan:
    """``ldl_solve(LD, pivots, B)`` with ``B`` of fewer dims than ``LD`` (a
    matrix broadcast over LD's batch): DTensor's strategy cuts ``B``'s rows
    as if they were LD's batch dim ("each A matrix is 5 by 5 but each b
    matrix is 3 by 5"). Every operand is gathered; the result is laid out on
    LD's batch spec (batch-parallel, as ``eigh``; JAX has no ``ldl_solve``).
    With ``B`` batched like ``LD`` DTensor's own strategy is right: not
    covered."""
    if call.kwargs.get("out") is not None:
        raise NotCovered
    ld, b = call.arg(0, "LD"), call.arg(2, "B")
    if not (hasattr(ld, "device_mesh") and hasattr(b, "device_mesh")) or b.ndim >= ld.ndim:
        raise NotCovered
    batch = S.spec_of(ld)[:-2]
    sizes = call.sizes
    return Plan({loc: ((),) * t.ndim for loc, t in call.tensors()},
                lambda outs: [R.fit_to_shape(batch + ((),) * (o.ndim - len(batch)), o.shape, sizes)
                              if o.ndim >= len(batch) else None for o in outs])
