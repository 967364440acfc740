"""The reshard: an op's DTensor operands laid out as its decision says
(``prepared``), after the decision and before the local op.

Each operand's ``decision.Action`` -- a pending sum completed, the
placements to move to (``redistribute.move``, DTensor's differentiable
``redistribute``), a leaf guarded -- is applied in ``map_dtensors``' order,
the order in which ``decision.operands`` located them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.tensor import DTensor

from parity.torch_impl.collectives.redistribute import move
from parity.torch_impl.semantics import grad_guard, pending
from parity.torch_impl.semantics.fallback import inplace_by_name, op_name


def map_dtensors(args: tuple, kwargs: dict, fn) -> tuple[tuple, dict]:
    """``(args, kwargs)`` with ``fn(locator, t)`` for each DTensor ``t``
    (one level into lists and tuples; locators as ``decision.operands``).
    Index loops, not ``enumerate`` or generators: dynamo traces those
    through its polyfills, several times the instructions, on every op."""
    mapped_args = []
    for i in range(len(args)):
        mapped_args.append(_mapped(("a", i), args[i], fn))
    mapped_kwargs = {}
    for k in kwargs:
        mapped_kwargs[k] = _mapped(("k", k), kwargs[k], fn)
    return tuple(mapped_args), mapped_kwargs


def _mapped(loc: tuple, value: Any, fn) -> Any:
    if isinstance(value, DTensor):
        return fn(loc, value)
    if not isinstance(value, (list, tuple)):
        return value
    items, found = [], False
    for j in range(len(value)):
        item = value[j]
        if isinstance(item, DTensor):
            items.append(fn(loc + (j,), item))
            found = True
        else:
            items.append(item)
    return type(value)(items) if found else value


def prepared(func: Any, args: tuple, kwargs: dict, actions: tuple,
             grad: bool) -> tuple[tuple, dict, bool]:
    """``(args, kwargs, moved)``: each DTensor operand of ``func`` as the
    decision's ``actions`` say, in ``map_dtensors``' order (a pending sum
    completed, redistributed, a leaf guarded); ``moved`` whether any operand
    changed (the call is then never clean). A pending operand ``func``
    writes into is completed in place (``pending.complete_in_place``)."""
    visits = [0]
    moved = [False]

    def prepare(loc, t: DTensor) -> DTensor:
        complete, target, guard, kept = actions[visits[0]]
        visits[0] += 1
        if complete:
            if loc == ("k", "out") or (loc == ("a", 0) and inplace_by_name(func)):
                t = pending.complete_in_place(op_name(func), t)  # the write lands in t
            else:
                t = pending.complete(t)
            moved[0] = True  # a pending operand: the call is never clean
        out = t if target is None else move(t, target, guard=guard)
        if out is not t or kept:
            moved[0] = True
            if grad and out.requires_grad and not torch.compiler.is_compiling():
                out = grad_guard.guard(out)
        return out

    prepared_args, prepared_kwargs = map_dtensors(args, kwargs, prepare)
    return prepared_args, prepared_kwargs, moved[0]
