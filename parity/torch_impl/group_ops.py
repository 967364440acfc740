"""One rank's block through a collective over one process group.

Multi-process: the process group's own C++ method, into one preallocated
output -- what ``torch.distributed``'s ``all_reduce`` / ``all_gather_single``
/ ``reduce_scatter_single`` call after their per-call Python (argument
checks, the options object, the default-group lookup), which a ``Group``
does once. Those functions themselves are called where their extra work
matters: complex blocks (sent as real views) and inside torch's coalescing
manager. The functional collectives are not used there (they add a copy, an
autograd wrapper and a wait: 1.3-3x on gloo). Simulated ranks: the
functional collectives, which ``LocalTensorMode`` knows how to run for
every rank at once.

A ``Group`` holds what a call needs of its group, resolved once per
(mesh, mesh dim) by the caller: no lookup happens per call here.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed import distributed_c10d as c10d
from torch.distributed.device_mesh import DeviceMesh as TorchMesh

from parity.torch_impl.torch_compat import (
    dist_all_gather_single,
    dist_reduce_scatter_single,
    funcol_all_gather_single,
    funcol_reduce_scatter_single,
    pg_all_gather_single,
    pg_reduce_scatter_single,
)

_FUNCOL_OPS = {"sum": "sum", "mean": "avg", "max": "max", "min": "min"}
# gloo has no AVG: mean is a sum divided by the group size.
_DIST_OPS = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM,
             "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


class Group:
    """Mesh dim ``mesh_dim`` of ``mesh``: its process group (``None`` for
    simulated ranks, which go through the functional collectives), its size,
    and whether calls go to ``torch.distributed`` directly."""

    __slots__ = ("mesh", "mesh_dim", "group", "size", "direct", "options")

    def __init__(self, mesh: TorchMesh, mesh_dim: int, direct: bool) -> None:
        self.mesh, self.mesh_dim, self.direct = mesh, mesh_dim, direct
        self.group = mesh.get_group(mesh_dim) if direct else None
        self.size = mesh.size(mesh_dim)
        # (collective, op) -> the options torch.distributed would build per call.
        self.options: dict[tuple[str, str], object] = {}

    def option(self, kind: str, op: str = "sum") -> object:
        found = self.options.get((kind, op))
        if found is None:
            found = _OPTIONS[kind]()
            found.asyncOp = False
            if kind != "all_gather":
                found.reduceOp = _DIST_OPS[op]
            self.options[(kind, op)] = found
        return found


_OPTIONS = {"all_reduce": c10d.AllreduceOptions, "all_gather": c10d.AllgatherOptions,
            "reduce_scatter": c10d.ReduceScatterOptions}


def _plain(t: torch.Tensor) -> bool:
    """Whether the process group's method may take ``t`` as it is (not
    complex, and no coalescing manager open)."""
    return not (t.is_complex() or c10d._world.pg_coalesce_state)


def _wait(work) -> None:
    if work is not None:  # as torch.distributed does for a synchronous call
        work.wait()


def all_reduce_block(block: torch.Tensor, op: str, g: Group, *, in_place: bool = False
                     ) -> torch.Tensor:
    """``op`` of ``block`` over the group: a new tensor, or ``block`` itself
    reduced in place when ``in_place`` (multi-process, contiguous blocks)."""
    if not g.direct:
        return funcol.wait_tensor(funcol.all_reduce(block, _FUNCOL_OPS[op], (g.mesh, g.mesh_dim)))
    if in_place and block.is_contiguous():
        out = block
    else:
        out = block.clone(memory_format=torch.contiguous_format)
    if _plain(out):
        _wait(g.group.allreduce([out], g.option("all_reduce", op)))
    else:
        dist.all_reduce(out, _DIST_OPS[op], group=g.group)
    if op == "mean":
        out.div_(g.size)
    return out


def all_gather_block(block: torch.Tensor, axis: int, g: Group,
                     out: torch.Tensor | None = None) -> torch.Tensor:
    """The group's blocks concatenated along ``axis`` in group-rank order.
    ``out`` (multi-process, ``axis`` 0): a contiguous buffer of the result's
    shape to gather into instead of a new one."""
    block = block.contiguous()
    if not g.direct:
        return funcol.wait_tensor(funcol_all_gather_single(block, axis, (g.mesh, g.mesh_dim)))
    moved = block if axis == 0 else block.movedim(axis, 0).contiguous()
    if out is None or axis != 0:
        out = moved.new_empty((g.size * moved.shape[0],) + tuple(moved.shape[1:]))
    if _plain(moved):
        _wait(pg_all_gather_single(g.group, out, moved, g.option("all_gather")))
    else:
        dist_all_gather_single(out, moved, group=g.group)
    if axis == 0:
        return out
    # out holds the group's blocks stacked on dim 0 (each moved); put them on ``axis``.
    return torch.cat([c.movedim(0, axis) for c in out.chunk(g.size, 0)], dim=axis)


def reduce_scatter_block(block: torch.Tensor, op: str, axis: int, g: Group,
                         out: torch.Tensor | None = None) -> torch.Tensor:
    """Chunk k (along ``axis``) of the group's reduction, on group rank k.
    ``out`` (multi-process, ``axis`` 0): a contiguous buffer of the result's
    shape to reduce into instead of a new one."""
    block = block.contiguous()
    if not g.direct:
        return funcol.wait_tensor(
            funcol_reduce_scatter_single(block, _FUNCOL_OPS[op], axis, (g.mesh, g.mesh_dim)))
    moved = block if axis == 0 else block.movedim(axis, 0).contiguous()
    if out is None or axis != 0:
        out = moved.new_empty((moved.shape[0] // g.size,) + tuple(moved.shape[1:]))
    if _plain(moved):
        _wait(pg_reduce_scatter_single(g.group, out, moved, g.option("reduce_scatter", op)))
    else:
        dist_reduce_scatter_single(out, moved, _DIST_OPS[op], group=g.group)
    if op == "mean":
        out.div_(g.size)
    return out if axis == 0 else out.movedim(0, axis).contiguous()
