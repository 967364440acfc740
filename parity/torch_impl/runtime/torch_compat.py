"""Every torch-version difference the backend depends on, in one place.

parity is developed on torch 2.13 and tested on 2.15 too; CUDA images carry older
releases (2.11).
Each name here is torch's own where this torch has it, else an equivalent:

* ``rank_map``, ``maybe_disable_local_tensor_mode``: in
  ``torch.distributed._local_tensor`` since 2.13; built on ``LocalTensor``
  before.
* ``traced_through``: torch's private allow-list of ``lru_cache``
  wrappers dynamo may trace through without a warning (2.13 and 2.14 have
  it; without it dynamo warns as before).
* ``process_rank``: torch 2.15's simulation makes ``dist.get_rank()`` every
  simulated rank's (a ``SymInt``); this is the process's own, an ``int``.
* ``register_opaque_like_device_mesh``: torch 2.15 renamed
  ``register_opaque_type`` / ``"reference"`` to ``register_custom_class`` /
  ``"symbolic"`` (the old names log a deprecation warning there).
* the single-tensor collectives: torch 2.13 renamed ``*_into_tensor`` /
  ``*_tensor`` to ``*_single`` (the old names are deprecated there).
  ``dist_all_gather_single`` and ``dist_reduce_scatter_single`` are what a
  ``torch.distributed`` user calls (the benchmarks time them as the raw
  library).

It is also the one module that imports torch's private names (the end of
this file): a torch that moves one breaks here, at import, and nowhere else.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch._dynamo.decorators import substitute_in_graph
from torch.autograd import _make_grads, _tensor_or_tensors_to_tuple
from torch.autograd.graph import _engine_run_backward
from torch._dynamo.exc import TorchDynamoException
from torch.distributed import _local_tensor
from torch.distributed import distributed_c10d as c10d
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
from torch.distributed.tensor.placement_types import _MaskPartial as MaskPartial
from torch.distributed.tensor.placement_types import _StridedShard as StridedShard
from torch.overrides import _get_current_function_mode_stack as function_mode_stack
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten
from torch.utils._python_dispatch import (
    _disable_current_modes,
    _get_current_dispatch_mode_stack,
    _pop_mode,
    _push_mode,
    get_alias_info,
    return_and_correct_aliasing,
)

# how many torch function modes this thread has on its stack (one C call)
function_mode_count: Callable[[], int] = torch._C._len_torch_function_stack

__all__ = [  # the private names re-exported, besides the shims defined below
    "DTensorSpec", "MaskPartial", "StridedShard", "TensorMeta", "TorchDynamoException", "c10d", "funcol",
    "function_mode_stack",
    "substitute_in_graph", "_engine_run_backward", "_make_grads", "_tensor_or_tensors_to_tuple",
    "tree_flatten", "tree_map", "tree_unflatten", "return_and_correct_aliasing",
]


def _newer(module: object, name: str, older: Callable) -> Callable:
    """``module.name`` when this torch has it, else ``older``."""
    return getattr(module, name) if hasattr(module, name) else older


dist_all_gather_single = _newer(dist, "all_gather_single", dist.all_gather_into_tensor)
dist_reduce_scatter_single = _newer(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)
# The process group's own methods that those call after their Python checks.
pg_all_gather_single = _newer(dist.ProcessGroup, "all_gather_single",
                              dist.ProcessGroup._allgather_base)
pg_reduce_scatter_single = _newer(dist.ProcessGroup, "reduce_scatter_single",
                                  dist.ProcessGroup._reduce_scatter_base)
funcol_all_gather_single = _newer(funcol, "all_gather_single", funcol.all_gather_tensor)
funcol_reduce_scatter_single = _newer(funcol, "reduce_scatter_single",
                                      funcol.reduce_scatter_tensor)


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


rank_map: Callable[[Callable[[int], torch.Tensor]], torch.Tensor] = _newer(
    _local_tensor, "rank_map", _rank_map)
"""``cb(rank)`` for every simulated rank as one ``LocalTensor``; ``cb(rank)``
of this process's rank outside simulation."""

