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

**A plain gradient for a DTensor output of a compiled graph is the
replicated value** (pytorch#173123, open; the error text points at
pytorch#172556). When a compiled graph returns several outputs that require
grad and the backward reaches only some of them -- Keras's ``train_step``
breaks the graph at ``loss.backward()`` and the graph returns the loss *and*
``y_pred``, which the metrics read after the backward -- the autograd engine
materializes the missing gradient as a *plain* ``torch.zeros`` of the global
shape (``InputMetadata::zeros_like`` knows no subclass), and AOTAutograd's
backward prologue refuses it: "Expected a DTensor tangent but got a plain
Tensor". Under ``jax_semantics()`` a plain tensor meeting DTensors is the
replicated value, so for a backward started under the mode
(``run_untraced``) ``process_runtime_tangent`` turns a plain tangent of the
DTensor output's global shape into a DTensor on the mesh of the backward's
roots with the placements AOTAutograd expects (a local slice: no
collective). Anything else -- no parity backward, the roots on several
meshes or on none, a shape that is not the output's -- goes to torch's own
check unchanged, which raises as before.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import torch
from torch._C._dynamo.eval_frame import set_code_exec_strategy
from torch._dynamo.types import FrameAction, FrameExecStrategy

# The functions that must never be traced by dynamo under jax_semantics().
_TENSOR_BACKWARD = torch.Tensor.backward
_AUTOGRAD_BACKWARD = torch.autograd.backward
_AUTOGRAD_GRAD = torch.autograd.grad

_backward = threading.local()  # .meshes: the meshes of the running parity backward's roots


def _recording_root_meshes(func: Any) -> Any:
    """``func`` run with the meshes of its root DTensors (the first
    argument: the tensor, or the ``tensors`` / ``outputs``) recorded for
    ``_tangent_as_dtensor``; nested backwards restore the outer ones. Keeps
    ``func``'s name (dynamo's graph-break reason names it)."""

    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> Any:
        from torch.distributed.tensor import DTensor

        roots = args[0] if args else kwargs.get("tensors", kwargs.get("outputs"))
        if isinstance(roots, torch.Tensor):
            roots = (roots,)
        outer = getattr(_backward, "meshes", None)
        _backward.meshes = {t.device_mesh for t in roots or () if isinstance(t, DTensor)}
        try:
            return func(*args, **kwargs)
        finally:
            _backward.meshes = outer

    return run


_UNTRACED_TENSOR_BACKWARD = torch._dynamo.disable(
    _recording_root_meshes(_TENSOR_BACKWARD), recursive=True)
_UNTRACED_AUTOGRAD_BACKWARD = torch._dynamo.disable(
    _recording_root_meshes(_AUTOGRAD_BACKWARD), recursive=True)
_UNTRACED_AUTOGRAD_GRAD = torch._dynamo.disable(_recording_root_meshes(_AUTOGRAD_GRAD), recursive=True)


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


def _tangent_as_dtensor(x: Any, meta: Any) -> Any:
    """``x`` as the DTensor tangent AOTAutograd expects when ``x`` is a plain
    tensor of the DTensor output's global shape and a parity backward on one
    mesh is running; ``None`` when that does not hold (torch's own check
    then decides)."""
    from torch.distributed.tensor import DTensor, Replicate

    expected = getattr(meta, "original_subclass_type", None)
    meshes = getattr(_backward, "meshes", None)
    if (expected is None or not issubclass(expected, DTensor) or type(x) is not torch.Tensor
            or not meshes or len(meshes) != 1):
        return None
    placements, tensor_meta = meta.meta[0], meta.meta[1]
    (mesh,) = meshes
    if len(placements) != mesh.ndim or tuple(x.shape) != tuple(tensor_meta.shape):
        return None
    replicated = DTensor.from_local(x, mesh, [Replicate()] * mesh.ndim, run_check=False)
    return replicated.redistribute(mesh, placements)


def _wrap_process_runtime_tangent(original: Any) -> Any:
    def process_runtime_tangent(x, meta, *args, **kwargs):
        converted = _tangent_as_dtensor(x, meta)
        return original(x if converted is None else converted, meta, *args, **kwargs)

    process_runtime_tangent._parity_original = original
    return staticmethod(process_runtime_tangent)


def _install_tangent_patch() -> None:
    """Wrap ``AOTDispatchAutograd.process_runtime_tangent`` (bound into each
    compiled backward's generated prologue when it is built, so this runs at
    import, before anything compiles). A torch without it has nothing to
    patch."""
    from torch._functorch._aot_autograd import runtime_wrappers

    owner = getattr(runtime_wrappers, "AOTDispatchAutograd", None)
    original = getattr(owner, "process_runtime_tangent", None)
    if original is None or hasattr(original, "_parity_original"):
        return
    owner.process_runtime_tangent = _wrap_process_runtime_tangent(original)


_install_tangent_patch()


def skip_alone(fn: Any) -> Any:
    """Never let dynamo compile ``fn``'s frames, nor what they call, as
    top-level frames; dynamo still inlines ``fn`` where it traces a caller
    (see the module docstring). Returns ``fn``."""
    set_code_exec_strategy(fn.__code__, FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP))
    return fn
