"""A backward started under ``jax_semantics()`` runs under it too.

torch pops a ``TorchFunctionMode`` while the mode's own
``__torch_function__`` runs; ``loss.backward()`` reaches the mode as a
torch function, so the backward it starts used to run with the mode off.
Every Python-level op inside that backward then ran without JAX's
semantics: activation checkpointing's recompute (``torch.utils.checkpoint``,
both forms), a custom ``autograd.Function``'s backward, a tensor hook. The
recompute then differed from the forward (non-reentrant: ``CheckpointError:
Recomputed values ... have different metadata``; reentrant: DTensor has no
strategy for the flash-attention backward that the forward's fallback
avoided).

Calling the entry point again with the mode pushed back would only reach
the mode again (each ``__torch_function__`` pops it), so this module runs
the entry point's own body -- the argument handling of
``torch.autograd.backward`` / ``torch.autograd.grad`` and the engine call
``torch.autograd.graph._engine_run_backward`` (torch 2.13) -- with the mode
on the stack. The autograd engine carries the caller's function-mode stack
into every node it runs (measured: a custom ``Function``'s backward sees the
mode), so the recompute runs with JAX's semantics. DTensor's own backward
kernels run below autograd and are unchanged.

Not covered, and run as before (the mode off inside the backward):
``torch.autograd.grad(..., is_grads_batched=True)`` (a vmap over the engine
call) and the deprecated ``grad_variables`` argument.

A backward that accumulates into ``.grad`` (``backward()`` without
``create_graph``) runs with a gradient bucket open
(``collectives.gradient_buckets``): the pending sums of the leaves'
gradients are completed together, one all_reduce per group, when the
engine returns (earlier where a hook or a ``.grad`` reader needs them),
and a root that holds a pending sum or mean (a loss under
``jax_semantics(defer=True)``) is reduced in the same launch.
``autograd.grad`` and the calls not covered run with no bucket, so a
gradient they return is always complete.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch
from torch.autograd.graph import GradientEdge
from torch.overrides import TorchFunctionMode, is_tensor_like

from parity.torch_impl.collectives.gradient_buckets import GradientBucket, open_bucket
from parity.torch_impl.runtime.torch_compat import (
    _engine_run_backward,
    _make_grads,
    _tensor_or_tensors_to_tuple,
)
from parity.torch_impl.semantics import compile_support
from parity.torch_impl.semantics.compile_support import (
    AUTOGRAD_BACKWARD,
    AUTOGRAD_GRAD,
    TENSOR_BACKWARD,
)

_SIGNATURES = {f: inspect.signature(f) for f in (TENSOR_BACKWARD, AUTOGRAD_BACKWARD,
                                                  AUTOGRAD_GRAD)}


def _as_tuple(values: Any) -> tuple:
    if is_tensor_like(values) or isinstance(values, GradientEdge):
        return (values,)
    return tuple(values)


def _inputs_tuple(inputs: Any, entry: str) -> tuple:
    if inputs is None:
        return ()
    if isinstance(inputs, (torch.Tensor, GradientEdge)):
        return (inputs,)
    if type(inputs) is dict:
        return tuple(inputs.values())
    if isinstance(inputs, Mapping):
        raise TypeError(f"`inputs` argument to `{entry}()` must be a dict, not "
                        f"{type(inputs).__name__}. Other Mapping types are not supported.")
    return tuple(inputs)


def _backward(bucket: GradientBucket | None, tensors: Any, grad_tensors: Any,
              retain_graph: Any, create_graph: bool, inputs: Any) -> None:
    """``torch.autograd.backward``'s body after its torch-function check;
    its pending roots wait in ``bucket`` with the gradients."""
    inputs_tuple = _inputs_tuple(inputs, "backward")
    if inputs is not None and not inputs_tuple:
        raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
    tensors = _as_tuple(tensors)
    grads = _tensor_or_tensors_to_tuple(grad_tensors, len(tensors))
    if bucket is not None:  # a pending loss (defer=True): reduced with the gradients
        grads = tuple(bucket.add_root(t, g) for t, g in zip(tensors, grads))
    grads = _make_grads(tensors, grads, is_grads_batched=False)
    if retain_graph is None:
        retain_graph = create_graph
    _engine_run_backward(tensors, grads, retain_graph, create_graph, inputs_tuple,
                         allow_unreachable=True, accumulate_grad=True)


def _grad(a: dict) -> Any:
    """``torch.autograd.grad``'s body (``is_grads_batched=False``) after its
    torch-function check."""
    allow_unused, materialize = a["allow_unused"], a["materialize_grads"]
    if materialize and allow_unused is False:
        raise ValueError("Expected allow_unused to be True or not passed when "
                         "materialize_grads=True, but got: allow_unused=False.")
    if allow_unused is None:
        allow_unused = materialize
    inputs = a["inputs"]
    inputs_tuple = _inputs_tuple(inputs, "grad")
    if not inputs_tuple:
        raise RuntimeError("`inputs` argument to `grad()` cannot be empty.")
    outputs = _as_tuple(a["outputs"])
    grads = _tensor_or_tensors_to_tuple(a["grad_outputs"], len(outputs))
    grads = _make_grads(outputs, grads, is_grads_batched=False)
    retain_graph = a["create_graph"] if a["retain_graph"] is None else a["retain_graph"]
    result = _engine_run_backward(outputs, grads, retain_graph, a["create_graph"],
                                  inputs_tuple, allow_unused, accumulate_grad=False)
    if materialize:
        if any(r is None and not is_tensor_like(i) for r, i in zip(result, inputs_tuple)):
            raise RuntimeError(
                "materialize_grads cannot be used when the given input is a GradientEdge")
        result = tuple(
            r if r is not None else torch.zeros_like(i, requires_grad=a["create_graph"])
            for r, i in zip(result, inputs_tuple, strict=True)
        )
    if type(inputs) is dict:
        return dict(zip(inputs.keys(), result, strict=True))
    return result


def covered(func: Any, args: tuple, kwargs: dict) -> bool:
    """Whether ``run`` can start this backward entry-point call with the mode
    on (``False``: a batched ``grad``, ``grad_variables``, or not an entry point)."""
    sig = _SIGNATURES.get(func)
    if sig is None:
        return False
    bound = sig.bind(*args, **kwargs).arguments
    return not bound.get("is_grads_batched") and bound.get("grad_variables") is None


def run(mode: TorchFunctionMode, func: Any, args: tuple, kwargs: dict) -> Any:
    """Run the backward entry point ``func(*args, **kwargs)`` with ``mode``
    on this thread's function-mode stack (see the module docstring).

    Raises what the entry point raises (``TypeError``/``RuntimeError`` for bad
    ``inputs``); ``ValueError`` when ``covered`` is False for the call.
    """
    if not covered(func, args, kwargs):
        raise ValueError(f"backward_scope.run: {func!r} with these arguments is not covered; "
                         "check covered() first.")
    bound = _SIGNATURES[func].bind(*args, **kwargs)
    bound.apply_defaults()
    a = bound.arguments
    # A bucket for a backward that accumulates into .grad, none for
    # autograd.grad (the gradients it returns are complete); flushed after the
    # mode is popped (the bucket's own ops need nothing from it).
    accumulates = func is not AUTOGRAD_GRAD and not a["create_graph"]
    with open_bucket(accumulates) as bucket, mode:
        if func is TENSOR_BACKWARD:
            return _backward(bucket, a["self"], a["gradient"], a["retain_graph"],
                             a["create_graph"], a["inputs"])
        if func is AUTOGRAD_BACKWARD:
            return _backward(bucket, a["tensors"], a["grad_tensors"], a["retain_graph"],
                             a["create_graph"], a["inputs"])
        return _grad(a)


def _entry(*args: Any, _parity_mode: TorchFunctionMode, _parity_entry: Any, **kwargs: Any) -> Any:
    return run(_parity_mode, _parity_entry, args, kwargs)


# Outside dynamo and with the roots' meshes recorded, as compile_support's
# entry points are (its module docstring says why).
_UNTRACED = torch.compiler.disable(compile_support._recording_root_meshes(_entry), recursive=True)


def run_untraced(mode: TorchFunctionMode, func: Any, args: tuple, kwargs: dict) -> Any:
    """``run`` outside dynamo, as ``compile_support.run_untraced`` runs the
    entry point itself."""
    return _UNTRACED(*args, _parity_mode=mode, _parity_entry=func, **kwargs)


def run_uncovered(func: Any, args: tuple, kwargs: dict) -> Any:
    """A backward entry point ``run`` does not cover (or with no mode), as
    ``compile_support.run_untraced`` runs it, with no gradient bucket: inside
    another backward (a hook's batched ``autograd.grad``) its gradients are
    complete."""
    with open_bucket(accumulates=False):
        return compile_support.run_untraced(func, args, kwargs)
