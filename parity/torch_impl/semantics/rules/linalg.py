"""Batched symmetric eigendecomposition: batch-parallel, as in JAX.

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
