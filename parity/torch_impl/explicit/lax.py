"""``jax.lax``'s collectives for a ``shard_map`` body, on each rank's block.

| function                                   | forward (per manual axis)      | backward (JAX's transpose)   |
|--------------------------------------------|--------------------------------|------------------------------|
| ``psum(x, axes)``                          | all_reduce sum                 | identity (ct is invariant)   |
| ``pmean(x, axes)``                         | psum / axis size               | identity / axis size         |
| ``pmax`` / ``pmin``                        | all_reduce max / min           | refused (JAX: not defined)   |
| ``all_gather(x, a, axis=0, tiled=False)``  | all_gather along ``axis``      | psum_scatter                 |
| ``psum_scatter(x, a, scatter_dimension=0,``| reduce_scatter                 | all_gather                   |
| ``tiled=False)``                           |                                |                              |
| ``ppermute(x, a, perm)``                   | all_gather, each rank takes    | ppermute by the inverse perm |
|                                            | its source's block (0 if none) |                              |
| ``all_to_all(x, a, split_axis,``           | all_gather, each rank takes    | all_to_all, axes swapped     |
| ``concat_axis, tiled=False)``              | its chunk of every block       |                              |
| ``axis_index(a)``                          | the rank's coordinate (int32)  | --                           |

The collectives run through ``torch.distributed._functional_collectives`` on
the manual axis's process group: over simulated ranks each rank's block is
a ``LocalTensor`` entry, under torchrun the process's own tensor. Types
follow JAX's ``vma`` rules (``manual``): an operand invariant along a
reduced axis is ``pvary``-ed first (so ``psum`` of an invariant value is
``size * x``, as in JAX); ``psum``/``pmean``/``pmax``/``pmin`` make the
result invariant along their axes; the others keep it varying.
``ppermute`` and ``all_to_all`` move a whole gathered block through each
rank (correct values, more traffic than a point-to-point exchange).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch.distributed.tensor import DTensor, Replicate, Shard

from parity.errors import LayoutError, UnsupportedOpError
from parity.torch_impl.explicit import manual
from parity.torch_impl.semantics.traced_errors import raise_error
from parity.torch_impl.runtime.torch_compat import funcol
from parity.torch_impl.runtime.torch_compat import (
    funcol_all_gather_single,
    funcol_reduce_scatter_single,
)

__all__ = ["all_gather", "all_to_all", "axis_index", "pmax", "pmean", "pmin", "ppermute",
           "psum", "psum_scatter"]


def _axes(axis_name: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(axis_name, str):
        return (axis_name,)
    if isinstance(axis_name, (tuple, list)) and all(isinstance(a, str) for a in axis_name):
        return tuple(axis_name)
    raise LayoutError(f"axis_name={axis_name!r} is not a mesh axis name or a tuple of them.", what="axis_name", value=axis_name)


def _one_axis(axis_name: object, what: str) -> str:
    axes = _axes(axis_name)  # type: ignore[arg-type]
    if len(axes) != 1:
        raise UnsupportedOpError(
            f"{what} over several axes {axes} is not supported; call it once per axis.",
            op=what, reason="several mesh axes")
    return axes[0]


def _wait(t: torch.Tensor) -> torch.Tensor:
    return funcol.wait_tensor(t)


def _gather(t: torch.Tensor, dim: int, scope: manual.Scope, name: str) -> torch.Tensor:
    group = manual.axis_group(scope, name)
    return _wait(funcol_all_gather_single(t.contiguous(), dim, group))


def _scatter(t: torch.Tensor, dim: int, scope: manual.Scope, name: str) -> torch.Tensor:
    group = manual.axis_group(scope, name)
    return _wait(funcol_reduce_scatter_single(t.contiguous(), "sum", dim, group))


def _coordinate(scope: manual.Scope, name: str) -> torch.Tensor:
    """Each rank's coordinate along mesh axis ``name`` (an int64 scalar):
    its block of ``arange(size)`` sharded along that axis, cut by DTensor's
    own Replicate -> Shard (a local slice, no collective). The ``arange`` is
    made from the body's block (``scope.template``), so that over simulated
    ranks it is a ``LocalTensor`` while ``torch.compile`` traces too (a
    factory tensor is a plain one there, and AOTAutograd's backward then
    meets a ``LocalTensor`` where it traced a plain tensor). Computed once
    per body and axis."""
    if name in scope.coordinates:
        return scope.coordinates[name]
    dim = scope.mesh.axis_index(name)
    ndim = len(scope.mesh.axis_names)
    size = scope.mesh.axis_size(name)
    with torch._C.DisableTorchFunction():
        if scope.template is not None:
            ones = scope.template.detach().new_ones((size,), dtype=torch.int64)
        else:
            ones = torch.ones((size,), dtype=torch.int64)
        whole = DTensor.from_local(ones.cumsum(0) - 1, scope.torch_mesh, [Replicate()] * ndim,
                                   run_check=False)
        mine = whole.redistribute(scope.torch_mesh,
                                  [Shard(0) if d == dim else Replicate() for d in range(ndim)])
        coord = mine.to_local().reshape(())
    scope.coordinates[name] = coord
    return coord


def _typed(out: torch.Tensor, vma) -> torch.Tensor:
    return manual.with_vma(out, frozenset(vma))


def _varying_in(x: torch.Tensor, axes: tuple[str, ...], scope: manual.Scope) -> torch.Tensor:
    """``x`` made varying along ``axes`` (JAX pvary-s an invariant operand)."""
    return manual.align(x, manual.vma_of(x) | set(axes), scope) if scope.check_vma else x


# ---------------------------------------------------------------- reductions

class _PSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, axes, scope):
        return manual.psum_plain(x, axes, scope)

    @staticmethod
    def backward(ctx, ct):
        return ct, None, None


def psum(x: torch.Tensor, axis_name: str | Sequence[str]) -> torch.Tensor:
    """The sum of ``x`` over the ranks along ``axis_name`` (one or several
    axes); invariant along them. Raises ``LayoutError`` for a name that is
    not a manual axis, ``ParityError`` outside a ``shard_map`` body."""
    scope = manual.require_scope("psum")
    axes = _axes(axis_name)
    for a in axes:
        manual.axis_group(scope, a)
    x = _varying_in(x, axes, scope)
    with torch._C.DisableTorchFunction():
        out = _PSum.apply(x, axes, scope)
    return _typed(out, manual.vma_of(x) - set(axes))


def pmean(x: torch.Tensor, axis_name: str | Sequence[str]) -> torch.Tensor:
    """``psum(x, axis_name) / size`` (the product of the axes' sizes)."""
    scope = manual.require_scope("pmean")
    axes = _axes(axis_name)
    total = psum(x, axes)
    size = math.prod([scope.mesh.axis_size(a) for a in axes])
    with torch._C.DisableTorchFunction():
        out = total / size
    return _typed(out, manual.vma_of(total))


class _PExtreme(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, op, axes, scope):
        ctx.op = op
        return manual.all_reduce(x, op, axes, scope)

    @staticmethod
    def backward(ctx, ct):
        name = "pmax" if ctx.op == "max" else "pmin"
        raise_error(  # also while torch.compile traces this backward
            UnsupportedOpError,
            f"{name} has no gradient (JAX: \"Differentiation rule for '{name}' not "
            "implemented\"). Fix: stop the gradient before it, or use psum.",
            op=name, reason="not differentiable in JAX")


def _extreme(x: torch.Tensor, axis_name, op: str) -> torch.Tensor:
    scope = manual.require_scope("pmax" if op == "max" else "pmin")
    axes = _axes(axis_name)
    for a in axes:
        manual.axis_group(scope, a)
    vma = manual.vma_of(x)
    with torch._C.DisableTorchFunction():
        out = _PExtreme.apply(x, op, axes, scope)
    return _typed(out, vma - set(axes))


def pmax(x: torch.Tensor, axis_name: str | Sequence[str]) -> torch.Tensor:
    """The elementwise max over the ranks along ``axis_name``; no gradient."""
    return _extreme(x, axis_name, "max")


def pmin(x: torch.Tensor, axis_name: str | Sequence[str]) -> torch.Tensor:
    """The elementwise min over the ranks along ``axis_name``; no gradient."""
    return _extreme(x, axis_name, "min")


# ---------------------------------------------------------------- gather / scatter

class _AllGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, name, axis, tiled, scope):
        ctx.args = (name, axis, tiled, scope)
        if not tiled:
            x = x.unsqueeze(axis)
        return _gather(x, axis, scope, name)

    @staticmethod
    def backward(ctx, ct):
        name, axis, tiled, scope = ctx.args
        out = _scatter(ct, axis, scope, name)
        return (out if tiled else out.squeeze(axis)), None, None, None, None


