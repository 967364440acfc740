"""Explicit axes under ``jax_semantics()``: where JAX's explicit mode
refuses an op (``ShardingTypeError``: contracting dims sharded
inconsistently or on both sides, conflicting elementwise operands, an axis
on two dims, ``where`` over differently sharded operands, indexing or
gathering along a sharded dim, sorting or scanning along one, a reshape
JAX cannot type, a slice, pad, split or roll whose pieces a sharded dim's
shard count does not divide, tiling a sharded dim), parity raises ``parity.ShardingTypeError`` naming the
operands' specs and the ``reshard`` that fixes it.

The rules (``parity.sharding_rules``, checked against JAX) mark such a plan
``chosen``; this module decides whether the mesh's axis types make it an
error: on a mesh with no Explicit axis never (Auto: the plan runs, as
today); when every mesh axis the operands name is Explicit, always (the
rule then sees exactly JAX's types). When the operands name Auto axes too,
JAX's types hold only the Explicit axes: the rule is asked again on
stand-in operands sharded over those alone (same shapes and mesh, no
data), and the op is refused when that plan is ``chosen``; otherwise that
plan lays the op out (``a + b`` of ``P('data', None)`` and ``P('model',
None)`` with ``data`` Auto is JAX's ``float32[8@model,8]``, where auto
mode's choice over both axes would keep ``data``).

Under ``torch.compile`` the check runs as traced code (the mesh's axis types
and the operands' placements are constants there; a function traced on an
Explicit mesh is guarded on them) and the error comes out as the cause of
dynamo's error (``traced_errors``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.tensor import DTensor

from parity.axis_types import AxisType
from parity.errors import ShardingTypeError
from parity.layout import Spec, entry_from_names
from parity.torch_impl.layouts import meshes
from parity.torch_impl.semantics import axis_overrides
from parity.torch_impl.layouts.typed_mesh import axis_types_of
from parity.torch_impl.layouts.specs import spec_and_pending
from parity.torch_impl.runtime.torch_compat import tree_map
from parity.torch_impl.semantics.traced_errors import raise_error

_is_compiling = torch.compiler.is_compiling  # dynamo folds it (by identity) to True


def _p(spec: Spec) -> str:
    return "P(" + ", ".join(repr(entry_from_names(n)) for n in spec) + ")"


def _name(loc: tuple) -> str:
    where = f"argument {loc[1]}" if loc[0] == "a" else f"{loc[1]}="
    return where + (f"[{loc[2]}]" if len(loc) > 2 else "")


def _typed_plan(explicit: set[str], func: Any, args: tuple, kwargs: dict, torch_mesh: Any) -> Any:
    """The rule's plan of the call with each operand sharded over its
    ``explicit`` axes only (JAX's type of it), or ``None`` (no rule)."""
    from parity.torch_impl.semantics import rules
    from parity.torch_impl.layouts.tensors import result_spec

    def stand_in(t: Any) -> Any:
        if not isinstance(t, DTensor):
            return t
        spec = tuple(tuple(n for n in names if n in explicit) for names in spec_and_pending(t)[0])
        if _is_compiling():  # dynamo traces from_local (unused: no graph node is kept)
            meta = result_spec(t.device_mesh, spec, tuple(t.shape), t.dtype)
            return DTensor.from_local(t.to_local().detach(), t.device_mesh, meta.placements,
                                      run_check=False, shape=t.shape, stride=t.stride())
        meta = result_spec(torch_mesh, spec, tuple(t.shape), t.dtype)
        return DTensor.__new__(DTensor, t._local_tensor, meta, requires_grad=False)

    return rules.plan_for(func, tree_map(stand_in, args), tree_map(stand_in, kwargs), torch_mesh)


def explicit_axes(torch_mesh: Any) -> frozenset[str]:
    """The names of ``torch_mesh``'s axes that are Explicit now (its types,
    or an override running); empty on an Auto mesh, where nothing is looked
    up: a compiled function traces no mesh lookup here."""
    if axis_types_of(torch_mesh) is None and not axis_overrides.active():
        return frozenset()  # all Auto
    mesh = meshes.to_parity_mesh(torch_mesh)
    return frozenset(name for name, t in zip(mesh.axis_names, axis_overrides.effective_types(mesh))
                     if t == AxisType.Explicit)


def refuse_if_ambiguous(func: Any, op: str, plan: Any, operands: list[tuple[tuple, Any]],
                        args: tuple, kwargs: dict, torch_mesh: Any,
                        explicit: frozenset[str]) -> Any:
    """Raise ``ShardingTypeError`` for ``func`` (named ``op``) whose
    ``chosen`` plan JAX's types refuse on the ``explicit`` axes (see the
    module docstring). Else ``None``, or -- on a mixed mesh, where the
    operands' Explicit axes alone are typed and JAX's rule answers -- that
    plan (``rules.Plan``): JAX's types then lay the op out, not auto mode's
    choice over every axis. ``operands``: ``decision.operands(args,
    kwargs)``."""
    specs = [spec_and_pending(t)[0] for _, t in operands]
    named = {n for spec in specs for names in spec for n in names}
    if not named & explicit:
        return None
    if not named <= explicit:
        typed = _typed_plan(explicit, func, args, kwargs, torch_mesh)
        if typed is None or not typed.chosen:
            return typed
    # the reshards JAX needs: ``plan.fix`` where auto mode lays operands out otherwise
    wanted = plan.inputs if plan.fix is None else plan.fix
    fixes = [f"reshard({_name(loc)}, {_p(wanted[loc])})"
             for (loc, _), spec in zip(operands, specs)
             if loc in wanted and wanted[loc] != spec]
    fix = "; ".join(fixes) if fixes else "reshard the operands to one consistent sharding"
    raise_error(
        ShardingTypeError,
        f"{op}: on Explicit mesh axes JAX's sharding rules give no result type for operands "
        f"sharded as {', '.join(_p(s) for s in specs)} (the result's sharding is ambiguous, "
        f"or the op needs a dim unsharded; JAX raises ShardingTypeError here). Fix: {fix}, "
        f"or use a mesh with Auto axes.",
        op=op, specs=tuple(specs), fix=fix)
