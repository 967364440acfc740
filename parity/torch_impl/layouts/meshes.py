"""parity meshes <-> torch ``DeviceMesh``es, and their process groups.

A parity mesh names its devices (``"cpu:3"`` is torch rank 3); the torch
mesh built for it is cached per process-group generation, so a mesh of an
earlier ``simulate()`` block is never handed out again.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.distributed.device_mesh import DeviceMesh as TorchMesh

from parity.errors import ParityError
from parity.mesh import DeviceMesh
from parity.torch_impl.layouts.specs import mesh_axis_names
from parity.torch_impl.runtime import state
from parity.torch_impl.runtime.devices import device_rank

__all__ = ["mesh_axis_names", "to_parity_mesh", "to_torch_mesh"]  # mesh_axis_names: specs's

# Both caches hold one runtime generation's meshes: a new generation empties
# them (``state.per_generation``; ``state.current()`` first).
_dynamo_compiling = torch.compiler.is_dynamo_compiling  # False eagerly; dynamo folds it to True
_mesh_cache: dict[DeviceMesh, TorchMesh] = {}
# id(torch mesh) -> (torch mesh, parity mesh); holding the torch mesh keeps its id unique.
# Bounded: a program that builds torch meshes in a loop keeps the newest
# PARITY_MESH_LIMIT (the oldest is forgotten first; its parity mesh is
# rebuilt if asked again -- a pure value, so nothing changes but the cost).
_parity_mesh_cache: dict[int, tuple[TorchMesh, DeviceMesh]] = {}
PARITY_MESH_LIMIT = 64
state.per_generation(_mesh_cache.clear)
state.per_generation(_parity_mesh_cache.clear)


def _remember_parity_mesh(torch_mesh: TorchMesh, mesh: DeviceMesh) -> None:
    """Hold ``torch_mesh -> mesh`` (under ``state.lock``)."""
    while len(_parity_mesh_cache) >= PARITY_MESH_LIMIT:
        del _parity_mesh_cache[next(iter(_parity_mesh_cache))]
    _parity_mesh_cache[id(torch_mesh)] = (torch_mesh, mesh)


def to_torch_mesh(mesh: DeviceMesh) -> TorchMesh:
    """The torch ``DeviceMesh`` for a parity mesh (cached per process group).

    Rank of ``mesh.devices.flat[i]`` comes from its name (``"cpu:i"``).
    Raises ``ParityError`` when no simulated or real process group runs, and
    for a device name that is not a rank of the job.
    """
    now = state.current()
    if now.mode == "plain":
        raise ParityError(
            "The torch backend has no ranks: use torch_impl.simulate(n) for "
            "simulated devices or torch_impl.initialize() under torchrun."
        )
    # A hit needs no lock (a dict read; the lock guards the fill) -- and
    # dynamo cannot enter an RLock, so a compiled function finds here the
    # mesh its inputs were distributed on, eagerly.
    cached = _mesh_cache.get(mesh)
    if cached is not None:
        return cached
    if _dynamo_compiling():
        # dynamo looks a user object up in a dict by identity: compare
        # values (an equal parity mesh built elsewhere).
        for key, held in _mesh_cache.items():
            if key == mesh:
                return held
    with state.lock:
        cached = _mesh_cache.get(mesh)
        if cached is None:
            ranks = np.vectorize(device_rank, otypes=[np.int64])(mesh.devices)
            if all(t.name == "Auto" for t in mesh.axis_types):
                cached = TorchMesh(now.device_type, torch.from_numpy(ranks),
                                   mesh_dim_names=mesh.axis_names)
            else:  # Explicit/Manual axes: a mesh no Auto one equals
                from parity.torch_impl.layouts.typed_mesh import TypedTorchMesh

                cached = TypedTorchMesh(now.device_type, torch.from_numpy(ranks),
                                        mesh_dim_names=mesh.axis_names,
                                        axis_types=tuple(t.name for t in mesh.axis_types))
            _mesh_cache[mesh] = cached
            _remember_parity_mesh(cached, mesh)
    return cached


def to_parity_mesh(torch_mesh: TorchMesh) -> DeviceMesh:
    """The parity mesh of a torch ``DeviceMesh`` (axis names ``dim0``... if unnamed)."""
    if _dynamo_compiling():
        # Dynamo has no id() of a mesh read off a traced intermediate
        # DTensor, and ``is`` between two of its mesh variables is not
        # stable; it compares meshes by value (equal torch meshes: same
        # ranks, axis names and device type, so the same parity mesh). A
        # mesh parity never met eagerly is converted outside the trace.
        for held, mesh in _parity_mesh_cache.values():
            if held == torch_mesh:
                return mesh
        return _to_parity_mesh_untraced(torch_mesh)
    state.current()  # this generation's caches (a new one empties them)
    cached = _parity_mesh_cache.get(id(torch_mesh))
    if cached is not None and cached[0] is torch_mesh:
        return cached[1]
    names = mesh_axis_names(torch_mesh)
    kind = state.parity_device_kind(torch_mesh.device_type)
    ranks = torch_mesh.mesh.cpu().numpy()
    devices = np.array([f"{kind}:{r}" for r in ranks.flat], dtype=object).reshape(ranks.shape)
    mesh = DeviceMesh(tuple(torch_mesh.mesh.shape), tuple(names), devices,
                      getattr(torch_mesh, "parity_axis_types", None))
    with state.lock:
        _remember_parity_mesh(torch_mesh, mesh)
        # the way back gives the user's mesh (an FSDP2 submesh, an
        # init_device_mesh) rather than a new one torch compares unequal
        _mesh_cache.setdefault(mesh, torch_mesh)
    return mesh


@torch.compiler.assume_constant_result
def _to_parity_mesh_untraced(torch_mesh) -> DeviceMesh:
    """``to_parity_mesh`` for dynamo: called with the real mesh while
    dynamo traces, its result a constant of the graph. torch 2.13 makes a
    ``DeviceMesh`` an opaque object in dynamo: reading ``.mesh`` off one
    taken from a traced intermediate DTensor raises ``UnsafeScriptObjectError:
    Unexpected type in sourceless builder``, and ``is`` between two of its
    mesh variables is not stable. Here the mesh is the real object
    (unwrapped from dynamo's ``FakeScriptObject`` where it is one). The
    result is a constant without a source: where dynamo guards on one of
    its attributes, torch 2.13 fails the guard it has just built ("Guard
    failed on the same frame it was created"), so meshes met eagerly are
    taken from the cache first (``to_parity_mesh``)."""
    return to_parity_mesh(getattr(torch_mesh, "real_obj", torch_mesh))
