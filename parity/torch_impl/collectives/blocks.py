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
from torch.distributed.device_mesh import DeviceMesh as TorchMesh

from parity.torch_impl.runtime.torch_compat import (
    c10d,
    dist_all_gather_single,
    dist_reduce_scatter_single,
    funcol,
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


# torch's open coalescing managers (group -> queued calls). torch only ever
# mutates or clears this dict, never rebinds it, so it is read here directly:
# a collective must not go to the process group while one is open.
COALESCING: dict = c10d._world.pg_coalesce_state

_METHODS = {"all_reduce": dist.ProcessGroup.allreduce, "all_gather": pg_all_gather_single,
            "reduce_scatter": pg_reduce_scatter_single}


def direct_call(g: Group, kind: str, op: str, dtype: torch.dtype) -> tuple | None:
    """``(method, process group, options)``: ``kind`` as the group's own C++
    method, resolved once, for blocks of ``dtype``; ``None`` where the call
    must go through the ``*_block`` functions (simulated ranks, complex
    blocks). The caller checks ``COALESCING`` per call, calls
    ``method(group, out, block, options)`` (``all_reduce``:
    ``method(group, [block], options)``) on contiguous blocks, waits on the
    work it returns (when not ``None``) and divides by ``g.size`` for mean."""
    if not g.direct or dtype.is_complex:
        return None
    return _METHODS[kind], g.group, g.option(kind, op)


def _plain(t: torch.Tensor) -> bool:
    """Whether the process group's method may take ``t`` as it is (not
    complex, and no coalescing manager open)."""
    return not (t.is_complex() or COALESCING)


def _wait(work) -> None:
    if work is not None:  # as torch.distributed does for a synchronous call
        work.wait()


def all_reduce_block(block: torch.Tensor, op: str, g: Group, *, in_place: bool = False
                     ) -> torch.Tensor:
    """``op`` of ``block`` over the group: a new tensor, or ``block`` itself
    reduced in place when ``in_place`` (multi-process, contiguous blocks)."""
    if not g.direct:
        return funcol.wait_tensor(funcol.all_reduce(block, _FUNCOL_OPS[op], (g.mesh, g.mesh_dim)))
    if block.is_contiguous():
        out = block if in_place else block.clone()
    else:
        out = block.clone(memory_format=torch.contiguous_format)
    if _plain(out):
        _wait(g.group.allreduce([out], g.option("all_reduce", op)))
    else:
        dist.all_reduce(out, _DIST_OPS[op], group=g.group)
    if op == "mean":
        out.div_(g.size)
    return out


def _new_output(block: torch.Tensor, dims: tuple[int, ...] | None, rows: int) -> torch.Tensor:
    """A contiguous buffer of shape ``dims`` (``block``'s dtype and device),
    or of ``block``'s shape with ``rows`` rows when ``dims`` is ``None``.
    Integer arguments, not a ``torch.Size``: torch parses those several
    microseconds faster."""
    if dims is None:
        dims = (rows, *block.shape[1:])
    return block.new_empty(*dims)


def all_gather_block(block: torch.Tensor, axis: int, g: Group,
                     out: torch.Tensor | None = None,
                     dims: tuple[int, ...] | None = None) -> torch.Tensor:
    """The group's blocks concatenated along ``axis`` in group-rank order.
    Multi-process, ``axis`` 0: ``out`` is a contiguous buffer of the
    result's shape to gather into instead of a new one; ``dims`` the
    result's shape, when the caller knows it (it saves working it out)."""
    block = block.contiguous()
    if not g.direct:
        return funcol.wait_tensor(funcol_all_gather_single(block, axis, (g.mesh, g.mesh_dim)))
    if axis == 0:
        moved = block
        if out is None:
            out = _new_output(block, dims, g.size * block.shape[0])
    else:
        moved = block.movedim(axis, 0).contiguous()
        out = _new_output(moved, None, g.size * moved.shape[0])
    if _plain(moved):
        _wait(pg_all_gather_single(g.group, out, moved, g.option("all_gather")))
    else:
        dist_all_gather_single(out, moved, group=g.group)
    if axis == 0:
        return out
    # out holds the group's blocks stacked on dim 0 (each moved); put them on ``axis``.
    return torch.cat([c.movedim(0, axis) for c in out.chunk(g.size, 0)], dim=axis)


def reduce_scatter_block(block: torch.Tensor, op: str, axis: int, g: Group,
                         out: torch.Tensor | None = None,
                         dims: tuple[int, ...] | None = None) -> torch.Tensor:
    """Chunk k (along ``axis``) of the group's reduction, on group rank k.
    Multi-process, ``axis`` 0: ``out`` is a contiguous buffer of the
    result's shape to reduce into instead of a new one; ``dims`` the
    result's shape, when the caller knows it."""
    block = block.contiguous()
    if not g.direct:
        return funcol.wait_tensor(
            funcol_reduce_scatter_single(block, _FUNCOL_OPS[op], axis, (g.mesh, g.mesh_dim)))
    if axis == 0:
        moved = block
        if out is None:
            out = _new_output(block, dims, block.shape[0] // g.size)
    else:
        moved = block.movedim(axis, 0).contiguous()
        out = _new_output(moved, None, moved.shape[0] // g.size)
    if _plain(moved):
        _wait(pg_reduce_scatter_single(g.group, out, moved, g.option("reduce_scatter", op)))
    else:
        dist_reduce_scatter_single(out, moved, _DIST_OPS[op], group=g.group)
    if op == "mean":
        out.div_(g.size)
    return out if axis == 0 else out.movedim(0, axis).contiguous()
