"""A multi-process rank's normal exit: its process groups destroyed, and
their gloo threads joined, while the interpreter is still alive.

Why (measured, torch 2.13, gloo): each gloo process group runs worker
threads (``pt_gloo_runloop``). A worker drops its finished work -- and the
tensors the work holds -- *after* it has told the waiting caller the work
is done. When the caller had already let go of such a tensor, the worker's
drop is the last one and releases the tensor's Python object, which takes
the GIL. If that happens once ``Py_FinalizeEx`` has begun, CPython 3.11
ends the thread with ``pthread_exit`` inside that GIL acquire; the forced
unwind crosses a ``noexcept`` destructor (``~AsyncWork``) and the process
dies of SIGABRT, "terminate called without an active exception"
(pytorch#190489; the core dump's faulting thread is a ``pt_gloo_runloop``
in ``~AsyncWork -> TensorImpl::decref_pyobject -> gil_scoped_acquire ->
take_gil -> PyThread_exit_thread``).

``destroy_process_group()`` alone does not prevent it: it unregisters the
groups, but a group's C++ object, and its threads, live on as long as any
Python reference does, and torch's own ``DeviceMesh`` keeps every group it
made in its ``_pg_registry`` (FSDP2's mesh infos and parity's collective
plans keep theirs too).
Only the group's destructor drains its queue and joins its threads. So
after destroying, ``destroy_at_normal_exit`` drops the references that torch's
and parity's own objects still hold to the destroyed groups, and the groups'
destructors run here, before finalization.
"""

from __future__ import annotations

import gc
import sys
import warnings

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh as TorchMesh

from parity.torch_impl.runtime.torch_compat import c10d

__all__ = ["destroy_at_normal_exit", "release_destroyed_groups"]

# Whose objects' references to a destroyed group are dropped: library
# bookkeeping (dead once the group is destroyed), never the user's objects.
_LIBRARIES = ("parity.", "torch.")


def destroy_at_normal_exit() -> None:
    """Destroy the process groups ``initialize()`` started, and join their
    threads, as the process ends (an ``atexit`` handler).

    Skipped after an uncaught exception, where destroying could wait on
    peers, and when the user has already destroyed the groups.
    """
    failed = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    if failed is not None or not dist.is_initialized():
        return
    groups = list(c10d._world.pg_names)
    dist.destroy_process_group()
    still_held = release_destroyed_groups(groups)
    if still_held:
        warnings.warn(
            f"process group(s) {still_held} stay referenced after destroy_process_group() "
            "(by an object of yours, or one the garbage collector cannot see): their "
            "gloo worker threads outlive the interpreter, and this rank can die of "
            "SIGABRT as it exits (pytorch#190489). "
            "Drop your references to process groups before the process ends.",
            RuntimeWarning, stacklevel=1)


def release_destroyed_groups(groups: list) -> list[str]:
    """Drop every reference to the destroyed ``groups`` that torch's meshes and
    parity's objects hold, so that each group's destructor runs (joining its
    worker threads) when ``groups`` -- the caller's only reference to them --
    goes. Returns the names of those still referenced elsewhere.

    Dropped: the groups in every live ``DeviceMesh``'s ``_pg_registry`` (a
    dict of names to groups the garbage collector does not track, so the
    meshes are looked up instead), and attributes of parity's and torch's
    own objects (the collective plans' ``Group``, FSDP2's mesh infos) that
    point at a destroyed group. The user's own variables are left alone.
    """
    by_id = {id(g): g for g in groups}
    for obj in gc.get_objects():
        # Not isinstance: some objects' classes warn when asked (torch's opaque types).
        if TorchMesh in type(obj).__mro__:
            registry = getattr(obj, "_pg_registry", None) or {}
            for name in [n for n, g in registry.items() if id(g) in by_id]:
                del registry[name]
    holder = None
    for holder in gc.get_referrers(*groups):
        if type(holder).__module__.startswith(_LIBRARIES):
            for name in _attribute_names(holder):
                if id(getattr(holder, name, None)) in by_id:
                    object.__setattr__(holder, name, None)  # frozen dataclasses too
    del obj, holder, by_id
    gc.collect()
    # Counted: ``groups``, the loop's ``g`` and getrefcount's own argument.
    return [g.group_name for g in groups if sys.getrefcount(g) > 3]


def _attribute_names(obj: object) -> list[str]:
    names = list(getattr(obj, "__dict__", {}))
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        names.extend([slots] if isinstance(slots, str) else slots)
    return names
