"""Argument checks at the public entries of both backends.

One helper per kind of check, so the same bad argument gets the same error
on JAX and on torch. Neutral: imports neither torch nor jax. Only public
entries call these (never the per-op path).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from parity.errors import LayoutError, ParityError

# numpy dtype kinds that are not numbers: object, text, bytes, dates.
_NOT_NUMERIC = "OUSMm"


def shown(value: object) -> str:
    """``value``'s type and repr for an error message (a long repr cut)."""
    text = repr(value)
    if len(text) > 200:
        text = text[:200] + "..."
    return f"{type(value).__name__} {text}"


def numeric_host(value: Any, what: str, arg: str) -> np.ndarray:
    """``value`` (host data: numpy, lists, scalars) as a numeric numpy array.

    Raises ``ParityError`` naming ``arg`` and the value when it does not
    convert or is not numeric (object, string, bytes or date data)."""
    try:
        array = np.asarray(value)
    except Exception as err:  # noqa: BLE001 - report any conversion failure alike
        raise ParityError(
            f"{what}: {arg}={shown(value)} is not array data ({err}). Fix: pass a numeric "
            "numpy array, a list of numbers or a tensor.") from None
    if array.dtype.kind in _NOT_NUMERIC:
        raise ParityError(
            f"{what}: {arg}={shown(value)} holds {array.dtype} data, not numbers. Fix: pass "
            "a numeric numpy array, a list of numbers or a tensor.")
    return array


def check_device_type(device_type: object, what: str) -> str | None:
    """``device_type`` lower-cased, or ``None``; raises ``ParityError`` for
    a value that is not a string (``"cpu"``, ``"gpu"``...) or ``None``."""
    if device_type is None:
        return None
    if not isinstance(device_type, str):
        raise ParityError(
            f"{what}: device_type={shown(device_type)} is not a device type. Fix: 'cpu', "
            "'gpu', or leave it out.")
    return device_type.lower()


def check_device_index(device_index: object, count: int, what: str) -> int:
    """``device_index`` if it is an int in ``[0, count)``; ``ParityError``
    naming it otherwise (a bool, float or ``None`` is not an index)."""
    if (isinstance(device_index, bool) or not isinstance(device_index, (int, np.integer))
            or not 0 <= device_index < count):
        raise ParityError(
            f"{what}: device_index={shown(device_index)} is not a device of a mesh of "
            f"{count} devices. Fix: an int in [0, {count}).")
    return int(device_index)


def check_callable(f: object, what: str, arg: str = "f") -> Callable:
    """``f`` if it is callable; ``TypeError`` naming it otherwise."""
    if not callable(f):
        raise TypeError(f"{what}: {arg}={shown(f)} is not callable. Fix: pass a function.")
    return f


def check_arity(f: Callable, n: int, what: str) -> None:
    """``TypeError`` naming ``f`` when it cannot take ``n`` positional
    arguments (one whose signature Python cannot read is let through)."""
    try:
        inspect.signature(f).bind(*range(n))
    except TypeError as err:
        raise TypeError(f"{what}: f={shown(f)} cannot take {n} argument(s): {err}") from None
    except ValueError:
        pass


def call_checked(f: Callable, args: tuple | list, what: str) -> Any:
    """``f(*args)``; when that raises ``TypeError`` because ``f`` cannot
    take ``len(args)`` arguments, a ``TypeError`` naming ``f`` instead
    (the check runs only on that failure: nothing on the way through)."""
    try:
        return f(*args)
    except TypeError:
        check_arity(f, len(args), what)
        raise


def check_axes(axes: object, what: str, arg: str = "axes") -> tuple[str, ...] | None:
    """Mesh axis names as a tuple (one name, or a tuple/list/set of names),
    or ``None``. Raises ``LayoutError`` naming ``arg`` and the value for
    anything else (the names are checked against the mesh later)."""
    if axes is None:
        return None
    if isinstance(axes, str):
        return (axes,)
    if isinstance(axes, (tuple, list, set, frozenset)) and all(isinstance(a, str) for a in axes):
        return tuple(sorted(axes)) if isinstance(axes, (set, frozenset)) else tuple(axes)
    raise LayoutError(
        f"{what}: {arg}={shown(axes)} is not mesh axis names. Fix: an axis name or a "
        "tuple of them.", what=arg, value=axes)


def check_axes_on_mesh(names: tuple[str, ...], mesh_axis_names: tuple[str, ...], what: str,
                       arg: str = "axes") -> None:
    """Raises ``LayoutError`` for a name in ``names`` that is not a mesh axis."""
    unknown = [n for n in names if n not in mesh_axis_names]
    if unknown:
        raise LayoutError(
            f"{what}: {arg} names {tuple(unknown)!r}, which are not axes of the mesh "
            f"{tuple(mesh_axis_names)}. Fix: name mesh axes.", what=arg, value=tuple(unknown))


