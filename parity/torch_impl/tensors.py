"""Small conversions shared by the torch backend's modules."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.distributed.tensor import DTensor, Partial, Replicate

from parity.errors import LayoutError, ParityError
from parity.layout import Spec, TensorLayout
from parity.mesh import DeviceMesh
from parity.torch_impl import meshes, state
from parity.torch_impl.placements import to_placements, to_spec
from parity.torch_impl.torch_compat import traced_through


def as_host_tensor(x: Any) -> torch.Tensor:
    """A plain torch tensor from numpy, lists, scalars or a plain tensor.

    Raises ``ParityError`` for a DTensor (use it as is) or unconvertible input.
    """
    if isinstance(x, DTensor):
        raise ParityError("as_host_tensor got a DTensor; it is already distributed.")
    if isinstance(x, torch.Tensor):
        return x
    try:
        array = np.asarray(x)
    except Exception as err:  # noqa: BLE001 - report any conversion failure alike
        raise ParityError(f"Cannot turn {type(x).__name__} into a tensor: {err}") from err
    if array.dtype == object:
        raise ParityError(f"Cannot turn {type(x).__name__} into a numeric tensor.")
    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16)
    # np.ascontiguousarray would turn a 0-d array into shape (1,).
    return torch.from_numpy(np.array(array, order="C", copy=True))


def require_layout(layout: Any) -> TensorLayout:
    """A parity ``TensorLayout`` bound to a mesh.

    Accepts anything with ``axes`` and ``device_mesh`` attributes (Keras's
    ``TensorLayout``). Raises ``LayoutError`` when there is no mesh.
    """
    if not isinstance(layout, TensorLayout):
        axes = getattr(layout, "axes", None)
        mesh = getattr(layout, "device_mesh", None)
        if axes is None:
            raise LayoutError(
                f"Expected a parity.TensorLayout, got {type(layout).__name__}."
            )
        if mesh is not None and not isinstance(mesh, DeviceMesh):
            mesh = DeviceMesh(mesh.shape, mesh.axis_names, mesh.devices)
        layout = TensorLayout(tuple(axes), mesh)
    layout.require_mesh()
    return layout


def placements_of(layout: TensorLayout) -> tuple:
    mesh = layout.require_mesh()
    return to_placements(layout.spec, mesh.shape, mesh.axis_names)


def contiguous_stride(shape: Sequence[int]) -> tuple[int, ...]:
    stride, acc = [], 1
    for size in reversed(tuple(shape)):
        stride.append(acc)
        acc *= max(int(size), 1)
    return tuple(reversed(stride))


@traced_through  # pure: dynamo may trace the function itself
@functools.lru_cache(maxsize=8192)
def _cached_spec(placements: tuple, ndim: int, mesh_shape: tuple, names: tuple):
    return to_spec(placements, ndim, mesh_shape, names)


def spec_of(x: DTensor) -> tuple[Spec, tuple[str, ...]]:
    """``(spec, pending_axes)`` of a DTensor (cached: it runs on every op
    under ``jax_semantics``)."""
    mesh = x.device_mesh
    return _cached_spec(
        tuple(x.placements), x.ndim, tuple(mesh.shape), meshes.mesh_axis_names(mesh)
    )


def resolve_pending(x: DTensor) -> DTensor:
    """``x`` with every ``Partial`` reduced (replicated on that mesh axis)."""
    if not any(isinstance(p, Partial) for p in x.placements):
        return x
    from parity.torch_impl import partial_sums  # imports gather, which imports this module

    return partial_sums.complete(x)  # pending sums over several axes: one all_reduce


def from_local_blocks(
    local: torch.Tensor, layout: TensorLayout, global_shape: Sequence[int]
) -> DTensor:
    """Wrap each rank's block (already computed) as a DTensor of ``layout``."""
    mesh = layout.require_mesh()
    return DTensor.from_local(
        local,
        meshes.to_torch_mesh(mesh),
        placements_of(layout),
        run_check=False,
        shape=torch.Size(global_shape),
        stride=contiguous_stride(global_shape),
    )


def result_spec(torch_mesh: Any, spec: Spec, global_shape: Sequence[int], dtype: torch.dtype):
    """The ``DTensorSpec`` of a contiguous result laid out as ``spec`` (cached
    per process group: torch meshes of two ``simulate()`` blocks compare
    equal, and a spec must not carry a mesh whose process group is gone)."""
    return _result_spec(state.generation(), torch_mesh, tuple(spec),
                        tuple(int(n) for n in global_shape), dtype)


@traced_through  # pure: dynamo may trace the function itself
@functools.lru_cache(maxsize=4096)
def _result_spec(generation: object, torch_mesh: Any, spec: Spec, global_shape: tuple[int, ...],
                 dtype):
    from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta

    placements = to_placements(spec, tuple(torch_mesh.shape), meshes.mesh_axis_names(torch_mesh))
    meta = TensorMeta(torch.Size(global_shape), contiguous_stride(global_shape), dtype)
    return DTensorSpec(torch_mesh, tuple(placements), tensor_meta=meta)


def global_shape_from_local(
    local_shape: Sequence[int], spec: Spec, mesh_shape: Sequence[int], axis_names: Sequence[str]
) -> tuple[int, ...]:
    """Global shape of evenly sharded blocks of ``local_shape`` laid out as ``spec``."""
    axis_names = tuple(axis_names)
    return tuple(
        # a list: dynamo cannot trace math.prod(generator)
        int(size) * math.prod([mesh_shape[axis_names.index(n)] for n in names])
        for size, names in zip(local_shape, spec)
    )
