"""Translation between parity specs and DTensor placements.

A spec gives, per tensor dim, the mesh axes that split it, major first (JAX's
``PartitionSpec``). DTensor gives, per *mesh* dim, what that mesh dim does,
and applies them left to right (mesh dim 0 splits first, so it is major):

| spec entry of dim d          | placements                                     |
|------------------------------|------------------------------------------------|
| ``()``                       | ``Replicate()`` on every mesh dim not used     |
| ``("a",)``                   | ``Shard(d)`` on mesh dim of ``a``              |
| ``("a", "b")``, a before b   | ``Shard(d)`` on ``a`` and on ``b``             |
| ``("b", "a")``, a before b   | ``_StridedShard(d, split_factor=size(b))`` on  |
|                              | ``a``, ``Shard(d)`` on ``b``                   |
| pending sum over ``a``       | ``Partial("sum")`` on ``a`` (never returned)   |

The split factor of a mesh dim is the product of the sizes of the axes that
are more major for that tensor dim (earlier in the spec entry) but come later
in the mesh: DTensor's own rule (``DTensorSpec._convert_shard_order_to_StridedShard``).
With it, each block lands on the device JAX puts it on: on a (2, 4) mesh
``("data", "model")``, 16 elements over ``("model", "data")`` put [4, 6) on
device 1 in both.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor.placement_types import Placement

from parity.errors import LayoutError
from parity.layout import Spec
from parity.torch_impl.runtime.torch_compat import StridedShard


def to_placements(
    spec: Spec, mesh_shape: Sequence[int], axis_names: Sequence[str]
) -> tuple[Placement, ...]:
    """DTensor placements (one per mesh dim) for ``spec``.

    Raises ``LayoutError`` for a name not in ``axis_names`` or used twice.
    """
    axis_names = tuple(axis_names)
    placements: list[Placement] = [Replicate() for _ in axis_names]
    used: set[str] = set()
    for dim, names in enumerate(spec):
        mesh_dims = []
        for name in names:
            if name not in axis_names:
                raise LayoutError(
                    f"Spec {spec} names mesh axis {name!r} on dim {dim}; the mesh "
                    f"axes are {axis_names}.",
                    what="spec", value=spec,
                )
            if name in used:
                raise LayoutError(f"Mesh axis {name!r} is used twice in spec {spec}.", what="spec", value=spec)
            used.add(name)
            mesh_dims.append(axis_names.index(name))
        for order, mesh_dim in enumerate(mesh_dims):
            split = math.prod(  # a list: dynamo cannot trace prod(generator)
                [mesh_shape[m] for m in mesh_dims[:order] if m > mesh_dim]
            )
            placements[mesh_dim] = (
                Shard(dim) if split == 1 else StridedShard(dim, split_factor=split)
            )
    return tuple(placements)


def to_spec(
    placements: Sequence[Placement],
    ndim: int,
    mesh_shape: Sequence[int],
    axis_names: Sequence[str],
) -> tuple[Spec, tuple[str, ...]]:
    """Inverse of ``to_placements``: ``(spec, pending_axes)``.

    ``pending_axes`` names the mesh axes holding a ``Partial``. Raises
    ``LayoutError`` for a strided shard no spec produces.
    """
    by_dim: dict[int, list[int]] = {}
    pending = []
    for mesh_dim, p in enumerate(placements):
        if isinstance(p, (Shard, StridedShard)):  # a strided shard is shard-like
            by_dim.setdefault(p.dim % ndim if ndim else p.dim, []).append(mesh_dim)
        elif isinstance(p, Partial):
            pending.append(axis_names[mesh_dim])
    spec: list[tuple[str, ...]] = [() for _ in range(ndim)]
    for dim, mesh_dims in by_dim.items():
        for order in itertools.permutations(mesh_dims):
            trial: list[tuple[str, ...]] = [() for _ in range(ndim)]
            trial[dim] = tuple(axis_names[m] for m in order)
            expected = to_placements(tuple(trial), mesh_shape, axis_names)
            if all(_same_shard(expected[m], placements[m]) for m in mesh_dims):
                spec[dim] = trial[dim]
                break
        else:
            raise LayoutError(
                f"Placements {tuple(placements)} shard dim {dim} in an order no "
                "PartitionSpec describes.",
                what="placements", value=tuple(placements),
            )
    return tuple(spec), tuple(pending)


def _same_shard(a: Placement, b: Placement) -> bool:
    if isinstance(a, StridedShard) or isinstance(b, StridedShard):
        # Placement equality (same class, dim and split factor), not
        # ``.split_factor``: dynamo reads only the members torch registers for
        # an opaque placement (``dim``, ``__eq__``), so tracing the property
        # raised "Dynamo does not know how to trace method `__get__`".
        return a == b
    return isinstance(a, Shard) and isinstance(b, Shard) and a.dim == b.dim
