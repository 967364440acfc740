"""A clone of a pending sum (DTensor ``Partial``) stays pending, as a copy of
a value is the value.

DTensor's ``clone`` reduce-scatters a ``Partial`` input (``S(3)P(sum)`` comes
out ``S(3)S(1)``). autograd's ``CopySlices``, the backward of an in-place op
on a view (``x.permute(...) += y``), clones the view's gradient, runs the
op's backward on the clone and copies the result back into the gradient
buffer, which is still ``Partial``: DTensor then has to turn a ``Shard``
into a ``Partial`` and cannot ("redistribute from S(1) to P(sum) not
supported yet"). keras-hub's Gemma3n meets it in AltUp's
``predictions += hidden_states`` when the gradient arriving there is a
pending sum (a contraction over a model-sharded dim). Under
``jax_semantics()`` a clone of a ``Partial`` input keeps the input's
placements (each rank clones its block; clone is linear); any other clone,
and every clone outside a scope, is DTensor's own.

``mode`` installs the handler in DTensor's dispatcher at the first
``jax_semantics()`` scope (``dtensor_handlers``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.tensor import DTensor, Partial

from parity.torch_impl.runtime.torch_compat import DTensorSpec
from parity.torch_impl.semantics.dtensor_handlers import DTensorCall, in_scope

CLONE = torch.ops.aten.clone.default


def clone_handler(op_call: Any, args: tuple, kwargs: dict) -> object:
    """DTensor's own ``aten.clone`` (sharding propagation, the redistribute
    it asks for, the local clone), except that under ``jax_semantics()`` an
    input with a ``Partial`` placement is cloned block by block and keeps
    its placements."""
    call = DTensorCall(op_call, args, kwargs)
    source = args[0]
    if (isinstance(source, DTensor) and any(isinstance(p, Partial) for p in source.placements)
            and in_scope()):
        # The global output's metadata (strides under memory_format) from
        # the propagation, the input's placements, each rank's own block.
        spec = DTensorSpec(source.device_mesh, source.placements,
                           tensor_meta=call.output_spec.tensor_meta)
        return call.result(op_call(source._local_tensor, **call.local_kwargs), spec)
    op, local_args = call.local_call()
    return call.result(op(*local_args, **call.local_kwargs))
