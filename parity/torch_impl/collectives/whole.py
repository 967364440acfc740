"""The whole array on every rank with one collective.

A DTensor whose dims are split over several mesh axes would take one
all_gather per mesh axis through DTensor's ``redistribute`` (torch says so:
"2 sequential all_gather operations will be performed ... flatten mesh
dimensions"). Here every rank's block goes through a single all_gather over
the flattened group of the mesh axes that shard anything (torch's
``DeviceMesh._flatten``, created once per mesh and set of axes:
``flat_groups``), and the gathered blocks are put in place with one reshape
and permute: block index on a dim split over ``(a, b)`` is ``coord[a] *
size[b] + coord[b]``, so the gathered buffer, viewed as (sizes of those mesh
axes in mesh order) + block shape, needs only its axes reordered to (a, b,
block dim) per dim.
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor, Shard

from parity.torch_impl.collectives import flat_groups
from parity.torch_impl.collectives.blocks import all_gather_block
from parity.torch_impl.layouts.specs import Blocks
from parity.torch_impl.runtime.torch_compat import StridedShard


def sharding_mesh_dims(x: DTensor) -> tuple[int, ...]:
    """The mesh dims that split some dim of ``x``, in mesh order (those
    holding a shard, strided or not: the mesh axes its spec names)."""
    return tuple(m for m, p in enumerate(x.placements) if isinstance(p, (Shard, StridedShard)))


def gather_whole(x: DTensor, blocks: Blocks) -> torch.Tensor:
    """The global array of ``x`` (no pending reduction; ``blocks``: its
    layout, ``specs.blocks_of(x)``) as a plain tensor on every rank (a
    ``LocalTensor`` of equal blocks when simulated), through at most one
    all_gather; an unevenly sharded ``x`` (a raw DTensor's) through
    DTensor's ``full_tensor``. Raises ``LayoutError`` for strided shards no
    spec describes."""
    mesh_dims = sharding_mesh_dims(x)
    local = x._local_tensor.contiguous()
    if not mesh_dims:
        return local
    mesh = x.device_mesh
    spec, names = blocks.described(), blocks.axis_names
    if not blocks.even:
        return x.full_tensor()
    group = flat_groups.group(mesh, mesh_dims)
    gathered = all_gather_block(local.view(-1), 0, group)
    gathered = gathered.view(*(mesh.shape[m] for m in mesh_dims), *local.shape)
    order = []
    for dim, entry in enumerate(spec):
        order += [mesh_dims.index(names.index(a)) for a in entry]
        order.append(len(mesh_dims) + dim)
    return gathered.permute(order).reshape(x.shape)