maybe_disable_local_tensor_mode: Callable[[], contextlib.AbstractContextManager] = _newer(
    _local_tensor, "maybe_disable_local_tensor_mode", _disable_local_tensor_mode)
"""A context in which simulated ranks' tensors are plain again (no-op outside
simulation)."""


def process_rank() -> int:
    """This process's rank in the default process group, a plain ``int``.

    Outside ``simulate()`` it is ``dist.get_rank()``. Inside, torch 2.15's
    ``LocalTensorMode`` patches ``dist.get_rank()`` to give every simulated
    rank's (a ``SymInt`` over a ``LocalIntNode``, which numpy compares with
    nothing); this reads the process group's own rank instead, what
    ``dist.get_rank()`` gave there before 2.15. Raises ``ValueError`` (torch's)
    before ``init_process_group``."""
    return c10d._get_default_group().rank()


def flattened_mesh(mesh, axis_names: tuple[str, ...], name: str):
    """The 1-D mesh of ``mesh``'s axes ``axis_names`` flattened into one,
    named ``name`` (``DeviceMesh._flatten``: torch also records it in the
    root mesh's ``flatten_registry``)."""
    return mesh[axis_names]._flatten(name)


def flatten_registry(mesh) -> dict | None:
    """The root mesh's registry of flattened meshes (name -> mesh), where
    DTensor's redistribute looks for one to merge its collectives into (torch
    2.10+: ``DeviceMesh._flatten_mapping``); ``None`` on a torch that keeps
    no such registry on the mesh (and merges no collectives)."""
    registry = getattr(mesh._get_root_mesh(), "_flatten_mapping", None)
    return registry if isinstance(registry, dict) else None


def traced_through(cached: Callable) -> Callable:
    """Tell dynamo that tracing through ``cached`` -- a ``functools.lru_cache``
    of a pure function of hashable arguments -- is safe: dynamo ignores the
    cache and traces the function, which gives the cached value; without
    this it warns once per call site it traces. Returns ``cached``."""
    import torch._dynamo.utils as dynamo_utils

    allow = getattr(dynamo_utils, "allow_lru_cache_wrapper_trace_without_warning", None)
    if allow is not None:
        allow(cached)
    return cached


# ``torch._C._storage_Use_Count``: how many references a storage has (None on
# a torch without it: donation then reuses no block).
storage_use_count: Callable | None = getattr(torch._C, "_storage_Use_Count", None)


