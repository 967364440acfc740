"""A DTensor ``view`` whose local block cannot alias is a reshape, as on JAX.

DTensor decides whether ``reshape`` may be a view from the global tensor's
strides (its fake metadata), then runs ``aten.view`` on each local block.
The two layouts can disagree: an elementwise op lays its global output out
like a permuted operand, while TensorIterator lays the (smaller) local block
out contiguously, or the other way round. A later ``reshape`` the global
strides allow then fails on the block with "view size is not compatible
with input tensor's size and stride" -- in a backward, where no user code
can call ``.contiguous()`` (Qwen3.5's gated delta rule: ``mul`` of an
expanded gradient with a head-sharded, transposed query, then the einsum's
``view``). JAX has no views: reshape is a value op. Under
``jax_semantics()`` such a view reshapes the block (a copy of it); anywhere
else, and for any other error, DTensor's own error stands.

``mode`` installs the handler in DTensor's dispatcher at the first
``jax_semantics()`` scope (``dtensor_handlers``); outside a scope it is
DTensor's own ``view``.
"""

from __future__ import annotations

from typing import Any

import torch

from parity.torch_impl.semantics.dtensor_handlers import DTensorCall, in_scope

VIEW = torch.ops.aten.view.default
_MESSAGE = "view size is not compatible with input tensor's size and stride"


def view_handler(op_call: Any, args: tuple, kwargs: dict) -> object:
    """DTensor's own ``aten.view`` (sharding propagation, the redistribute
    it asks for, the local view, the aliasing fix-up), except that a local
    block that cannot be viewed is reshaped under ``jax_semantics()``.

    Raises DTensor's error outside ``jax_semantics()`` and for any other
    failure.
    """
    call = DTensorCall(op_call, args, kwargs)
    op, local_args = call.local_call()
    try:
        local = op(*local_args, **call.local_kwargs)
    except RuntimeError as err:
        if _MESSAGE not in str(err) or not in_scope():
            raise
        block, *rest = local_args
        copy = torch.ops.aten.clone.default(block, memory_format=torch.contiguous_format)
        local = op(copy, *rest, **call.local_kwargs)
    return call.result(local)
