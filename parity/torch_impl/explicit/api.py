"""JAX's explicit-sharding API on DTensor: ``set_mesh``, ``device_put``,
``typeof``, ``reshard``, ``with_sharding_constraint``.

| parity (``torch_impl.``)     | JAX                                  | on DTensor                     |
|------------------------------|--------------------------------------|--------------------------------|
| ``set_mesh(mesh)``           | ``jax.set_mesh`` (call or ``with``)  | parity's ambient mesh          |
| ``device_put(x, P(...))``    | ``jax.device_put(x, P(...))``        | ``distribute_tensor``          |
| ``typeof(x)``                | ``jax.typeof(x)``                    | a ``parity.ArrayType``         |
| ``reshard(x, P(...))``       | ``jax.sharding.reshard``             | differentiable ``redistribute``|
| ``with_sharding_constraint`` | ``jax.lax.with_sharding_constraint`` | Explicit: a check; Auto: reshard|
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch.distributed.tensor import DTensor, Partial

from parity import ambient
from parity.arg_checks import shown
from parity.array_type import ArrayType, array_type
from parity.axis_types import AxisType
from parity.errors import LayoutError, MeshMismatchError, ShardingTypeError, UnsupportedOpError
from parity.layout import Spec, TensorLayout
from parity.mesh import DeviceMesh
from parity.partition_spec import PartitionSpec
from parity.torch_impl.layouts import meshes
from parity.torch_impl.arrays.distribute import distribute_tensor
from parity.torch_impl.collectives import redistribute
from parity.torch_impl.explicit import manual
from parity.torch_impl.semantics import axis_overrides
from parity.torch_impl.semantics.traced_errors import raise_error
from parity.torch_impl.collectives.redistribute import resolve_pending
from parity.torch_impl.layouts.specs import placements_for, spec_and_pending
from parity.torch_impl.semantics.unreduced import Unreduced, as_partial, retype, typed, unreduced_axes


class set_mesh(ambient.set_mesh):
    """``jax.set_mesh``: a plain call makes ``mesh`` this thread's ambient
    mesh (what a ``parity.P`` resolves on) until the next call;
    ``with set_mesh(mesh):`` scopes it to the block and restores the
    previous one; ``set_mesh(None)`` clears it. Raises ``LayoutError`` for a
    value that is not a ``parity.DeviceMesh`` or ``None``, and for a mesh
    with Manual axes."""

    __slots__ = ()


def _ndim(x: Any) -> int:
    return x.ndim if isinstance(x, torch.Tensor) else np.ndim(x)


def device_put(x: Any, spec_or_layout: Any) -> DTensor:
    """``x`` (host data or a DTensor) laid out as a ``parity.P`` on the
    ambient mesh or as a ``TensorLayout`` (``distribute_tensor``). Raises
    ``LayoutError`` (no ambient mesh, rank mismatch) and ``ShardingError``
    (an indivisible dim, another mesh). A ``P(..., unreduced=...)`` gives an
    unreduced value as ``reshard`` does."""
    if _unreduced_of(spec_or_layout):
        return reshard(x, spec_or_layout)
    return distribute_tensor(x, ambient.to_layout(spec_or_layout, _ndim(x), "device_put"))


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def typeof(x: Any) -> ArrayType:
    """``x``'s type as JAX prints ``jax.typeof``: ``float32[8@data,8@model]``
    for a DTensor on Explicit axes (Auto axes are not shown); an unreduced
    value (``P(..., unreduced=...)``) ends in ``{U:axes}``; inside a
    ``shard_map`` body the block's shape and ``{V:axes}``. parity's own
    pending reductions are not shown (it completes them before any use).

    Raises ``TypeError`` for a value that is not a tensor.
    """
    if isinstance(x, torch.nn.Parameter) and isinstance(x.data, DTensor):
        x = x.data
    if isinstance(x, DTensor):
        spec, _ = spec_and_pending(x)
        mesh = axis_overrides.effective(meshes.to_parity_mesh(x.device_mesh))
        return array_type(_dtype_name(x.dtype), tuple(x.shape), spec, mesh,
                          unreduced=unreduced_axes(x))
    if isinstance(x, torch.Tensor):
        scope = manual.current()
        varying = manual.vma_of(x) if scope is not None and scope.check_vma else ()
        return array_type(_dtype_name(x.dtype), tuple(x.shape), ((),) * x.ndim,
                          scope.mesh if scope is not None else None, tuple(varying))
    raise TypeError(f"typeof needs a tensor; got x={shown(x)}.")


def _layout_for(x: DTensor, spec_or_layout: Any, what: str) -> TensorLayout:
    layout = ambient.to_layout(spec_or_layout, x.ndim, what)
    mine = meshes.to_parity_mesh(x.device_mesh)
    if layout.device_mesh != mine:
        raise MeshMismatchError(
            f"{what}: the tensor lives on {mine} and the target on {layout.device_mesh}. "
            "Fix: reshard on the tensor's own mesh (set_mesh(that mesh)).",
            first=mine, second=layout.device_mesh)
    return layout


def reshard(x: Any, spec_or_layout: Any) -> DTensor:
    """``x`` laid out as ``spec_or_layout`` (``jax.sharding.reshard``):
    differentiable, the gradient comes back in ``x``'s sharding. Host data
    is distributed. Raises ``LayoutError`` (no ambient mesh, rank
    mismatch), ``MeshMismatchError`` (a target on another mesh) and
    ``IndivisibleError``."""
    if not isinstance(x, DTensor):
        x = device_put(x, _reduced(spec_or_layout))
        if not _unreduced_of(spec_or_layout):
            return x
    layout = _layout_for(x, spec_or_layout, "reshard")
    layout.check_shape(tuple(x.shape))
    axes = _unreduced_of(spec_or_layout)
    if not axes:
        return redistribute.redistribute_to(resolve_pending(x), layout.spec, guard=True)
    return _to_unreduced(x, layout, axes)


def _unreduced_of(spec_or_layout: Any) -> frozenset[str]:
    return spec_or_layout.unreduced if isinstance(spec_or_layout, PartitionSpec) else frozenset()


def _reduced(spec_or_layout: Any) -> Any:
    if isinstance(spec_or_layout, PartitionSpec):
        return spec_or_layout.without_unreduced()
    return spec_or_layout


def _to_unreduced(x: DTensor, layout: TensorLayout, axes: frozenset[str]) -> DTensor:
    """``x`` laid out as ``layout`` and unreduced over ``axes``: the sum's
    terms are ``x / n`` on each of the ``n`` ranks of ``axes`` (DTensor's
    ``Replicate -> Partial``), so completing it gives ``x`` back,
    as JAX's ``reshard`` into unreduced. Raises ``LayoutError`` for an axis
    that is not an Explicit axis of the mesh (JAX's ``ValueError``)."""
    mesh = layout.device_mesh
    explicit = set(mesh.axes_of_type(AxisType.Explicit))
    if not axes <= explicit:
        raise LayoutError(
            f"reshard: unreduced={set(axes)} names axes that are not Explicit axes of {mesh} "
            f"(Explicit: {sorted(explicit)}); JAX types unreduced values only on Explicit axes. "
            "Fix: make those axes Explicit (parity.make_mesh) or leave unreduced= out.",
            what="unreduced", value=tuple(sorted(axes)))
    if unreduced_axes(x) != tuple(n for n in mesh.axis_names if n in axes):
        # The terms of the sum: x on every rank, divided by the ranks of `axes`.
        current = redistribute.redistribute_to(resolve_pending(x), layout.spec, guard=True)
        tmesh = current.device_mesh
        target = [Unreduced() if n in axes else p
                  for n, p in zip(mesh.axis_names, placements_for(layout.spec, tmesh))]
        return retype(current, tuple(target), 1.0 / math.prod([mesh.axis_size(n) for n in sorted(axes)]))
    # Already unreduced over `axes`: only the other dims move (the terms stay pending).
    plain = as_partial(x)
    tmesh = plain.device_mesh
    target = tuple(Partial("sum") if n in axes else p
                   for n, p in zip(mesh.axis_names, placements_for(layout.spec, tmesh)))
    moved = plain if tuple(plain.placements) == target else plain.redistribute(tmesh, target)
    return typed(moved, tuple(n for n in mesh.axis_names if n in axes), "reshard")


def _p(spec: Spec) -> str:
    from parity.layout import entry_from_names

    return "P(" + ", ".join(repr(entry_from_names(n)) for n in spec) + ")"


def with_sharding_constraint(x: Any, spec_or_layout: Any) -> DTensor:
    """``jax.lax.with_sharding_constraint``: on a mesh whose axes are all
    Explicit, a check that ``x`` already has that sharding (JAX asserts;
    parity raises ``ShardingTypeError`` naming the ``reshard`` to use);
    otherwise ``reshard``. Raises like ``reshard``, and
    ``UnsupportedOpError`` for an unreduced value or target (JAX 0.10.2
    fails there with an internal ``ValueError``)."""
    if _unreduced_of(spec_or_layout) or (isinstance(x, DTensor) and unreduced_axes(x)):
        raise UnsupportedOpError(
            f"with_sharding_constraint of an unreduced value or to {spec_or_layout!r} is not "
            "supported (JAX 0.10.2 fails there too). Fix: reshard(x, spec).",
            op="with_sharding_constraint", reason="unreduced values")
    if not isinstance(x, DTensor):
        return device_put(x, spec_or_layout)
    layout = _layout_for(x, spec_or_layout, "with_sharding_constraint")
    mesh = layout.device_mesh
    if all(t == AxisType.Explicit for t in mesh.axis_types):
        spec, _ = spec_and_pending(x)
        if spec != layout.spec:
            raise_error(
                ShardingTypeError,
                f"with_sharding_constraint is an assertion on Explicit axes: the array's "
                f"sharding {_p(spec)} is not {_p(layout.spec)}. Fix: "
                f"reshard(x, {_p(layout.spec)}).",
                op="with_sharding_constraint", specs=(spec, layout.spec),
                fix=f"reshard(x, {_p(layout.spec)})")
        return x
    return reshard(x, layout)
