"""Replicating a DTensor with one collective: ``all_gather_variable``
through ``whole.gather_whole`` (one all_gather over the flattened group of
the mesh axes that shard anything), differentiable; an unevenly sharded
DTensor through ``redistribute.merged``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.tensor import DTensor, Replicate

from parity.torch_impl.collectives.donation import require_dtensor
from parity.torch_impl.collectives import redistribute
from parity.torch_impl.collectives.redistribute import resolve_pending
from parity.torch_impl.collectives.whole import gather_whole
from parity.torch_impl.layouts.specs import blocks_of
from parity.torch_impl.layouts.tensors import result_spec


class _GatherWhole(torch.autograd.Function):
    """``gather_whole`` as a replicated DTensor, differentiable: forward is
    one all_gather over the flattened group (DTensor's redistribute takes
    one per mesh axis for dims split out of mesh order, or over two dims);
    backward gives the gradient ``x``'s placements (a local slice for a
    replicated gradient, a reduce-scatter for a pending one, as DTensor's
    Shard -> Replicate backward does; several mesh axes in one collective:
    ``redistribute.merged``)."""

    @staticmethod
    def forward(ctx: Any, x: DTensor) -> DTensor:
        ctx.placements = tuple(x.placements)
        whole = gather_whole(x, blocks_of(x))
        spec = result_spec(x.device_mesh, ((),) * x.ndim, x.shape, x.dtype)
        return DTensor.__new__(DTensor, whole, spec, requires_grad=False)

    @staticmethod
    def backward(ctx: Any, grad: DTensor) -> DTensor:
        return redistribute.merged(grad, ctx.placements)


def gather_whole_differentiable(x: DTensor) -> DTensor:
    """``x`` (evenly sharded, no pending reduction) replicated on its mesh
    through one all_gather, with a gradient back to ``x``'s placements."""
    return _GatherWhole.apply(x)


def all_gather_variable(x: Any) -> DTensor:
    """``x`` fully replicated on its mesh (pending reductions resolved).

    Raises ``ParityError`` when ``x`` is not a DTensor.
    """
    x = resolve_pending(require_dtensor(x, "all_gather_variable"))
    blocks = blocks_of(x)
    if not blocks.even:
        # DTensor's redistribute: differentiable, and it handles uneven blocks.
        return redistribute.merged(x, [Replicate()] * x.device_mesh.ndim)
    if x.requires_grad and torch.is_grad_enabled():
        return gather_whole_differentiable(x)  # one collective, gradient to x's placements
    whole = gather_whole(x, blocks)  # one collective over the flattened group
    spec = result_spec(x.device_mesh, ((),) * x.ndim, x.shape, x.dtype)
    return DTensor.__new__(DTensor, whole, spec, requires_grad=False)
