"""parity's handlers in DTensor's dispatcher, and DTensor's dispatch of one
op in the steps such a handler departs between.

DTensor lets a function of one's own handle an aten op (its table of custom
op handlers; torch's ``loss_parallel()`` puts its loss handlers there).
parity puts two there, each departing from DTensor's own dispatch only under
``jax_semantics()``: ``local_views`` (``aten.view``: a block that cannot be
viewed is reshaped) and ``pending_clone`` (``aten.clone``: a pending sum
stays pending). Both run DTensor's dispatch as ``DTensorCall`` spells it --
sharding propagation, the redistribute it asks for, the local op, the
wrapping of its result -- and change one step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from parity.torch_impl.runtime.torch_compat import (
    dtensor_op_dispatcher,
    dtensor_op_handlers,
    return_and_correct_aliasing,
    tree_unflatten,
)

_scope: list[Callable[[], bool]] = []  # [whether this thread is inside jax_semantics()]


def install(handlers: Mapping[Any, Callable], active: Callable[[], bool]) -> None:
    """Route each aten op of ``handlers`` to its handler in DTensor's
    dispatcher; ``in_scope()`` asks ``active()`` from then on (idempotent:
    the first ``active`` stays, and a handler someone else registered for an
    op is left alone)."""
    if not _scope:
        _scope.append(active)
    table = dtensor_op_handlers()
    for op, handler in handlers.items():
        table.setdefault(op, handler)


def in_scope() -> bool:
    """Whether a handler may depart from DTensor: inside ``jax_semantics()``."""
    return bool(_scope) and _scope[0]()


def handled(op: Any) -> bool:
    """Whether some custom handler (parity's or torch's) takes ``op``."""
    return op in dtensor_op_handlers()


class DTensorCall:
    """One call of an aten op on DTensors as DTensor's dispatcher runs it:
    constructed, it has unwrapped the arguments and propagated their
    sharding (``output_spec``); ``local_call`` does the redistribute the
    propagation asks for and gives the local op and arguments; ``result``
    wraps a local result and fixes up its aliasing. A handler runs these in
    order and departs between two of them."""

    __slots__ = ("op_call", "args", "kwargs", "_info", "_sharding")

    def __init__(self, op_call: Any, args: tuple, kwargs: dict) -> None:
        self.op_call, self.args, self.kwargs = op_call, args, kwargs
        dispatcher = dtensor_op_dispatcher()
        self._info = dispatcher.unwrap_to_op_info(op_call, args, kwargs)
        dispatcher.sharding_propagator.propagate(self._info)
        self._sharding = self._info.output_sharding

    @property
    def output_spec(self) -> Any:
        """The output's ``DTensorSpec`` the propagation chose."""
        return self._sharding.output_spec

    @property
    def local_kwargs(self) -> dict:
        return self._info.local_kwargs

    def local_call(self) -> tuple[Callable, Sequence]:
        """``(op, local_args)``: the local blocks redistributed as the
        propagation asks, and the op to run on them (the one the
        propagation rewrote the call to, where it did)."""
        sharding, info = self._sharding, self._info
        op = self.op_call
        if sharding.needs_redistribute:
            dtensor_op_dispatcher().redistribute_local_args(
                info, sharding.redistribute_schema, sharding.use_val_from_redistribute_schema)
            if sharding.redistribute_schema is not None:
                op = sharding.redistribute_schema.op
        local_args = (tree_unflatten(list(info.local_args), info.args_tree_spec)
                      if info.args_tree_spec else info.local_args)
        return op, local_args

    def result(self, local: Any, spec: Any = None) -> object:
        """``local`` wrapped as DTensors laid out as ``spec`` (default: the
        propagated ``output_spec``), aliasing as the op's schema says."""
        out = dtensor_op_dispatcher().wrap(local, self.output_spec if spec is None else spec)
        return return_and_correct_aliasing(self.op_call, self.args, self.kwargs, out)
