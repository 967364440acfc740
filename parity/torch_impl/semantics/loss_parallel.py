"""Inside torch's ``loss_parallel()``, the loss is DTensor's own.

``torch.distributed.tensor.parallel.loss_parallel()`` is how a user asks
DTensor for a cross-entropy over logits sharded on the class dimension
without gathering them (torchtitan's output layer). It works by handlers
for ``aten._log_softmax``, ``aten.nll_loss_forward`` and their backwards,
registered in DTensor's dispatcher while the context is open, and it
requires the class dimension to stay sharded. The mode's rule for
``cross_entropy`` / ``log_softmax`` / ``nll_loss`` would lay the logits
out first (JAX's rule replicates a reduced dimension), and DTensor's handler
then refused them ("loss_parallel() requires exactly one mesh dim to shard
tensor dimension 1"). While ``loss_parallel()`` is open, those functions run
as DTensor runs them (pending sums completed, plain operands replicated as
everywhere under ``jax_semantics()``); the result is the same value.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from parity.torch_impl.semantics.dtensor_handlers import handled

_LOG_SOFTMAX = torch.ops.aten._log_softmax.default

# The functions whose aten ops loss_parallel() handles.
FUNCTIONS = frozenset({
    F.cross_entropy, torch._C._nn.cross_entropy_loss, F.nll_loss, torch._C._nn.nll_loss,
    torch._C._nn.nll_loss_nd, torch._C._nn.nll_loss2d, F.log_softmax, torch.log_softmax,
    torch.Tensor.log_softmax, torch._log_softmax,
})


def active() -> bool:
    """Whether a ``loss_parallel()`` context is open (its handlers are in
    DTensor's dispatcher)."""
    return handled(_LOG_SOFTMAX)


def applies(func: Any) -> bool:
    """Whether ``func`` is a loss function ``loss_parallel()`` handles and the
    context is open."""
    return func in FUNCTIONS and active()
