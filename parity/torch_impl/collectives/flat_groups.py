"""The flattened process group of several mesh axes, created once per mesh,
set of axes and runtime generation, and registered in the root mesh's
flattened-mesh registry only while one redistribute runs (``registered``).

DTensor merges a redistribute's per-axis collectives into one when it finds a
flattened mesh of those axes in the root mesh's registry; torch asserts when
it finds one for a redistribute that involves a strided shard, so the
flattened mesh is kept out of the registry except for the duration of one
redistribute that holds none (``gather``, ``redistribute``).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import Any

import torch
from torch.distributed.device_mesh import DeviceMesh as TorchMesh
from torch.distributed.tensor import DTensor, Replicate

from parity.torch_impl.collectives.blocks import Group
from parity.torch_impl.layouts.specs import blocks_of, has_strided
from parity.torch_impl.runtime import state
from parity.torch_impl.runtime.torch_compat import flatten_registry, flattened_mesh, tree_flatten

# (id(mesh), mesh dims) -> (mesh, group, name): holding the mesh keeps its id
# unique; name is the flattened mesh's name (None for a single mesh dim).
# One process-group generation's groups (``state.per_generation`` empties
# them): a torch mesh object may outlive its process groups (a caller's mesh
# reused across simulate() blocks), and a flattened group of the old
# generation no longer resolves ("Could not resolve the process group
# registered under the name ...").
_entries: dict[tuple, tuple[TorchMesh, Group, str | None]] = {}
state.per_generation(_entries.clear)


def group(mesh: TorchMesh, mesh_dims: tuple[int, ...]) -> Group:
    """The group of ``mesh_dims`` of ``mesh``, flattened into one when there
    are several (created on first use: every rank gathers in the same order,
    so every rank creates it at the same point)."""
    return entry(mesh, mesh_dims)[1]


def entry(mesh: TorchMesh, mesh_dims: tuple[int, ...]) -> tuple[TorchMesh, Group, str | None]:
    direct = state.current().mode == "multiprocess"  # a new generation empties _entries
    key = (id(mesh), mesh_dims)
    found = _entries.get(key)
    if found is not None and found[0] is mesh:
        return found
    if len(mesh_dims) == 1:
        group_mesh, group_dim, name = mesh, mesh_dims[0], None
    else:
        names = mesh.mesh_dim_names
        if not names:  # torch slices a mesh by its axis names (RuntimeError, as torch's)
            raise RuntimeError(
                f"Mesh dims {mesh_dims} of {mesh} cannot be flattened into one group: "
                "the mesh has no axis names; name them (init_device_mesh(..., "
                "mesh_dim_names=(...)) or parity.DeviceMesh).")
        picked = tuple(names[m] for m in mesh_dims)
        name = "parity_flat:" + ",".join(picked)
        group_mesh, group_dim = flattened_mesh(mesh, picked, name), 0
        registry = flatten_registry(mesh)
        if registry is not None and registry.get(name) is group_mesh:
            del registry[name]  # see the module docstring
    entry = (mesh, Group(group_mesh, group_dim, direct), name)
    _entries[key] = entry
    return entry


@contextlib.contextmanager
def registered(mesh: TorchMesh, mesh_dims: tuple[int, ...]) -> Iterator[None]:
    """The flattened mesh of ``mesh_dims`` in the root mesh's registry while
    the block runs (nothing when this torch has no registry)."""
    _, group, name = entry(mesh, mesh_dims)
    registry = flatten_registry(mesh)
    if registry is None or name is None or name in registry:
        yield
        return
    registry[name] = group.mesh
    try:
        yield
    finally:
        if registry.get(name) is group.mesh:
            del registry[name]


@contextlib.contextmanager
def every_registered(mesh: TorchMesh) -> Iterator[None]:
    """The flattened mesh of every set of two or more of ``mesh``'s dims in
    its registry while the block runs, so that DTensor merges whichever
    per-axis collectives its own plan holds. The caller makes sure no
    strided shard is involved (torch asserts on one)."""
    with contextlib.ExitStack() as stack:
        for n in range(2, mesh.ndim + 1):
            for dims in itertools.combinations(range(mesh.ndim), n):
                stack.enter_context(registered(mesh, dims))
        yield


def merge_needed(mesh: TorchMesh, operands: Any) -> bool:
    """Whether a call in which DTensor lays its ``operands`` (any pytree) out
    by itself -- an op run on DTensor's own strategy, which gathers or
    completes one mesh axis at a time and logs "N sequential all_gather
    operations" unless it finds a flattened mesh -- should run under
    ``every_registered(mesh)``: when some operand is split or pending on two
    or more mesh dims and none holds a strided shard or is unevenly sharded
    (DTensor's all_gather over a flattened mesh corrupts uneven nested
    blocks: pytorch#194457); never while dynamo traces (no flattened mesh
    can be created under fake tensors)."""
    if mesh.ndim < 2 or torch.compiler.is_dynamo_compiling():
        return False
    several = False
    for value in tree_flatten(operands)[0]:
        if isinstance(value, DTensor):
            if has_strided(value) or not blocks_of(value).even:
                return False
            several = several or sum(not isinstance(p, Replicate) for p in value.placements) > 1
    return several


def merging(mesh: TorchMesh, operands: Any) -> contextlib.AbstractContextManager:
    """``every_registered(mesh)`` where ``merge_needed(mesh, operands)``,
    otherwise a block that does nothing."""
    return every_registered(mesh) if merge_needed(mesh, operands) else contextlib.nullcontext()
