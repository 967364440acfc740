"""Tensors onto layouts: host tensors from numpy, the parity layout of an
argument, a DTensor built from each rank's block, and the ``DTensorSpec`` of
a contiguous result."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.distributed.tensor import DTensor

from parity.arg_checks import numeric_host
from parity.errors import LayoutError, ParityError
from parity.layout import Spec, TensorLayout
from parity.mesh import DeviceMesh
from parity.torch_impl.layouts import meshes
from parity.torch_impl.runtime import state
from parity.torch_impl.layouts.specs import placements_for
from parity.torch_impl.runtime.torch_compat import DTensorSpec, TensorMeta, traced_through


def as_host_tensor(x: Any, what: str = "distribute_tensor", arg: str = "x") -> torch.Tensor:
    """A plain torch tensor from numpy, lists, scalars or a plain tensor.

    Raises ``ParityError`` for a DTensor (use it as is) or input that is not
    numeric (object, string or bytes data; as ``jax_ref`` refuses it).
    """
    if isinstance(x, DTensor):
        raise ParityError("as_host_tensor got a DTensor; it is already distributed.")
    if isinstance(x, torch.Tensor):
        return x
    array = numeric_host(x, what, arg)  # ParityError naming the value
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
                f"Expected a parity.TensorLayout, got {type(layout).__name__}.",
                what="layout", value=layout,
            )
        if mesh is not None and not isinstance(mesh, DeviceMesh):
            mesh = DeviceMesh(mesh.shape, mesh.axis_names, mesh.devices)
        layout = TensorLayout(tuple(axes), mesh)
    layout.require_mesh()
    return layout


def contiguous_stride(shape: Sequence[int]) -> tuple[int, ...]:
    stride, acc = [], 1
    for size in reversed(tuple(shape)):
        stride.append(acc)
        acc *= max(int(size), 1)
    return tuple(reversed(stride))


def from_local_blocks(
    local: torch.Tensor, layout: TensorLayout, global_shape: Sequence[int]
) -> DTensor:
    """Wrap each rank's block (already computed) as a DTensor of ``layout``.
    Raises ``LayoutError`` for an axis the mesh lacks."""
    torch_mesh = meshes.to_torch_mesh(layout.require_mesh())
    return from_local_on_mesh(local, torch_mesh, placements_for(layout.spec, torch_mesh),
                              global_shape)


def from_local_on_mesh(
    local: torch.Tensor, torch_mesh: Any, placements: Sequence[Any], global_shape: Sequence[int]
) -> DTensor:
    """Wrap each rank's block as a contiguous DTensor with ``placements`` on
    the torch mesh itself (an op's result beside its operands: no round trip
    through a parity mesh)."""
    return DTensor.from_local(
        local,
        torch_mesh,
        placements,
        run_check=False,
        shape=torch.Size(global_shape),
        stride=contiguous_stride(global_shape),
    )


def result_spec(torch_mesh: Any, spec: Spec, global_shape: Sequence[int], dtype: torch.dtype):
    """The ``DTensorSpec`` of a contiguous result laid out as ``spec`` (cached
    per process group: torch meshes of two ``simulate()`` blocks compare
    equal, and a spec must not carry a mesh whose process group is gone)."""
    state.current()  # this generation's specs (a new one empties the cache)
    return _result_spec(torch_mesh, tuple(spec), tuple(int(n) for n in global_shape), dtype)


@traced_through  # pure: dynamo may trace the function itself
@functools.lru_cache(maxsize=4096)
def _result_spec(torch_mesh: Any, spec: Spec, global_shape: tuple[int, ...], dtype):
    meta = TensorMeta(torch.Size(global_shape), contiguous_stride(global_shape), dtype)
    return DTensorSpec(torch_mesh, placements_for(spec, torch_mesh), tensor_meta=meta)


state.per_generation(_result_spec.cache_clear)


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


def raw_to_local(t: DTensor) -> torch.Tensor:
    """``t``'s local block as it is, a pending sum too: DTensor's own
    differentiable ``to_local``, without the completion of deferred sums
    that ``jax_semantics()`` wraps it in (``pending.install_to_local_hook``).
    For moving a DTensor to another mesh object with its placements: the
    completed block under ``Partial`` would count the sum once per rank.
    (While dynamo traces, ``to_local`` as it is.)"""
    if torch.compiler.is_dynamo_compiling():
        return t.to_local()
    return getattr(DTensor.to_local, "__wrapped__", DTensor.to_local)(t)
