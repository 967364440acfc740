"""When two torch ``DeviceMesh`` objects are the same mesh.

torch's ``DeviceMesh.__eq__`` (2.13) compares the *root* mesh's whole rank
map and the CuTe layout of the slice: FSDP2's 2-D mesh ``("dp", "tp")``
sliced to ``["tp"]`` and a 1-D ``("tp",)`` mesh over the same two ranks
(``init_device_mesh``, or parity's own mesh for the same devices) compare
unequal, and DTensor refuses an op across them ("cross-mesh operation").
For JAX a mesh is its devices and axis names: two meshes with the same
device type, axis names and rank array are one mesh (``same_mesh``). Where
they differ, ``differences`` says which field and how, for the error
message. A mesh that is a *slice* of another (fewer axes) is not the same
mesh but lives in it: ``submesh``.
"""

from __future__ import annotations

from typing import Any


def _ranks(mesh: Any) -> list:
    """This rank's view of the mesh's rank array, as nested lists."""
    return mesh.mesh.tolist()


def _names(mesh: Any) -> tuple[str, ...] | None:
    names = mesh.mesh_dim_names
    return tuple(names) if names is not None else None


def differences(first: Any, second: Any) -> tuple[str, ...]:
    """What differs between two torch meshes that JAX would see: device
    type, axis names, shape, ranks (empty when they are the same mesh).
    Fields torch compares besides (the root mesh a slice came from, its
    layout) are not differences."""
    if first is second:
        return ()
    found = []
    if first.device_type != second.device_type:
        found.append(f"device type {first.device_type!r} vs {second.device_type!r}")
    if _names(first) != _names(second):
        found.append(f"axis names {_names(first)} vs {_names(second)}")
    if tuple(first.mesh.shape) != tuple(second.mesh.shape):
        found.append(f"shape {tuple(first.mesh.shape)} vs {tuple(second.mesh.shape)}")
    elif _ranks(first) != _ranks(second):
        found.append(f"ranks {_ranks(first)} vs {_ranks(second)}")
    return tuple(found)


def same_mesh(first: Any, second: Any) -> bool:
    """Whether two torch meshes are one mesh for JAX (see the module
    docstring): ``is``, torch's ``==``, or no ``differences``."""
    return first is second or first == second or not differences(first, second)


def rehome(t: Any, mesh: Any) -> Any:
    """The DTensor ``t`` on ``mesh``, a mesh ``same_mesh`` as its own (the
    same local block and placements) or of which its own is a slice
    (``submesh.lift``: replicated on the axes its mesh lacks);
    differentiable, no collective.

    Raises ``ValueError`` when ``t``'s mesh is neither (a bug in the
    caller: ``same_mesh`` / ``submesh.slice_axes`` decide first).
    """
    from torch.distributed.tensor import DTensor

    from parity.torch_impl.layouts import submesh
    from parity.torch_impl.layouts.tensors import raw_to_local

    if t.device_mesh is mesh:
        return t
    if not same_mesh(t.device_mesh, mesh):
        axes = submesh.slice_axes(mesh, t.device_mesh)
        if axes is not None:
            return submesh.lift(t, mesh, axes)
        raise ValueError(f"rehome: {t.device_mesh} and {mesh} are different meshes: "
                         f"{'; '.join(differences(t.device_mesh, mesh))}.")
    return DTensor.from_local(raw_to_local(t), mesh, t.placements, run_check=False,
                              shape=t.shape, stride=t.stride())
