"""Calls the mode has already proven need nothing from it.

Most ops in a training step -- elementwise ops on equal layouts, a matmul
whose contracting dims are replicated -- need no reshard, leave no pending
reduction and already come out with JAX's placement: the mode's work for
them is pure overhead. Whether a call is such a *clean* call depends only on
what DTensor's own sharding propagation sees: the function, each DTensor's
``DTensorSpec`` (mesh, placements, shape, stride, dtype), the non-tensor
arguments, grad mode, whether a DTensor needs a gradient and is a leaf
(leaves always go through ``redistribute``; an op DTensor has no backward
for takes the fallback when any operand needs a gradient), and the scope's
``defer`` option. The
first call with a given signature runs the whole rule; if nothing moved, the
signature is remembered and later calls run the op directly.

A signature is only formed from DTensors, Python scalars, strings, dtypes,
devices, ``None``, lists, tuples and ``torch.Size`` of those, and plain 0-dim
tensors that need no gradient (keyed by dtype and device, not value: an
optimizer's step counts and learning rates). A call with any other plain
tensor, a numpy array or anything else has no signature and always takes
the full path. Scalars are keyed by type and value (``1``, ``1.0`` and
``True`` differ). A call with a plain 0-dim tensor is remembered only where
DTensor's own call replicates it as the full path's promotion does
(``operands.replicated_by_dtensor``): the fast path hands it to DTensor
as it is.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.tensor import DTensor

_LIMIT = 8192  # signatures kept; the cache is emptied when it fills
_KEYED = frozenset({int, float, bool, str, complex, type(None), torch.dtype, torch.device,
                    torch.memory_format, torch.layout})
CLEAN: dict[tuple, bool] = {}  # signatures of clean calls (read by the mode)
# Functions the mode hands to torch untouched whatever their arguments
# (metadata, autograd plumbing: the mode's passthrough names), by function.
DIRECT: dict[Any, bool] = {}
_grad_enabled = torch.is_grad_enabled


def signature(func: Any, args: tuple, kwargs: dict | None, defer: bool) -> tuple | None:
    """What decides the mode's work for this call, or ``None`` when some
    argument cannot be keyed (the call then always takes the full path)."""
    grad = _grad_enabled()
    parts: list = [func, grad, defer]
    append = parts.append
    for value in args:
        if type(value) is DTensor:  # the common case, inlined: this runs per op
            append(value._spec)
            append(grad_role(value) if grad else 0)
        elif not _add(parts, value, grad):
            return None
    if kwargs:
        for name, value in kwargs.items():
            append(name)
            if not _add(parts, value, grad):
                return None
    return tuple(parts)


def _add(parts: list, value: Any, grad: bool) -> bool:
    kind = type(value)
    if kind in _KEYED:
        parts.append(kind)
        parts.append(value)
        return True
    if isinstance(value, DTensor):
        parts.append(value._spec)
        parts.append(grad_role(value) if grad else 0)
        return True
    if kind is tuple or kind is list or kind is torch.Size:
        parts.append(kind)
        parts.append(len(value))
        return all(_add(parts, v, grad) for v in value)
    if kind is torch.Tensor and value.ndim == 0 and not value.requires_grad:
        parts.append(kind)
        parts.append(value.dtype)
        parts.append(value.device)
        return True
    return False


def grad_role(x: DTensor) -> int:
    """0: no gradient; 1: an intermediate that needs one (ops DTensor has no
    backward for take the fallback); 2: a leaf that needs one (always
    redistributed, so its gradient comes back in place)."""
    if not x.requires_grad:
        return 0
    return 2 if x.is_leaf else 1


def remember(key: tuple) -> None:
    """Record ``key`` as a call that needed no reshard and no completion."""
    if len(CLEAN) >= _LIMIT:
        CLEAN.clear()
    CLEAN[key] = True


def remember_direct(func: Any) -> None:
    """Record ``func`` as one the mode passes through untouched."""
    if len(DIRECT) >= _LIMIT:
        DIRECT.clear()
    DIRECT[func] = True


def forget_all() -> None:
    """Empty the caches (tests; a changed rule set)."""
    CLEAN.clear()
    DIRECT.clear()
