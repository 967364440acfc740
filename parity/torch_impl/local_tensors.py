"""Simulated ranks' tensors (``LocalTensor``) across torch versions.

torch 2.13 has ``rank_map`` and ``maybe_disable_local_tensor_mode`` in
``torch.distributed._local_tensor``; older releases with ``LocalTensorMode``
(2.11, as on CUDA images) lack them. Each name here uses torch's own when it
exists and an equivalent built on ``LocalTensor`` otherwise.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.distributed import _local_tensor
from torch.utils._python_dispatch import _disable_current_modes, _get_current_dispatch_mode_stack


def _active_mode():
    modes = [m for m in _get_current_dispatch_mode_stack()
             if isinstance(m, _local_tensor.LocalTensorMode)]
    return modes[-1] if modes else None


def _rank_map(cb: Callable[[int], torch.Tensor]) -> torch.Tensor:
    mode = _active_mode()
    if mode is None:
        return cb(dist.get_rank())
    with _disable_current_modes():
        return _local_tensor.LocalTensor({r: cb(r) for r in sorted(mode.ranks)})


def _disable_local_tensor_mode() -> contextlib.AbstractContextManager:
    return _disable_current_modes() if _active_mode() is not None else contextlib.nullcontext()


rank_map: Callable[[Callable[[int], torch.Tensor]], torch.Tensor] = getattr(
    _local_tensor, "rank_map", _rank_map)
"""``cb(rank)`` for every simulated rank as one ``LocalTensor``; ``cb(rank)``
of this process's rank outside simulation."""

maybe_disable_local_tensor_mode: Callable[[], contextlib.AbstractContextManager] = getattr(
    _local_tensor, "maybe_disable_local_tensor_mode", _disable_local_tensor_mode)
"""A context in which simulated ranks' tensors are plain again (no-op outside
simulation)."""
