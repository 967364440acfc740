"""Pending reductions (DTensor ``Partial``): completed before anyone sees them.

In JAX a pending reduction is never observable. DTensor leaves one after a
sum over a sharded dim or a contraction of sharded dims, and ``to_local()``,
``max`` or ``norm`` on it give per-rank garbage. Without ``defer`` every
op's result is completed at once (reduce-scatter straight into a sharded
output spec, all-reduce otherwise). With ``defer`` a pending sum may flow
through linear ops (add/sub of alike pending values, scalar mul/div, neg,
sum/mean, reshapes, a contraction with a replicated operand) and is
completed at the first op that is not linear, and by ``describe``,
``to_numpy``, ``.item()`` and ``to_local()``.

The completion is a new tensor. An in-place op (or ``out=``) that writes
into a pending operand completes that operand in place first
(``complete_in_place``: the completed tensor takes the operand's Python
object, as ``torch.utils.swap_tensors`` does, so every reference the program
holds sees the sum), then writes; where the object cannot be swapped (traced
by dynamo, or referenced from C++, e.g. saved for a backward) the write is
refused (``refuse_write``).
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor, Partial

from parity.errors import UnsupportedOpError
from parity.torch_impl.collectives import redistribute
from parity.torch_impl.layouts import specs as S
from parity.torch_impl.runtime.torch_compat import DTensorSpec

# Deferred tensors carry this attribute; describe/to_local look for it.
DEFERRED_ATTR = "_parity_deferred"


# ``x`` with every pending reduction completed (replicated on that axis).
complete = redistribute.resolve_pending


class _MeanAsSum(torch.autograd.Function):
    """A pending mean (``Partial("avg")``) as the pending sum it equals:
    each rank's block divided by the count of blocks averaged. The logical
    value is the same, so the gradient passes as it is. DTensor's backward
    cannot lay a gradient out as a pending mean (``P(sum) -> P(avg)``), and
    every op after this one sees only pending sums."""

    @staticmethod
    def forward(ctx, x: DTensor) -> DTensor:  # type: ignore[override]
        count, placements = 1, []
        for dim, p in enumerate(x.placements):
            if isinstance(p, Partial) and p.reduce_op == "avg":
                count *= x.device_mesh.size(dim)
                placements.append(Partial("sum"))
            else:
                placements.append(p)
        spec = DTensorSpec(x.device_mesh, tuple(placements), tensor_meta=x._spec.tensor_meta)
        return DTensor(x._local_tensor / count, spec, requires_grad=False)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        return grad


def mark_deferred(x: DTensor) -> DTensor:
    """Remember that ``x`` is pending on purpose (``defer``); a pending mean
    is kept as the pending sum it equals (``_MeanAsSum``), eagerly only
    (``decision.output_action`` completes a mean under ``torch.compile``)."""
    if any(isinstance(p, Partial) and p.reduce_op == "avg" for p in x.placements):
        x = _MeanAsSum.apply(x)
    try:
        setattr(x, DEFERRED_ATTR, True)
    except (AttributeError, RuntimeError):  # pragma: no cover - exotic subclasses
        pass
    return x


def is_deferred(x) -> bool:
    return isinstance(x, DTensor) and getattr(x, DEFERRED_ATTR, False) and S.has_partial(x)


_hook_installed = False


def install_to_local_hook() -> None:
    """``to_local()`` is a plain method (no ``__torch_function__``); wrap it
    once, when the first ``jax_semantics()`` scope opens (never inside a
    compiled frame: dynamo cannot trace a class attribute being set), so a
    *deferred* tensor is completed first. Every other DTensor behaves
    exactly as before."""
    global _hook_installed
    if _hook_installed:
        return
    original = DTensor.to_local

    def to_local(self, *args, **kwargs):
        if getattr(self, DEFERRED_ATTR, False) and S.has_partial(self):
            self = complete(self)
        return original(self, *args, **kwargs)

    to_local.__wrapped__ = original  # type: ignore[attr-defined]
    to_local.__doc__ = original.__doc__
    DTensor.to_local = to_local  # type: ignore[method-assign]
    _hook_installed = True



def complete_in_place(op: str, x: DTensor) -> DTensor:
    """``x`` itself, its pending sums completed, for ``op`` to write into.

    Raises ``UnsupportedOpError`` (``refuse_write``) under ``torch.compile``
    (dynamo cannot trace a swap of Python objects) or where torch refuses
    the swap (``x`` has weak references or other owners of its storage)."""
    if torch.compiler.is_compiling():
        refuse_write(op, x)
    completed = complete(x)
    try:
        torch.utils.swap_tensors(x, completed)
    except RuntimeError:
        refuse_write(op, x)
    return x


def refuse_write(op: str, x: DTensor) -> None:
    """Raise the ``UnsupportedOpError`` for ``op`` writing into ``x``, a
    pending operand that must be completed first (its completion is another
    tensor: ``x`` itself would stay unchanged)."""
    placements = (tuple(x.placements),)
    raise UnsupportedOpError(
        f"{op} writes into an operand with a pending sum (placements {placements[0]}), "
        "which must be completed before the op; it cannot be completed in place here "
        "(inside torch.compile, or the tensor has other owners), and a completed copy "
        "would leave the operand unchanged. Use the out-of-place form (y = x.op(...) "
        "instead of x.op_(...)), or jax_semantics(defer=False) to complete sums at once.",
        op=op, placements=placements, reason="writes into a pending sum",
    )
