"""Putting arrays on the mesh and reading them back: distribute,
``to_numpy``, ``local_block`` (the whole array replicated,
``all_gather_variable``, is a collective: ``collectives.gather``).

Every rank keeps only its own block: a host array is sliced per rank (the
slice is copied, so no rank keeps the whole array), exactly as
``jax.device_put`` from the host does.

Floating host data (numpy arrays and scalars, Python lists and scalars)
arrives in JAX's dtypes with 64-bit types off, JAX's default: float64 ->
float32, complex128 -> complex64. ``JAX_ENABLE_X64=1`` in the environment
(JAX's own switch, read at each call here) keeps 64 bits. Integers keep
their width: torch's index ops (``gather``, ``tensor_split``, a loss's
targets) require int64 where JAX would hold int32, and narrowing would wrap
values past int32 silently. A torch tensor or DTensor keeps the dtype it
has.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch
from torch.distributed.tensor import DTensor

from parity import ambient
from parity.arg_checks import check_device_index, numeric_host
from parity.errors import MeshMismatchError, ParityError
from parity.layout import TensorLayout
from parity.torch_impl.runtime import devices, state
from parity.torch_impl.layouts import mesh_identity, meshes
from parity.torch_impl.collectives.donation import check_not_donated, require_dtensor
from parity.torch_impl.collectives.whole import gather_whole
from parity.torch_impl.runtime.rank_results import first_rank_value
from parity.torch_impl.runtime.torch_compat import rank_map
from parity.torch_impl.layouts.tensors import (
    as_host_tensor,
    from_local_blocks,
    global_shape_from_local,
    require_layout,
)
from parity.torch_impl.collectives.redistribute import merged, resolve_pending
from parity.torch_impl.layouts.specs import blocks_of, placements_for


# JAX's canonical floating dtypes with 64-bit types off
# (jax.dtypes.canonicalize_dtype); integers keep their width (module doc).
_NARROW = {np.dtype(np.float64): np.dtype(np.float32),
           np.dtype(np.complex128): np.dtype(np.complex64)}
_TRUE, _FALSE = ("y", "yes", "t", "true", "on", "1"), ("n", "no", "f", "false", "off", "0")


def x64_enabled() -> bool:
    """Whether host data keeps 64-bit dtypes: the environment variable
    ``JAX_ENABLE_X64``, read as JAX reads it (``1``/``true``/``yes``/``on``...
    or ``0``/``false``/``no``/``off``..., any case; unset: off).

    Raises ``ParityError`` for any other value, naming it.
    """
    value = os.environ.get("JAX_ENABLE_X64", "0").lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ParityError(
        f"JAX_ENABLE_X64={os.environ['JAX_ENABLE_X64']!r} is not a truth value. Fix: set it "
        f"to one of {_TRUE} (keep 64-bit host data) or {_FALSE} (JAX's default), or unset it.")


def host_value(x: Any) -> Any:
    """``x`` with JAX's dtype for floating host data (float64 -> float32,
    complex128 -> complex64) unless
    ``x64_enabled()``; a torch tensor, and anything numpy cannot convert
    (``as_host_tensor`` reports it), as given."""
    if isinstance(x, torch.Tensor) or x64_enabled():
        return x
    try:
        array = np.asarray(x)
    except Exception:  # noqa: BLE001 - as_host_tensor raises the typed error
        return x
    narrow = _NARROW.get(array.dtype)
    return x if narrow is None else array.astype(narrow)


def _mesh_position(layout: TensorLayout) -> dict[int, int]:
    """torch rank -> device index (position in ``mesh.devices.flat``)."""
    mesh = layout.require_mesh()
    return {devices.device_rank(d): i for i, d in enumerate(mesh.devices.flat)}


def _block(host: torch.Tensor, bounds: tuple[tuple[int, int], ...]) -> torch.Tensor:
    index = tuple(slice(a, b) for a, b in bounds)
    return host[index].clone(memory_format=torch.contiguous_format)


def distribute_tensor(x: Any, layout: Any) -> DTensor:
    """``x`` laid out as ``layout`` (a ``TensorLayout``, or a ``parity.P``
    on the ambient mesh): host data is sliced per rank, a DTensor is
    resharded (through DTensor's differentiable ``redistribute``). Host
    data gets JAX's 32-bit dtypes unless ``JAX_ENABLE_X64`` is set
    (``host_value``); a torch tensor keeps its dtype.

    Raises ``LayoutError`` (no mesh -- for a ``P`` no ambient mesh --, rank
    mismatch, unknown axis), ``ShardingError`` (indivisible dim, another
    mesh) and ``ParityError`` (no simulated or real ranks, unconvertible
    input).
    """
    ndim = x.ndim if isinstance(x, torch.Tensor) else np.ndim(x)
    layout = require_layout(ambient.resolve(layout, ndim, "distribute_tensor"))
    mesh = layout.require_mesh()
    torch_mesh = meshes.to_torch_mesh(mesh)
    if isinstance(x, DTensor):
        layout.check_shape(x.shape)
        if not mesh_identity.same_mesh(x.device_mesh, torch_mesh):
            raise MeshMismatchError(
                f"The tensor lives on mesh {x.device_mesh} and the layout on "
                f"{torch_mesh} (they differ in "
                f"{'; '.join(mesh_identity.differences(x.device_mesh, torch_mesh))}). Fix: "
                "gather it with all_gather_variable and to_numpy, then distribute on the "
                "new mesh.",
                first=x.device_mesh, second=torch_mesh,
            )
        x = mesh_identity.rehome(x, torch_mesh)
        x = resolve_pending(x)
        # one collective, not one per mesh axis (redistribute.merged)
        return merged(x, placements_for(layout.spec, torch_mesh))
    host = as_host_tensor(host_value(x))
    layout.check_shape(host.shape)
    shards = layout.shards(host.shape)
    position = _mesh_position(layout)
    device = devices.torch_device()
    local = rank_map(lambda rank: _block(host, shards[position[rank]]).to(device))
    return from_local_blocks(local, layout, host.shape)


def distribute_variable(value: Any, layout: Any) -> torch.nn.Parameter:
    """``distribute_tensor`` for a trainable value: a ``Parameter`` whose data
    is a sharded DTensor (``requires_grad`` for floating dtypes); ``layout``
    may be a ``parity.P`` on the ambient mesh. Raises like
    ``distribute_tensor``."""
    tensor = distribute_tensor(value, layout)
    if isinstance(value, torch.Tensor) and not isinstance(value, DTensor):
        tensor = tensor.detach()
    return torch.nn.Parameter(
        tensor, requires_grad=tensor.is_floating_point() or tensor.is_complex()
    )


def distribute_data_input(
    per_process_batch: Any, layout: Any, batch_dim_name: str | None = None
) -> DTensor:
    """The global batch from each process's local batch, as
    ``jax.make_array_from_process_local_data`` builds it.

    One process (plain or simulated): the batch is the global batch. Several
    processes (one device each): each passes the block its device holds, so
    every dim grows by its shard count; processes that share a data shard
    (model-parallel meshes) must pass equal data. ``batch_dim_name`` is
    accepted for Keras's signature; it must name a mesh axis if given.

    Raises like ``distribute_tensor``.
    """
    layout = require_layout(layout)
    mesh = layout.require_mesh()
    if batch_dim_name is not None:
        mesh.axis_index(batch_dim_name)
    if devices.num_processes() == 1:
        return distribute_tensor(per_process_batch, layout)
    if isinstance(per_process_batch, DTensor):
        raise ParityError("distribute_data_input expects host data, got a DTensor.")
    local = as_host_tensor(host_value(per_process_batch), "distribute_data_input",
                           "per_process_batch")
    if local.ndim != layout.rank:
        layout.check_shape(local.shape)  # raises the rank mismatch
    global_shape = global_shape_from_local(local.shape, layout.spec, mesh.shape, mesh.axis_names)
    return from_local_blocks(local.to(devices.torch_device()).contiguous(), layout, global_shape)


def to_numpy(x: Any) -> np.ndarray:
    """The whole global array as numpy (never only a local block).

    Pending reductions are completed first. Plain tensors and arrays are
    converted as they are. Raises ``ParityError`` for a value that is not
    numeric array data (``None``, a string, an object array).
    """
    if isinstance(x, DTensor):
        check_not_donated(x)
        x = resolve_pending(x)
        whole = gather_whole(x, blocks_of(x))  # every rank's copy of the global array
        x = first_rank_value(whole)
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        if x.dtype == torch.bfloat16:
            import ml_dtypes

            return x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return x.numpy()
    return numeric_host(x, "to_numpy", "x")


def local_block(x: DTensor, device_index: int) -> torch.Tensor:
    """The block that device ``device_index`` holds (simulated mode, or this
    process's own device in multi-process mode).

    Raises ``ParityError`` for an index that is not an int in range and for
    a device another process holds.
    """
    x = require_dtensor(x, "local_block")
    flat = x.device_mesh.mesh.flatten()
    device_index = check_device_index(device_index, flat.numel(), "local_block")
    rank = int(flat[device_index])
    local = x.to_local()
    local_tensors = getattr(local, "_local_tensors", None)
    if local_tensors is not None:
        return local_tensors[rank]
    if state.mode() == "multiprocess" and rank != devices.process_id():
        raise ParityError(
            f"Device {device_index} is rank {rank}, held by another process "
            f"(this one is rank {devices.process_id()})."
        )
    return local