def _dim(axis: int, ndim: int, what: str) -> int:
    if not -ndim <= axis < ndim:
        raise LayoutError(f"{what}: axis {axis} is out of range for rank {ndim}.", what=what, value=axis)
    return axis % ndim


def all_gather(x: torch.Tensor, axis_name: str, *, axis: int = 0,
               tiled: bool = False) -> torch.Tensor:
    """Every rank's block along ``axis_name``: stacked on a new dim ``axis``
    (``tiled=False``) or concatenated along ``axis`` (``tiled=True``).
    Raises ``LayoutError`` for a bad axis or name."""
    scope = manual.require_scope("all_gather")
    name = _one_axis(axis_name, "all_gather")
    manual.axis_group(scope, name)
    axis = _dim(axis, x.ndim + (0 if tiled else 1), "all_gather")
    x = _varying_in(x, (name,), scope)
    with torch._C.DisableTorchFunction():
        out = _AllGather.apply(x, name, axis, tiled, scope)
    return _typed(out, manual.vma_of(x))


class _PSumScatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, name, dim, tiled, scope):
        ctx.args = (name, dim, tiled, scope)
        out = _scatter(x, dim, scope, name)
        return out if tiled else out.squeeze(dim)

    @staticmethod
    def backward(ctx, ct):
        name, dim, tiled, scope = ctx.args
        if not tiled:
            ct = ct.unsqueeze(dim)
        return _gather(ct, dim, scope, name), None, None, None, None


