"""Inside torch's ``loss_parallel()``, the loss is DTensor's own where DTensor
computes it right, and parity's own (on the class-sharded logits, no gather)
where it does not.

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

Two ``cross_entropy`` calls DTensor's handlers do not compute (torch's
docstring: label smoothing "currently not supported"): its backward of
``_log_softmax`` passes the gradient through untouched, since it expects
``nll_loss``'s backward to have done the softmax part, so any other use of
the log-probabilities gets a wrong gradient.

* ``label_smoothing > 0`` (class-index target): plain DTensor raises
  (``aten.masked_fill_``: an in-place op on a ``Partial(sum)``; with a plain
  target, its mixed ``torch.Tensor and DTensor`` error);
* a target of class probabilities (the logits' shape): plain DTensor gives
  the right loss, as a ``Partial(sum)``, and a wrong gradient, silently.

Under ``jax_semantics()`` parity computes these by torch's own formula
(``cross_entropy_loss_label_smoothing`` / ``cross_entropy_loss_prob_target``
in ATen): the ``nll_loss`` term through DTensor's handlers, the rest from a
log-softmax of its own (``amax``, ``sum(exp)``: one all-reduce each, the
logits stay sharded) run with the mode's rules, so value and gradient are
the unsharded ones.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from parity.errors import ParityError
from parity.torch_impl.semantics.dtensor_handlers import handled

_LOG_SOFTMAX = torch.ops.aten._log_softmax.default

# The functions whose aten ops loss_parallel() handles.
FUNCTIONS = frozenset({
    F.cross_entropy, torch._C._nn.cross_entropy_loss, F.nll_loss, torch._C._nn.nll_loss,
    torch._C._nn.nll_loss_nd, torch._C._nn.nll_loss2d, F.log_softmax, torch.log_softmax,
    torch.Tensor.log_softmax, torch._log_softmax,
})

# Each cross-entropy function's positional parameters.
_PARAMETERS = {
    F.cross_entropy: ("input", "target", "weight", "size_average", "ignore_index", "reduce",
                      "reduction", "label_smoothing"),
    torch._C._nn.cross_entropy_loss: ("input", "target", "weight", "reduction",
                                      "ignore_index", "label_smoothing"),
}
_REDUCTIONS = ("none", "mean", "sum")  # torch's Reduction enum, by value


def active() -> bool:
    """Whether a ``loss_parallel()`` context is open (its handlers are in
    DTensor's dispatcher)."""
    return handled(_LOG_SOFTMAX)


def applies(func: Any) -> bool:
    """Whether ``func`` is a loss function ``loss_parallel()`` handles and the
    context is open."""
    return func in FUNCTIONS and active()


def _bound(func: Any, args: tuple, kwargs: dict) -> dict:
    names = _PARAMETERS[func]
    bound = dict(zip(names, args))
    bound.update(kwargs)
    return bound


def own_route(func: Any, args: tuple, kwargs: dict) -> bool:
    """Whether ``func(*args, **kwargs)`` is a ``cross_entropy`` DTensor's
    handlers get wrong (label smoothing, or a target of class
    probabilities), which ``run`` computes instead."""
    if func not in _PARAMETERS:
        return False
    bound = _bound(func, args, kwargs)
    x, target = bound.get("input"), bound.get("target")
    if not isinstance(x, torch.Tensor) or not isinstance(target, torch.Tensor):
        return False  # torch's own error
    return bound.get("label_smoothing", 0.0) > 0.0 or target.shape == x.shape


def run(func: Any, args: tuple, kwargs: dict, mode: Any) -> torch.Tensor:
    """The cross-entropy ``func(*args, **kwargs)`` (one ``own_route`` takes)
    computed with ``mode`` (this thread's ``jax_semantics()`` mode) pushed:
    torch's formula, the class dim sharded throughout; the value and the
    logits' gradient are the unsharded program's.

    Raises ``ParityError`` for a ``reduction`` other than ``"mean"``,
    ``"sum"``, ``"none"``, a ``label_smoothing`` outside [0, 1], and a
    target of class probabilities that is not floating point or comes with
    an ``ignore_index`` (torch refuses each of these too).
    """
    bound = _bound(func, args, kwargs)
    x, target, weight = bound["input"], bound["target"], bound.get("weight")
    smoothing = float(bound.get("label_smoothing", 0.0))
    ignore_index = int(bound.get("ignore_index", -100))
    reduction = bound.get("reduction", "mean")
    if isinstance(reduction, int):  # torch._C._nn.cross_entropy_loss's enum
        reduction = _REDUCTIONS[reduction]
    size_average, reduce = bound.get("size_average"), bound.get("reduce")
    if size_average is not None or reduce is not None:  # torch's legacy arguments
        reduce = reduce is None or reduce
        reduction = "mean" if reduce and size_average in (None, True) else (
            "sum" if reduce else "none")
    if reduction not in _REDUCTIONS:
        raise ParityError(f"cross_entropy(reduction={reduction!r}): choose 'mean', 'sum' or "
                          "'none'.")
    if not 0.0 <= smoothing <= 1.0:
        raise ParityError(f"cross_entropy(label_smoothing={smoothing}): label_smoothing must "
                          "be between 0.0 and 1.0; pass a value in that range.")
    with mode:
        if target.shape == x.shape:
            return _probability_target(x, target, weight, ignore_index, reduction, smoothing)
        return _label_smoothing(x, target, weight, ignore_index, reduction, smoothing)


def _class_dim(x: torch.Tensor) -> int:
    return 0 if x.dim() == 1 else 1


def _log_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    """``log_softmax`` as torch decomposes it, without DTensor's handler (whose
    backward passes the gradient through): a max and a sum over the sharded
    ``dim``, each completed by the mode; low precision computed in float32
    as torch does."""
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    shifted = xf - xf.detach().amax(dim, keepdim=True)
    out = shifted - shifted.exp().sum(dim, keepdim=True).log()
    return out.to(x.dtype)


def _class_view(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    shape = [1] * x.dim()
    shape[_class_dim(x)] = weight.shape[0]
    return weight.view(shape)


def _label_smoothing(x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
                     ignore_index: int, reduction: str, smoothing: float) -> torch.Tensor:
    """ATen's ``cross_entropy_loss_label_smoothing``: the ``nll_loss`` term
    by DTensor's handlers (``cross_entropy`` without smoothing), the
    smoothing term from ``_log_softmax``."""
    class_dim = _class_dim(x)
    nll = F.cross_entropy(x, target, weight, ignore_index=ignore_index, reduction=reduction)
    logp = _log_softmax(x, class_dim)
    if weight is not None:
        smooth = -(logp * _class_view(x, weight)).sum(class_dim)
    else:
        smooth = -logp.sum(class_dim)
    ignore_mask = target == ignore_index
    smooth = smooth.masked_fill(ignore_mask, 0.0)
    if reduction == "mean":
        if weight is not None:
            safe = target.masked_fill(ignore_mask, 0).flatten()
            counted = weight.gather(0, safe).view(target.shape).masked_fill(ignore_mask, 0)
            smooth = smooth.sum() / counted.sum()
        else:
            smooth = smooth.sum() / (~ignore_mask).sum()
    elif reduction == "sum":
        smooth = smooth.sum()
    return (1 - smoothing) * nll + smooth * (smoothing / x.shape[class_dim])


def _probability_target(x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
                        ignore_index: int, reduction: str, smoothing: float) -> torch.Tensor:
    """ATen's ``cross_entropy_loss_prob_target``."""
    if not target.is_floating_point():
        raise ParityError(f"cross_entropy: a target of the logits' shape {tuple(x.shape)} is "
                          f"class probabilities and must be floating point, not "
                          f"{target.dtype}; pass class indices of shape without the class dim, "
                          "or probabilities as float.")
    if ignore_index >= 0:
        raise ParityError(f"cross_entropy(ignore_index={ignore_index}): ignore_index is not "
                          "supported for a target of class probabilities; leave it at its "
                          "default (-100).")
    class_dim = _class_dim(x)
    n_classes = x.shape[class_dim]
    if smoothing > 0.0:
        target = target * (1 - smoothing) + smoothing / n_classes
    terms = _log_softmax(x, class_dim) * target
    if weight is not None:
        terms = terms * _class_view(x, weight)
    if reduction == "none":
        return -terms.sum(class_dim)
    if reduction == "sum":
        return -terms.sum()
    return -terms.sum() / (x.numel() / n_classes)
