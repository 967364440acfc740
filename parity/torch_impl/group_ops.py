"""One rank's block through a collective over one mesh axis's process group.

Multi-process: ``torch.distributed`` directly, into one preallocated output
(the functional collectives add a copy, an autograd wrapper and a wait, which
cost 1.3-3x on gloo). Simulated ranks: the functional collectives, which
``LocalTensorMode`` knows how to run for every rank at once.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import DeviceMesh as TorchMesh

from parity.torch_impl import state
from parity.torch_impl.torch_compat import (
    dist_all_gather_single,
    dist_reduce_scatter_single,
    funcol_all_gather_single,
    funcol_reduce_scatter_single,
)

_FUNCOL_OPS = {"sum": "sum", "mean": "avg", "max": "max", "min": "min"}
# gloo has no AVG: mean is a sum divided by the group size.
_DIST_OPS = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM,
             "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


def _direct() -> bool:
    return state.mode() == "multiprocess"


def all_reduce_block(block: torch.Tensor, op: str, mesh: TorchMesh, mesh_dim: int) -> torch.Tensor:
    """``op`` of ``block`` over the group of mesh dim ``mesh_dim`` (a new tensor)."""
    if not _direct():
        return funcol.wait_tensor(funcol.all_reduce(block, _FUNCOL_OPS[op], (mesh, mesh_dim)))
    out = block.clone(memory_format=torch.contiguous_format)
    dist.all_reduce(out, _DIST_OPS[op], group=mesh.get_group(mesh_dim))
    if op == "mean":
        out.div_(mesh.size(mesh_dim))
    return out


def all_gather_block(block: torch.Tensor, axis: int, mesh: TorchMesh, mesh_dim: int) -> torch.Tensor:
    """The group's blocks concatenated along ``axis`` in group-rank order."""
    block = block.contiguous()
    if not _direct():
        return funcol.wait_tensor(funcol_all_gather_single(block, axis, (mesh, mesh_dim)))
    size = mesh.size(mesh_dim)
    moved = block if axis == 0 else block.movedim(axis, 0).contiguous()
    out = moved.new_empty((size * moved.shape[0],) + tuple(moved.shape[1:]))
    dist_all_gather_single(out, moved, group=mesh.get_group(mesh_dim))
    if axis == 0:
        return out
    # out holds the group's blocks stacked on dim 0 (each moved); put them on ``axis``.
    return torch.cat([c.movedim(0, axis) for c in out.chunk(size, 0)], dim=axis)


def reduce_scatter_block(
    block: torch.Tensor, op: str, axis: int, mesh: TorchMesh, mesh_dim: int
) -> torch.Tensor:
    """Chunk k (along ``axis``) of the group's reduction, on group rank k."""
    block = block.contiguous()
    if not _direct():
        return funcol.wait_tensor(
            funcol_reduce_scatter_single(block, _FUNCOL_OPS[op], axis, (mesh, mesh_dim))
        )
    size = mesh.size(mesh_dim)
    moved = block if axis == 0 else block.movedim(axis, 0).contiguous()
    out = moved.new_empty((moved.shape[0] // size,) + tuple(moved.shape[1:]))
    dist_reduce_scatter_single(out, moved, _DIST_OPS[op], group=mesh.get_group(mesh_dim))
    if op == "mean":
        out.div_(size)
    return out if axis == 0 else out.movedim(0, axis).contiguous()
