"""``auto_axes`` / ``explicit_axes``: a function run with some mesh axes of
the ambient mesh typed otherwise (JAX's ``jax.sharding.auto_axes`` and
``explicit_axes``).

Inside ``auto_axes(f, axes=..., out_sharding=P(...))`` the named axes are
Auto: ``typeof`` hides them and ops on them are not refused; the outputs are
resharded to ``out_sharding``. Inside ``explicit_axes(f, axes=...,
in_sharding=P(...))`` they are Explicit: the inputs are resharded to
``in_sharding`` and ambiguous ops raise ``ShardingTypeError``. The override
is per thread and applies to the ambient mesh's axes by name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from parity import ambient
from parity.arg_checks import check_axes, check_axes_on_mesh, check_callable
from parity.axis_types import AxisType
from parity.errors import LayoutError
from parity.torch_impl.runtime.torch_compat import tree_flatten, tree_unflatten
from parity.torch_impl.semantics import axis_overrides


def _scoped(f: Callable, axes: Any, axis_type: AxisType, what: str, before, after) -> Callable:
    check_callable(f, what)
    axes = check_axes(axes, what)

    @functools.wraps(f)
    def wrapper(*args: Any) -> Any:
        mesh = ambient.get_mesh()
        if mesh is None:
            raise LayoutError(f"{what} needs an ambient mesh: run inside set_mesh(mesh).", what="mesh", value=None)
        names = mesh.axis_names if axes is None else axes
        check_axes_on_mesh(names, mesh.axis_names, what)
        args = before(args)
        with axis_overrides.overridden({n: axis_type for n in names}):
            out = f(*args)
        return after(out)

    return wrapper


def _reshard_all(values: Any, sharding: Any, what: str) -> Any:
    from parity.torch_impl.explicit.api import reshard

    leaves, tree = tree_flatten(values)
    if sharding is None:
        raise LayoutError(f"{what} needs a sharding (a P or a tuple of them, one per value).", what=what, value=sharding)
    specs = list(sharding) if isinstance(sharding, (tuple, list)) else [sharding] * len(leaves)
    if len(specs) != len(leaves):
        raise LayoutError(f"{what}: {len(specs)} shardings for {len(leaves)} values.", what=what, value=sharding)
    return tree_unflatten([reshard(v, s) for v, s in zip(leaves, specs)], tree)


def auto_axes(f: Callable, *, axes: str | tuple[str, ...] | None = None,
              out_sharding: Any = None) -> Callable:
    """``f`` with ``axes`` (default: all) of the ambient mesh Auto inside;
    its outputs resharded to ``out_sharding``. Raises ``TypeError`` for an
    ``f`` that is not callable, ``LayoutError`` for ``axes`` that are not
    axis names; when called, with no ambient mesh, an unknown axis or no
    ``out_sharding``."""
    return _scoped(f, axes, AxisType.Auto, "auto_axes", lambda args: args,
                   lambda out: _reshard_all(out, out_sharding, "auto_axes out_sharding"))


def explicit_axes(f: Callable, *, axes: str | tuple[str, ...] | None = None,
                  in_sharding: Any = None) -> Callable:
    """``f`` with ``axes`` (default: all) of the ambient mesh Explicit
    inside, its inputs resharded to ``in_sharding`` first. Raises like
    ``auto_axes``, for ``in_sharding``."""
    return _scoped(f, axes, AxisType.Explicit, "explicit_axes",
                   lambda args: _reshard_all(args, in_sharding, "explicit_axes in_sharding"),
                   lambda out: out)
