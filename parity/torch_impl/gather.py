"""The whole array on every rank with one collective.

A DTensor whose dims are split over several mesh axes would take one
all_gather per mesh axis through DTensor's ``redistribute`` (torch says so:
"2 sequential all_gather operations will be performed ... flatten mesh
dimensions"). Here every rank's block goes through a single all_gather over
the flattened group of the mesh axes that shard anything (torch's
``DeviceMesh._flatten``, created once per mesh and set of axes), and the
gathered blocks are put in place with one reshape and permute: block index
on a dim split over ``(a, b)`` is ``coord[a] * size[b] + coord[b]``, so the
gathered buffer, viewed as (sizes of those mesh axes in mesh order) +
block shape, needs only its axes reordered to (a, b, block dim) per dim.
"""

from __future__ import annotations

import math

import torch
from torch.distributed.device_mesh import DeviceMesh as TorchMesh
from torch.distributed.tensor import DTensor

from parity.torch_impl import state
from parity.torch_impl.group_ops import Group, all_gather_block
from parity.torch_impl.meshes import mesh_axis_names
from parity.torch_impl.tensors import spec_of

# (id(mesh), mesh dims) -> (mesh, group): holding the mesh keeps its id unique.
_groups: dict[tuple, tuple[TorchMesh, Group]] = {}


def _group(mesh: TorchMesh, mesh_dims: tuple[int, ...]) -> Group:
    """The group of ``mesh_dims`` of ``mesh``, flattened into one when there
    are several (created on first use: every rank gathers in the same order,
    so every rank creates it at the same point)."""
    key = (id(mesh), mesh_dims)
    found = _groups.get(key)
    if found is not None and found[0] is mesh:
        return found[1]
    direct = state.mode() == "multiprocess"
    if len(mesh_dims) == 1:
        group = Group(mesh, mesh_dims[0], direct)
    else:
        picked = tuple(mesh_axis_names(mesh)[m] for m in mesh_dims)
        group = Group(mesh[picked]._flatten("parity_flat:" + ",".join(picked)), 0, direct)
    _groups[key] = (mesh, group)
    return group


def sharding_mesh_dims(x: DTensor) -> tuple[int, ...]:
    """The mesh dims that split some dim of ``x``, in mesh order."""
    spec, _ = spec_of(x)
    names = mesh_axis_names(x.device_mesh)
    return tuple(sorted(names.index(a) for entry in spec for a in entry))


def flatten_for(x: DTensor) -> None:
    """Create the flattened group of the mesh dims that shard ``x``, so that
    DTensor's own ``redistribute`` to replicated merges its all_gathers into
    one where it can (torch looks flattened meshes up by layout)."""
    dims = sharding_mesh_dims(x)
    if len(dims) > 1:
        _group(x.device_mesh, dims)


def evenly_sharded(x: DTensor) -> bool:
    """Whether every dim of ``x`` divides by its shard count (parity's own
    layouts always do; a raw DTensor may not)."""
    spec, _ = spec_of(x)
    sizes = dict(zip(mesh_axis_names(x.device_mesh), x.device_mesh.shape))
    return all(n % math.prod(sizes[a] for a in entry) == 0 for n, entry in zip(x.shape, spec))


def gather_whole(x: DTensor) -> torch.Tensor:
    """The global array of ``x`` (no pending reduction, evenly sharded) as a
    plain tensor on every rank (a ``LocalTensor`` of equal blocks when
    simulated), through at most one all_gather."""
    spec, _ = spec_of(x)
    mesh = x.device_mesh
    names = mesh_axis_names(mesh)
    mesh_dims = sharding_mesh_dims(x)
    local = x._local_tensor.contiguous()
    if not mesh_dims:
        return local
    gathered = all_gather_block(local.view(-1), 0, _group(mesh, mesh_dims))
    gathered = gathered.view(*(mesh.shape[m] for m in mesh_dims), *local.shape)
    order = []
    for dim, entry in enumerate(spec):
        order += [mesh_dims.index(names.index(a)) for a in entry]
        order.append(len(mesh_dims) + dim)
    return gathered.permute(order).reshape(x.shape)
