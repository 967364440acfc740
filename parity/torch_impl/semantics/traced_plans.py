"""JAX's plan for an op under ``torch.compile``, decided outside dynamo's trace.

Eagerly the mode asks ``rules.plan_for`` per call. Under ``torch.compile``
dynamo traced that rule Python op by op (the rule registry, the
framework-free sharding algebra, spec and placement conversions): most of
the instructions dynamo traced for a step were parity's decision, not the
DTensor ops it decides. The plan depends only on metadata -- the function,
each DTensor operand's placements, global shape, dtype and
``requires_grad``, the mesh, and the non-tensor arguments -- all constants
while dynamo traces with static shapes. So under dynamo the mode describes
the call by those constants (``describe``, a few traced instructions per
operand) and ``_plan_untraced`` (``torch.compiler.assume_constant_result``:
dynamo calls it with the real values and the plan enters the graph as a
constant) runs the very same rule on stand-in DTensors with those specs and
meta-device blocks, cached per description. Dynamo then traces only what
the plan says to do: the redistributes and the op.

A call that cannot be described by constants (a plain tensor or an object
among the arguments, a symbolic size under dynamic shapes) takes the traced
rule as before. Eagerly nothing changes: ``plan_for`` is ``rules.plan_for``.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.distributed.tensor import DTensor, Partial
from torch.fx.experimental.symbolic_shapes import has_static_value

from parity.errors import LayoutError
from parity.torch_impl.layouts.placements import to_spec
from parity.torch_impl.layouts.specs import mesh_axis_names, placements_for, spec_and_pending
from parity.torch_impl.runtime.torch_compat import DTensorSpec, TensorMeta
from parity.torch_impl.semantics import rules

_dynamo_compiling = torch.compiler.is_dynamo_compiling
_CONSTANTS = (bool, int, float, str, type(None), torch.dtype, torch.device, torch.memory_format,
              torch.layout)


def plan_for(func: Any, args: tuple, kwargs: dict, mesh) -> Any:
    """``rules.plan_for(func, args, kwargs, mesh)``; under dynamo, decided
    outside the trace when the call can be described by constants (see the
    module docstring). Exceptions of the rule propagate as they do eagerly."""
    if not _dynamo_compiling():
        return rules.plan_for(func, args, kwargs, mesh)
    described = describe(args, kwargs)
    if described is None:
        return rules.plan_for(func, args, kwargs, mesh)
    found = _plan_untraced(func, described, mesh)
    if found is None:
        return None
    if isinstance(found, str):  # _TRACED: the rule's outputs are computed from the outputs
        return rules.plan_for(func, args, kwargs, mesh)
    inputs, outputs, linear, chosen = found
    return rules.Plan(dict(inputs), outputs, linear, chosen)


def describe(args: tuple, kwargs: dict) -> tuple | None:
    """The call's arguments as hashable constants: per DTensor
    ``("T", placements, shape, dtype, requires_grad, is_leaf)``, per list or
    tuple ``("L" | "U", items)``, per ``torch.Size`` ``("S", sizes)``, per
    constant ``("C", value)``; ``None``
    when some argument is none of these or a size is symbolic."""
    found_args = _describe_each(args)
    found_kwargs = _describe_each(kwargs.values())
    if found_args is None or found_kwargs is None:
        return None
    return found_args, tuple(zip(kwargs, found_kwargs))


def _describe_each(values) -> tuple | None:
    """``_describe_one`` of each value; ``None`` when any is ``None``."""
    found = []
    for value in values:
        one = _describe_one(value)
        if one is None:
            return None
        found.append(one)
    return tuple(found)


def _describe_one(value: Any) -> tuple | None:
    if isinstance(value, DTensor):
        # Sizes only (no rule reads a stride; dynamo 2.13 fails building a
        # DTensor's symbolic stride as a constant), each checked with
        # ``has_static_value``: dynamo answers it truthfully, where
        # ``isinstance(n, int)`` is True for a symbolic size too.
        shape = tuple(value.shape)
        for n in shape:
            if not has_static_value(n):
                return None
        return ("T", tuple(value.placements), shape, value.dtype, value.requires_grad,
                value.is_leaf)
    if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
        items = _describe_each(value)
        return None if items is None else ("U" if type(value) is tuple else "L", items)
    if isinstance(value, torch.Size):
        for n in value:
            if not has_static_value(n):
                return None
        return ("S", tuple(value))
    if isinstance(value, (bool, int, float)):
        return ("C", value) if has_static_value(value) else None
    if isinstance(value, _CONSTANTS):
        return ("C", value)
    return None


@torch.compiler.assume_constant_result
def _plan_untraced(func: Any, described: tuple, mesh) -> Any:
    """The plan for a described call: called by dynamo with the real values
    (the mesh unwrapped from dynamo's ``FakeScriptObject``)."""
    return _plan_cached(func, described, getattr(mesh, "real_obj", mesh))


# The answer for a plan whose output specs are a function of the outputs
# (a rule that needs the output shapes): that call's rule is traced as before.
_TRACED = "trace the rule"


@functools.lru_cache(maxsize=4096)
def _plan_cached(func: Any, described: tuple, mesh) -> Any:
    """The plan as plain constants ``(inputs items, outputs, linear,
    chosen)`` (a plan object would carry dynamo guards on a constant, which
    dynamo cannot build), ``None`` (no rule) or ``_TRACED``."""
    arg_parts, kwarg_parts = described
    args = tuple(_rebuild(part, mesh) for part in arg_parts)
    kwargs = {name: _rebuild(part, mesh) for name, part in kwarg_parts}
    plan = rules.plan_for(func, args, kwargs, mesh)
    if plan is None:
        return None
    if callable(plan.outputs):
        return _TRACED
    return tuple(plan.inputs.items()), plan.outputs, plan.linear, plan.chosen


def _rebuild(part: tuple, mesh) -> Any:
    kind = part[0]
    if kind == "T":
        _, placements, shape, dtype, requires_grad, _ = part
        local = torch.empty(shape, dtype=dtype, device="meta")
        meta = TensorMeta(torch.Size(shape), local.stride(), dtype)
        return DTensor(local, DTensorSpec(mesh, placements, tensor_meta=meta),
                       requires_grad=requires_grad)
    if kind == "U":
        return tuple(_rebuild(p, mesh) for p in part[1])
    if kind == "L":
        return [_rebuild(p, mesh) for p in part[1]]
    if kind == "S":
        return torch.Size(part[1])
    return part[1]


# --- the whole decision around the op, for dynamo -------------------------
#
# Beyond the plan, the mode decides per operand whether to complete a pending
# sum, which spec to redistribute it to and whether a leaf is guarded, and
# per output whether to defer, complete or redistribute it. All of that is a
# function of the same description (and of the outputs' placements), so under
# dynamo it is decided here, outside the trace, once per description: dynamo
# then traces the completions, the redistributes and the op, not the Python
# that chose them.

Action = tuple  # (complete first, spec to redistribute to or None, guard)


def decision_for(func: Any, args: tuple, kwargs: dict, mesh, defer: bool,
                 grad: bool) -> tuple | None:
    """Under dynamo, ``(plan, actions, keep_partial)`` for a call described
    by constants: ``plan`` as ``_plan_cached`` gives it (``None``: no rule),
    ``actions`` one ``Action`` per DTensor operand in the order the mode
    visits them (each argument, and the items of a list or tuple argument);
    ``None`` where the call cannot be decided outside the trace (not
    described, a rule whose output specs need the outputs, an operand whose
    placements no spec describes): the mode then decides as it does eagerly."""
    described = describe(args, kwargs)
    if described is None:
        return None
    return _decision_untraced(func, described, mesh, defer, grad)


@torch.compiler.assume_constant_result
def _decision_untraced(func: Any, described: tuple, mesh, defer: bool, grad: bool) -> Any:
    return _decision_cached(func, described, getattr(mesh, "real_obj", mesh), defer, grad)


@functools.lru_cache(maxsize=4096)
def _decision_cached(func: Any, described: tuple, mesh, defer: bool, grad: bool) -> Any:
    plan = _plan_cached(func, described, mesh)
    if isinstance(plan, str):  # _TRACED
        return None
    inputs = dict(plan[0]) if plan is not None else {}
    keep_partial = bool(defer and plan is not None and plan[2])
    actions = []
    for loc, part in _visited(described):
        _, placements, _, _, requires_grad, is_leaf = part
        spec = inputs.get(loc)
        partial = any(isinstance(p, Partial) for p in placements)
        complete = partial and not keep_partial
        guard = grad and requires_grad and is_leaf and not complete  # completed: not a leaf
        if spec is None or (partial and not complete):
            if guard:  # a leaf goes through redistribute to its own spec
                try:
                    spec = spec_and_pending(_rebuild(part, mesh))[0]
                except LayoutError:
                    return None
            else:
                spec = None
        actions.append((complete, spec, guard))
    return plan, tuple(actions), keep_partial


def _visited(described: tuple):
    """``(locator, "T" part)`` of each DTensor operand the mode visits:
    arguments and keyword arguments, and one level into lists and tuples."""
    arg_parts, kwarg_parts = described
    located = [(("a", i), part) for i, part in enumerate(arg_parts)]
    located += [(("k", name), part) for name, part in kwarg_parts]
    for loc, part in located:
        if part[0] == "T":
            yield loc, part
        elif part[0] in ("L", "U"):
            for j, item in enumerate(part[1]):
                if item[0] == "T":
                    yield loc + (j,), item


def output_action(x: DTensor, spec: Any, keep_partial: bool) -> tuple:
    """What the mode does to an output ``x`` whose plan gives ``spec``
    (``None``: none): ``("defer", None)``, ``("complete", None)`` (strided
    shards gathered, pending sums completed), ``("keep", None)`` or
    ``("to", spec)``; decided outside dynamo's trace."""
    return _output_action_untraced(tuple(x.placements), x.ndim, spec, keep_partial,
                                   x.device_mesh)


@torch.compiler.assume_constant_result
def _output_action_untraced(placements: tuple, ndim: int, spec: Any, keep_partial: bool,
                            mesh) -> tuple:
    spec = None if spec is None else tuple(tuple(names) for names in spec)  # hashable
    return _output_action(placements, ndim, spec, keep_partial, getattr(mesh, "real_obj", mesh))


@functools.lru_cache(maxsize=4096)
def _output_action(placements: tuple, ndim: int, spec: Any, keep_partial: bool, mesh) -> tuple:
    partial = any(isinstance(p, Partial) for p in placements)
    if keep_partial and partial:
        return ("defer", None)
    names, shape = mesh_axis_names(mesh), tuple(mesh.shape)
    if spec is None or len(spec) != ndim:
        try:
            to_spec(placements, ndim, shape, names)
            describable = True
        except LayoutError:
            describable = False
        return ("complete", None) if partial or not describable else ("keep", None)
    if placements_for(spec, mesh) != placements:
        return ("to", spec)
    return ("keep", None)
