"""Specs of DTensors and the way back: the one spec <-> placements
conversion, its table (``to_placements`` / ``to_spec``, pure) and its
cached front on a torch mesh (it runs on every op under ``jax_semantics``).

A spec is JAX's ``PartitionSpec`` as parity writes it: one tuple of mesh-axis
names per tensor dim, ``()`` for replicated. ``spec_of(x)`` reads it from a
DTensor (``spec_and_pending(x)`` also names the mesh axes of a pending
reduction; ``spec_of_placements`` from metadata alone);
``placements_for(spec, mesh)`` gives the DTensor placements back (strided
shards included).

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

Cache policy: the two caches below are keyed by values only (placements,
shapes, axis names), never by a mesh or a process group, so they hold across
``simulate()`` blocks; what holds a torch mesh is cached per runtime
generation (``meshes``, ``tensors.result_spec``).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Sequence

import torch
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor.placement_types import Placement

from parity.arg_checks import shown
from parity.errors import LayoutError
from parity.layout import Spec
from parity.torch_impl.runtime.torch_compat import MaskPartial, StridedShard, traced_through


# --- the table (pure) ----------------------------------------------------------


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


# --- its cached front on a torch mesh --------------------------------------------



def mesh_axis_names(torch_mesh) -> tuple[str, ...]:
    """The axis names of a torch ``DeviceMesh`` (``dim0``, ``dim1``... if
    unnamed): what a spec names. Here, beside the conversions that read it
    on every op (``meshes`` re-exports it). Raises ``LayoutError`` naming
    the value when it is not a torch ``DeviceMesh`` (``to_parity_mesh``'s
    check: a try costs nothing on the way through)."""
    try:
        names = torch_mesh.mesh_dim_names
    except AttributeError:
        raise LayoutError(
            f"to_parity_mesh: mesh={shown(torch_mesh)} is not a torch DeviceMesh. Fix: "
            "pass a torch DeviceMesh (torch_impl.to_torch_mesh(parity_mesh) makes one).",
            what="mesh", value=torch_mesh) from None
    return tuple(names) if names else tuple(f"dim{i}" for i in range(torch_mesh.ndim))


# Speed: both conversions run several times per op; a hit costs a dict
# lookup where the table costs a loop over the mesh dims (and, for
# ``to_spec``, over permutations of them).
@traced_through  # pure: dynamo may trace the function itself
@functools.lru_cache(maxsize=8192)
def _placements(spec: Spec, mesh_shape: tuple, names: tuple) -> tuple:
    return to_placements(spec, mesh_shape, names)


@traced_through  # pure: dynamo may trace the function itself
@functools.lru_cache(maxsize=8192)
def _spec(placements: tuple, ndim: int, mesh_shape: tuple, names: tuple):
    return to_spec(placements, ndim, mesh_shape, names)


# Speed under torch.compile: dynamo traced both tables op by op (to_spec
# tries permutations), about a fifth of the instructions it traced for the
# tensor-parallel MLP's forward (13.7k -> 10.8k, benchmarks/compiled_step's
# first-compile MLP). Their arguments are constants while dynamo traces, so
# the conversion runs outside the trace (``assume_constant_result``: called
# with the real values, its answer a constant of the graph). A conversion
# that raises is traced as before, so the error is the eager one.
_dynamo_compiling = torch.compiler.is_dynamo_compiling


@torch.compiler.assume_constant_result
def _placements_untraced(spec: Spec, mesh) -> tuple | None:
    """``placements_for`` for dynamo (the mesh unwrapped from dynamo's
    ``FakeScriptObject``); ``None`` where the conversion raises."""
    try:
        return placements_for(spec, getattr(mesh, "real_obj", mesh))
    except LayoutError:
        return None


@torch.compiler.assume_constant_result
def _spec_untraced(placements: tuple, ndim: int, mesh):
    """``spec_and_pending`` for dynamo, of a DTensor's placements and rank;
    ``None`` where the conversion raises."""
    mesh = getattr(mesh, "real_obj", mesh)
    try:
        return _spec(placements, ndim, tuple(mesh.shape), mesh_axis_names(mesh))
    except LayoutError:
        return None


def placements_for(spec: Spec, mesh) -> tuple:
    """DTensor placements of ``spec`` on a torch ``DeviceMesh``.

    Raises ``LayoutError`` for a mesh axis the mesh lacks or one used twice.
    """
    if _dynamo_compiling():
        found = _placements_untraced(spec, mesh)
        if found is not None:
            return found
    return _placements(tuple(tuple(n) for n in spec), tuple(mesh.shape), mesh_axis_names(mesh))


def spec_and_pending(x: DTensor) -> tuple[Spec, tuple[str, ...]]:
    """``(spec, pending_axes)`` of a DTensor: ``pending_axes`` names the mesh
    axes holding a ``Partial``. Raises ``LayoutError`` for strided shards no
    spec describes (``blocks_of`` says so without raising)."""
    return _spec_and_pending(tuple(x.placements), x.ndim, x.device_mesh)


def _spec_and_pending(placements: tuple, ndim: int, mesh) -> tuple[Spec, tuple[str, ...]]:
    if _dynamo_compiling():
        found = _spec_untraced(placements, ndim, mesh)
        if found is not None:
            return found
    names = mesh_axis_names(mesh)
    return _spec(placements, ndim, tuple(mesh.shape), names)


def spec_of(x: DTensor) -> Spec:
    """The spec of a DTensor (its pending reductions aside)."""
    return spec_and_pending(x)[0]


def spec_of_placements(placements: tuple, ndim: int, mesh) -> Spec:
    """The spec of an ``ndim``-d DTensor with ``placements`` on the torch
    ``mesh`` (its pending reductions aside): ``spec_of`` from metadata.
    Raises ``LayoutError`` as ``spec_and_pending``."""
    return _spec_and_pending(tuple(placements), ndim, mesh)[0]


def has_partial(x: DTensor) -> bool:
    """Whether a mesh dim of ``x`` holds a pending reduction (``Partial``)."""
    # loops, not any(generator): dynamo traces a generator through its
    # polyfills, several times the instructions (this runs per operand)
    for p in x.placements:
        if isinstance(p, Partial):
            return True
    return False


def masked_partial(placements: Sequence[Placement]) -> bool:
    """Whether ``placements`` hold DTensor's masked partial sum
    (``_MaskPartial``: the lookup of a row-sharded embedding table that
    DTensor ran itself, outside ``jax_semantics()``). Its mask fits the
    lookup's own shape, not a reshape's, and DTensor releases it at the
    first completion: the mode never lets it pass an op pending, and
    remembers its completion (``redistribute.resolve_pending``)."""
    for p in placements:
        if isinstance(p, MaskPartial):
            return True
    return False


def axis_sizes(mesh) -> dict[str, int]:
    return dict(zip(mesh_axis_names(mesh), mesh.shape))


@dataclasses.dataclass(frozen=True)
class Blocks:
    """What a collective asks of a DTensor's layout before it moves the
    blocks, answered in one place: ``spec`` (``None`` where no
    PartitionSpec describes the placements; ``undescribed`` is then the
    conversion's ``LayoutError``), the mesh's ``axis_names``, ``even``:
    every dim divides by its shard count (``False`` where ``spec`` is
    ``None``), and ``masked``: a mesh dim holds DTensor's masked partial
    sum (``masked_partial``)."""

    spec: Spec | None
    axis_names: tuple[str, ...]
    even: bool
    masked: bool = False
    undescribed: LayoutError | None = None

    def described(self) -> Spec:
        """``spec``; raises ``LayoutError`` where no PartitionSpec describes
        the placements (``spec_of``'s error)."""
        if self.undescribed is not None:
            err = self.undescribed
            raise LayoutError(str(err), what=err.what, value=err.value)
        return self.spec


def blocks_of(x: DTensor) -> Blocks:
    """``Blocks`` of a DTensor (cached per placements, shape and mesh)."""
    mesh = x.device_mesh
    return _blocks(tuple(x.placements), tuple(x.shape), tuple(mesh.shape), mesh_axis_names(mesh))


# Speed: one cached answer where the redistribute and the whole gather asked
# four questions of the same tensor (spec, axis names, evenness, masked
# partial sum), each a conversion or a loop of its own.
@functools.lru_cache(maxsize=8192)
def _blocks(placements: tuple, shape: tuple, mesh_shape: tuple, names: tuple) -> Blocks:
    masked = masked_partial(placements)
    try:
        spec = _spec(placements, len(shape), mesh_shape, names)[0]
    except LayoutError as err:
        return Blocks(None, names, False, masked, err)
    sizes = dict(zip(names, mesh_shape))
    even = all(n % math.prod([sizes[a] for a in entry]) == 0 for n, entry in zip(shape, spec))
    return Blocks(spec, names, even, masked)


def has_strided(x: DTensor) -> bool:
    """Whether a mesh dim of ``x`` holds a strided shard (a dim split over
    several mesh axes, or a reshape's result, which may be undescribable)."""
    for p in x.placements:
        if type(p) is StridedShard:
            return True
    return False


def without_strided(x: DTensor) -> DTensor:
    """``x`` with every strided-shard mesh dim gathered (replicated)."""
    if not has_strided(x):
        return x
    return x.redistribute(x.device_mesh, [
        Replicate() if type(p).__name__ == "_StridedShard" else p for p in x.placements
    ])
