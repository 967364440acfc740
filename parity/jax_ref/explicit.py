"""JAX's explicit-sharding API on the reference backend: JAX's own
functions, with parity's meshes and specs.

| parity (``jax_ref.``)        | JAX                                          |
|------------------------------|----------------------------------------------|
| ``set_mesh(mesh)``           | ``jax.set_mesh(Mesh)`` (+ parity's ambient)  |
| ``device_put(x, spec)``      | ``jax.device_put(x, NamedSharding)``         |
| ``typeof(x)``                | ``jax.typeof(x)``                            |
| ``reshard(x, spec)``         | ``jax.sharding.reshard``                     |
| ``with_sharding_constraint`` | ``jax.lax.with_sharding_constraint``         |
| ``shard_map(f, ...)``        | ``jax.shard_map``                            |
| ``lax.psum`` ...             | ``jax.lax.psum`` ... (``parity.jax_ref.lax``)|
| ``auto_axes``/``explicit_axes``| ``jax.sharding.auto_axes``/``explicit_axes``|
| ``matmul``/``dot``/``einsum`` | ``jnp.matmul``/``dot``/``einsum`` (``out_sharding=``)|

A parity mesh becomes a JAX mesh with the mesh's own ``axis_types``; a
``parity.P`` is resolved on the ambient mesh (``set_mesh``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as JaxP

from parity import ambient
from parity.errors import LayoutError
from parity.jax_ref.meshes import to_jax_mesh, to_partition_spec
from parity.layout import TensorLayout
from parity.mesh import DeviceMesh
from parity.partition_spec import PartitionSpec


@contextlib.contextmanager
def set_mesh(mesh: DeviceMesh) -> Iterator[DeviceMesh]:
    """``mesh`` is the ambient mesh inside the block (parity's and JAX's:
    ``jax.set_mesh``), per thread and nestable. Raises ``LayoutError`` for a
    value that is not a ``parity.DeviceMesh``."""
    with ambient.set_mesh(mesh), jax.set_mesh(to_jax_mesh(mesh, None)):
        yield mesh


def _jax_p(s: PartitionSpec) -> JaxP:
    """JAX's ``P`` with the same entries and ``unreduced`` axes."""
    if s.unreduced:
        return JaxP(*s.entries, unreduced=set(s.unreduced))
    return JaxP(*s.entries)


def _sharding(spec_or_layout: Any, ndim: int, what: str) -> NamedSharding:
    layout = ambient.to_layout(spec_or_layout, ndim, what)
    spec = to_partition_spec(layout.spec)
    if isinstance(spec_or_layout, PartitionSpec) and spec_or_layout.unreduced:
        spec = JaxP(*spec, unreduced=set(spec_or_layout.unreduced))
    return NamedSharding(to_jax_mesh(layout.device_mesh, None), spec)


def device_put(x: Any, spec_or_layout: Any) -> jax.Array:
    """``x`` (host data or an array) laid out as a ``parity.P`` on the
    ambient mesh or a ``TensorLayout``, on a JAX mesh of the parity mesh's
    own axis types. Raises ``LayoutError`` (no ambient mesh, rank mismatch)
    and ``IndivisibleError`` (a dim that does not divide)."""
    value = x if isinstance(x, jax.Array) else np.asarray(x)
    layout = ambient.to_layout(spec_or_layout, value.ndim, "device_put")
    layout.check_shape(value.shape)
    return jax.device_put(value, _sharding(layout, value.ndim, "device_put"))


def typeof(x: Any) -> Any:
    """``jax.typeof(x)``: its ``str`` is ``float32[8@data,8@model]``."""
    return jax.typeof(x)


def reshard(x: Any, spec_or_layout: Any) -> jax.Array:
    """``jax.sharding.reshard(x, sharding)`` (differentiable; the gradient
    comes back in ``x``'s sharding). Raises ``LayoutError`` like
    ``device_put``."""
    return jax.sharding.reshard(x, _sharding(spec_or_layout, np.ndim(x), "reshard"))