def fake_store() -> type:
    """torch's ``FakeStore``, which ``simulate(n)``'s ``fake`` process group
    runs on (imported when first asked: ``torch.testing`` is slow to import)."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    return FakeStore


# The simulator's parts (``runtime.simulator``): torch's per-rank mode, its
# tensor, and the helpers its per-rank loop ends with (``None`` on a torch
# without one: the simulator then takes torch's own loop for every op).
LocalTensor = _local_tensor.LocalTensor
FakeTensor = torch._subclasses.fake_tensor.FakeTensor
LocalTensorMode = _local_tensor.LocalTensorMode
OpOverload = torch._ops.OpOverload
disable_torch_function = torch._C.DisableTorchFunction
push_dispatch_mode = _push_mode  # a dispatch mode back on the stack (inside its own dispatch)
pop_dispatch_mode = _pop_mode
combine_rank_results: Callable | None = getattr(_local_tensor, "_combine_rank_results", None)
enabled_local_tensor_mode: Callable | None = getattr(_local_tensor, "enabled_local_tensor_mode",
                                                     None)
is_inplace_op: Callable | None = getattr(_local_tensor, "_is_inplace_op", None)
set_rng_state: Callable | None = getattr(_local_tensor, "_set_rng_state", None)
get_rng_state: Callable | None = getattr(_local_tensor, "_get_rng_state", None)
composite_explicit_autograd = torch._C.DispatchKey.CompositeExplicitAutograd
alias_info = get_alias_info  # an op's aliasing, as return_and_correct_aliasing reads it
# The storage swap ``return_and_correct_aliasing`` gives a view's result wrapper.
unsafe_set_storage = torch._functionalize_unsafe_set
# What ``runtime.rank_results`` builds a ``LocalTensor`` wrapper with (as
# ``LocalTensor.__new__`` does).
make_wrapper_subclass = torch.Tensor._make_wrapper_subclass
throw_on_mutable_data_ptr = torch._C._set_throw_on_mutable_data_ptr
is_exporting = torch.compiler.is_exporting
NO_EXTRA_DISPATCH_KEYS = torch._C.DispatchKeySet.from_raw_repr(0)


def aot_runtime_wrappers():
    """AOTAutograd's ``runtime_wrappers`` module (the compile workarounds
    patch two of its functions)."""
    from torch._functorch._aot_autograd import runtime_wrappers

    return runtime_wrappers


def dynamo_overridable_functions() -> set | None:
    """The set of torch functions dynamo dispatches to an active
    ``TorchFunctionMode`` while it traces (``torch._dynamo.variables.torch.
    get_overridable_functions``, cached: the set itself is the registry);
    ``None`` on a torch without it."""
    from torch._dynamo.variables import torch as dynamo_torch

    registry = getattr(dynamo_torch, "get_overridable_functions", None)
    found = registry() if callable(registry) else None
    return found if isinstance(found, set) else None


def skip_frames_of(code) -> None:
    """Never let dynamo compile frames of ``code``, nor what they call, as
    top-level frames (what ``torch._dynamo.skip`` does without marking the
    code skipped when inlined)."""
    from torch._C._dynamo.eval_frame import set_code_exec_strategy
    from torch._dynamo.types import FrameAction, FrameExecStrategy

    set_code_exec_strategy(code, FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP))


def dtensor_op_dispatcher():
    """DTensor's op dispatcher (``DTensor._op_dispatcher``): its sharding
    propagator, the unwrap / redistribute / wrap steps of its dispatch, and
    its table of custom op handlers (``_custom_op_handlers``, aten op ->
    handler, which ``dtensor_op_handlers`` returns)."""
    return DTensor._op_dispatcher


def dtensor_op_handlers() -> dict:
    """DTensor's table of custom op handlers (aten op -> ``handler(op, args,
    kwargs)``), where torch's ``loss_parallel()`` and parity's
    ``semantics.dtensor_handlers`` put theirs; the table itself, not a copy."""
    return dtensor_op_dispatcher()._custom_op_handlers


def default_store():
    """The default process group's store (torch has no public getter)."""
    return c10d._get_default_store()


def clear_sharding_caches() -> None:
    """Empty DTensor's sharding-propagation caches (the Python one and the
    C++ fast path's). Their keys compare meshes by value (ranks, layout, axis
    names), not by process group, and the output specs they hand back hold
    the mesh object of the first call: after a new process group (another
    ``simulate()`` block, another ``initialize()``), ``x.detach()`` or
    ``nn.Parameter(x)`` of a DTensor on the new mesh came back on the old,
    equal one (Megatron-LM#7029 and transformers#48383 met the same)."""
    from torch.distributed.tensor.debug import _clear_sharding_prop_cache

    _clear_sharding_prop_cache()


def default_group():
    """The default (WORLD) process group, ``None`` before ``init_process_group``
    and after ``destroy_process_group``: ``dist.group.WORLD`` read from the
    attribute behind it. Speed: ``runtime.state`` reads it on every
    collective; torch's property and ``dist.is_initialized()`` are two
    Python calls more each time (and the collectives' hot path runs no torch
    Python, ``tests/test_collectives_per_call.py``)."""
    return c10d._world._default_pg


