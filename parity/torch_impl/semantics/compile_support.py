"""What ``jax_semantics()`` does so that a user's ``torch.compile(step)``
compiles a whole training step: forward, loss, ``loss.backward()`` and an
optimizer update.

Each workaround here answers one upstream failure a user cannot get around
from outside torch; each names its upstream issue and is pinned by a test
that shows plain DTensor failing where parity passes
(``tests/test_compiled_step.py``).

**The backward runs outside dynamo** (torch 2.13 and 2.14; same family as
pytorch#130978, "SymNodeVariable() is not a constant" in DTensor's
``__tensor_unflatten__``; pytorch#155251 is the same escape on
AOTAutogradCache hits). Dynamo cannot trace ``Tensor.backward``: it breaks the
graph there and calls it eagerly -- with its frame callback still installed.
The eager backward runs AOTAutograd's compiled backward, and its subclass
epilogue is generated Python (``subclass_codegen.py:codegen(
backward_subclass_wrapper)``, since pytorch#178674) that dynamo's skip rules
do not cover: dynamo compiles that frame, traces DTensor's
``__tensor_unflatten__`` with symbolic sizes and fails with
``InternalTorchDynamoError: AsPythonConstantNotImplementedError:
SymNodeVariable() is not a constant``. Under ``jax_semantics()`` the mode
routes ``Tensor.backward``, ``torch.autograd.backward`` and
``torch.autograd.grad`` through ``torch._dynamo.disable``: the graph breaks
there as before (dynamo cannot trace a backward either way), the backward
runs AOTAutograd's compiled backward graph eagerly, nothing in it is
re-traced, and the rest of the step (the optimizer update) is compiled in
the resume function. Outside compilation the wrapper only clears and
restores dynamo's frame callback.

**The mode's own frames are never compiled on their own.** Dynamo inlines
the mode's ``__torch_function__`` into the graph it traces; but wherever
Python runs a torch function eagerly while dynamo's callback is installed --
the eager code at a graph break, the prologue of a compiled frame reading
``p.grad`` -- dynamo also sees the mode's ``__torch_function__`` as a new
top-level frame and compiles it: one op per frame, recompiled per op and
layout until its recompile limit (8), with symbolic DTensor sizes. When a
user's frame falls back to eager, a step then ran op by op through such
graphs and returned wrong values (a mean of squares of -3.1 instead of 1.42
on the test MLP, torch 2.13). ``skip_alone`` marks those code objects
SKIP for the frame and everything it calls (dynamo's own
``FrameExecStrategy``, what ``torch._dynamo.skip`` uses without the
``_torchdynamo_disable`` mark that would stop inlining): eager ops run
eagerly, traced ops are still inlined.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._C._dynamo.eval_frame import set_code_exec_strategy
from torch._dynamo.types import FrameAction, FrameExecStrategy

# The functions that must never be traced by dynamo under jax_semantics().
_TENSOR_BACKWARD = torch.Tensor.backward
_AUTOGRAD_BACKWARD = torch.autograd.backward
_AUTOGRAD_GRAD = torch.autograd.grad

_UNTRACED_TENSOR_BACKWARD = torch._dynamo.disable(_TENSOR_BACKWARD, recursive=True)
_UNTRACED_AUTOGRAD_BACKWARD = torch._dynamo.disable(_AUTOGRAD_BACKWARD, recursive=True)
_UNTRACED_AUTOGRAD_GRAD = torch._dynamo.disable(_AUTOGRAD_GRAD, recursive=True)


def runs_untraced(func: Any) -> bool:
    """Whether ``func`` is a backward entry point the mode runs outside
    dynamo (see the module docstring). ``is`` tests only: this runs per op,
    and dynamo folds them to constants while tracing."""
    return func is _TENSOR_BACKWARD or func is _AUTOGRAD_BACKWARD or func is _AUTOGRAD_GRAD


def run_untraced(func: Any, args: tuple, kwargs: dict) -> Any:
    """Call a backward entry point with dynamo's frame callback cleared, so
    the eager backward after dynamo's graph break is not traced
    (pytorch#130978 family; see the module docstring)."""
    # ``is`` chains, not a dict keyed by function: dynamo's dict lookup with
    # a function key raises KeyError while tracing (torch 2.13).
    if func is _TENSOR_BACKWARD:
        return _UNTRACED_TENSOR_BACKWARD(*args, **kwargs)
    if func is _AUTOGRAD_BACKWARD:
        return _UNTRACED_AUTOGRAD_BACKWARD(*args, **kwargs)
    if func is _AUTOGRAD_GRAD:
        return _UNTRACED_AUTOGRAD_GRAD(*args, **kwargs)
    raise ValueError(f"run_untraced: {func!r} is not a backward entry point (runs_untraced() is False).")


def skip_alone(fn: Any) -> Any:
    """Never let dynamo compile ``fn``'s frames, nor what they call, as
    top-level frames; dynamo still inlines ``fn`` where it traces a caller
    (see the module docstring). Returns ``fn``."""
    set_code_exec_strategy(fn.__code__, FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP))
    return fn
