"""``shard_map``: a function of per-device blocks, on DTensors.

``shard_map(f, mesh=mesh, in_specs=P("data", "model"), out_specs=P("data", None))(x)``:

1. each argument is resharded to its ``in_specs`` entry (DTensor's
   differentiable ``redistribute``; host data is distributed) and its local
   block taken (``to_local``: over simulated ranks a ``LocalTensor`` of
   every rank's block, under torchrun this process's block);
2. ``f`` runs once on the blocks, under ``manual.BodyMode`` (JAX's ``vma``
   types, ``pvary``), calling ``parity.torch_impl.lax`` collectives;
3. each output block becomes a DTensor laid out as its ``out_specs`` entry
   (``from_local``; its global shape is the block's times the shard
   counts). With ``check_vma=True`` an ``out_specs`` entry that leaves out
   a manual axis the output varies along raises ``ShardingTypeError``, as
   JAX refuses it.

Gradients flow through all three steps: ``to_local`` / ``from_local`` are
differentiable, and the body's collectives and ``pvary`` have JAX's
transposes (``lax``, ``manual``).

``axis_names`` (the manual axes) must be all the mesh's axes here: a body
that is manual over some axes and Auto/Explicit over the others is not
supported (``UnsupportedOpError``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch.distributed.tensor import DTensor

from parity import ambient
from parity.arg_checks import (broadcast_specs, call_checked, check_axes, check_axes_on_mesh,
                               check_callable, check_mesh_arg, check_spec_tree,
                               out_spec_varies, spec_text)
from parity import sharding_rules as R
from parity.errors import LayoutError, ShardingTypeError, UnsupportedOpError
from parity.layout import Spec, TensorLayout
from parity.mesh import DeviceMesh
from parity.partition_spec import PartitionSpec
from parity.axis_types import AxisType
from parity.torch_impl.semantics import axis_overrides
from parity.torch_impl.semantics.traced_errors import raise_error
from parity.torch_impl.layouts import meshes
from parity.torch_impl.arrays.distribute import distribute_tensor
from parity.torch_impl.explicit import manual
from parity.torch_impl.runtime.torch_compat import tree_flatten, tree_unflatten
from parity.torch_impl.collectives import redistribute
from parity.torch_impl.layouts import specs as S
from parity.torch_impl.collectives.redistribute import resolve_pending


def _spec_of(s: Any, ndim: int, mesh: DeviceMesh, what: str) -> Spec:
    if isinstance(s, PartitionSpec):
        if s.unreduced:
            raise UnsupportedOpError(
                f"{what}: {s!r} is unreduced; parity's shard_map takes and gives reduced "
                "values only. Fix: reshard the argument to a spec without unreduced= first.",
                op="shard_map", reason="unreduced specs")
        spec = s.spec_for(ndim)
    elif isinstance(s, TensorLayout):
        if s.device_mesh is not None and s.device_mesh != mesh:
            raise LayoutError(f"{what}: layout {s!r} is on another mesh than the shard_map's.", what=what, value=s)
        spec = s.spec
        if len(spec) != ndim:
            raise LayoutError(f"{what}: layout {s.axes} has {len(spec)} entries for rank {ndim}.", what=what, value=s)
    else:
        raise LayoutError(f"{what}: expected a parity.P(...), got {type(s).__name__}: {s!r}.", what=what, value=s)
    TensorLayout.from_spec(spec, mesh)  # unknown axis names raise here
    return spec


def _broadcast(specs: Any, values: list, what: str) -> list:
    """One spec per value: ``specs`` is one spec for all, or a matching
    sequence (JAX: a pytree prefix; nested prefixes are not supported)."""
    return broadcast_specs(specs, values, "shard_map", what)


_p = spec_text


def shard_map(f: Callable, *, mesh: DeviceMesh | None = None, in_specs: Any, out_specs: Any,
              axis_names: Any = None, check_vma: bool = True) -> Callable:
    """``f`` applied to each device's block of its arguments (JAX's
    ``jax.shard_map``); returns the mapped function.

    Arguments are DTensors (resharded to ``in_specs``) or host data
    (distributed). ``f`` returns a tensor or a tuple/list of tensors,
    matched by ``out_specs``. Raises, when called: ``LayoutError`` (no
    mesh, specs that do not match the arguments, an unknown axis, an
    output block whose global shape cannot be formed),
    ``ShardingTypeError`` (``check_vma``: ``out_specs`` claims replication
    along an axis the output varies along), ``UnsupportedOpError``
    (``axis_names`` a strict subset of the mesh axes). Raises at once:
    ``TypeError`` for an ``f`` that is not callable, ``LayoutError`` for a
    ``mesh`` that is not a ``parity.DeviceMesh``, specs that are not ``P``s
    and ``axis_names`` that are not axis names.
    """
    check_callable(f, "shard_map")
    check_mesh_arg(mesh, "shard_map")
    check_spec_tree(in_specs, "shard_map", "in_specs")
    check_spec_tree(out_specs, "shard_map", "out_specs")
    names = check_axes(axis_names, "shard_map", "axis_names")

    @functools.wraps(f)
    def mapped(*args: Any) -> Any:
        the_mesh = mesh if mesh is not None else ambient.get_mesh()
        if the_mesh is None:
            raise LayoutError("shard_map needs mesh= or an ambient mesh (set_mesh(mesh)).", what="mesh", value=None)
        if names is not None:
            check_axes_on_mesh(names, the_mesh.axis_names, "shard_map", "axis_names")
        manual_axes = the_mesh.axis_names if names is None else tuple(
            a for a in the_mesh.axis_names if a in names)
        if set(manual_axes) != set(the_mesh.axis_names):
            raise UnsupportedOpError(
                f"shard_map(axis_names={axis_names!r}): parity runs a body manual over every "
                f"mesh axis {the_mesh.axis_names}. Fix: leave axis_names out.",
                op="shard_map", reason="partial manual axes")
        torch_mesh = meshes.to_torch_mesh(the_mesh)
        leaves = list(args)
        specs = _broadcast(in_specs, leaves, "in_specs")
        blocks = []
        for i, (value, s) in enumerate(zip(leaves, specs)):
            ndim = value.ndim if isinstance(value, torch.Tensor) else len(getattr(value, "shape", ()))
            spec = _spec_of(s, ndim, the_mesh, f"in_specs[{i}]")
            layout = TensorLayout.from_spec(spec, the_mesh)
            if isinstance(value, DTensor):
                layout.check_shape(tuple(value.shape))
                if value.device_mesh != torch_mesh:
                    raise LayoutError(f"shard_map argument {i} lives on another mesh.", what="args", value=i)
                _check_explicit_type(value, spec, i)
                guard = value.requires_grad and value.is_leaf
                value = redistribute.redistribute_to(resolve_pending(value), spec, guard=guard)
            else:
                value = distribute_tensor(value, layout)
            block = value.to_local()
            blocks.append(manual.with_vma(block, {n for names in spec for n in names}))
        scope = manual.Scope(the_mesh, torch_mesh, tuple(manual_axes), bool(check_vma),
                             template=blocks[0] if blocks else None)
        manual.push(scope)
        try:
            with manual.BodyMode(scope):
                out = call_checked(f, blocks, "shard_map")
        finally:
            manual.pop()
        outs, tree = tree_flatten(out)
        o_specs = _broadcast(out_specs, outs, "out_specs")
        results = []
        for i, (block, s) in enumerate(zip(outs, o_specs)):
            if not isinstance(block, torch.Tensor):
                raise LayoutError(f"shard_map output {i} is a {type(block).__name__}, not a tensor.", what="out_specs", value=block)
            spec = _spec_of(s, block.ndim, the_mesh, f"out_specs[{i}]")
            named = {n for names in spec for n in names}
            varying = manual.vma_of(block)
            if check_vma and not varying <= named:
                missing = tuple(a for a in the_mesh.axis_names if a in varying - named)
                message, fix = out_spec_varies(i, spec, missing, varying)
                raise_error(ShardingTypeError, message, op="shard_map", specs=(spec,), fix=fix)
            if check_vma and named - varying:
                # an invariant block laid out along an axis: JAX pvary-s it
                # (its transpose sums the blocks' cotangents over that axis)
                block = manual.align(block, varying | named, scope)
            placements = S.placements_for(spec, torch_mesh)
            shape = tuple(int(d) * R.shard_count(names, S.axis_sizes(torch_mesh))
                          for d, names in zip(block.shape, spec))
            stride = _contiguous_stride(shape)
            results.append(DTensor.from_local(block, torch_mesh, placements, run_check=False,
                                              shape=torch.Size(shape), stride=stride))
        return tree_unflatten(results, tree)

    return mapped


def _check_explicit_type(value: DTensor, spec: Spec, i: int) -> None:
    """On the mesh's Explicit axes an argument's type must already be its
    ``in_specs`` entry, as JAX asks (no implicit reshard of a typed value).
    Raises ``ShardingTypeError`` naming both and the ``reshard`` that fixes it."""
    mesh = axis_overrides.effective(meshes.to_parity_mesh(value.device_mesh))
    explicit = set(mesh.axes_of_type(AxisType.Explicit))
    if not explicit:
        return
    have, _ = S.spec_and_pending(value)

    def typed(sp: Spec) -> Spec:
        return tuple(tuple(n for n in names if n in explicit) for names in sp)

    if typed(have) != typed(spec):
        raise_error(
            ShardingTypeError,
            f"shard_map argument {i}: its type {_p(have)} does not match in_specs[{i}] "
            f"{_p(spec)} on the Explicit mesh axes {sorted(explicit)}. "
            f"Fix: reshard(x, {_p(spec)}) before the shard_map.",
            op="shard_map", specs=(have, spec), fix=f"reshard(x, {_p(spec)})")


def _contiguous_stride(shape: tuple[int, ...]) -> tuple[int, ...]:
    stride, acc = [], 1
    for size in reversed(shape):
        stride.append(acc)
        acc *= size
    return tuple(reversed(stride))