def _check_chunks(op: str, what: str, x: torch.Tensor, dim: int, size: int, name: str,
                  tiled: bool) -> None:
    """Raise ``LayoutError`` unless dim ``dim`` of ``x`` splits into one chunk
    per rank of axis ``name`` (``size`` ranks): divisible when ``tiled``, else
    exactly ``size`` long (JAX's rule for psum_scatter and all_to_all)."""
    if (tiled and x.shape[dim] % size) or (not tiled and x.shape[dim] != size):
        raise LayoutError(
            f"{op}: {what} {dim} of size {x.shape[dim]} "
            f"{'does not divide by' if tiled else 'is not'} the size {size} of axis {name!r}.",
            what=what, value=dim)


def psum_scatter(x: torch.Tensor, axis_name: str, *, scatter_dimension: int = 0,
                 tiled: bool = False) -> torch.Tensor:
    """The sum over the ranks along ``axis_name``, each rank keeping its
    slice of dim ``scatter_dimension`` (untiled: that dim's size must be the
    axis size and is removed). Raises ``LayoutError`` for a dim that does not
    divide, as JAX does."""
    scope = manual.require_scope("psum_scatter")
    name = _one_axis(axis_name, "psum_scatter")
    manual.axis_group(scope, name)
    size = scope.mesh.axis_size(name)
    dim = _dim(scatter_dimension, x.ndim, "psum_scatter")
    _check_chunks("psum_scatter", "scatter_dimension", x, dim, size, name, tiled)
    x = _varying_in(x, (name,), scope)
    with torch._C.DisableTorchFunction():
        out = _PSumScatter.apply(x, name, dim, tiled, scope)
    return _typed(out, manual.vma_of(x))


# ---------------------------------------------------------------- permutations

def _ppermute_plain(x, name, perm, coord, scope):
    n = scope.mesh.axis_size(name)
    source = [-1] * n
    for src, dst in perm:
        source[dst] = src
    # per rank: the coordinate its block comes from (0 if none) and whether one does
    # per rank: the coordinate its block comes from (0 if none) and whether
    # one does -- sums of scalars times (coord == k), never a lookup in a
    # plain table (a plain tensor indexed by a LocalTensor has no dispatch
    # under torch.compile's functionalization)
    if all(s < 0 for s in source):
        return torch.zeros_like(x)
    src = sum(max(source[k], 0) * (coord == k).long() for k in range(n)).reshape(1)
    has = sum((coord == k).long() for k in range(n) if source[k] >= 0) > 0
    gathered = _gather(x.unsqueeze(0), 0, scope, name)
    picked = torch.index_select(gathered, 0, src).squeeze(0)
    return torch.where(has, picked, torch.zeros_like(picked))


class _PPermute(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, name, perm, coord, scope):
        ctx.args = (name, perm, coord, scope)
        return _ppermute_plain(x, name, perm, coord, scope)

    @staticmethod
    def backward(ctx, ct):
        name, perm, coord, scope = ctx.args
        inverse = tuple((dst, src) for src, dst in perm)
        return _ppermute_plain(ct, name, inverse, coord, scope), None, None, None, None


