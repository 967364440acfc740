"""The rule registry: torch callables -> the rule that plans their calls.

DTensor-style: a rule is registered on the callables it covers
(``@rule_for(torch.add, torch.Tensor.add, torch.Tensor.__add__, ...)``) and
looked up by the callable the mode receives, never by its ``__name__``.
``torch_ops("add", "sub")`` lists the callables of those names in
``torch``, ``torch.Tensor``, ``torch.nn.functional`` and ``torch._C._nn`` (a name found in none
raises at import: a typo cannot silently register nothing).

A rule reads the call (``Call``) and returns a ``Plan``, or raises
``NotCovered`` for a call form it deliberately does not handle (the call then
runs as DTensor runs it, pending reductions completed). Any other exception
is a bug and propagates: ``plan_for`` never turns an error into "no rule".

Under ``torch.compile`` dynamo traces the lookup; ``_key_of`` is marked
constant so that the lookup is a constant string key (a dict keyed on
builtin callables is not something dynamo can trace without a graph break).
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor

from parity.torch_impl.layouts import specs as S

Locator = tuple  # ("a", i) | ("a", i, j) | ("k", name) | ("k", name, j)
_NAMESPACES = (torch, torch.Tensor, F, torch._C._nn)


class NotCovered(Exception):
    """Raised by a rule on purpose: this call form is outside the rule (an
    argument it does not parse, a layout its algebra has no answer for)."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """What to do around one op (a value: a rule that changes a plan makes a
    new one with ``dataclasses.replace``).

    ``inputs``: operand locator -> spec to reshard to before the op (held
    read-only).
    ``outputs``: spec per tensor output (flattened order, a tuple), ``None``
    for "as DTensor gives it, reductions completed"; or a callable from the
    outputs to that list (for rules that need the output shapes).
    ``linear``: pending sums may pass through (``defer``).
    ``chosen``: JAX's explicit mode refuses this op; the plan is auto mode's.
    ``fix``: for a ``chosen`` plan whose ``inputs`` are not what JAX needs
    (auto mode lays the operands out otherwise), operand locator -> the
    spec that makes JAX accept the op (what ``ShardingTypeError`` tells the
    user to ``reshard`` to); ``None``: ``inputs`` are.
    """

    inputs: Mapping[Locator, Any] = dataclasses.field(default_factory=dict)
    outputs: Any = None
    linear: bool = False
    chosen: bool = False
    fix: Mapping[Locator, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", types.MappingProxyType(dict(self.inputs)))
        if self.fix is not None:
            object.__setattr__(self, "fix", types.MappingProxyType(dict(self.fix)))
        if isinstance(self.outputs, list):
            object.__setattr__(self, "outputs", tuple(self.outputs))


class Call:
    """An op call with its DTensor operands located. ``name`` is the name the
    callable was registered under (a rule's variants: ``add_`` is in place,
    ``stack`` adds a dim)."""

    __slots__ = ("name", "args", "kwargs", "mesh", "sizes", "_tensors")

    def __init__(self, name: str, args: tuple, kwargs: dict, mesh) -> None:
        self.name, self.args, self.kwargs, self.mesh = name, args, kwargs, mesh
        self.sizes = S.axis_sizes(mesh)
        self._tensors = None

    def tensors(self) -> list[tuple[Locator, DTensor]]:
        """The DTensor operands, one level into lists and tuples."""
        if self._tensors is None:
            found = []
            for i, a in enumerate(self.args):
                if isinstance(a, DTensor):
                    found.append((("a", i), a))
                elif isinstance(a, (list, tuple)):
                    found.extend((("a", i, j), v) for j, v in enumerate(a) if isinstance(v, DTensor))
            for k, a in self.kwargs.items():
                if isinstance(a, DTensor):
                    found.append((("k", k), a))
                elif isinstance(a, (list, tuple)):
                    found.extend((("k", k, j), v) for j, v in enumerate(a) if isinstance(v, DTensor))
            self._tensors = found
        return self._tensors

    def arg(self, index: int, *names: str, default=None):
        """Argument ``index`` (positional) or the first of ``names`` given
        as a keyword, else ``default``."""
        for n in names:
            if n in self.kwargs:
                return self.kwargs[n]
        return self.args[index] if len(self.args) > index else default

    def only_self(self) -> tuple[Locator, DTensor]:
        """The one DTensor operand, which must be ``self`` (argument 0);
        ``NotCovered`` otherwise."""
        ops = self.tensors()
        if len(ops) != 1 or ops[0][0] != ("a", 0):
            raise NotCovered
        return ops[0]


Rule = Callable[[Call], Plan]
# The registry: filled while the rule families import (rules/__init__.py),
# then closed (``close``). Nothing may change it afterwards: the fast path's
# clean calls (fast_path.CLEAN) and dynamo's graphs (``_key_of`` is a
# constant to dynamo) remember what it said.
_ENTRIES: dict[str, tuple[Rule, str]] = {}  # key -> (rule, registered name)
_KEYS: dict[Any, str] = {}  # torch callable -> key
_closed = False


class RegistryClosedError(RuntimeError):
    """A rule registered after the rule families were imported; ``target``
    is the torch callable it was for."""

    def __init__(self, *, target: Any) -> None:
        self.target = target
        super().__init__(f"a rule for {target!r} registered after the rule families were imported: "
                         "rules are fixed once parity.torch_impl.semantics.rules is imported (calls "
                         "proven clean and compiled graphs remember them). Fix: put the rule in a "
                         "family module of parity/torch_impl/semantics/rules/ and import it from "
                         "rules/__init__.py")


def close() -> None:
    """Refuse any later registration (``RegistryClosedError``); called once
    every family has registered its rules."""
    global _closed
    _closed = True


def torch_ops(*names: str) -> list[tuple[Any, str]]:
    """``(callable, name)`` for every callable called ``name`` in ``torch``,
    ``torch.Tensor``, ``torch.nn.functional`` and ``torch._C._nn``. Raises ``LookupError`` for
    a name found in none."""
    found: list[tuple[Any, str]] = []
    for name in names:
        hits = [getattr(ns, name) for ns in _NAMESPACES if callable(getattr(ns, name, None))]
        if not hits:
            raise LookupError(f"no torch callable is called {name!r}")
        for fn in hits:
            if not any(fn is f for f, _ in found):
                found.append((fn, name))
    return found


def rule_for(*targets: Any) -> Callable[[Rule], Rule]:
    """Register the decorated rule for ``targets``: torch callables, or
    ``(callable, name)`` pairs from ``torch_ops``. A callable registered
    twice raises ``ValueError`` (two rules for one op is a bug); a rule
    registered after ``close`` raises ``RegistryClosedError``."""

    def register(rule: Rule) -> Rule:
        if _closed:
            raise RegistryClosedError(target=targets[0] if targets else None)
        for target in targets:
            fn, name = target if isinstance(target, tuple) else (target, target.__name__)
            if fn in _KEYS:
                raise ValueError(f"{fn!r} already has a rule ({_ENTRIES[_KEYS[fn]][0].__name__})")
            key = f"{name}#{len(_ENTRIES)}"
            _KEYS[fn] = key
            _ENTRIES[key] = (rule, name)
        return rule

    return register


def covers(func: Any) -> bool:
    """Whether ``func`` has a rule."""
    return _key_of(func) is not None


def covered() -> frozenset:
    """Every callable that has a rule."""
    return frozenset(_KEYS)


@torch.compiler.assume_constant_result
def _key_of(func) -> str | None:
    return _KEYS.get(func)


def plan_for(func: Any, args: tuple, kwargs: dict, mesh) -> Plan | None:
    """The plan of ``func(*args, **kwargs)`` on ``mesh``, or ``None`` when no
    rule covers ``func`` or its rule does not cover this call form
    (``NotCovered``). Any other exception from a rule propagates."""
    key = _key_of(func)
    if key is None:
        return None
    rule, name = _ENTRIES[key]
    try:
        return rule(Call(name, args, kwargs, mesh))
    except NotCovered:
        return None
