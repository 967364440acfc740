"""Explicit axes under ``jax_semantics()``: where JAX's explicit mode
refuses an op (``ShardingTypeError``: contracting dims sharded
inconsistently or on both sides, conflicting elementwise operands, an axis
on two dims), parity raises ``parity.ShardingTypeError`` naming the
operands' specs and the ``reshard`` that fixes it.

The rules (``parity.sharding_rules``, checked against JAX) mark such a plan
``chosen``; this module decides whether the mesh's axis types make it an
error: on a mesh with no Explicit axis never (Auto: the plan runs, as
today); when every mesh axis the operands name is Explicit, always (the
rule then sees exactly JAX's types). A mixed mesh whose operands name both
Auto and Explicit axes is not refused here (JAX's rule on the Explicit part
alone is not computed): the plan runs as on Auto axes.
"""

from __future__ import annotations

from typing import Any

from torch.distributed.tensor import DTensor

from parity.axis_types import AxisType
from parity.errors import ShardingTypeError
from parity.layout import Spec, entry_from_names
from parity.torch_impl import meshes
from parity.torch_impl.tensors import spec_of as spec_and_pending


def _p(spec: Spec) -> str:
    return "P(" + ", ".join(repr(entry_from_names(n)) for n in spec) + ")"


def _operands(args: tuple, kwargs: dict) -> list[tuple[tuple, DTensor]]:
    found = []

    def visit(loc: tuple, value: Any) -> None:
        if isinstance(value, DTensor):
            found.append((loc, value))
        elif isinstance(value, (list, tuple)):
            for j, v in enumerate(value):
                if isinstance(v, DTensor):
                    found.append((loc + (j,), v))

    for i, a in enumerate(args):
        visit(("a", i), a)
    for k, v in kwargs.items():
        visit(("k", k), v)
    return found


def _name(loc: tuple) -> str:
    where = f"argument {loc[1]}" if loc[0] == "a" else f"{loc[1]}="
    return where + (f"[{loc[2]}]" if len(loc) > 2 else "")


def refuse_if_explicit(op: str, plan: Any, args: tuple, kwargs: dict, torch_mesh: Any) -> None:
    """Raise ``ShardingTypeError`` for a ``chosen`` plan whose operands name
    only Explicit mesh axes (see the module docstring); else return."""
    mesh = meshes.to_parity_mesh(torch_mesh)
    explicit = set(mesh.axes_of_type(AxisType.Explicit))
    if not explicit:
        return
    operands = _operands(args, kwargs)
    specs = [spec_and_pending(t)[0] for _, t in operands]
    named = {n for spec in specs for names in spec for n in names}
    if not named or not named <= explicit:
        return
    fixes = [f"reshard({_name(loc)}, {_p(plan.inputs[loc])})"
             for (loc, _), spec in zip(operands, specs)
             if loc in plan.inputs and plan.inputs[loc] != spec]
    fix = "; ".join(fixes) if fixes else "reshard the operands to one consistent sharding"
    raise ShardingTypeError(
        f"{op}: on Explicit mesh axes the result's sharding is ambiguous for operands "
        f"sharded as {', '.join(_p(s) for s in specs)} (JAX raises ShardingTypeError "
        f"here). Fix: {fix}, or use a mesh with Auto axes.",
        op=op, specs=tuple(specs), fix=fix)
