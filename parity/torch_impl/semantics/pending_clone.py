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
``jax_semantics()`` scope.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.distributed.tensor import DTensor, Partial

from parity.torch_impl.runtime.torch_compat import (
    DTensorSpec,
    return_and_correct_aliasing,
    tree_unflatten,
)

_CLONE = torch.ops.aten.clone.default


def _handlers() -> dict:
    return DTensor._op_dispatcher._custom_op_handlers


def installed() -> bool:
    """Whether DTensor's dispatcher sends ``aten.clone`` to this module."""
    return _handlers().get(_CLONE) is clone_handler


_active: list[Callable[[], bool]] = []  # whether this thread is inside jax_semantics()


def install(active: Callable[[], bool]) -> None:
    """Route DTensor's ``aten.clone`` through ``clone_handler``, which keeps
    a pending sum pending only while ``active()`` (idempotent; a handler
    someone else registered is left alone)."""
    if not _active:
        _active.append(active)
    _handlers().setdefault(_CLONE, clone_handler)


def uninstall() -> None:
    if installed():
        del _handlers()[_CLONE]


def clone_handler(op_call: Any, args: tuple, kwargs: dict) -> object:
    """DTensor's own ``aten.clone`` (sharding propagation, the redistribute
    it asks for, the local clone), except that under ``jax_semantics()`` an
    input with a ``Partial`` placement is cloned block by block and keeps
    its placements."""
    dispatcher = DTensor._op_dispatcher
    op_info = dispatcher.unwrap_to_op_info(op_call, args, kwargs)
    dispatcher.sharding_propagator.propagate(op_info)
    sharding = op_info.output_sharding
    source = args[0]
    if (_active and _active[0]() and isinstance(source, DTensor)
            and any(isinstance(p, Partial) for p in source.placements)):
        # The global output's metadata (strides under memory_format) from
        # the propagation, the input's placements, each rank's own block.
        spec = DTensorSpec(source.device_mesh, source.placements,
                           tensor_meta=sharding.output_spec.tensor_meta)
        local = op_call(source._local_tensor, **op_info.local_kwargs)
        return return_and_correct_aliasing(op_call, args, kwargs, dispatcher.wrap(local, spec))
    if sharding.needs_redistribute:
        dispatcher.redistribute_local_args(op_info, sharding.redistribute_schema,
                                           sharding.use_val_from_redistribute_schema)
    local_args = (tree_unflatten(list(op_info.local_args), op_info.args_tree_spec)
                  if op_info.args_tree_spec else op_info.local_args)
    local = op_call(*local_args, **op_info.local_kwargs)
    return return_and_correct_aliasing(op_call, args, kwargs,
                                       dispatcher.wrap(local, sharding.output_spec))