def check_spec_tree(specs: object, what: str, arg: str, *, allow_none: bool = False) -> None:
    """Raises ``LayoutError`` naming ``arg`` and the value unless ``specs``
    is a ``parity.P``, a ``TensorLayout`` or a tuple/list of them (nested;
    ``None`` entries too when ``allow_none``)."""
    from parity.layout import TensorLayout
    from parity.partition_spec import PartitionSpec

    def ok(s: object) -> bool:
        if isinstance(s, (PartitionSpec, TensorLayout)):
            return True
        if s is None:
            return allow_none
        return isinstance(s, (tuple, list)) and all(ok(e) for e in s)

    if not ok(specs):
        raise LayoutError(
            f"{what}: {arg}={shown(specs)} is not a parity.P(...), a TensorLayout or a "
            "tuple of them. Fix: e.g. P('data', None).", what=arg, value=specs)


def as_parity_mesh(mesh: object, what: str, arg: str = "device_mesh") -> Any:
    """``mesh`` as a ``parity.DeviceMesh``: a parity mesh as it is, a Keras
    ``DeviceMesh`` (``shape``, ``axis_names``, ``devices``) converted.
    Raises ``LayoutError`` naming ``arg`` and the value for anything else."""
    from parity.mesh import DeviceMesh

    if isinstance(mesh, DeviceMesh):
        return mesh
    if mesh is None or any(not hasattr(mesh, a) for a in ("shape", "axis_names", "devices")):
        raise LayoutError(
            f"{what}: {arg}={shown(mesh)} is not a parity.DeviceMesh or a Keras DeviceMesh. "
            "Fix: parity.make_mesh(shape, names) or parity.DeviceMesh(...).",
            what=arg, value=mesh)
    return DeviceMesh(tuple(mesh.shape), tuple(mesh.axis_names), np.asarray(mesh.devices))


def check_mesh_arg(mesh: object, what: str) -> Any:
    """``mesh`` if it is a ``parity.DeviceMesh`` or ``None``; ``LayoutError``
    naming the value otherwise."""
    from parity.mesh import DeviceMesh

    if mesh is not None and not isinstance(mesh, DeviceMesh):
        raise LayoutError(
            f"{what}: mesh={shown(mesh)} is not a parity.DeviceMesh. Fix: "
            "parity.make_mesh(shape, names), or leave mesh= out for the ambient mesh.",
            what="mesh", value=mesh)
    return mesh


def broadcast_specs(specs: object, values: list, what: str, arg: str) -> list:
    """One entry of ``specs`` per value: one spec for all, or a tuple/list
    with one entry per value (a nested tuple only for a value that is itself
    a tuple, list or dict). Raises ``LayoutError`` naming ``arg`` otherwise."""
    from parity.layout import TensorLayout
    from parity.partition_spec import PartitionSpec

    if isinstance(specs, (PartitionSpec, TensorLayout)):
        return [specs] * len(values)
    if isinstance(specs, (tuple, list)) and len(specs) == len(values):
        for s, v in zip(specs, values):
            if isinstance(s, (tuple, list)) and not isinstance(v, (tuple, list, dict)):
                break
        else:
            return list(specs)
    raise LayoutError(
        f"{what}: {arg}={shown(specs)} does not match {len(values)} value(s). Fix: one P for "
        "all, or a tuple with one P per value.", what=arg, value=specs)


def spec_text(spec: Any) -> str:
    """A spec (one tuple of axis names per dim) as ``P(...)`` is written."""
    from parity.spec_entries import entry_from_names

    return "P(" + ", ".join(repr(entry_from_names(n)) for n in spec) + ")"


def out_spec_varies(index: int, spec: Any, missing: tuple, varying: set) -> tuple[str, str]:
    """``(message, fix)`` of the ``ShardingTypeError`` both backends raise
    when ``shard_map``'s ``out_specs[index]`` leaves out axes ``missing``
    along which the output varies (JAX's words for each axis, then why)."""
    claims = " and ".join(f"replicated across mesh axis {a!r}" for a in missing)
    message = (f"shard_map out_specs[{index}] is {spec_text(spec)}, which claims the output is "
               f"{claims} (replicated along {missing}), but it varies along them (its type is "
               f"varying over {tuple(sorted(varying))}). Fix: name {missing} in "
               f"out_specs, or psum/all_gather over {missing} in the body.")
    return message, f"psum(out, {missing!r}) or out_specs naming {missing}"