def register_opaque_like_device_mesh(cls: type, extra: tuple[str, ...]) -> None:
    """Let ``torch.compile`` trace ``cls`` (a ``DeviceMesh`` subclass) as it
    traces ``DeviceMesh`` (torch 2.13+: an opaque reference type whose
    stand-in ``FakeScriptObject`` carries the listed members), the
    attributes ``extra`` carried and guarded on too (a function traced on
    one value of them recompiles for another). A no-op on a torch whose
    ``DeviceMesh`` is not opaque (dynamo then traces the object itself).

    torch 2.15 renamed ``register_opaque_type`` to ``register_custom_class``
    and the kind ``"reference"`` to ``"symbolic"`` (the old names still work
    there, each with a logged deprecation warning): ``cls`` is registered
    with the newest function this torch has and ``DeviceMesh``'s own kind."""
    import torch.distributed.tensor  # noqa: F401 - registers DeviceMesh as opaque
    from torch.distributed.device_mesh import DeviceMesh

    try:
        from torch._library import opaque_object
        from torch._library.opaque_object import MemberType, get_opaque_obj_info
    except ImportError:
        return
    register = getattr(opaque_object, "register_custom_class", None) or getattr(
        opaque_object, "register_opaque_type", None)
    base = get_opaque_obj_info(DeviceMesh)
    if base is None or register is None:
        return
    base_guard = base.guard_fn
    register(
        cls, typ=base.opaque_typ, reconstruct_fn=base.reconstruct_fn,
        guard_fn=lambda obj: [*(base_guard(obj) if base_guard else ()),
                              *(getattr(obj, name) for name in extra)],
        members={**base.members, **{name: MemberType.USE_REAL for name in extra}})


def aot_backend(fw_compiler: Callable, bw_compiler: Callable) -> Callable:
    """A ``torch.compile`` backend that runs AOTAutograd (as ``aot_eager``
    does) and hands its forward and backward graphs to ``fw_compiler`` /
    ``bw_compiler`` (``(graph module, example inputs) -> boxed callable``).
    Imported when called: dynamo's backends are not loaded with parity."""
    from torch._dynamo.backends.common import aot_autograd

    return aot_autograd(fw_compiler=fw_compiler, bw_compiler=bw_compiler)


def boxed(fn: Callable) -> Callable:
    """``fn`` in AOTAutograd's boxed calling convention (one list argument)."""
    from torch._functorch.aot_autograd import make_boxed_func

    return make_boxed_func(fn)


def inductor_option_patcher(name: str, value: object) -> Callable[[], Callable[[], None]]:
    """A cheap patcher of inductor's config option ``name`` (inductor's own
    ``_make_closure_patcher``): calling it sets ``value`` for this thread
    (inductor's config values are ContextVars: per thread, torch >= 2.13)
    and returns the undo, which restores the option exactly (unset stays
    unset)."""
    import torch._inductor.config as config

    return config._make_closure_patcher(**{name: value})


def inductor_option_is_default(name: str) -> bool:
    """Whether inductor's config option ``name`` has its default value, set
    neither by the user (in this thread) nor by the environment."""
    import torch._inductor.config as config

    return config._is_default(name)


def bucket_all_reduces(gm: torch.fx.GraphModule) -> None:
    """Inductor's all-reduce bucketing pass on ``gm`` (what
    ``torch._inductor.config.bucket_all_reduces_fx = "all"`` runs after
    AOTAutograd): the functional all_reduces of one group, reduce op and
    dtype, within inductor's bucket cap, become one all_reduce of their
    concatenation. In place; imported when called (inductor is heavy)."""
    from torch._inductor.fx_passes.bucketing import bucket_all_reduce

    bucket_all_reduce(gm)


def has_mesh_layouts() -> bool:
    """Whether this torch describes mesh axes by CuTe layouts
    (``torch.distributed._mesh_layout``)."""
    try:
        from torch.distributed._mesh_layout import _MeshLayout  # noqa: F401
    except ImportError:
        return False
    return True


def collapsed_mesh_layout(layouts: list):
    """torch's layout of several mesh axes flattened into one
    (``_MeshLayout(layouts).collapse()``); needs ``has_mesh_layouts()``."""
    from torch.distributed._mesh_layout import _MeshLayout

    return _MeshLayout(layouts).collapse()
