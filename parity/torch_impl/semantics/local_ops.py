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

``matmul`` of a vector by a matrix or a batch (``v @ m``, 1-D first
operand) runs as ``(v.unsqueeze(0) @ m).squeeze(-2)``: DTensor's own
(torch 2.13) gives a DTensor whose global shape keeps the vector's
inserted dim (``[1, n]`` over ``[n]`` blocks), found by PyTorch's OpInfo
samples (``parity run --source opinfo --full --op matmul``).

Two ops run without DTensor's strategy search for them, which takes
minutes (over the 60 s a conformance case gets):

* ``tensordot`` runs as the einsum it is on each rank's blocks (laid out
  by the contraction rule, the result a ``Partial`` over the axes that
  split the contracted dims): DTensor's tensordot and einsum strategies
  expand every single-dim strategy over the mesh and price each
  redistribution by a graph search, minutes on a (2, 2, 2) mesh;
* ``torch.ops.aten._batch_norm_with_update`` (training batch norm, as
  ``torch.export`` and OpInfo call it) runs as ``aten.native_batch_norm``
  with ``training=True``, which computes the same output, saved mean and
  saved inverse std and updates the running statistics in place the same
  way; the fourth output (cuDNN's reserve space) is the empty byte tensor
  the CPU kernel returns. DTensor has no strategy for its backward
  (``batch_norm_backward``) and propagates through the decomposition, one
  to several minutes per call; ``native_batch_norm_backward`` has one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.distributed.tensor import DTensor, Partial

from parity import sharding_rules as R

from parity.torch_impl.semantics import pending
from parity.torch_impl.collectives import redistribute
from parity.torch_impl.layouts import specs as S
from parity.torch_impl.layouts.tensors import contiguous_stride, from_local_on_mesh
from parity.torch_impl.semantics.attention import run_attention

LOCAL_REDUCTIONS = frozenset({"prod", "__getitem__", "scaled_dot_product_attention", "tensordot",
                              "_batch_norm_with_update", "_batch_norm_with_update.default",
                              "matmul", "__matmul__", "__rmatmul__"})
_MATMULS = frozenset({torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__})
_BATCH_NORM_WITH_UPDATE = (torch.ops.aten._batch_norm_with_update,
                           torch.ops.aten._batch_norm_with_update.default)


@dataclasses.dataclass(frozen=True)
class OnWhole:
    """``run_local_reduction``'s answer for a call each rank must run on
    its full copy of the operands (``fallback.run_replicated``), and why."""

    why: str


def run_local_reduction(func: Any, args: tuple, kwargs: dict) -> Any:
    """``func(x, dim, keepdim)`` on each rank's block, attention on each
    rank's block, tensordot on each rank's blocks, or batch norm as its
    quick equivalent (above); ``OnWhole`` for an advanced index that needs
    a gradient (and a tensordot torch broadcasts): the mode runs it on the
    gathered operands; ``None`` when the call is none of these (a full
    reduction, basic indexing: they go the usual way)."""
    # The calls answered in this module first, then those answered below it
    # (the contraction rule, attention): each branch is one function.
    if func is torch.Tensor.__getitem__:
        return _advanced_index_with_grad(args, kwargs)
    if any(func is f for f in _BATCH_NORM_WITH_UPDATE):
        return _batch_norm_with_update(args, kwargs)
    if func in _MATMULS:
        return _vector_matmul(args, kwargs)
    if func is torch.Tensor.__rmatmul__:
        return _vector_matmul(args[::-1], kwargs)
    if func is torch.tensordot:
        return _tensordot_local(args, kwargs)
    if func is torch.nn.functional.scaled_dot_product_attention:
        return run_attention(args, kwargs)
    x = args[0]
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    if not isinstance(x, DTensor) or not isinstance(dim, int):
        return None
    keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
    extra = {k: v for k, v in kwargs.items() if k not in ("dim", "keepdim")}
    dim %= x.ndim
    mesh = x.device_mesh
    # the operand with ``dim`` gathered, and the result: both conversions at once
    spec = S.spec_of(x)
    gathered = spec[:dim] + ((),) + spec[dim + 1:]
    result = gathered if keepdim else gathered[:dim] + gathered[dim + 1:]
    source, target = S.placements_for(gathered, mesh), S.placements_for(result, mesh)
    if spec[dim]:
        x = redistribute.move(x, source)
    local = func(x.to_local(), dim, keepdim, **extra)
    shape = list(x.shape)
    if keepdim:
        shape[dim] = 1
    else:
        del shape[dim]
    return from_local_on_mesh(local, mesh, target, shape)


def _advanced_index_with_grad(args: tuple, kwargs: dict) -> Any:
    if len(args) != 2 or kwargs or not isinstance(args[0], DTensor):
        return None
    x, index = args
    if not (torch.is_grad_enabled() and x.requires_grad):
        return None
    items = index if isinstance(index, tuple) else (index,)
    if R.index(S.spec_of(x), items, tuple(x.shape)) is not None:
        return None  # basic indexing: the getitem rule
    return OnWhole("DTensor cannot run its backward")


def _tensordot_local(args: tuple, kwargs: dict) -> Any:
    """``tensordot`` on each rank's blocks, laid out by the contraction
    rule: contracting dims sharded alike, so each rank's einsum of its
    blocks is its output block, a partial sum over the mesh axes that split
    the contracted dims (``Partial`` there, completed by the mode)."""
    from parity.torch_impl.semantics.rules.contractions import tensordot_letters

    if (len(args) < 2 or kwargs.get("out") is not None or set(kwargs) - {"dims", "out"}
            or not all(isinstance(t, DTensor) for t in args[:2])):
        return None  # out=, or a plain operand: the usual way
    a, b = (pending.complete(t) for t in args[:2])
    if a.device_mesh != b.device_mesh:
        return None  # the usual path raises parity's mesh error
    lettered = tensordot_letters(a.ndim, b.ndim, args[2] if len(args) > 2 else kwargs.get("dims", 2))
    if lettered is None:
        return None
    lets_a, lets_b, out = lettered
    mesh = a.device_mesh
    if any(n != m for la, n in zip(lets_a, a.shape) for lb, m in zip(lets_b, b.shape)
           if la == lb):
        # torch broadcasts a contracted dim of size 1 against any size (JAX
        # refuses it; einsum on blocks raises "NYI"): torch's value, gathered
        return OnWhole("contracted dims of different sizes")
    result = R.contract([(S.spec_of(a), tuple(a.shape)), (S.spec_of(b), tuple(b.shape))],
                        [lets_a, lets_b], out, S.axis_sizes(mesh))
    a, b = redistribute.redistribute_to(a, result.inputs[0]), redistribute.redistribute_to(b, result.inputs[1])
    out_axes = {n for names in result.output for n in names}
    summed = {n for letter, names in zip(lets_a, result.inputs[0]) if letter not in out
              for n in names}
    local = torch.einsum(f"{lets_a},{lets_b}->{out}", _block(a, out_axes), _block(b, out_axes))
    sizes = dict(zip(lets_a, a.shape)) | dict(zip(lets_b, b.shape))
    shape = [sizes[letter] for letter in out]
    placements = [Partial() if name in summed else p for name, p in
                  zip(S.mesh_axis_names(mesh), S.placements_for(result.output, mesh))]
    return DTensor.from_local(local, mesh, placements, run_check=False, shape=torch.Size(shape),
                              stride=contiguous_stride(shape))


def _block(x: DTensor, out_axes: set) -> torch.Tensor:
    """``x``'s local block; its gradient is a partial sum over the mesh axes
    that split the output but not ``x`` (ranks along one computed different
    output blocks from the same copy of ``x``)."""
    mine = {n for names in S.spec_of(x) for n in names}
    split = out_axes - mine
    names = S.mesh_axis_names(x.device_mesh)
    return x.to_local(grad_placements=[Partial() if name in split else p
                                       for name, p in zip(names, x.placements)])


def _vector_matmul(args: tuple, kwargs: dict) -> Any:
    """``v @ m`` for a 1-D ``v`` and an ``m`` of 2 dims or more, through a
    row matrix (see the module docstring); ``None`` for any other call."""
    if kwargs or len(args) != 2 or not all(isinstance(t, DTensor) for t in args):
        return None  # out=, or a plain operand: the usual way
    v, m = args
    if v.ndim != 1 or m.ndim < 2:
        return None
    return torch.matmul(v.unsqueeze(0), m).squeeze(-2)


def _batch_norm_with_update(args: tuple, kwargs: dict) -> Any:
    names = ("input", "weight", "bias", "running_mean", "running_var", "momentum", "eps")
    if len(args) + len(kwargs) != len(names) or set(kwargs) - set(names[len(args):]):
        return None  # torch's own argument error
    x, weight, bias, mean, var, momentum, eps = [
        args[i] if i < len(args) else kwargs[n] for i, n in enumerate(names)]
    if not isinstance(x, DTensor):
        return None
    out, save_mean, save_invstd = torch.ops.aten.native_batch_norm.default(
        x, weight, bias, mean, var, True, momentum, eps)
    reserve = x.new_empty((0,), dtype=torch.uint8)
    return out, save_mean, save_invstd, reserve
