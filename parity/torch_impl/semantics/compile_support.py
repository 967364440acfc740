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

**An output that aliases a DTensor input is rebuilt from the graph's own
output, never by ``as_strided`` on the DTensor** (torch 2.13; no upstream
issue found). AOTAutograd returns an output that is a view of an input (or
of an intermediate) by regenerating the view on the base at run time
(``gen_alias_from_base``). For a DTensor it has no view chain to replay (the
output is a fresh wrapper: no ``_base``, no recorded ``ViewMeta``s), so it
falls back to ``base.as_strided(out.size(), out.stride(),
out.storage_offset())`` -- the *global* size and stride with the *local*
storage offset that a DTensor wrapper carries. Plain DTensor refuses that
call ("as_strided not supported with DTensor"); under ``jax_semantics()``
the fallback ran it on the gathered value: every such output came back
replicated, and one with a non-zero offset held wrong values
(``tensor_split(x, 2, dim=0)[1]`` of an (8, 16) array whose dim 1 is split
over ("data", "model") read elements 8..71 instead of 64..127).
``gen_alias_from_base`` is wrapped: when the base and the output are
DTensors and no view replay applies, the output is the graph's own output
(right values and placements; it shares the base's local storage), detached
when it must not require grad; one that must require grad is rebuilt as a
differentiable view of the base's local block with the output's local
geometry (``to_local`` / ``as_strided`` / ``from_local``), so its gradient
reaches the base. A local block that does not share the base's storage
raises ``UnsupportedOpError`` naming the shapes (never a wrong value).

**``torch._foreach_*`` reach the mode while traced, as they do eagerly**
(torch 2.13 and 2.14; no upstream issue found). Eagerly a
``TorchFunctionMode`` sees ``torch._foreach_norm`` and the other foreach
ops; dynamo dispatches a traced call to the mode only when the function is
in its ``get_overridable_functions()`` set, built from
``torch.overrides.get_overridable_functions``, which leaves out torch's
private names. So ``clip_grad_norm_(foreach=True)`` (and Adam
``foreach=True``) on a model with DTensor and plain parameters -- the TP
plan leaves the norms plain -- put DTensors and plain tensors in one
``_foreach_norm`` inside a compiled step, and DTensor refused them ("got
mixed torch.Tensor and DTensor") where the eager step, through the mode,
runs. ``_install_foreach_dispatch`` adds the ``torch._foreach_*`` functions
to that set, so the traced mode sees them as the eager one does.

**``F.pad`` reaches the mode while traced** (torch 2.13; no upstream issue
found). Eagerly ``F.pad`` hands a call under a ``TorchFunctionMode`` to the
mode (``has_torch_function_unary``); dynamo inlines ``F.pad``, takes that
test as false and traces its last line, ``torch._C._nn.pad``, which is not
in the set above (``torch.overrides`` lists ``F.pad`` instead): the mode
never saw the pad, DTensor's own strategy laid the result out (under
aot_eager ``F.pad(x, (0, 0, 1, 1))`` of an ``x`` sharded ``("data", None)``
came back ``(None, "model")`` where the eager call gives ``("data",
None)``). ``_install_pad_dispatch`` adds ``torch._C._nn.pad`` to the set;
``tests/test_explicit_compile.py`` pins it.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import torch

from parity.torch_impl.runtime.torch_compat import (
    aot_runtime_wrappers,
    dynamo_overridable_functions,
    skip_frames_of,
)

# The backward entry points: never traced by dynamo under jax_semantics()
# (here), and what ``backward_scope`` runs a parity backward for.
TENSOR_BACKWARD = torch.Tensor.backward
AUTOGRAD_BACKWARD = torch.autograd.backward
AUTOGRAD_GRAD = torch.autograd.grad

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


_UNTRACED_TENSOR_BACKWARD = torch.compiler.disable(
    _recording_root_meshes(TENSOR_BACKWARD), recursive=True)
_UNTRACED_AUTOGRAD_BACKWARD = torch.compiler.disable(
    _recording_root_meshes(AUTOGRAD_BACKWARD), recursive=True)
_UNTRACED_AUTOGRAD_GRAD = torch.compiler.disable(_recording_root_meshes(AUTOGRAD_GRAD), recursive=True)


def runs_untraced(func: Any) -> bool:
    """Whether ``func`` is a backward entry point the mode runs outside
    dynamo (see the module docstring). ``is`` tests only: this runs per op,
    and dynamo folds them to constants while tracing."""
    return func is TENSOR_BACKWARD or func is AUTOGRAD_BACKWARD or func is AUTOGRAD_GRAD


def run_untraced(func: Any, args: tuple, kwargs: dict) -> Any:
    """Call a backward entry point with dynamo's frame callback cleared, so
    the eager backward after dynamo's graph break is not traced
    (pytorch#130978 family; see the module docstring)."""
    # ``is`` chains, not a dict keyed by function: dynamo's dict lookup with
    # a function key raises KeyError while tracing (torch 2.13).
    if func is TENSOR_BACKWARD:
        return _UNTRACED_TENSOR_BACKWARD(*args, **kwargs)
    if func is AUTOGRAD_BACKWARD:
        return _UNTRACED_AUTOGRAD_BACKWARD(*args, **kwargs)
    if func is AUTOGRAD_GRAD:
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
    runtime_wrappers = aot_runtime_wrappers()
    owner = getattr(runtime_wrappers, "AOTDispatchAutograd", None)
    original = getattr(owner, "process_runtime_tangent", None)
    if original is None or hasattr(original, "_parity_original"):
        return
    owner.process_runtime_tangent = _wrap_process_runtime_tangent(original)


_install_tangent_patch()


def _local_blocks(t: torch.Tensor) -> list[torch.Tensor]:
    """The plain per-rank blocks of a local tensor: a simulated rank set's
    ``LocalTensor`` holds one per rank; a real rank holds itself."""
    blocks = getattr(t, "_local_tensors", None)
    return [blocks[r] for r in sorted(blocks)] if blocks is not None else [t]


def _shares_storage(view: torch.Tensor, base: torch.Tensor) -> bool:
    pairs = list(zip(_local_blocks(view), _local_blocks(base)))
    return len(pairs) == len(_local_blocks(view)) == len(_local_blocks(base)) and all(
        v.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() for v, b in pairs)


def _dtensor_alias(base: Any, out: Any, requires_grad: bool) -> Any:
    """The output ``out`` (a DTensor the compiled graph returned, a view of
    ``base``'s local block) as the alias AOTAutograd must return; ``None``
    when ``base`` or ``out`` is not a DTensor (torch's own path then runs).

    Raises ``UnsupportedOpError`` when ``out`` must require grad and its
    local block is not a view of ``base``'s (no differentiable view of the
    base gives it).
    """
    from torch.distributed.tensor import DTensor

    if not (isinstance(base, DTensor) and isinstance(out, DTensor)):
        return None
    if not requires_grad:
        return out.detach() if out.requires_grad else out
    local, base_local = out._local_tensor, base._local_tensor
    if not _shares_storage(local, base_local):
        from parity.errors import UnsupportedOpError

        raise UnsupportedOpError(
            f"torch.compile returned a view (global shape {tuple(out.shape)}, "
            f"{tuple(out.placements)}) of a DTensor (global shape {tuple(base.shape)}, "
            f"{tuple(base.placements)}) whose local block is not a view of the base's; parity "
            "cannot rebuild it as a differentiable view. Return a copy (.clone()) of it from "
            "the compiled function.", op="torch.compile output alias",
            placements=tuple(out.placements), reason="alias of a DTensor without a local view")
    view = base.to_local().as_strided(local.size(), local.stride(), local.storage_offset())
    return DTensor.from_local(view, out.device_mesh, out.placements, run_check=False,
                              shape=out.shape, stride=out.stride())


def _wrap_gen_alias_from_base(original: Any) -> Any:
    def gen_alias_from_base(aliased_base_tensor, target_meta_tensor, target_requires_grad,
                            target_view_meta_sequence=None, *, replay_views):
        replays = (replay_views and target_view_meta_sequence is not None
                   and not any(vm.has_symbolic_inputs
                               for vm in target_view_meta_sequence.sequence))
        if not replays:
            alias = _dtensor_alias(aliased_base_tensor, target_meta_tensor, target_requires_grad)
            if alias is not None:
                return alias
        return original(aliased_base_tensor, target_meta_tensor, target_requires_grad,
                        target_view_meta_sequence, replay_views=replay_views)

    gen_alias_from_base._parity_original = original
    return gen_alias_from_base


def _install_alias_patch() -> None:
    """Wrap ``gen_alias_from_base`` where AOTAutograd's runtime wrappers
    look it up (their generated alias epilogue binds it when a graph is
    compiled, so this runs at import). A torch without it has nothing to
    patch."""
    runtime_wrappers = aot_runtime_wrappers()
    original = getattr(runtime_wrappers, "gen_alias_from_base", None)
    if original is None or hasattr(original, "_parity_original"):
        return
    runtime_wrappers.gen_alias_from_base = _wrap_gen_alias_from_base(original)


_install_alias_patch()


def _install_foreach_dispatch() -> None:
    """Add torch's ``_foreach_*`` functions to the functions dynamo
    dispatches to a ``TorchFunctionMode`` while tracing (see the module
    docstring). A torch without that set has nothing to extend."""
    overridable = dynamo_overridable_functions()
    if overridable is None:
        return
    overridable.update(fn for name, fn in vars(torch).items()
                       if name.startswith("_foreach_") and callable(fn))


_install_foreach_dispatch()


def _install_pad_dispatch() -> None:
    """Add ``torch._C._nn.pad`` (what a traced ``F.pad`` calls) to the
    functions dynamo dispatches to a ``TorchFunctionMode`` (see the module
    docstring). A torch without that set has nothing to extend."""
    overridable = dynamo_overridable_functions()
    if overridable is not None:
        overridable.add(torch._C._nn.pad)


_install_pad_dispatch()


def skip_alone(fn: Any) -> Any:
    """Never let dynamo compile ``fn``'s frames, nor what they call, as
    top-level frames; dynamo still inlines ``fn`` where it traces a caller
    (see the module docstring). Returns ``fn``."""
    skip_frames_of(fn.__code__)
    return fn
