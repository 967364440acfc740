"""Ops whose backward makes one of torch's ZeroTensors, run as an op that
gives the same values and a real zero gradient.

``sgn``'s gradient for a real input is ``at::_efficientzerotensor`` (a
tensor with no storage, read as zeros through the ZeroTensor dispatch key).
Over simulated ranks that gradient is a ``LocalTensor`` holding one
ZeroTensor per rank, and the next op on it -- the backward of whatever made
``sgn``'s operand, e.g. ``torch.sgn(x * 2)`` -- crashed the process with
SIGSEGV: a wrapper subclass's ``__torch_dispatch__`` runs the op on the
inner tensors with the ZeroTensor key excluded (torch's Python fallback
excludes it, and ``LocalTensor`` forwards only the Conjugate and Negative
keys to its wrapper), so the CPU kernel reads the null data pointer. Upstream:
pytorch/pytorch#108983 ("ZeroTensor doesn't play well with wrapper tensor
subclasses", open); plain-torch reproduction::

    from torch.distributed._local_tensor import LocalTensor
    LocalTensor({r: torch._efficientzerotensor((4, 4)) for r in range(2)}).sum()  # SIGSEGV

For a real input ``sgn`` *is* ``sign`` (same values, dtype and shape), and
``sign``'s gradient is ``zeros_like(grad)``: a real DTensor. So under
``jax_semantics()`` ``sgn`` of a real tensor runs as ``sign``; a complex
input keeps ``sgn`` (its gradient is computed, never a ZeroTensor).
"""

from __future__ import annotations

from typing import Any

import torch

_AS_SIGN = {torch.sgn: torch.sign, torch.Tensor.sgn: torch.Tensor.sign,
            torch.Tensor.sgn_: torch.Tensor.sign_}


def replacement(func: Any, args: tuple, kwargs: dict) -> Any:
    """The callable to run in place of ``func``: ``sign`` for ``sgn`` of a
    real tensor, else ``func`` itself."""
    swap = _AS_SIGN.get(func)
    if swap is None:
        return func
    x = args[0] if args else kwargs.get("input")
    if isinstance(x, torch.Tensor) and not x.is_complex():
        return swap
    return func
