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

import functools
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as JaxP

from parity import ambient
from parity.axis_types import AxisType
from parity.arg_checks import (broadcast_specs, call_checked, check_axes, check_axes_on_mesh,
                               check_callable, check_mesh_arg, check_spec_tree, numeric_host,
                               out_spec_varies, shown, spec_text)
from parity.errors import LayoutError, ParityError, ShardingTypeError
from parity.jax_ref.meshes import spec_of, to_jax_mesh, to_partition_spec
from parity.layout import TensorLayout
from parity.mesh import DeviceMesh
from parity.partition_spec import PartitionSpec


class set_mesh(ambient.set_mesh):
    """``jax.set_mesh`` on the JAX mesh of ``mesh`` (its own axis types),
    and parity's ambient mesh with it: a plain call sets both for this
    thread until the next call, ``with set_mesh(mesh):`` for the block (the
    exit restores the previous ones); ``set_mesh(None)`` clears both.
    Raises ``LayoutError`` for a value that is not a ``parity.DeviceMesh``
    or ``None``, and for a mesh with Manual axes (JAX refuses those too);
    JAX's ``ValueError`` inside ``jax.jit``."""

    __slots__ = ("_jax",)

    def __init__(self, mesh: DeviceMesh | None) -> None:
        mesh = ambient.check_mesh(mesh)
        self._jax = jax.set_mesh(None if mesh is None else to_jax_mesh(mesh, None))
        super().__init__(mesh)

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        self._jax.__exit__(*exc)


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
    own axis types. Raises ``LayoutError`` (no ambient mesh, rank mismatch),
    ``IndivisibleError`` (a dim that does not divide) and ``ParityError``
    (host data that is not numeric)."""
    value = x if isinstance(x, jax.Array) else numeric_host(x, "device_put", "x")
    layout = ambient.to_layout(spec_or_layout, value.ndim, "device_put")
    layout.check_shape(value.shape)
    return jax.device_put(value, _sharding(layout, value.ndim, "device_put"))


def _check_value(x: Any, what: str) -> None:
    """Raises ``ParityError`` naming ``x`` unless it is a ``jax.Array`` or
    numeric host data."""
    if not isinstance(x, jax.Array):
        numeric_host(x, what, "x")


def typeof(x: Any) -> Any:
    """``jax.typeof(x)``: its ``str`` is ``float32[8@data,8@model]``.
    Raises ``ParityError`` naming ``x`` for a value JAX has no type for
    (not numeric, or an int too large for its dtype)."""
    _check_value(x, "typeof")
    try:
        return jax.typeof(x)
    except (OverflowError, TypeError) as err:
        raise ParityError(f"typeof: x={shown(x)} has no JAX type: {err}") from None


def reshard(x: Any, spec_or_layout: Any) -> jax.Array:
    """``jax.sharding.reshard(x, sharding)`` (differentiable; the gradient
    comes back in ``x``'s sharding). Raises like ``device_put``."""
    _check_value(x, "reshard")
    return jax.sharding.reshard(x, _sharding(spec_or_layout, np.ndim(x), "reshard"))


class ExplicitAssertionError(ShardingTypeError, AssertionError):
    """``with_sharding_constraint``'s refusal on Explicit axes: parity's
    ``ShardingTypeError`` (as torch_impl raises) that is also the
    ``AssertionError`` JAX raises there, so code written against JAX keeps
    catching it."""


def with_sharding_constraint(x: Any, spec_or_layout: Any) -> jax.Array:
    """``jax.lax.with_sharding_constraint``: on Auto axes a reshard, on
    Explicit axes an assertion: ``ShardingTypeError`` naming the
    ``reshard`` to use when the sharding differs (JAX raises an
    ``AssertionError``, which it also is: ``ExplicitAssertionError``;
    torch_impl raises the same ``ShardingTypeError``). Raises like
    ``reshard`` besides."""
    _check_value(x, "with_sharding_constraint")
    sharding = _sharding(spec_or_layout, np.ndim(x), "with_sharding_constraint")
    try:
        return jax.lax.with_sharding_constraint(x, sharding)
    except AssertionError:
        ndim = np.ndim(x)
        want = spec_of(sharding.spec, ndim)
        have = spec_of(jax.typeof(x).sharding.spec, ndim)
        raise ExplicitAssertionError(
            f"with_sharding_constraint is an assertion on Explicit axes: the array's "
            f"sharding {_p(have)} is not {_p(want)}. Fix: reshard(x, {_p(want)}).",
            op="with_sharding_constraint", specs=(have, want),
            fix=f"reshard(x, {_p(want)})") from None


_p = spec_text


def _jax_specs(specs: Any) -> Any:
    def one(s: Any) -> Any:
        if isinstance(s, PartitionSpec):
            return _jax_p(s)
        if isinstance(s, TensorLayout):
            return to_partition_spec(s.spec)
        return s

    return jax.tree_util.tree_map(
        one, specs, is_leaf=lambda s: isinstance(s, (PartitionSpec, TensorLayout)))


def _spec_names(s: Any, ndim: int) -> Any:
    """The ``Spec`` of a ``P`` or ``TensorLayout`` for rank ``ndim`` (``None``
    for a nested entry, which JAX checks itself)."""
    if isinstance(s, PartitionSpec):
        return s.spec_for(ndim)
    if isinstance(s, TensorLayout):
        return s.spec
    return None


def _names_in(specs: Any) -> set:
    """Every mesh axis a tree of ``P``s and layouts names."""
    if isinstance(specs, PartitionSpec):
        return {n for names in specs.spec_for(len(specs)) for n in names} | set(specs.unreduced)
    if isinstance(specs, TensorLayout):
        return {n for names in specs.spec for n in names}
    if isinstance(specs, (tuple, list)):
        return set().union(*(_names_in(s) for s in specs)) if specs else set()
    return set()


def _check_arg_types(args: tuple, specs: list, mesh: DeviceMesh) -> None:
    """On the mesh's Explicit axes an argument's type must already be its
    ``in_specs`` entry (JAX's ``ValueError``; torch_impl's
    ``ShardingTypeError`` naming the ``reshard``, raised here too)."""
    explicit = set(mesh.axes_of_type(AxisType.Explicit))
    if not explicit:
        return
    for i, (a, s) in enumerate(zip(args, specs)):
        if not isinstance(a, jax.Array) or isinstance(a, jax.core.Tracer):
            continue
        want = _spec_names(s, a.ndim)
        sharding = a.sharding
        if want is None or not isinstance(sharding, NamedSharding):
            continue
        have = spec_of(sharding.spec, a.ndim)

        def typed(sp: Any) -> tuple:
            return tuple(tuple(n for n in names if n in explicit) for names in sp)

        if typed(have) != typed(want):
            raise ShardingTypeError(
                f"shard_map argument {i}: its type {_p(have)} does not match in_specs[{i}] "
                f"{_p(want)} on the Explicit mesh axes {sorted(explicit)}. "
                f"Fix: reshard(x, {_p(want)}) before the shard_map.",
                op="shard_map", specs=(have, want), fix=f"reshard(x, {_p(want)})")


def _varying(o: Any) -> set:
    """The manual axes ``o`` varies along (JAX 0.10: ``manual_axis_type``;
    earlier: ``vma``)."""
    aval = jax.typeof(o)
    kind = getattr(aval, "manual_axis_type", None)
    return set(kind.varying) if kind is not None else set(getattr(aval, "vma", ()) or ())


def _check_out_vma(outs: list, specs: list, mesh: DeviceMesh) -> None:
    """``check_vma``: an ``out_specs`` entry must name every axis its output
    varies along (JAX's ``ValueError``; torch_impl's ``ShardingTypeError``,
    raised here too)."""
    for i, (o, s) in enumerate(zip(outs, specs)):
        spec = _spec_names(s, np.ndim(o))
        if spec is None:
            continue
        named = {n for names in spec for n in names}
        varying = _varying(o)
        if not varying <= named:
            missing = tuple(a for a in mesh.axis_names if a in varying - named)
            message, fix = out_spec_varies(i, spec, missing, varying)
            raise ShardingTypeError(message, op="shard_map", specs=(spec,), fix=fix)


def shard_map(f: Callable, *, mesh: DeviceMesh | None = None, in_specs: Any,
              out_specs: Any, axis_names: Any = None, check_vma: bool = True) -> Callable:
    """``jax.shard_map`` on the JAX mesh of ``mesh`` (default: the ambient
    mesh), with parity ``P``s as specs. Raises ``TypeError`` for an ``f``
    that is not callable (or, when called, cannot take the arguments);
    ``LayoutError`` with no mesh, for a ``mesh`` that is not a
    ``parity.DeviceMesh`` or is not the ambient one, specs that are not
    ``P``s, ``axis_names`` that are not axes of the mesh or specs naming
    axes outside ``axis_names``; when called, specs that do not match the
    arguments or outputs. ``ShardingTypeError`` (as torch_impl) for an
    argument whose Explicit type is not its ``in_specs`` entry and, with
    ``check_vma``, an ``out_specs`` entry that leaves out an axis its
    output varies along."""
    check_callable(f, "shard_map")
    given = check_mesh_arg(mesh, "shard_map")
    around = ambient.get_mesh()
    mesh = given if given is not None else around
    if mesh is None:
        raise LayoutError("shard_map needs mesh= or an ambient mesh (set_mesh).", what="mesh", value=None)
    if given is not None and around is not None and given != around:
        raise LayoutError(
            f"shard_map: mesh={given!r} is not the ambient mesh {around!r} (JAX requires them "
            "to match). Fix: leave mesh= out, or call it inside set_mesh(mesh).",
            what="mesh", value=given)
    check_spec_tree(in_specs, "shard_map", "in_specs")
    check_spec_tree(out_specs, "shard_map", "out_specs")
    names = check_axes(axis_names, "shard_map", "axis_names")
    kwargs = {}
    if names is not None:
        check_axes_on_mesh(names, mesh.axis_names, "shard_map", "axis_names")
        outside = sorted((_names_in(in_specs) | _names_in(out_specs)) - set(names))
        if outside:
            raise LayoutError(
                f"shard_map: axis_names={axis_names!r} leaves out {outside}, which the specs "
                "name; specs may name only manual axes. Fix: add them to axis_names.",
                what="axis_names", value=axis_names)
        kwargs = {"axis_names": set(names)}

    @functools.wraps(f)
    def body(*blocks: Any) -> Any:
        out = call_checked(f, blocks, "shard_map")
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        o_specs = broadcast_specs(out_specs, outs, "shard_map", "out_specs")
        if check_vma:
            _check_out_vma(outs, o_specs, mesh)
        return out

    # the arguments are a tuple: a list of specs is the same prefix to JAX
    jax_in = _jax_specs(tuple(in_specs) if isinstance(in_specs, list) else in_specs)
    mapped = jax.shard_map(body, mesh=to_jax_mesh(mesh, None), in_specs=jax_in,
                           out_specs=_jax_specs(out_specs), check_vma=check_vma, **kwargs)

    @functools.wraps(f)
    def call(*args: Any) -> Any:
        specs = broadcast_specs(in_specs, list(args), "shard_map", "in_specs")
        _check_arg_types(args, specs, mesh)
        return mapped(*args)

    return call


def _jax_sharding(s: Any) -> Any:
    if s is None:
        return None
    if isinstance(s, (tuple, list)):  # JAX takes a tuple, one per value
        return tuple(_jax_sharding(x) for x in s)
    return _jax_specs(s)


def _scoped(jax_fn: Callable, f: Callable, axes: Any, sharding: Any, what: str,
            arg: str) -> Callable:
    """``jax_fn(f, axes=..., <arg>=...)`` with its arguments checked as
    torch_impl checks them: ``f``, ``axes`` and ``sharding`` when built;
    the names on the ambient mesh and ``sharding`` against the values
    (``in_sharding``: the arguments, ``out_sharding``: the outputs) when
    called."""
    check_callable(f, what)
    names = check_axes(axes, what)
    if sharding is not None:
        check_spec_tree(sharding, what, arg)
    jax_axes = names[0] if names is not None and len(names) == 1 else names

    @functools.wraps(f)
    def call(*args: Any, **kwargs: Any) -> Any:
        mesh = ambient.get_mesh()
        if names is not None and mesh is not None:
            check_axes_on_mesh(names, mesh.axis_names, what)
        chosen = kwargs.pop(arg, sharding)  # JAX lets a call pass its own
        if chosen is None:
            raise LayoutError(f"{what} needs {arg}= (a P or a tuple of them, one per value).",
                              what=arg, value=None)
        check_spec_tree(chosen, what, arg)
        if arg == "in_sharding":
            broadcast_specs(chosen, list(args), what, arg)

        @functools.wraps(f)
        def checked(*a: Any, **k: Any) -> Any:
            out = f(*a, **k)
            if arg == "out_sharding":
                broadcast_specs(chosen, list(out) if isinstance(out, (tuple, list)) else [out],
                                what, arg)
            return out

        return jax_fn(checked, axes=jax_axes, **{arg: _jax_sharding(chosen)})(*args, **kwargs)

    return call


def auto_axes(f: Callable, *, axes: Any = None, out_sharding: Any = None) -> Callable:
    """``jax.sharding.auto_axes`` with parity ``P``s. Raises ``TypeError``
    for an ``f`` that is not callable, ``LayoutError`` for ``axes`` that
    are not mesh axis names and an ``out_sharding`` that is not a ``P`` (or
    a tuple of them); when called, for an axis the ambient mesh lacks and
    for no ``out_sharding``."""
    return _scoped(jax.sharding.auto_axes, f, axes, out_sharding, "auto_axes", "out_sharding")


def explicit_axes(f: Callable, *, axes: Any = None, in_sharding: Any = None) -> Callable:
    """``jax.sharding.explicit_axes`` with parity ``P``s. Raises like
    ``auto_axes``, for ``in_sharding``."""
    return _scoped(jax.sharding.explicit_axes, f, axes, in_sharding, "explicit_axes",
                   "in_sharding")


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
