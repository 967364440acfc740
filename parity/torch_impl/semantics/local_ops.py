"""Ops computed on each rank's block, for which DTensor cannot run torch's
own backward.

torch's backward of ``prod`` along a dim concatenates a plain tensor with a
DTensor (``aten.cat: got mixed torch.Tensor and DTensor``) below autograd,
where no function mode reaches, so its gradient fails even on a replicated
DTensor. With the reduced dim unsharded (gathered above autograd by
``redistribute``), the reduction is local: each rank applies it to its own
block, and ``to_local`` / ``from_local`` carry the gradient back.
"""

from __future__ import annotations

from typing import Any

from torch.distributed.tensor import DTensor

from parity.layout import TensorLayout
from parity.torch_impl import meshes
from parity.torch_impl.semantics import specs as S
from parity.torch_impl.tensors import from_local_blocks

LOCAL_REDUCTIONS = frozenset({"prod"})


def run_local_reduction(func: Any, args: tuple, kwargs: dict) -> DTensor | None:
    """``func(x, dim, keepdim)`` on each rank's block; ``None`` when there is
    no single ``dim`` (a full reduction goes the usual way)."""
    x = args[0]
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    if not isinstance(x, DTensor) or not isinstance(dim, int):
        return None
    keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
    extra = {k: v for k, v in kwargs.items() if k not in ("dim", "keepdim")}
    dim %= x.ndim
    spec = list(S.spec_of(x))
    if spec[dim]:
        spec[dim] = ()
        x = S.redistribute_to(x, tuple(spec))
    local = func(x.to_local(), dim, keepdim, **extra)
    shape = list(x.shape)
    if keepdim:
        shape[dim] = 1
    else:
        del spec[dim], shape[dim]
    mesh = meshes.to_parity_mesh(x.device_mesh)
    return from_local_blocks(local, TensorLayout.from_spec(tuple(spec), mesh), shape)
