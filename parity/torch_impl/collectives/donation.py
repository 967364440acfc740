"""Donated DTensors, as JAX's ``donate_argnums``: a collective called with
``donate=True`` may write its result into the input's local buffer, and the
input is then invalid. Its local tensor is replaced by a ``DonatedTensor``
of the same shape and dtype that raises ``DonatedArrayError`` on any use
(an op, ``to_local()``, ``to_numpy``, another collective), so a stale value
is never read silently.

A donated block that cannot hold the call's own result (``all_gather``'s
output is larger, ``reduce_scatter``'s smaller) is kept, when it is
contiguous and nothing else can see it, for a later collective's output
of the same shape and dtype (``take``): a loop of donating collectives --
a gather and a scatter in turn, as in a sharded training step -- then
allocates nothing, as the raw calls into preallocated outputs do.
"Nothing else can see it", checked when the block is taken: no other
reference to the block (``x.to_local()`` held by the caller; a C++ owner
such as a process group's work or an autograd graph that saved it) and
no other tensor on its storage (a view, or the block a view of a larger
buffer). Not checked at donation: the process group's finished work
(gloo's all_gather keeps its input tensor until its worker thread lets
the work go) still holds the block when the collective returns, and
whatever holds it then but no longer at ``take`` cannot see the new values.
At most ``POOL_SIZE`` blocks are kept (the oldest go first);
``release_buffers()`` drops them.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch.distributed.tensor import DTensor

from parity.errors import DonatedArrayError, ParityError
from parity.torch_impl.runtime.torch_compat import storage_use_count


def _message(what: str) -> str:
    return (f"This array was donated to {what}(..., donate=True): its buffer now holds "
            "that call's result or another array's, so it cannot be used again. Fix: use "
            "the value the call returned, or call it without donate=True.")


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


def require_dtensor(x: Any, what: str) -> DTensor:
    """``x`` if it is a DTensor (a ``Parameter`` of one included) that was
    not donated; ``ParityError`` otherwise (``DonatedArrayError`` for a
    donated one)."""
    if not isinstance(x, DTensor):
        if isinstance(x, torch.nn.Parameter) and isinstance(x.data, DTensor):
            x = x.data
        else:
            raise ParityError(
                f"{what} needs a distributed tensor (DTensor); got {type(x).__name__}. "
                "Fix: distribute_tensor(x, layout) first."
            )
    check_not_donated(x)
    return x


def check_not_donated(x: DTensor) -> None:
    """Raise ``DonatedArrayError`` when ``x`` was donated."""
    local = x._local_tensor
    if type(local) is DonatedTensor:
        raise DonatedArrayError(_message(local._donated_to), what=local._donated_to)


POOL_SIZE = 4
_pool: dict[tuple, torch.Tensor] = {}  # (shape, dtype, device) -> a kept block, oldest first
# The same dict, for callers that skip ``take`` while nothing is kept (only read).
kept_blocks = _pool
# One tensor on the storage, plus the Python storage object asked for the count.
_UNSHARED_STORAGE_USES = 2
# Whether this torch lets ``take`` prove a block unseen (else nothing is reused).
_CAN_CHECK = storage_use_count is not None and hasattr(torch.Tensor, "_use_count")


def donate_block(x: DTensor, marker: DonatedTensor, key: tuple) -> None:
    """Invalidate ``x`` (see ``invalidate``) and keep its local block, a
    plain tensor, for a later ``take`` (which checks that nothing else can
    see it, see the module docstring). ``key``: the block's (shape, dtype,
    device), from the caller, who vouches that the block is contiguous
    and of that shape (a collective's plan: the local shape a spec gives
    on this rank); reading them here costs more than the rest."""
    local = x._local_tensor
    x._local_tensor = marker
    if type(local) is not torch.Tensor:
        return
    if len(_pool) >= POOL_SIZE and key not in _pool:
        del _pool[next(iter(_pool))]
    _pool[key] = local


def take(shape: torch.Size, dtype: torch.dtype, device: torch.device) -> torch.Tensor | None:
    """A kept donated block of this shape, dtype and device (no longer
    kept), or ``None``: also when something else can still see it (the
    block is then dropped): a Python reference, a C++ owner (a process
    group's work, DLPack, an autograd graph that saved the block itself),
    another tensor on its storage (a view holds its base; ``set_``, an
    autograd graph that saved an output keep the storage). So a saved
    block is never overwritten under its graph."""
    return take_key((shape, dtype, device))


def take_key(key: tuple) -> torch.Tensor | None:
    """``take(*key)``, for callers that hold the key."""
    block = _pool.pop(key, None)
    if block is None or not _CAN_CHECK:
        return None
    # References to ``block`` now: this frame's and getrefcount's argument;
    # its TensorImpl: the Python object's; its storage: block's and the
    # Python storage object's.
    if (sys.getrefcount(block) > 2 or block._use_count() != 1
            or storage_use_count(block.untyped_storage()._cdata) != _UNSHARED_STORAGE_USES):
        return None  # dropped: something else can still see it
    return block


def release_buffers() -> None:
    """Drop every kept donated block."""
    _pool.clear()
