"""Gradients that autograd leaves undefined, made DTensors again.

When an op's gradient is zero or empty for an input (``sgn``, ``sign``,
``repeat(x, 0)``, max-pool's indices, an integer output), autograd passes
*no* gradient back. A Python autograd node upstream -- DTensor's
``redistribute``, which the mode puts in front of every resharded operand
and every leaf -- then receives a materialized *plain* zero tensor and fails
with ``AttributeError: ... has no attribute '_local_tensor'``. ``guard(x)``
inserts a node between the two that turns an undefined gradient into DTensor
zeros laid out as ``x``, so the gradient still reaches the leaf with the
leaf's placement. A gradient whose blocks are torch's ZeroTensor (the
gradient of ``sgn``) is made real zeros the same way: a ZeroTensor cannot be
read back (``to_numpy``) or accumulated into in place.
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor, Replicate
from torch.distributed.tensor import zeros as dtensor_zeros

from parity.torch_impl.collectives import redistribute


class _Guard(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: DTensor) -> DTensor:  # type: ignore[override]
        ctx.set_materialize_grads(False)
        ctx.meta = (tuple(x.shape), x.dtype, x.device_mesh, tuple(x.placements))
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        shape, dtype, mesh, placements = ctx.meta
        if grad is not None and _zero_tensor(grad._local_tensor if isinstance(grad, DTensor)
                                             else grad):
            grad = None  # a ZeroTensor: no numpy, no in-place ops; real zeros below
        if isinstance(grad, DTensor):
            # a gradient pending over several mesh axes (the sum_to_size of a
            # broadcast operand): one collective, not DTensor's one per axis
            return redistribute.merged(grad, placements) if len(
                redistribute.pending_mesh_dims(grad)) > 1 else grad
        if grad is None:
            return dtensor_zeros(shape, dtype=dtype, device_mesh=mesh, placements=placements)
        # a plain gradient here is the full value on every rank
        full = DTensor.from_local(grad, mesh, [Replicate()] * mesh.ndim, run_check=False)
        return full.redistribute(mesh, placements)


def _zero_tensor(block: torch.Tensor) -> bool:
    """Whether ``block`` is torch's ZeroTensor (``sgn``'s gradient), or
    simulated ranks' blocks that are."""
    blocks = getattr(block, "_local_tensors", None)  # LocalTensor: one per rank
    if blocks is not None:
        return any(b._is_zerotensor() for b in blocks.values())
    return block._is_zerotensor()


def guard(x: DTensor) -> DTensor:
    """``x`` behind a node whose backward never hands a plain or undefined
    gradient to the nodes above it."""
    return _Guard.apply(x)
