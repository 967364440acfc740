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
``jax_semantics()`` scope; outside a scope it is DTensor's own ``view``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.distributed.tensor import DTensor

from parity.torch_impl.runtime.torch_compat import return_and_correct_aliasing, tree_unflatten

_VIEW = torch.ops.aten.view.default
_MESSAGE = "view size is not compatible with input tensor's size and stride"


def _handlers() -> dict:
    return DTensor._op_dispatcher._custom_op_handlers


def installed() -> bool:
    """Whether DTensor's dispatcher sends ``aten.view`` to this module."""
    return _handlers().get(_VIEW) is view_handler


_active: list[Callable[[], bool]] = []  # whether this thread is inside jax_semantics()


def install(active: Callable[[], bool]) -> None:
    """Route DTensor's ``aten.view`` through ``view_handler``, which reshapes
    a block only while ``active()`` (idempotent; a handler someone else
    registered is left alone). Outside the scope the handler is DTensor's
    own ``view``."""
    if not _active:
        _active.append(active)
    _handlers().setdefault(_VIEW, view_handler)


def uninstall() -> None:
    if installed():
        del _handlers()[_VIEW]


def view_handler(op_call: Any, args: tuple, kwargs: dict) -> object:
    """DTensor's own ``aten.view`` (sharding propagation, the redistribute
    it asks for, the local view, the aliasing fix-up), except that a local
    block that cannot be viewed is reshaped under ``jax_semantics()``.

    Raises DTensor's error outside ``jax_semantics()`` and for any other
    failure.
    """
    dispatcher = DTensor._op_dispatcher
    op_info = dispatcher.unwrap_to_op_info(op_call, args, kwargs)
    dispatcher.sharding_propagator.propagate(op_info)
    sharding = op_info.output_sharding
    if sharding.needs_redistribute:
        dispatcher.redistribute_local_args(op_info, sharding.redistribute_schema,
                                           sharding.use_val_from_redistribute_schema)
    local_args = (tree_unflatten(list(op_info.local_args), op_info.args_tree_spec)
                  if op_info.args_tree_spec else op_info.local_args)
    op = (sharding.redistribute_schema.op if sharding.needs_redistribute
          and sharding.redistribute_schema is not None else op_call)
    try:
        local = op(*local_args, **op_info.local_kwargs)
    except RuntimeError as err:
        if _MESSAGE not in str(err) or not (_active and _active[0]()):
            raise
        block, *rest = local_args
        copy = torch.ops.aten.clone.default(block, memory_format=torch.contiguous_format)
        local = op(copy, *rest, **op_info.local_kwargs)
    out = dispatcher.wrap(local, sharding.output_spec)
    return return_and_correct_aliasing(op_call, args, kwargs, out)
