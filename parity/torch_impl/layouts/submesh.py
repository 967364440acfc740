"""A mesh that is a slice of another: one mesh, as in JAX.

A JAX program has one mesh; an array sharded over ``dp`` alone is that
mesh's array replicated over the other axes. torch gives FSDP2's ``dp``
submesh (``mesh["dp"]``), an ``init_device_mesh`` slice or a flattened
axis (``mesh["dp", "cp"]._flatten()``) a ``DeviceMesh`` of its own, and
DTensor refuses an op across the two. ``slice_axes(parent, sub)`` says how
``sub`` sits in ``parent``; ``lift`` puts a DTensor of ``sub`` on
``parent`` with ``Replicate()`` on the missing axes (the same local block,
differentiable: the gradient comes back on ``sub`` with its placements).

The relation is torch's own where the two meshes share a root rank map
(each axis of ``sub`` is an axis of ``parent``, or several of them in
order, flattened: compared on torch's CuTe layouts); otherwise by names and
ranks: ``sub``'s axes are ``parent`` axes of the same sizes, in the same
order, and its ranks are ``parent``'s along them through this rank (a
``dp`` mesh of ranks ``[1, 3]`` on rank 1 of ``[[0, 1], [2, 3]]``).
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
from torch.distributed.tensor import DTensor, Replicate

from parity.errors import MeshMismatchError
from parity.torch_impl.layouts.tensors import raw_to_local
from parity.torch_impl.runtime import state
from parity.torch_impl.runtime.torch_compat import (StridedShard, collapsed_mesh_layout,
                                                    has_mesh_layouts, process_rank)

# slice_axes per (parent, sub) pair of one runtime generation (a new one
# empties it), at most _CACHE_LIMIT pairs.
_CACHE_LIMIT = 256
_cache: dict[tuple[Any, Any], tuple[int, ...] | None] = {}
state.per_generation(_cache.clear)


def _names(mesh: Any) -> tuple[str, ...] | None:
    names = mesh.mesh_dim_names
    return tuple(names) if names is not None else None


def _torch_axes(parent: Any, sub: Any) -> tuple[int, ...] | None:
    """torch's relation: the same root rank map, each axis of ``sub`` the
    layout of the ``parent`` axis of its name, or (a name ``parent`` lacks)
    of several ``parent`` axes in order, flattened."""
    if not has_mesh_layouts():  # a torch without CuTe mesh layouts
        return None
    try:
        same_root = parent._flatten_rank_map == sub._flatten_rank_map
        layouts, sub_layouts = list(parent._layout), list(sub._layout)
    except AttributeError:
        return None
    if not same_root:
        return None
    names, sub_names = _names(parent) or (), _names(sub) or ()
    axes, last = [-1] * len(layouts), -1
    for i, layout in enumerate(sub_layouts):
        name = sub_names[i] if i < len(sub_names) else None
        found = None
        if name in names and names.index(name) > last and layouts[names.index(name)] == layout:
            found = (names.index(name),)
        elif name not in names:  # a flattened axis (its own name): several in order
            later = range(last + 1, len(layouts))
            for size in range(2 if name else 1, len(layouts) - last):
                found = next((dims for dims in itertools.combinations(later, size)
                              if collapsed_mesh_layout([layouts[j] for j in dims]) == layout),
                             None)
                if found is not None:
                    break
        if found is None:
            return None
        for j in found:
            axes[j] = i
        last = found[-1]
    return tuple(axes)


def _through_this_rank(parent: Any, axes: list[int]) -> list | None:
    """``parent``'s rank array along ``axes`` at this rank's coordinate on
    the others (``None`` when this rank is not in ``parent``)."""
    import numpy as np

    grid = np.array(parent.mesh.tolist())
    where = np.argwhere(grid == process_rank())
    if len(where) == 0:
        return None
    index = tuple(slice(None) if j in axes else int(where[0][j]) for j in range(grid.ndim))
    return grid[index].tolist()


def _rank_axes(parent: Any, sub: Any) -> tuple[int, ...] | None:
    """By names and ranks (meshes built apart: ``init_device_mesh``,
    parity's own): see the module docstring."""
    names, sub_names = _names(parent), _names(sub)
    if names is None or sub_names is None or parent.device_type != sub.device_type:
        return None
    if any(n not in names for n in sub_names):
        return None
    dims = [names.index(n) for n in sub_names]
    if dims != sorted(set(dims)) or len(dims) >= len(names):
        return None
    if [parent.mesh.shape[j] for j in dims] != list(sub.mesh.shape):
        return None
    if _through_this_rank(parent, dims) != sub.mesh.tolist():
        return None
    return tuple(dims.index(j) if j in dims else -1 for j in range(len(names)))


def slice_axes(parent: Any, sub: Any) -> tuple[int, ...] | None:
    """For each axis of the torch mesh ``parent``, the axis of ``sub`` that
    it carries (``-1``: an axis ``sub`` lacks, where a lifted DTensor is
    replicated), when ``sub`` is a slice of ``parent`` with fewer devices;
    else ``None`` (not a slice, or the same mesh). Cached per pair; made
    on the real meshes (``assume_constant_result`` where dynamo traces:
    see ``slice_axes_traced``)."""
    state.current()  # this generation's cache (a new one empties it)
    key = (parent, sub)
    try:
        return _cache[key]
    except KeyError:
        pass
    except TypeError:  # an unhashable mesh stand-in
        key = None
    axes = None
    if parent.mesh.numel() > sub.mesh.numel():
        axes = _torch_axes(parent, sub)
        if axes is None:
            axes = _rank_axes(parent, sub)
    if key is not None:
        if len(_cache) >= _CACHE_LIMIT:
            _cache.clear()
        _cache[key] = axes
    return axes


@torch.compiler.assume_constant_result
def slice_axes_traced(parent: Any, sub: Any) -> tuple[int, ...] | None:
    """``slice_axes`` on the real meshes, a constant in dynamo's graph
    (dynamo passes its mesh variables' ``real_obj``)."""
    return slice_axes(getattr(parent, "real_obj", parent), getattr(sub, "real_obj", sub))


def why_not(first: Any, second: Any) -> str | None:
    """Why neither mesh is a slice of the other, when one's axis names are
    among the other's (else ``None``: the names already say it)."""
    if len(first.mesh.shape) < len(second.mesh.shape):
        first, second = second, first
    names, sub_names = _names(first), _names(second)
    if names is None or sub_names is None or any(n not in names for n in sub_names):
        return None
    dims = [names.index(n) for n in sub_names]
    if dims != sorted(dims):
        return f"axes {sub_names} are not in the order of {names}"
    sizes = [first.mesh.shape[j] for j in dims]
    if sizes != list(second.mesh.shape):
        return f"sizes {tuple(second.mesh.shape)} are not the sizes {tuple(sizes)} of {sub_names} in {names}"
    expected = _through_this_rank(first, dims)
    return (f"ranks {second.mesh.tolist()} are not the {sub_names} slice {expected} of "
            f"{names} through rank {process_rank()}, so not a submesh")


def lift(t: DTensor, parent: Any, axes: tuple[int, ...]) -> DTensor:
    """The DTensor ``t`` of a slice of ``parent`` as ``parent``'s array
    (``axes`` from ``slice_axes(parent, t.device_mesh)``): the same local
    block, ``t``'s placement on each axis it carries (a pending sum stays
    pending) and ``Replicate()`` on the others (no collective;
    differentiable: the gradient comes back on ``t``'s mesh with ``t``'s
    placements). Traceable by dynamo.

    Raises ``MeshMismatchError`` for a strided shard on a flattened axis
    (torch's ``StridedShard``: no placement on ``parent`` says it)."""
    # the local block as it is, a pending sum too (it stays pending, now
    # on ``parent``): parity's ``to_local`` completes a deferred sum, and
    # under Partial the completed block would be counted twice
    local = raw_to_local(t)
    placements = t.placements
    lifted = []
    flattened = len([i for i in axes if i >= 0]) > len(placements)
    for i in axes:
        if i < 0:
            lifted.append(Replicate())
            continue
        placement = placements[i]
        if flattened and isinstance(placement, StridedShard) and axes.count(i) > 1:
            raise MeshMismatchError(
                f"A DTensor with the strided placement {placement} on a flattened mesh axis "
                f"cannot be lifted onto {parent}: redistribute it to Shard or Replicate first.",
                first=parent, second=t.device_mesh)
        lifted.append(placement)
    return DTensor.from_local(local, parent, lifted, run_check=False,
                              shape=t.shape, stride=t.stride())
