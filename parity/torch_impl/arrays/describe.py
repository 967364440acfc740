"""``describe``: the ``parity.Placement`` a DTensor holds, read from its
placements (the same record ``parity.jax_ref.describe`` gives)."""

from __future__ import annotations

from typing import Any

from torch.distributed.tensor import Shard

from parity.errors import IndivisibleError
from parity.layout import TensorLayout, mesh_coords
from parity.placement import Placement
from parity.torch_impl.layouts import meshes
from parity.torch_impl.collectives.donation import require_dtensor
from parity.torch_impl.collectives.redistribute import resolve_pending
from parity.torch_impl.layouts.specs import spec_and_pending


def describe(x: Any) -> Placement:
    """The ``Placement`` of a DTensor, read from its placements.

    Device index ``i`` is ``mesh.devices.flat[i]``, i.e. torch rank
    ``mesh.mesh.flatten()[i]``. ``pending`` lists axes of an unresolved
    ``Partial`` (parity's own functions never return one). Raises
    ``ParityError`` for a tensor that is not distributed.
    """
    x = require_dtensor(x, "describe")
    if getattr(x, "_parity_deferred", False):  # pending on purpose: jax_semantics(defer=True)
        x = resolve_pending(x)
    mesh = meshes.to_parity_mesh(x.device_mesh)
    spec, pending = spec_and_pending(x)
    layout = TensorLayout.from_spec(spec, mesh)
    try:
        shards = layout.shards(tuple(x.shape))
    except IndivisibleError:  # a raw DTensor split unevenly: report what it holds
        shards = uneven_shard_bounds(tuple(x.shape), x.placements, mesh.shape)
    return Placement(
        shape=tuple(x.shape),
        dtype=str(x.dtype).removeprefix("torch."),
        mesh_shape=mesh.shape,
        axis_names=mesh.axis_names,
        spec=spec,
        shards=shards,
        pending=pending,
    )


def uneven_shard_bounds(shape, placements, mesh_shape) -> dict:
    """Blocks of a DTensor whose ``Shard`` dims do not divide evenly.

    DTensor splits like ``torch.chunk``: ``ceil(n / k)`` per rank, the last
    ones shorter or empty. Raises ``ShardingError`` for an uneven strided
    shard, which no JAX layout produces.
    """
    result = {}
    for device, coord in enumerate(mesh_coords(tuple(mesh_shape))):
        bounds = [[0, n] for n in shape]
        for mesh_dim, p in enumerate(placements):
            if isinstance(p, Shard):
                start, stop = bounds[p.dim]
                chunk = -(-(stop - start) // mesh_shape[mesh_dim])
                lo = min(start + coord[mesh_dim] * chunk, stop)
                bounds[p.dim] = [lo, min(lo + chunk, stop)]
            elif not hasattr(p, "is_replicate") or not (p.is_replicate() or p.is_partial()):
                raise IndivisibleError(
                    f"Cannot describe uneven placement {p} of shape {shape}.",
                    dim=getattr(p, "dim", -1), size=shape[getattr(p, "dim", 0)] if shape else 0,
                    axes=(), shards=mesh_shape[mesh_dim])
        result[device] = tuple(tuple(b) for b in bounds)
    return result
