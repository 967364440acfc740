"""Donated DTensors, as JAX's ``donate_argnums``: a collective called with
``donate=True`` may write its result into the input's local buffer, and the
input is then invalid. Its local tensor is replaced by a ``DonatedTensor``
of the same shape and dtype that raises ``DonatedArrayError`` on any use
(an op, ``to_local()``, ``to_numpy``, another collective), so a stale value
is never read silently.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.tensor import DTensor

from parity.errors import DonatedArrayError


def _message(what: str) -> str:
    return (f"This array was donated to {what}(..., donate=True): its buffer now holds "
            "that call's result, so it cannot be used again. Fix: use the value the call "
            "returned, or call it without donate=True.")


class DonatedTensor(torch.Tensor):
    """The local tensor of a donated DTensor: metadata only; any use raises
    ``DonatedArrayError`` naming the call it was donated to."""

    @staticmethod
    def __new__(cls, like: torch.Tensor, what: str) -> "DonatedTensor":
        out = torch.Tensor._make_wrapper_subclass(
            cls, like.shape, dtype=like.dtype, device=like.device, requires_grad=False)
        out._donated_to = what
        return out

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        raise DonatedArrayError(_message(_donated_to(args)), what=_donated_to(args))

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise DonatedArrayError(_message(_donated_to(args)), what=_donated_to(args))

    def __repr__(self) -> str:  # a debugger or a traceback may print it
        return f"DonatedTensor(donated to {self._donated_to})"


def _donated_to(args: Any) -> str:
    for arg in args:
        if isinstance(arg, DonatedTensor):
            return arg._donated_to
    return "a collective"


def invalidate(x: DTensor, marker: DonatedTensor) -> None:
    """Mark ``x`` donated: its local tensor becomes ``marker`` (a
    ``DonatedTensor`` of its local shape and dtype; being immutable, one
    marker serves every tensor of that shape), so every later use raises."""
    x._local_tensor = marker


def check_not_donated(x: DTensor) -> None:
    """Raise ``DonatedArrayError`` when ``x`` was donated."""
    local = x._local_tensor
    if type(local) is DonatedTensor:
        raise DonatedArrayError(_message(local._donated_to), what=local._donated_to)