def with_sharding_constraint(x: Any, spec_or_layout: Any) -> jax.Array:
    """``jax.lax.with_sharding_constraint``: on Auto axes a reshard, on
    Explicit axes an assertion (JAX's ``AssertionError`` when it differs)."""
    return jax.lax.with_sharding_constraint(
        x, _sharding(spec_or_layout, np.ndim(x), "with_sharding_constraint"))


def _jax_specs(specs: Any) -> Any:
    def one(s: Any) -> Any:
        if isinstance(s, PartitionSpec):
            return _jax_p(s)
        if isinstance(s, TensorLayout):
            return to_partition_spec(s.spec)
        return s

    return jax.tree_util.tree_map(
        one, specs, is_leaf=lambda s: isinstance(s, (PartitionSpec, TensorLayout)))


def shard_map(f: Callable, *, mesh: DeviceMesh | None = None, in_specs: Any,
              out_specs: Any, axis_names: Any = None, check_vma: bool = True) -> Callable:
    """``jax.shard_map`` on the JAX mesh of ``mesh`` (default: the ambient
    mesh), with parity ``P``s as specs. Raises ``LayoutError`` with no mesh."""
    mesh = mesh if mesh is not None else ambient.get_mesh()
    if mesh is None:
        raise LayoutError("shard_map needs mesh= or an ambient mesh (set_mesh).", what="mesh", value=None)
    kwargs = {} if axis_names is None else {"axis_names": set(axis_names)}
    return jax.shard_map(f, mesh=to_jax_mesh(mesh, None), in_specs=_jax_specs(in_specs),
                         out_specs=_jax_specs(out_specs), check_vma=check_vma, **kwargs)


def _jax_sharding(s: Any) -> Any:
    if s is None:
        return None
    if isinstance(s, (tuple, list)):
        return type(s)(_jax_sharding(x) for x in s)
    return _jax_specs(s)


def auto_axes(f: Callable, *, axes: Any = None, out_sharding: Any = None) -> Callable:
    """``jax.sharding.auto_axes`` with parity ``P``s."""
    return jax.sharding.auto_axes(f, axes=axes, out_sharding=_jax_sharding(out_sharding))


def explicit_axes(f: Callable, *, axes: Any = None, in_sharding: Any = None) -> Callable:
    """``jax.sharding.explicit_axes`` with parity ``P``s."""
    return jax.sharding.explicit_axes(f, axes=axes, in_sharding=_jax_sharding(in_sharding))


def _out_sharding(s: Any, what: str) -> Any:
    if s is None or isinstance(s, PartitionSpec):
        return None if s is None else _jax_p(s)
    if isinstance(s, TensorLayout):
        return NamedSharding(to_jax_mesh(s.require_mesh(), None), to_partition_spec(s.spec))
    raise LayoutError(f"{what}: out_sharding must be a parity.P(...) or a TensorLayout, got "
                      f"{type(s).__name__}: {s!r}.", what="out_sharding", value=s)


def matmul(a: Any, b: Any, *, out_sharding: Any = None) -> jax.Array:
    """``jnp.matmul(a, b, out_sharding=...)`` with a parity ``P``."""
    return jax.numpy.matmul(a, b, out_sharding=_out_sharding(out_sharding, "matmul"))


def dot(a: Any, b: Any, *, out_sharding: Any = None) -> jax.Array:
    """``jnp.dot(a, b, out_sharding=...)`` with a parity ``P``."""
    return jax.numpy.dot(a, b, out_sharding=_out_sharding(out_sharding, "dot"))


def einsum(subscripts: str, *operands: Any, out_sharding: Any = None) -> jax.Array:
    """``jnp.einsum(subscripts, *operands, out_sharding=...)`` with a parity ``P``."""
    return jax.numpy.einsum(subscripts, *operands,
                            out_sharding=_out_sharding(out_sharding, "einsum"))
