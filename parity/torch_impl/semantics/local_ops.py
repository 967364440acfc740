"""Ops computed on each rank's block, for which DTensor cannot run torch's
own backward (the mode hands every call named in ``LOCAL_REDUCTIONS`` to
``run_local_reduction``; ``None`` back means "run it the usual way").

torch's backward of ``prod`` along a dim concatenates a plain tensor with a
DTensor (``aten.cat: got mixed torch.Tensor and DTensor``) below autograd,
where no function mode reaches, so its gradient fails even on a replicated
DTensor. With the reduced dim unsharded (gathered above autograd by
``redistribute``), the reduction is local: each rank applies it to its own
block, and ``to_local`` / ``from_local`` carry the gradient back.

Advanced indexing (``x[[1, 2]]``, ``x[index_tensor]``) has the same
problem: its backward is an ``index_put`` of the saved plain index into a
DTensor gradient (``aten.index_put: got mixed torch.Tensor and DTensor``).
When a gradient is needed it runs on each rank's full copy
(``fallback.run_replicated``); basic indexing keeps its rule.

``scaled_dot_product_attention`` runs on each rank's (batch, head) block
(``semantics.attention``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.tensor import DTensor

from parity import sharding_rules as R

from parity.layout import TensorLayout
from parity.torch_impl import meshes
from parity.torch_impl.semantics import specs as S
from parity.torch_impl.tensors import from_local_blocks

LOCAL_REDUCTIONS = frozenset({"prod", "__getitem__", "scaled_dot_product_attention"})


def run_local_reduction(func: Any, args: tuple, kwargs: dict) -> Any:
    """``func(x, dim, keepdim)`` on each rank's block, or an advanced index
    that needs a gradient on each rank's full copy; ``None`` when the call is
    neither (a full reduction, basic indexing: they go the usual way)."""
    if func is torch.Tensor.__getitem__:
        return _advanced_index_with_grad(args, kwargs)
    if func is torch.nn.functional.scaled_dot_product_attention:
        from parity.torch_impl.semantics.attention import run_attention

        return run_attention(args, kwargs)
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


def _advanced_index_with_grad(args: tuple, kwargs: dict) -> Any:
    from parity.torch_impl.semantics import fallback

    if len(args) != 2 or kwargs or not isinstance(args[0], DTensor):
        return None
    x, index = args
    if not (torch.is_grad_enabled() and x.requires_grad):
        return None
    items = index if isinstance(index, tuple) else (index,)
    if R.index(S.spec_of(x), items) is not None:
        return None  # basic indexing: the getitem rule
    return fallback.run_replicated(torch.Tensor.__getitem__, args, kwargs, x.device_mesh,
                                   "DTensor cannot run its backward")
