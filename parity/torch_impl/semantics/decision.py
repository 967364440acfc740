"""The mode's decision around one op, made once per description of the call.

Around an op the mode decides JAX's plan (``rules.plan_for``: the spec each
operand is resharded to, the output specs, whether pending sums may pass,
whether JAX's explicit mode refuses it), then per DTensor operand whether
to complete a pending sum first, the spec to redistribute it to and whether
it is a leaf guarded so that its gradient comes back with its placement
(an ``Action``), and per output whether to keep, defer, complete or
redistribute it (``output_action``). All of it depends only on metadata:
the function, each DTensor operand's placements, global shape, dtype,
``requires_grad`` and ``is_leaf``, the mesh, the non-tensor arguments, the
scope's ``defer`` and grad mode. So the mode describes the call by those
constants (``describe``) and decides once per description (``_decided``,
cached), eagerly and under ``torch.compile`` alike:

* eagerly a later call with the same description costs the description and
  one cache lookup, not the rule's Python (``benchmarks``: the per-call
  rows of ops that reshard);
* under ``torch.compile`` the decision is made outside dynamo's trace
  (``torch.compiler.assume_constant_result``: dynamo calls it with the real
  values and the decision enters the graph as a constant), so dynamo traces
  what the decision says to do -- the completions, the redistributes, the
  op -- and not the Python that chose it.

The rule runs on stand-in DTensors with the described specs and
meta-device blocks (``_rebuild``). A call that cannot be described by
constants (an object among the arguments, a symbolic size under dynamic
shapes), or whose plan computes the output specs from the outputs, is
decided by the same function (``_decide``) from its operands themselves,
uncached.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.distributed.tensor import DTensor, Partial
from torch.fx.experimental.symbolic_shapes import has_static_value

from parity.errors import LayoutError
from parity.torch_impl.layouts.specs import masked_partial, placements_for, spec_of_placements
from parity.torch_impl.runtime.torch_compat import DTensorSpec, TensorMeta
from parity.torch_impl.semantics import rules

_dynamo_compiling = torch.compiler.is_dynamo_compiling
_CONSTANTS = (bool, int, float, str, type(None), torch.dtype, torch.device, torch.memory_format,
              torch.layout)

# A decision, as plain constants (a plan object would carry dynamo guards on
# a constant, which dynamo cannot build):
#   (plan, actions, keep_partial)
#   plan: None (no rule) or (inputs items, outputs, linear, chosen, fix items or None),
#         as rules.Plan (``plan_of``)
#   actions: one Action per DTensor operand, in the order ``operands`` visits them;
#            () when no operand needs anything
Action = tuple  # (complete first, placements to move to or None, guard, pending kept)


def decision_for(func: Any, args: tuple, kwargs: dict, mesh, defer: bool, grad: bool) -> tuple:
    """``(plan, actions, keep_partial)`` for this call (see the module
    docstring), from the cache when the call is described by constants.
    Exceptions of the rule propagate; a ``LayoutError`` for an operand
    whose placements no spec describes, where a leaf guard needs its spec."""
    described = describe(args, kwargs)
    if described is not None:
        if _dynamo_compiling():
            found = _decided_untraced(func, described, mesh, defer, grad)
        else:
            found = _decided_or_none(func, described, mesh, defer, grad)
        if found is not None:
            return found
    return decision_with(rules.plan_for(func, args, kwargs, mesh), args, kwargs, mesh, defer,
                         grad)


def decision_with(plan: rules.Plan | None, args: tuple, kwargs: dict, mesh, defer: bool,
                  grad: bool) -> tuple:
    """``(plan, actions, keep_partial)`` for ``plan`` over this call's
    operands, uncached (``decision_for`` without the rule; the Explicit
    check's plan on a mixed mesh)."""
    facts = [(loc, tuple(t.placements), t.ndim, t.requires_grad, t.is_leaf)
             for loc, t in operands(args, kwargs)]
    return _decide(_constants(plan), facts, mesh, defer, grad)


def _constants(plan: rules.Plan | None) -> tuple | None:
    """The plan as the decision holds it (module docstring)."""
    if plan is None:
        return None
    fix = None if plan.fix is None else tuple(plan.fix.items())
    return (tuple(plan.inputs.items()), plan.outputs, plan.linear, plan.chosen, fix)


def plan_of(plan: tuple) -> rules.Plan:
    """The ``rules.Plan`` a decision's plan constants stand for."""
    return rules.Plan(dict(plan[0]), plan[1], plan[2], plan[3],
                      None if plan[4] is None else dict(plan[4]))


def operands(args: tuple, kwargs: dict) -> list[tuple[tuple, DTensor]]:
    """``(locator, DTensor)`` of each DTensor operand, in the order the
    decision's actions are: arguments, then keyword arguments, one level
    into lists and tuples (locators ``("a", i)``, ``("a", i, j)``,
    ``("k", name)``, ``("k", name, j)``, as ``rules.Call``)."""
    found = []
    for loc, value in _located(args, kwargs):
        if isinstance(value, DTensor):
            found.append((loc, value))
        elif isinstance(value, (list, tuple)):
            for j, item in enumerate(value):
                if isinstance(item, DTensor):
                    found.append((loc + (j,), item))
    return found


def _located(args: tuple, kwargs: dict) -> list[tuple[tuple, Any]]:
    return [(("a", i), a) for i, a in enumerate(args)] + [(("k", k), v) for k, v in kwargs.items()]


def describe(args: tuple, kwargs: dict) -> tuple | None:
    """The call's arguments as hashable constants: per DTensor
    ``("T", placements, shape, dtype, requires_grad, is_leaf)``, per list or
    tuple ``("L" | "U", items)``, per ``torch.Size`` ``("S", sizes)``, per
    constant ``("C", value, type)``; ``None`` when some argument is none of
    these or a size is symbolic."""
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
        # ``has_static_value`` under dynamo: it answers truthfully, where
        # ``isinstance(n, int)`` is True for a symbolic size too.
        shape = tuple(value.shape)
        if _dynamo_compiling():
            for n in shape:
                if not has_static_value(n):
                    return None
        return ("T", tuple(value.placements), shape, value.dtype, value.requires_grad,
                value.is_leaf)
    if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
        items = _describe_each(value)
        return None if items is None else ("U" if type(value) is tuple else "L", items)
    if isinstance(value, torch.Size):
        if _dynamo_compiling():
            for n in value:
                if not has_static_value(n):
                    return None
        return ("S", tuple(value))
    # a constant keyed by its type too: 1, 1.0 and True are equal keys otherwise
    if isinstance(value, (bool, int, float)):
        if _dynamo_compiling() and not has_static_value(value):
            return None
        return ("C", value, type(value))
    if isinstance(value, _CONSTANTS):
        return ("C", value, type(value))
    return None


@torch.compiler.assume_constant_result
def _decided_untraced(func: Any, described: tuple, mesh, defer: bool, grad: bool) -> Any:
    """``_decided_or_none`` for dynamo, which calls it with the real values
    (the mesh unwrapped from its ``FakeScriptObject``)."""
    return _decided_or_none(func, described, getattr(mesh, "real_obj", mesh), defer, grad)


def _decided_or_none(func: Any, described: tuple, mesh, defer: bool, grad: bool) -> Any:
    """The cached decision; ``None`` where the described call cannot be
    decided from its description (a plan whose output specs are computed
    from the outputs, an operand no spec describes): ``decision_for`` then
    decides from the operands themselves, which raises what they raise."""
    try:
        return _decided(func, described, mesh, defer, grad)
    except LayoutError:
        return None


@functools.lru_cache(maxsize=4096)
def _decided(func: Any, described: tuple, mesh, defer: bool, grad: bool) -> Any:
    """The decision for a described call (grad mode set as ``grad``: a rule
    may read it), or ``None`` for a plan whose outputs are a function."""
    arg_parts, kwarg_parts = described
    args = tuple(_rebuild(part, mesh) for part in arg_parts)
    kwargs = {name: _rebuild(part, mesh) for name, part in kwarg_parts}
    with torch.set_grad_enabled(grad):
        plan = rules.plan_for(func, args, kwargs, mesh)
    if plan is not None and callable(plan.outputs):
        return None
    plan = _constants(plan)
    facts = [(loc, part[1], len(part[2]), part[4], part[5]) for loc, part in _visited(described)]
    return _decide(plan, facts, mesh, defer, grad)


def _decide(plan: tuple | None, facts: list, mesh, defer: bool, grad: bool) -> tuple:
    """The decision from the plan and each operand's ``(locator,
    placements, ndim, requires_grad, is_leaf)``: the one copy of the mode's
    per-operand logic. ``LayoutError`` where a guarded leaf's placements
    have no spec."""
    inputs = dict(plan[0]) if plan is not None else {}
    keep_partial = bool(defer and plan is not None and plan[2])
    actions = []
    for loc, placements, ndim, requires_grad, is_leaf in facts:
        spec = inputs.get(loc)
        partial = any(isinstance(p, Partial) for p in placements)
        # a masked partial sum passes no op pending (its mask fits one shape)
        complete = partial and (not keep_partial or masked_partial(placements))
        kept = partial and not complete
        guard = grad and requires_grad and is_leaf and not complete  # completed: not a leaf
        if spec is None or kept:
            # a leaf goes through redistribute to its own spec
            spec = spec_of_placements(placements, ndim, mesh) if guard else None
        # the placements themselves: the collectives take them converted
        target = None if spec is None else placements_for(spec, mesh)
        actions.append((complete, target, guard, kept))
    if all(action == _INERT for action in actions):
        actions = []  # nothing to do to any operand: the mode skips the walk over them
    return plan, tuple(actions), keep_partial


_INERT = (False, None, False, False)  # an Action that leaves its operand as it is


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


def output_action(x: DTensor, spec: Any, keep_partial: bool) -> tuple:
    """What the mode does to an output ``x`` whose plan gives ``spec``
    (``None``: none): ``("defer", None)``, ``("complete", None)`` (strided
    shards gathered, pending sums completed), ``("keep", None)`` or
    ``("to", placements)`` (``spec``'s); cached, and decided outside
    dynamo's trace."""
    if _dynamo_compiling():
        return _output_action_untraced(tuple(x.placements), x.ndim, spec, keep_partial,
                                       x.device_mesh)
    return _output_action(tuple(x.placements), x.ndim, _hashable(spec), keep_partial,
                          x.device_mesh, True)


def _hashable(spec: Any) -> Any:
    return None if spec is None else tuple(tuple(names) for names in spec)


@torch.compiler.assume_constant_result
def _output_action_untraced(placements: tuple, ndim: int, spec: Any, keep_partial: bool,
                            mesh) -> tuple:
    return _output_action(placements, ndim, _hashable(spec), keep_partial,
                          getattr(mesh, "real_obj", mesh))


@functools.lru_cache(maxsize=4096)
def _output_action(placements: tuple, ndim: int, spec: Any, keep_partial: bool, mesh,
                   eager: bool = False) -> tuple:
    partial = any(isinstance(p, Partial) for p in placements)
    kept = ("sum", "avg") if eager else ("sum",)
    if (keep_partial and partial and not masked_partial(placements)
            and all(p.reduce_op in kept for p in placements if isinstance(p, Partial))):
        # pending sums, and eagerly pending means (kept as the sums they
        # equal: pending.mark_deferred); a pending max, or a mean under
        # torch.compile, is completed
        return ("defer", None)
    if spec is None or len(spec) != ndim:
        try:
            spec_of_placements(placements, ndim, mesh)
            describable = True
        except LayoutError:
            describable = False
        return ("complete", None) if partial or not describable else ("keep", None)
    target = placements_for(spec, mesh)
    if target != placements:
        return ("to", target)
    return ("keep", None)