def ppermute(x: torch.Tensor, axis_name: str, perm: Sequence[tuple[int, int]]) -> torch.Tensor:
    """Each ``(src, dst)`` pair sends the block of coordinate ``src`` along
    ``axis_name`` to ``dst``; a rank no pair sends to gets zeros. Raises
    ``LayoutError`` for an index out of range or repeated."""
    scope = manual.require_scope("ppermute")
    name = _one_axis(axis_name, "ppermute")
    manual.axis_group(scope, name)
    n = scope.mesh.axis_size(name)
    pairs = tuple((int(s), int(d)) for s, d in perm)
    srcs, dsts = [s for s, _ in pairs], [d for _, d in pairs]
    if any(not 0 <= i < n for i in srcs + dsts) or len(set(srcs)) != len(srcs) \
            or len(set(dsts)) != len(dsts):
        raise LayoutError(
            f"ppermute: perm={perm!r} must pair distinct sources with distinct destinations "
            f"in [0, {n}) (the size of axis {name!r}).",
            what="perm", value=perm)
    x = _varying_in(x, (name,), scope)
    coord = _coordinate(scope, name)
    with torch._C.DisableTorchFunction():
        out = _PPermute.apply(x, name, pairs, coord, scope)
    return _typed(out, manual.vma_of(x))


def _all_to_all_plain(x, name, split, concat, tiled, coord, scope):
    n = scope.mesh.axis_size(name)
    coord = coord.reshape(1)
    gathered = _gather(x.unsqueeze(0), 0, scope, name)  # [n, *x.shape]
    chunks = gathered.unflatten(split + 1, (n, x.shape[split] // n))
    mine = torch.index_select(chunks, split + 1, coord).squeeze(split + 1)  # [n, ...]
    if not tiled:  # the split dim (size 1 per chunk) is gone; n blocks stack at concat
        mine = mine.squeeze(split + 1).movedim(0, concat)
    else:
        mine = mine.movedim(0, concat).flatten(concat, concat + 1)
    # with standard strides: a view here keeps odd strides on size-1 dims, and
    # a gradient's tangent shaped like it (zeros_like) then differs from the
    # layout AOTAutograd traced -- over simulated ranks torch.compile's
    # backward turned its per-rank blocks into LocalTensors ("expected
    # SubclassCreationMeta, got PlainTensorMeta", torch 2.13)
    return mine.clone(memory_format=torch.contiguous_format)


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, name, split, concat, tiled, coord, scope):
        ctx.args = (name, split, concat, tiled, coord, scope)
        return _all_to_all_plain(x, name, split, concat, tiled, coord, scope)

    @staticmethod
    def backward(ctx, ct):
        name, split, concat, tiled, coord, scope = ctx.args
        if tiled:
            return _all_to_all_plain(ct, name, concat, split, True, coord, scope), *(None,) * 6
        # untiled: out_r[j] = x_j[r], so grad x_j[r] = ct_r[j]: the same exchange
        return _all_to_all_plain(ct, name, concat, split, False, coord, scope), *(None,) * 6


def all_to_all(x: torch.Tensor, axis_name: str, split_axis: int, concat_axis: int, *,
               tiled: bool = False) -> torch.Tensor:
    """Split dim ``split_axis`` into one chunk per rank along ``axis_name``,
    send chunk ``j`` to rank ``j`` and join what arrives along
    ``concat_axis`` (tiled) or on a new dim there (untiled: the split dim's
    size must be the axis size and it is removed). Raises ``LayoutError``
    for a dim that does not divide."""
    scope = manual.require_scope("all_to_all")
    name = _one_axis(axis_name, "all_to_all")
    manual.axis_group(scope, name)
    n = scope.mesh.axis_size(name)
    split = _dim(split_axis, x.ndim, "all_to_all")
    concat = _dim(concat_axis, x.ndim, "all_to_all")
    _check_chunks("all_to_all", "split_axis", x, split, n, name, tiled)
    x = _varying_in(x, (name,), scope)
    coord = _coordinate(scope, name)
    with torch._C.DisableTorchFunction():
        out = _AllToAll.apply(x, name, split, concat, tiled, coord, scope)
    return _typed(out, manual.vma_of(x))


def axis_index(axis_name: str) -> torch.Tensor:
    """This rank's coordinate along ``axis_name`` (an int32 scalar),
    varying along it."""
    scope = manual.require_scope("axis_index")
    name = _one_axis(axis_name, "axis_index")
    manual.axis_group(scope, name)
    out = _coordinate(scope, name)
    with torch._C.DisableTorchFunction():
        out = out.to(torch.int32)
    return _typed(out, {name} if scope.check_vma else ())
