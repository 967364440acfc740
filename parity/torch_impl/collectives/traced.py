"""``all_reduce``, ``all_gather``, ``reduce_scatter`` and
``all_gather_variable`` as dynamo traces them.

The eager collectives (``parity.torch_impl.collectives.eager``) are written for
microseconds: multi-process calls go to the process group's C++ method
inline, and the result is wrapped by ``DTensor.__new__`` with a prebuilt
spec. Dynamo can trace neither (``_TensorMeta._dtensor__new__`` is an
unsupported method; a process group's method is not a graph op), so inside
``torch.compile`` every collective was a compile error.

Each function here is registered with ``torch._dynamo``'s
``substitute_in_graph`` for its eager twin: eager calls run the eager code,
untouched (no ``is_compiling()`` test on the hot path), and dynamo, wherever
it meets the eager function, traces this one instead. Same arguments, same
checks and errors (the same ``_prepare``), same result spec; the data moves
through the functional collectives (graph ops on real ranks and on simulated
ones alike) with the block summed and divided for ``mean`` (gloo has no
AVG), and the result is made by ``DTensor.from_local`` with the plan's
placements, shape and stride (no collective, no check).

``all_gather_variable`` (eagerly one all_gather over a flattened group of
the whole mesh, wrapped by ``DTensor.__new__``; the flattened group's rank
tensor is not a fake tensor dynamo can trace) is DTensor's own
``redistribute`` to replicated under dynamo: the same values and spec,
differentiable as the eager one is, one gather per sharded mesh dim.

``donate=True`` raises ``ParityError`` while dynamo traces: donation
invalidates ``x``'s Python object and keeps its buffer for a later call,
which a traced graph cannot do; the error says so rather than ignoring the
donation. (A ``ParityError``, not ``UnsupportedOpError``: dynamo cannot
construct an exception whose ``__init__`` calls ``super().__init__``. Under
``fullgraph=True`` it arrives as dynamo's "Observed exception" naming it;
without, dynamo runs the frame eagerly, where donation works.)
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.tensor import DTensor, Replicate

from parity.errors import ParityError
from parity.torch_impl.collectives import eager
from parity.torch_impl.collectives import gather
from parity.torch_impl.collectives.donation import require_dtensor
from parity.torch_impl.collectives.redistribute import resolve_pending
from parity.torch_impl.runtime.torch_compat import funcol, funcol_all_gather_single
from parity.torch_impl.runtime.torch_compat import substitute_in_graph
from parity.torch_impl.runtime.torch_compat import funcol_reduce_scatter_single

_FUNCOL_OPS = {"sum": "sum", "mean": "sum", "max": "max", "min": "min"}


def _refuse_donation(donate: bool, kind: str) -> None:
    if donate:
        raise ParityError(
            f"{kind}(donate=True) inside torch.compile: donation invalidates the input "
            "tensor object and keeps its buffer for a later call, which a compiled graph "
            "cannot do. Call it with donate=False inside the compiled function, or call "
            "the donating collective outside it.")


def _wrap(out: torch.Tensor, plan: Any) -> DTensor:
    spec = plan.out_spec
    return DTensor.from_local(out, spec.mesh, spec.placements, run_check=False,
                              shape=spec.shape, stride=spec.stride)


def _block(x: DTensor, plan: Any) -> torch.Tensor:
    local = x.to_local()
    return local.to(torch.float32) if plan.to_float else local


def _group(plan: Any) -> tuple:
    return (plan.group.mesh, plan.group.mesh_dim)


@substitute_in_graph(eager.all_reduce)
def all_reduce(x: Any, op: str = "sum", axis_name: str | None = None, *,
               donate: bool = False) -> DTensor:
    """``collectives.all_reduce`` under dynamo (module docstring)."""
    _refuse_donation(donate, "all_reduce")
    x, plan = eager._prepare(x, "all_reduce", op, axis_name, 0)
    out = funcol.wait_tensor(funcol.all_reduce(_block(x, plan), _FUNCOL_OPS[op], _group(plan)))
    if plan.mean:
        out = out / plan.group.size
    elif not plan.group.direct:
        # Simulated ranks: a DTensor wrapped directly around the functional
        # all_reduce's result came out of an aot_eager graph holding the
        # FakeTensors it was traced with (torch 2.13, LocalTensor); a copy
        # returns the real blocks.
        out = out.clone()
    return _wrap(out, plan)


@substitute_in_graph(eager.all_gather)
def all_gather(x: Any, axis: int, axis_name: str, *, donate: bool = False) -> DTensor:
    """``collectives.all_gather`` under dynamo (module docstring)."""
    _refuse_donation(donate, "all_gather")
    x, plan = eager._prepare(x, "all_gather", "sum", axis_name, axis)
    block = x.to_local().contiguous()
    out = funcol.wait_tensor(funcol_all_gather_single(block, plan.axis, _group(plan)))
    return _wrap(out, plan)


@substitute_in_graph(eager.reduce_scatter)
def reduce_scatter(x: Any, axis: int, axis_name: str, op: str = "sum", *,
                   donate: bool = False) -> DTensor:
    """``collectives.reduce_scatter`` under dynamo (module docstring)."""
    _refuse_donation(donate, "reduce_scatter")
    x, plan = eager._prepare(x, "reduce_scatter", op, axis_name, axis)
    block = _block(x, plan).contiguous()
    out = funcol.wait_tensor(funcol_reduce_scatter_single(block, _FUNCOL_OPS[op], plan.axis,
                                                          _group(plan)))
    if plan.mean:
        out = out / plan.group.size
    return _wrap(out, plan)


@substitute_in_graph(gather.all_gather_variable)
def all_gather_variable(x: Any) -> DTensor:
    """``gather.all_gather_variable`` under dynamo (module docstring)."""
    x = resolve_pending(require_dtensor(x, "all_gather_variable"))
    return x.redistribute(x.device_mesh, [Replicate()] * x.device_mesh.ndim)
