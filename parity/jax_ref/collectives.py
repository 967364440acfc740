"""``all_reduce``, ``all_gather`` and ``reduce_scatter``: SPEC's definition,
literally. Each is ``jax.shard_map`` over the array's own mesh with
``in_specs`` = its spec; every device applies the collective to its local
block over the devices that share its position on every other mesh axis.

* ``all_reduce``: ``lax.psum``/``pmean``/``pmax``/``pmin``; out spec = the
  spec without ``axis_name``.
* ``all_gather``: ``lax.all_gather(tiled=True, to="invarying")``; out spec =
  the spec without ``axis_name``.
* ``reduce_scatter``: ``lax.psum_scatter(tiled=True)``; mean = that / axis
  size; max, min = ``pmax``/``pmin`` then this device's chunk. Out spec = the
  spec without ``axis_name``, then ``axis_name`` appended (minor-most) on dim
  ``axis``.

Notes: ``all_gather`` needs ``to="invarying"`` because JAX 0.10's default
(``"varying"``) fails ``shard_map``'s replication check for that out spec.
A block replicated over ``axis_name`` takes part once per device, so ``sum``
multiplies it by the axis size. ``mean`` of integers is floating
(``lax.pmean`` divides).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
from jax import lax

from parity.collective_args import (
    check_axis,
    check_axis_name,
    check_op,
    scattered_spec,
)
from parity.errors import IndivisibleError
from parity.jax_ref.distribute import require_distributed
from parity.jax_ref.meshes import spec_of, to_partition_spec
from parity.layout import Spec, spec_without_axis

_ALL_REDUCE = {"sum": lax.psum, "mean": lax.pmean, "max": lax.pmax, "min": lax.pmin}


def _prepare(x: Any, axis_name: Any, what: str) -> tuple[jax.Array, Spec]:
    x = require_distributed(x, what)
    mesh = x.sharding.mesh
    check_axis_name(axis_name, mesh.axis_names, mesh.devices.shape, what)
    return x, spec_of(x.sharding.spec, x.ndim)


@functools.lru_cache(maxsize=512)
def _spmd(mesh: Any, in_spec: Spec, out_spec: Spec, body: Callable, donate: bool) -> Callable:
    return jax.jit(
        jax.shard_map(
            body,
            mesh=mesh,
            in_specs=to_partition_spec(in_spec),
            out_specs=to_partition_spec(out_spec),
        ),
        donate_argnums=(0,) if donate else (),
    )


def _psum_like(op: str, axis_name: str) -> Callable:
    return functools.partial(_ALL_REDUCE[op], axis_name=axis_name)


def all_reduce(x: Any, op: str = "sum", axis_name: str | None = None, *,
               donate: bool = False) -> jax.Array:
    """Reduce (``op`` in sum, mean, max, min) every device's block over
    ``axis_name``; the result's spec drops ``axis_name``. ``donate=True``
    donates ``x`` (``donate_argnums``): it is deleted, and using it again
    raises ``DonatedArrayError``.

    Raises ``LayoutError`` for an op or axis name that is not valid,
    ``ParityError`` when ``x`` is not distributed.
    """
    check_op(op, "all_reduce")
    x, spec = _prepare(x, axis_name, "all_reduce")
    body = _body("all_reduce", op, axis_name, 0, 1)
    out = _spmd(x.sharding.mesh, spec, spec_without_axis(spec, axis_name), body, donate)(x)
    return _consumed(x, out, donate)


def _consumed(x: jax.Array, out: jax.Array, donate: bool) -> jax.Array:
    # XLA reuses a donated buffer only where the output fits in it (all_reduce);
    # parity's contract is the same for every collective: a donated x is gone.
    if donate and not x.is_deleted():
        x.delete()
    return out


def all_gather(x: Any, axis: int, axis_name: str, *, donate: bool = False) -> jax.Array:
    """Concatenate the blocks of the ``axis_name`` group along ``axis``, in
    the order of their ``axis_name`` coordinate; spec drops ``axis_name``.

    Raises ``LayoutError`` for an axis name not in the mesh or ``axis`` out
    of range (negative counts from the end), ``ParityError`` when ``x`` is
    not distributed.
    """
    x, spec = _prepare(x, axis_name, "all_gather")
    axis = check_axis(axis, x.ndim, "all_gather")
    body = _body("all_gather", "sum", axis_name, axis, 1)
    out = _spmd(x.sharding.mesh, spec, spec_without_axis(spec, axis_name), body, False)(x)
    return _consumed(x, out, donate)


def reduce_scatter(x: Any, axis: int, axis_name: str, op: str = "sum", *,
                   donate: bool = False) -> jax.Array:
    """Reduce the blocks of the ``axis_name`` group, then the device at
    coordinate k keeps chunk k of dim ``axis``; the spec moves ``axis_name``
    to the minor-most place on dim ``axis``. ``donate=True`` deletes ``x``.

    Raises ``LayoutError`` for a bad op, axis name or axis, ``ShardingError``
    when the block's dim ``axis`` does not divide by the axis size, and
    ``ParityError`` when ``x`` is not distributed.
    """
    check_op(op, "reduce_scatter")
    x, spec = _prepare(x, axis_name, "reduce_scatter")
    axis = check_axis(axis, x.ndim, "reduce_scatter")
    mesh = x.sharding.mesh
    size = mesh.shape[axis_name]
    block = x.shape[axis] // max(1, _shard_count(mesh, spec[axis]))
    if block % size:
        raise IndivisibleError(
            f"reduce_scatter: each device's block has size {block} on dim {axis} "
            f"(global {x.shape[axis]}), which does not divide by the size {size} "
            f"of mesh axis {axis_name!r}.",
            dim=axis, size=block, axes=(axis_name,), shards=size,
        )
    out_spec = scattered_spec(spec, axis, axis_name)
    body = _body("reduce_scatter", op, axis_name, axis, size)
    return _consumed(x, _spmd(mesh, spec, tuple(out_spec), body, False)(x), donate)


def _shard_count(mesh: Any, names: tuple[str, ...]) -> int:
    count = 1
    for name in names:
        count *= mesh.shape[name]
    return count


@functools.lru_cache(maxsize=None)
def _body(kind: str, op: str, axis_name: str, axis: int, size: int) -> Callable:
    # Cached so that the same collective reuses one compiled shard_map.
    if kind == "all_reduce":
        return _psum_like(op, axis_name)
    if kind == "all_gather":
        return lambda b: lax.all_gather(b, axis_name, axis=axis, tiled=True, to="invarying")
    if op == "sum":
        return lambda b: lax.psum_scatter(b, axis_name, scatter_dimension=axis, tiled=True)
    if op == "mean":
        return lambda b: lax.psum_scatter(
            b, axis_name, scatter_dimension=axis, tiled=True
        ) / size

    def chunk_of_reduction(b: jax.Array) -> jax.Array:
        chunk = b.shape[axis] // size
        reduced = _ALL_REDUCE[op](b, axis_name)
        start = lax.axis_index(axis_name) * chunk
        return lax.dynamic_slice_in_dim(reduced, start, chunk, axis)

    return chunk_of_reduction
