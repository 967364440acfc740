"""A torch ``DeviceMesh`` that carries its parity mesh's axis types.

DTensor keeps no axis types, and its sharding propagation caches an op's
output spec by the operands' specs, comparing meshes by value (ranks, names,
device type): an op on an Explicit mesh could then come back on an equal
Auto mesh object cached earlier, and lose its type. A mesh whose axes are
not all Auto is therefore built as ``TypedTorchMesh``: equal only to a mesh
with the same axis types (and hashed with them), so every cache keeps the
two apart; ``to_parity_mesh`` reads the types back from it.
"""

from __future__ import annotations

from typing import Any

from torch.distributed.device_mesh import DeviceMesh as TorchMesh

from parity.torch_impl.runtime.torch_compat import register_opaque_like_device_mesh


class TypedTorchMesh(TorchMesh):
    """A torch ``DeviceMesh`` with ``parity_axis_types`` (the names of the
    parity ``AxisType`` of each axis) in its value."""

    def __init__(self, *args: Any, axis_types: tuple[str, ...], **kwargs: Any) -> None:
        self.parity_axis_types = tuple(axis_types)
        super().__init__(*args, **kwargs)

    def _hash_key(self) -> tuple[Any, ...]:
        return (super()._hash_key(), self.parity_axis_types)

    def __hash__(self) -> int:
        return super().__hash__()

    def __eq__(self, other: object) -> bool:
        return (super().__eq__(other)
                and getattr(other, "parity_axis_types", None) == self.parity_axis_types)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)


# Under torch.compile the mesh is traced as DeviceMesh is (an opaque object
# whose stand-in carries ``parity_axis_types``; guarded on, so a function
# traced on an Explicit mesh recompiles for an Auto one of the same ranks).
register_opaque_like_device_mesh(TypedTorchMesh, ("parity_axis_types",))


def axis_types_of(torch_mesh: Any) -> tuple[str, ...] | None:
    """The axis type names a ``TypedTorchMesh`` carries; ``None`` for any
    other mesh (all Auto). Under ``torch.compile`` a plain mesh's stand-in
    has no such member (dynamo refuses the lookup): the type is asked first."""
    return torch_mesh.parity_axis_types if isinstance(torch_mesh, TypedTorchMesh) else None
