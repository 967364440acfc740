"""Specs of DTensors, cached: the per-op bookkeeping must stay cheap.

A spec is JAX's ``PartitionSpec`` as parity writes it: one tuple of mesh-axis
names per tensor dim, ``()`` for replicated. ``spec_and_pending(x)`` reads it
from a DTensor; ``placements_for(spec, mesh)`` gives the DTensor placements
back (strided shards included, see ``parity.torch_impl.placements``).
"""

from __future__ import annotations

import functools

from torch.distributed.tensor import DTensor, Partial, Replicate
from torch.distributed.tensor.placement_types import _StridedShard

from parity import sharding_rules as R
from parity.errors import LayoutError
from parity.layout import Spec
from parity.torch_impl import partial_sums
from parity.torch_impl.placements import to_placements
from parity.torch_impl.torch_compat import traced_through
from parity.torch_impl.meshes import mesh_axis_names
from parity.torch_impl.tensors import spec_of as spec_of_dtensor


@traced_through  # pure: dynamo may trace the function itself
@functools.lru_cache(maxsize=8192)
def _to_placements(spec, mesh_shape, names):
    return to_placements(spec, mesh_shape, names)


spec_and_pending = spec_of_dtensor  # ``(spec, pending_axes)`` of a DTensor


def spec_of(x: DTensor) -> Spec:
    return spec_of_dtensor(x)[0]


def placements_for(spec: Spec, mesh) -> tuple:
    """DTensor placements of ``spec`` on a torch ``DeviceMesh``."""
    return _to_placements(tuple(tuple(n) for n in spec), tuple(mesh.shape), mesh_axis_names(mesh))


def has_partial(x: DTensor) -> bool:
    return any(isinstance(p, Partial) for p in x.placements)


def axis_sizes(mesh) -> dict[str, int]:
    return dict(zip(mesh_axis_names(mesh), mesh.shape))


# The pure spec algebra (shared with the rules): one implementation.
shard_count = R.shard_count
fit_to_shape = R.fit_to_shape
dedupe = R.dedupe
replicate_dims = R.replicate_dims


def redistribute_to(x: DTensor, spec: Spec, *, guard: bool = False) -> DTensor:
    """``x`` laid out as ``spec`` through DTensor's differentiable
    ``redistribute`` (so autograd records it and backward runs the mirror
    collective). Pending reductions are completed on the way.

    ``guard`` redistributes even when nothing moves: the autograd node then
    brings the gradient back to ``x``'s own placement.
    """
    mesh = x.device_mesh
    target = placements_for(spec, mesh)
    current = tuple(x.placements)
    if current == target:
        return x.redistribute(mesh, target) if guard else x
    if any(isinstance(p, Partial) for p in current):
        # Partial -> strided shard is not implemented by DTensor: reduce first.
        if any(isinstance(p, Partial) and not isinstance(t, (Replicate,)) and
               type(t).__name__ == "_StridedShard" for p, t in zip(current, target)):
            x = x.redistribute(mesh, [Replicate() if isinstance(p, Partial) else p
                                      for p in current])
    out = partial_sums.merged(x, target)  # pending sums over several axes: one collective
    if any(isinstance(p, Partial) and p.reduce_op != "sum" for p in current):
        # A pending mean (a mean over a sharded dim): DTensor's backward
        # cannot turn a pending-sum gradient into Partial("avg") ("from one
        # partial type (P(sum)) to another (P(avg)) is unsupported"); this
        # same-placement node lays the gradient out as ``target`` first.
        out = out.redistribute(mesh, target)
    return out


def has_strided(x: DTensor) -> bool:
    """Whether a mesh dim of ``x`` holds a strided shard (a dim split over
    several mesh axes, or a reshape's result, which may be undescribable)."""
    return any(type(p) is _StridedShard for p in x.placements)


def describable(x: DTensor) -> bool:
    """Whether ``x``'s placements are a JAX ``PartitionSpec`` (DTensor can
    make strided shards that none describes, e.g. after a reshape)."""
    try:
        spec_and_pending(x)
    except LayoutError:  # to_spec: an order no PartitionSpec describes
        return False
    return True


def without_strided(x: DTensor) -> DTensor:
    """``x`` with every strided-shard mesh dim gathered (replicated)."""
    if not has_strided(x):
        return x
    return x.redistribute(x.device_mesh, [
        Replicate() if type(p).__name__ == "_StridedShard" else p for p in x.placements
    ])
