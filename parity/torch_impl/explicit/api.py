"""JAX's explicit-sharding API on DTensor: ``set_mesh``, ``device_put``,
``typeof``, ``reshard``, ``with_sharding_constraint``.

| parity (``torch_impl.``)     | JAX                                  | on DTensor                     |
|------------------------------|--------------------------------------|--------------------------------|
| ``set_mesh(mesh)``           | ``jax.set_mesh``                     | parity's ambient mesh          |
| ``device_put(x, P(...))``    | ``jax.device_put(x, P(...))``        | ``distribute_tensor``          |
| ``typeof(x)``                | ``jax.typeof(x)``                    | a ``parity.ArrayType``         |
| ``reshard(x, P(...))``       | ``jax.sharding.reshard``             | differentiable ``redistribute``|
| ``with_sharding_constraint`` | ``jax.lax.with_sharding_constraint`` | Explicit: a check; Auto: reshard|
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.distributed.tensor import DTensor

from parity import ambient
from parity.array_type import ArrayType, array_type
from parity.axis_types import AxisType
from parity.errors import MeshMismatchError, ShardingTypeError
from parity.layout import Spec, TensorLayout
from parity.mesh import DeviceMesh
from parity.torch_impl.layouts import meshes
from parity.torch_impl.arrays.distribute import distribute_tensor
from parity.torch_impl.collectives import redistribute
from parity.torch_impl.explicit import manual
from parity.torch_impl.semantics import axis_overrides
from parity.torch_impl.semantics.traced_errors import raise_error
from parity.torch_impl.collectives.redistribute import resolve_pending
from parity.torch_impl.layouts.specs import spec_and_pending


@contextlib.contextmanager
def set_mesh(mesh: DeviceMesh) -> Iterator[DeviceMesh]:
    """``mesh`` is this thread's ambient mesh inside the block (what a
    ``parity.P`` resolves on); nestable. Raises ``LayoutError`` for a value
    that is not a ``parity.DeviceMesh``."""
    with ambient.set_mesh(mesh):
        yield mesh


def _ndim(x: Any) -> int:
    return x.ndim if isinstance(x, torch.Tensor) else np.ndim(x)


def device_put(x: Any, spec_or_layout: Any) -> DTensor:
    """``x`` (host data or a DTensor) laid out as a ``parity.P`` on the
    ambient mesh or as a ``TensorLayout`` (``distribute_tensor``). Raises
    ``LayoutError`` (no ambient mesh, rank mismatch) and ``ShardingError``
    (an indivisible dim, another mesh)."""
    return distribute_tensor(x, ambient.to_layout(spec_or_layout, _ndim(x), "device_put"))


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def typeof(x: Any) -> ArrayType:
    """``x``'s type as JAX prints ``jax.typeof``: ``float32[8@data,8@model]``
    for a DTensor on Explicit axes (Auto axes are not shown); inside a
    ``shard_map`` body the block's shape and ``{V:axes}``. A pending
    reduction is not shown (parity completes it before any use).

    Raises ``TypeError`` for a value that is not a tensor.
    """
    if isinstance(x, torch.nn.Parameter) and isinstance(x.data, DTensor):
        x = x.data
    if isinstance(x, DTensor):
        spec, _ = spec_and_pending(x)
        mesh = axis_overrides.effective(meshes.to_parity_mesh(x.device_mesh))
        return array_type(_dtype_name(x.dtype), tuple(x.shape), spec, mesh)
    if isinstance(x, torch.Tensor):
        scope = manual.current()
        varying = manual.vma_of(x) if scope is not None and scope.check_vma else ()
        return array_type(_dtype_name(x.dtype), tuple(x.shape), ((),) * x.ndim,
                          scope.mesh if scope is not None else None, tuple(varying))
    raise TypeError(f"typeof needs a tensor; got {type(x).__name__}.")


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
        return device_put(x, spec_or_layout)
    layout = _layout_for(x, spec_or_layout, "reshard")
    layout.check_shape(tuple(x.shape))
    return redistribute.redistribute_to(resolve_pending(x), layout.spec, guard=True)


def _p(spec: Spec) -> str:
    from parity.layout import entry_from_names

    return "P(" + ", ".join(repr(entry_from_names(n)) for n in spec) + ")"


def with_sharding_constraint(x: Any, spec_or_layout: Any) -> DTensor:
    """``jax.lax.with_sharding_constraint``: on a mesh whose axes are all
    Explicit, a check that ``x`` already has that sharding (JAX asserts;
    parity raises ``ShardingTypeError`` naming the ``reshard`` to use);
    otherwise ``reshard``. Raises like ``reshard``."""
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
