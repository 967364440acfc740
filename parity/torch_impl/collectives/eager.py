"""``all_reduce``, ``all_gather`` and ``reduce_scatter`` with ``shard_map``
meaning: each device applies the collective to its own block over the
devices that share its position on every other mesh axis (the sub-group of
the named axis, never the whole world), and the result is laid out as SPEC
says: the input spec without ``axis_name`` (``reduce_scatter``: with it
appended as the minor-most name of dim ``axis``).

Per call, only what depends on the data runs: everything fixed by (the
input's ``DTensorSpec``, op, axis name, axis) -- the argument checks, the
process group, the output's ``DTensorSpec`` -- is resolved once into a
``_Plan`` and cached for the current runtime generation (a plan holds its
process group: a new ``simulate()`` block, ``initialize()`` again or a
process group destroyed and started again empties the caches,
``state.per_generation``, so a mesh object kept across them never reaches
a destroyed group). The result is wrapped
with DTensor's own constructor and no autograd node (the collectives refuse
inputs that require grad).

``donate=True`` (JAX's ``donate_argnums``): ``x`` is consumed. ``all_reduce``
reduces ``x``'s local buffer in place (multi-process) and returns it as the
result; ``all_gather`` and ``reduce_scatter``, whose result differs in size,
leave ``x``'s block to a later collective's output of its size
(``donation.take``: a gather and a scatter in turn allocate nothing). Every
collective then marks ``x`` invalid, so a later use raises
``DonatedArrayError`` (``parity.torch_impl.collectives.donation``). Simulated ranks
compute functionally (their blocks are ``LocalTensor``s) and invalidate
``x`` alike.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.tensor import DTensor

from parity.collective_args import check_axis, check_axis_name, check_op, scattered_spec
from parity.errors import IndivisibleError, ParityError
from parity.layout import spec_without_axis
from parity.torch_impl.runtime import state
from parity.torch_impl.collectives.donation import DonatedTensor, donate_block, invalidate, kept_blocks, take
from parity.torch_impl.collectives.donation import require_dtensor, take_key
from parity.torch_impl.collectives.blocks import COALESCING, Group, all_gather_block, all_reduce_block
from parity.torch_impl.collectives.blocks import direct_call
from parity.torch_impl.collectives.blocks import reduce_scatter_block
from parity.torch_impl.layouts.meshes import mesh_axis_names
from parity.torch_impl.collectives.redistribute import resolve_pending
from parity.torch_impl.layouts.specs import spec_and_pending
from parity.torch_impl.layouts.tensors import global_shape_from_local, result_spec

_grad_enabled = torch.is_grad_enabled


class _Plan:
    """What one (input spec, collective, op, axis name, axis) needs per call."""

    __slots__ = ("pending", "group", "axis", "to_float", "out_spec", "kind", "marker",
                 "out_local", "out_dims", "reuse", "call", "mean", "out_key", "in_key")

    def __init__(self, pending: bool, group: Group | None = None, axis: int = 0,
                 to_float: bool = False, out_spec: Any = None, kind: str = "",
                 out_local: torch.Size | None = None, op: str = "sum",
                 dtype: torch.dtype | None = None, in_local: torch.Tensor | None = None
                 ) -> None:
        self.pending, self.group, self.axis = pending, group, axis
        self.to_float, self.out_spec, self.kind = to_float, out_spec, kind
        self.marker: DonatedTensor | None = None
        # The local result's shape; whether it may go into a kept donated
        # block (multi-process, the collective writes one contiguous buffer).
        self.out_local = out_local
        self.out_dims = None if out_local is None else tuple(out_local)
        self.reuse = group is not None and group.direct and axis == 0
        # The process group's own method, called by the hot path
        # (``_direct_into``) where it applies: multi-process, dim 0, a real
        # dtype, no integer mean.
        self.call = (direct_call(group, kind, op, dtype)
                     if group is not None and axis == 0 and not to_float else None)
        self.mean = op == "mean"
        # donation's pool keys, (shape, dtype, device): this plan's output
        # block (the fast path's dtype is the input's) and its input block.
        self.out_key = self.in_key = None
        if in_local is not None:
            self.out_key = (out_local, dtype, in_local.device)
            self.in_key = (in_local.shape, dtype, in_local.device)

    def donate(self, x: DTensor, keep: bool) -> None:
        """Invalidate ``x``, donated to this collective; ``keep``: its block
        is contiguous and may serve a later output of its size
        (``donation.donate_block``, keyed by this plan's input block)."""
        if self.marker is None:
            self.marker = DonatedTensor(x._local_tensor, self.kind)
        if keep and self.group.direct:
            donate_block(x, self.marker, self.in_key)
        else:
            invalidate(x, self.marker)

    def output_buffer(self, like: torch.Tensor) -> torch.Tensor | None:
        """A kept donated block to write the result into, or ``None``."""
        if self.reuse and kept_blocks:
            return take(self.out_local, like.dtype, like.device)
        return None


# The plan cache, one idea looked up two ways, both holding the plans of one
# runtime generation (``state.per_generation`` empties them: a torch mesh
# object may outlive its process groups -- a DTensor or a mesh kept across
# ``simulate()`` blocks, or across ``destroy_process_group`` and a new
# ``init_process_group`` -- and a plan built for it then holds the destroyed
# group).
# ``_plans``: by value, (id(torch mesh), spec, kind, op, axis name, axis) ->
# plan. Keyed on the torch mesh's identity besides the (value-compared) spec:
# the meshes of two process groups compare equal, and a plan holds its mesh,
# so an id is not reused while its plan lives.
_plans: dict[tuple, _Plan] = {}
_MAX_PLANS = 4096
# ``_by_identity``, in front of it (speed: skips hashing the spec with
# DTensorSpec's Python ``__hash__``, and a key tuple, on every call): per
# collective, id(spec) -> (spec, op, axis name, axis, plan) for the specs seen
# last. A collective's result carries its plan's ``out_spec`` object, so a
# loop of collectives hits here. The entry holds its spec: the id is not
# reused while it lives. The arguments are compared with ``is`` (exact:
# ``True`` is not ``1``); an equal but distinct string takes ``_plans``.
_by_identity: dict[str, dict[int, tuple]] = {
    "all_reduce": {}, "all_gather": {}, "reduce_scatter": {}}


def _forget_plans() -> None:
    _plans.clear()
    for seen in _by_identity.values():
        seen.clear()


state.per_generation(_forget_plans)


def _build_plan(x: DTensor, kind: str, op: str, axis_name: Any, axis: Any) -> _Plan:
    """Check the arguments (raising as documented) and resolve the plan."""
    if kind != "all_gather":
        check_op(op, kind)
    mesh = x.device_mesh
    names = mesh_axis_names(mesh)
    mesh_dim = check_axis_name(axis_name, names, mesh.shape, kind)
    spec, pending = spec_and_pending(x)
    if pending:
        return _Plan(pending=True)
    if kind != "all_reduce":
        axis = check_axis(axis, x.ndim, kind)
    group = Group(mesh, mesh_dim, direct=state.mode() == "multiprocess")
    local = list(x._local_tensor.shape)
    to_float = op == "mean" and not (x.dtype.is_floating_point or x.dtype.is_complex)
    if kind == "all_reduce":
        out_spec = spec_without_axis(spec, axis_name)
    elif kind == "all_gather":
        out_spec = spec_without_axis(spec, axis_name)
        local[axis] *= group.size
    else:
        if local[axis] % group.size:
            raise IndivisibleError(
                f"reduce_scatter: each device's block has size {local[axis]} on dim {axis}, "
                f"which does not divide by the size {group.size} of mesh axis {axis_name!r}.",
                dim=axis, size=local[axis], axes=(axis_name,), shards=group.size,
            )
        out_spec = scattered_spec(spec, axis, axis_name)
        local[axis] //= group.size
    shape = global_shape_from_local(local, out_spec, tuple(mesh.shape), names)
    dtype = torch.float32 if to_float else x.dtype  # lax.pmean of integers is float32
    return _Plan(False, group, axis, to_float, result_spec(mesh, out_spec, shape, dtype), kind,
                 torch.Size(local), op, x.dtype, x._local_tensor)


def _plan(x: DTensor, kind: str, op: str, axis_name: Any, axis: Any) -> _Plan:
    if type(op) is not str or type(axis_name) is not str or type(axis) is not int:
        return _build_plan(x, kind, op, axis_name, axis)  # raises on the bad argument
    spec = x._spec
    key = (id(spec.mesh), spec, kind, op, axis_name, axis)
    plan = _plans.get(key)
    if plan is None:
        plan = _build_plan(x, kind, op, axis_name, axis)
        if len(_plans) >= _MAX_PLANS:
            _plans.clear()
        _plans[key] = plan
    return plan


def _prepare(x: Any, kind: str, op: str, axis_name: Any, axis: Any) -> tuple[DTensor, _Plan]:
    if type(x) is not DTensor or type(x._local_tensor) is DonatedTensor:
        x = require_dtensor(x, kind)  # raises unless a DTensor (or its Parameter)
    if x.requires_grad and _grad_enabled():
        # A gradient through these would be wrong (DTensor's from_local and
        # the collective's own backward each count the replicas), and a
        # detached result would silently drop x's share of the gradient.
        raise ParityError(
            f"{kind} is not differentiable, as in parity.jax_ref (where it needs "
            "a concrete array, not a traced one), but x requires grad. Call it under "
            "torch.no_grad() or on x.detach(); for a differentiable reduction use "
            "ops under jax_semantics() (e.g. x.sum(dim) over a sharded dim)."
        )
    state.current()  # this generation's plans (a new one empties the caches)
    spec = x._spec
    seen = _by_identity[kind]
    hit = seen.get(id(spec))
    if (hit is not None and hit[0] is spec and hit[1] is op and hit[2] is axis_name
            and hit[3] is axis):
        return x, hit[4]
    plan = _plan(x, kind, op, axis_name, axis)
    if plan.pending:
        x = resolve_pending(x)
        return x, _plan(x, kind, op, axis_name, axis)
    if len(seen) >= _MAX_PLANS:
        seen.clear()
    seen[id(spec)] = (spec, op, axis_name, axis, plan)
    return x, plan


# The hot path of each collective (multi-process, ``plan.call`` set, no
# coalescing manager open) calls the process group's method itself, skipping
# ``blocks``' layers: each Python call layer costs about a microsecond on the
# fake group; the output is allocated from integer dims (``new_empty(*dims)``:
# a ``torch.Size`` argument costs several microseconds more to parse) and
# wrapped by DTensor's own constructor without its (no-op) ``__init__``, with
# no autograd node (the collectives refuse inputs that require grad).


def _direct_into(plan: _Plan, block: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """The hot path of ``all_gather`` and ``reduce_scatter``: ``block``
    through the process group's own method into a kept donated block of the
    output's size or a new one. Returns the output and whether ``block`` is
    its own contiguous buffer (so a donated ``x`` may keep it)."""
    local = block.contiguous()
    out = take_key(plan.out_key) if kept_blocks else None
    if out is None:
        out = local.new_empty(*plan.out_dims)
    call = plan.call
    work = call[0](call[1], out, local, call[2])
    if work is not None:
        work.wait()
    if plan.mean:
        out.div_(plan.group.size)
    return out, local is block


def all_reduce(x: Any, op: str = "sum", axis_name: str | None = None, *,
               donate: bool = False) -> DTensor:
    """``lax.psum``/``pmean``/``pmax``/``pmin`` of the local blocks over
    ``axis_name``; the result's spec drops ``axis_name``. ``donate=True``
    reduces ``x``'s buffer in place and invalidates ``x``.

    Raises ``LayoutError`` for an unknown axis or op, ``ParityError`` for a
    tensor that is not distributed or requires grad, ``DonatedArrayError``
    for a donated ``x``.
    """
    x, plan = _prepare(x, "all_reduce", op, axis_name, 0)
    local = x._local_tensor
    call = plan.call
    if call is not None and not COALESCING and local.is_contiguous():
        out = local if donate else local.clone()
        work = call[0](call[1], [out], call[2])
        if work is not None:
            work.wait()
        if plan.mean:
            out.div_(plan.group.size)
    else:
        if plan.to_float:
            local = local.to(torch.float32)
        out = all_reduce_block(local, op, plan.group, in_place=donate)
    del local
    if donate:
        plan.donate(x, keep=False)  # its buffer is the result (multi-process)
    return DTensor.__new__(DTensor, out, plan.out_spec, requires_grad=False)


def all_gather(x: Any, axis: int, axis_name: str, *, donate: bool = False) -> DTensor:
    """``lax.all_gather(block, axis_name, axis=axis, tiled=True)``: blocks
    concatenated along ``axis`` in the order of the ``axis_name`` coordinate.
    ``donate=True`` invalidates ``x`` and keeps its block for a later
    collective's output of its size (see the module docstring). The result
    (``axis`` 0, multi-process) goes into such a kept block where one fits.

    Raises ``LayoutError`` for an unknown axis name or an axis out of range,
    ``DonatedArrayError`` for a donated ``x``.
    """
    x, plan = _prepare(x, "all_gather", "sum", axis_name, axis)
    block = x._local_tensor
    if plan.call is not None and not COALESCING:
        out, keep = _direct_into(plan, block)
    else:
        out = all_gather_block(block, plan.axis, plan.group, plan.output_buffer(block),
                               plan.out_dims)
        keep = block.is_contiguous()
    del block  # a donated block is kept only when nothing else refers to it
    if donate:
        plan.donate(x, keep)
    return DTensor.__new__(DTensor, out, plan.out_spec, requires_grad=False)


def reduce_scatter(x: Any, axis: int, axis_name: str, op: str = "sum", *,
                   donate: bool = False) -> DTensor:
    """``lax.psum_scatter(block, axis_name, scatter_dimension=axis, tiled=True)``
    (with ``op`` in sum, mean, max, min): the device at coordinate k of
    ``axis_name`` gets the reduction of chunk k of every block in its group.
    ``donate=True`` invalidates ``x`` and keeps its block for a later
    collective's output of its size; the result (``axis`` 0,
    multi-process) goes into such a kept block where one fits.

    Raises ``LayoutError`` for an unknown axis name, op or an axis out of
    range, ``IndivisibleError`` when the block's ``axis`` does not divide by
    the axis size, ``DonatedArrayError`` for a donated ``x``.
    """
    x, plan = _prepare(x, "reduce_scatter", op, axis_name, axis)
    block = x._local_tensor
    if plan.call is not None and not COALESCING:
        out, keep = _direct_into(plan, block)
    else:
        local = block.to(torch.float32) if plan.to_float else block
        out = reduce_scatter_block(local, op, plan.axis, plan.group, plan.output_buffer(local),
                                   plan.out_dims)
        keep = local is block and block.is_contiguous()
        del local
    del block  # a donated block is kept only when nothing else refers to it
    if donate:
        plan.donate(x, keep)
    return DTensor.__new__(DTensor, out, plan.out_spec, requires_grad=False)
