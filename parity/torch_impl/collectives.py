"""``all_reduce``, ``all_gather`` and ``reduce_scatter`` with ``shard_map``
meaning: each device applies the collective to its own block over the
devices that share its position on every other mesh axis (the sub-group of
the named axis, never the whole world), and the result is laid out as SPEC
says: the input spec without ``axis_name`` (``reduce_scatter``: with it
appended as the minor-most name of dim ``axis``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.tensor import DTensor

from parity.collective_args import (
    check_axis,
    check_axis_name,
    check_op,
    scattered_spec,
)
from parity.errors import IndivisibleError, ParityError
from parity.layout import Spec, spec_without_axis
from parity.torch_impl.meshes import mesh_axis_names
from parity.torch_impl.distribute import require_dtensor
from parity.torch_impl.group_ops import all_gather_block, all_reduce_block, reduce_scatter_block
from parity.torch_impl.tensors import (
    global_shape_from_local,
    resolve_pending,
    spec_of,
    wrap_collective_result,
)

def _floating_for_mean(local: torch.Tensor, op: str) -> torch.Tensor:
    # lax.pmean of integers is float32; so is parity's.
    if op == "mean" and not (local.is_floating_point() or local.is_complex()):
        return local.to(torch.float32)
    return local


def _prepare(x: Any, axis_name: str, what: str) -> tuple[DTensor, Spec, int]:
    x = require_dtensor(x, what)
    if x.requires_grad and torch.is_grad_enabled():
        # A gradient through these would be wrong (DTensor's from_local and
        # the collective's own backward each count the replicas), and a
        # detached result would silently drop x's share of the gradient.
        raise ParityError(
            f"{what} is not differentiable, as in parity.jax_ref (where it needs "
            "a concrete array, not a traced one), but x requires grad. Call it under "
            "torch.no_grad() or on x.detach(); for a differentiable reduction use "
            "ops under jax_semantics() (e.g. x.sum(dim) over a sharded dim)."
        )
    x = resolve_pending(x)
    mesh = x.device_mesh
    mesh_dim = check_axis_name(axis_name, mesh_axis_names(mesh), mesh.shape, what)
    spec, _ = spec_of(x)
    return x, spec, mesh_dim


def _wrap(local: torch.Tensor, x: DTensor, out_spec: Spec) -> DTensor:
    mesh = x.device_mesh
    shape = global_shape_from_local(
        local.shape, out_spec, tuple(mesh.shape), mesh_axis_names(mesh))
    return wrap_collective_result(local.contiguous(), mesh, out_spec, shape)


def all_reduce(x: Any, op: str = "sum", axis_name: str | None = None) -> DTensor:
    """``lax.psum``/``pmean``/``pmax``/``pmin`` of the local blocks over
    ``axis_name``; the result's spec drops ``axis_name``.

    Raises ``LayoutError`` for an unknown axis or op, ``ParityError`` for a
    tensor that is not distributed.
    """
    check_op(op, "all_reduce")
    x, spec, mesh_dim = _prepare(x, axis_name, "all_reduce")
    local = all_reduce_block(_floating_for_mean(x.to_local(), op), op, x.device_mesh, mesh_dim)
    return _wrap(local, x, spec_without_axis(spec, axis_name))


def all_gather(x: Any, axis: int, axis_name: str) -> DTensor:
    """``lax.all_gather(block, axis_name, axis=axis, tiled=True)``: blocks
    concatenated along ``axis`` in the order of the ``axis_name`` coordinate.

    Raises ``LayoutError`` for an unknown axis name or an axis out of range.
    """
    x, spec, mesh_dim = _prepare(x, axis_name, "all_gather")
    axis = check_axis(axis, x.ndim, "all_gather")
    local = all_gather_block(x.to_local(), axis, x.device_mesh, mesh_dim)
    return _wrap(local, x, spec_without_axis(spec, axis_name))


def reduce_scatter(x: Any, axis: int, axis_name: str, op: str = "sum") -> DTensor:
    """``lax.psum_scatter(block, axis_name, scatter_dimension=axis, tiled=True)``
    (with ``op`` in sum, mean, max, min): the device at coordinate k of
    ``axis_name`` gets the reduction of chunk k of every block in its group.

    Raises ``LayoutError`` for an unknown axis name, op or an axis out of
    range, and ``ShardingError`` when the block's ``axis`` does not divide by
    the axis size.
    """
    check_op(op, "reduce_scatter")
    x, spec, mesh_dim = _prepare(x, axis_name, "reduce_scatter")
    axis = check_axis(axis, x.ndim, "reduce_scatter")
    local = _floating_for_mean(x.to_local().contiguous(), op)
    size = x.device_mesh.size(mesh_dim)
    block = int(local.shape[axis])
    if block % size:
        raise IndivisibleError(
            f"reduce_scatter: each device's block has size {block} on dim {axis}, "
            f"which does not divide by the size {size} of mesh axis {axis_name!r}.",
            dim=axis, size=block, axes=(axis_name,), shards=size,
        )
    local = reduce_scatter_block(local, op, axis, x.device_mesh, mesh_dim)
    return _wrap(local, x, scattered_spec(spec, axis, axis_name))
