"""An op's operands under ``jax_semantics()`` before its decision: found
(``find_mesh``), promoted, rehomed, completed for a value observer
(``completed``); laid out as the decision says after it: ``reshard``.

Mixed operands: what JAX does with host data that meets a sharded array.

JAX treats host arrays, Python scalars and uncommitted arrays as replicated
inputs. DTensor refuses them (``aten.sub.Tensor: got mixed torch.Tensor and
DTensor``). ``promote`` turns every plain tensor and numpy array among an
op's arguments into a DTensor replicated on the mesh of the DTensors it
meets; Python scalars stay scalars (DTensor already treats them as
constants). Two mesh objects with the same device type, axis names and
ranks are one mesh (``mesh_identity``), and a mesh that is a slice of
another (FSDP2's ``dp`` submesh, a flattened axis: ``layouts.submesh``) is
part of it, as a JAX program has one mesh: the operands are moved onto the
parent (``rehome``), a slice's DTensor replicated over the axes it lacks.
DTensors on unrelated meshes raise ``MeshMismatchError``, saying how they
differ.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.distributed.tensor import DTensor, Replicate

from parity.errors import MeshMismatchError
from parity.torch_impl.runtime import state
from parity.torch_impl.layouts import mesh_identity, submesh
from parity.torch_impl.layouts.tensors import as_host_tensor, raw_to_local
from parity.torch_impl.semantics import pending

_SEQ = (list, tuple)


def find_mesh(args: tuple, kwargs: dict) -> tuple[Any, bool, bool]:
    """``(mesh, rehome, plain)``: the torch ``DeviceMesh`` of the operands
    (one level into lists and tuples), or ``None`` when there is no
    DTensor; ``rehome`` is whether some DTensor lives on another mesh
    object that is the same mesh (an FSDP2 submesh and a 1-D mesh of the
    same ranks, which torch compares unequal) or on a slice of ``mesh``
    (FSDP2's ``dp`` submesh of the ``(dp, tp)`` mesh: JAX's one mesh, the
    array replicated over the missing axes): ``rehome`` moves or lifts it;
    ``plain`` whether some operand is a plain tensor or a numpy array
    (``promote`` replicates them). One walk over the operands.

    Raises ``MeshMismatchError`` when two DTensors live on different
    meshes neither of which is a slice of the other (saying how they
    differ).
    """
    mesh, rehome, plain = None, False, False
    others = None  # meshes that are not ``mesh``: slices of one of them, or a mismatch
    for value in _operands(args, kwargs):
        if not isinstance(value, DTensor):
            if isinstance(value, (torch.Tensor, np.ndarray)):
                plain = True
            continue
        other = value.device_mesh
        if mesh is None:
            mesh = other
            continue
        if _dynamo_compiling():  # no ``is`` on dynamo's mesh variables
            how = _how_meshes_differ(mesh, other)
        elif other is mesh or other == mesh:
            continue
        else:
            how = mesh_identity.differences(mesh, other)
        if how is not None:
            if not how:  # the same devices and names: one mesh (rehome)
                rehome = True
                continue
            if others is None:
                others = [other]
            else:
                others.append(other)
    if others is not None:  # a slice of another mesh: the parent's array (rehome lifts it)
        mesh, rehome = _parent_mesh(mesh, others), True
    return mesh, rehome, plain


def _parent_mesh(first, others: list):
    """The mesh among ``first`` and ``others`` of which each of the others
    is the same mesh or a slice (``submesh.slice_axes``).

    Raises ``MeshMismatchError`` naming the first pair that is neither.
    (Loops, not generators: dynamo traces this.)"""
    distinct = [first]
    for m in others:
        for d in distinct:
            if same_mesh(m, d):
                break
        else:
            distinct.append(m)
    for p, parent in enumerate(distinct):
        for k, m in enumerate(distinct):
            if k != p and submesh.slice_axes_traced(parent, m) is None:
                break
        else:
            return parent
    for second in distinct[1:]:
        if (submesh.slice_axes_traced(first, second) is None
                and submesh.slice_axes_traced(second, first) is None):
            break
    raise MeshMismatchError(_mismatch_message(first, second), first=first, second=second)


@torch.compiler.assume_constant_result
def _mismatch_message(first, second) -> str:
    """Why two torch meshes are not one mesh for an op (a constant under
    dynamo, made on the real meshes)."""
    first = getattr(first, "real_obj", first)
    second = getattr(second, "real_obj", second)
    how = list(mesh_identity.differences(first, second))
    slice_ = submesh.why_not(first, second)
    if slice_ is not None:
        how.append(slice_)
    return ("Operands live on different device meshes: "
            f"{_describe_mesh(first)} and {_describe_mesh(second)} (they differ in "
            f"{'; '.join(how)}). JAX refuses this too; move one with "
            "distribute_tensor onto the other's mesh (via to_numpy when the "
            "devices differ).")


def rehome(args: tuple, kwargs: dict, mesh) -> tuple[tuple, dict]:
    """``(args, kwargs)`` with every DTensor operand on the mesh object
    ``mesh`` (``mesh_identity.rehome``: same blocks, differentiable)."""
    return _each_dtensor(args, kwargs, lambda t: _rehome_one(t, mesh))


def completed(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``(args, kwargs)`` with every DTensor operand's pending sums
    completed (``pending.complete``): what a value observer (``item``,
    ``numpy``...) and DTensor's own parallel loss are handed."""
    return _each_dtensor(args, kwargs, pending.complete)


def _each_dtensor(args: tuple, kwargs: dict, fn) -> tuple[tuple, dict]:
    """``(args, kwargs)`` with ``fn(t)`` for each DTensor ``t`` (one level
    into lists and tuples)."""
    def one(value):
        if isinstance(value, DTensor):
            return fn(value)
        if isinstance(value, _SEQ) and any(isinstance(v, DTensor) for v in value):
            return type(value)(one(v) for v in value)
        return value

    return tuple(one(a) for a in args), {k: one(v) for k, v in kwargs.items()}


def _rehome_one(t: DTensor, mesh) -> DTensor:
    if not _dynamo_compiling():
        return mesh_identity.rehome(t, mesh)
    how = _how_meshes_differ(t.device_mesh, mesh)
    if how is None:
        return t
    if how:  # a slice of ``mesh`` (``find_mesh`` found it one)
        return submesh.lift(t, mesh, submesh.slice_axes_traced(mesh, t.device_mesh))
    return DTensor.from_local(raw_to_local(t), mesh, t.placements, run_check=False,
                              shape=t.shape, stride=t.stride())


# Under torch.compile (torch 2.13) a torch DeviceMesh is an opaque object to
# dynamo, and ``is`` between two of its mesh variables is not stable: the
# same pair compared ``is`` in dynamo's first analysis of a frame and
# ``is not`` when the analysis restarted after a graph break (the
# ``loss.backward()`` of a compiled step), so the restart took another path
# through ``find_mesh`` and dynamo raised ``SpeculationLogDivergence``. Mesh
# comparisons under dynamo are therefore made on the real meshes, outside
# the trace, and enter the graph as constants.
_dynamo_compiling = torch.compiler.is_dynamo_compiling


def same_mesh(first, second) -> bool:
    """Whether two torch meshes are one mesh for JAX (``is``, ``==``, or the
    same devices and names: ``mesh_identity``), eagerly and while dynamo
    traces."""
    how = _how_meshes_differ(first, second)
    return how is None or not how


@torch.compiler.assume_constant_result
def _how_meshes_differ(first, second) -> tuple[str, ...] | None:
    """``None`` when two torch meshes are equal (``is`` or ``==``), else
    ``mesh_identity.differences`` (empty: the same mesh for JAX). Called by
    dynamo with the real meshes (unwrapped from its ``FakeScriptObject``)."""
    first = getattr(first, "real_obj", first)
    second = getattr(second, "real_obj", second)
    if first is second or first == second:
        return None
    return mesh_identity.differences(first, second)


def _describe_mesh(mesh) -> str:
    names = mesh.mesh_dim_names
    return f"mesh(shape={tuple(mesh.shape)}, axes={names}, ranks={mesh.mesh.flatten().tolist()})"


def _operands(args: tuple, kwargs: dict) -> list:
    """The arguments, one level into lists and tuples. A list, not a
    generator: dynamo traces a generator through its polyfills, several
    times the instructions (this runs per op under torch.compile)."""
    found = []
    for value in (*args, *kwargs.values()):
        if isinstance(value, _SEQ):
            found.extend(value)
        else:
            found.append(value)
    return found


def _in_place(name: str) -> bool:
    """Whether the function named ``name`` writes into its first operand
    (``add_``, ``__iadd__``, ``__setitem__``)."""
    return ((name.endswith("_") and not name.endswith("__")) or name.startswith("__i")
            or name == "__setitem__")


def writes_gradient_into_plain(name: str, args: tuple, kwargs: dict) -> bool:
    """Whether an in-place op (``name``: ``__setitem__``, ``copy_``,
    ``add_`` ...) writes a DTensor that needs a gradient into a plain tensor
    while autograd records (see ``write_into_plain``)."""
    if not (args and isinstance(args[0], torch.Tensor) and not isinstance(args[0], DTensor)):
        return False
    if not torch.is_grad_enabled() or not _in_place(name):
        return False
    return any(isinstance(v, DTensor) and v.requires_grad for v in _operands(args[1:], kwargs))


def replicated_by_dtensor(name: str, args: tuple, kwargs: dict) -> bool:
    """Whether DTensor's own call replicates this call's plain operands as
    ``promote`` does (``_try_replicate_spec_for_scalar_tensor``: a tensor of
    one element is a replicated scalar): each is a 0-dim tensor that needs
    no gradient, already on the device ``replicate`` puts it on, and the op
    writes into none of them (no in-place op, no ``out=``). Only such a call
    may run on the fast path with its plain operands as they are."""
    if _in_place(name) or "out" in kwargs:
        return False
    device = None if state.mode() == "plain" else state.torch_device()
    for value in _operands(args, kwargs):
        if isinstance(value, np.ndarray):
            return False
        if isinstance(value, torch.Tensor) and not isinstance(value, DTensor):
            if value.ndim != 0 or value.requires_grad or (
                    device is not None and value.device != device):
                return False
    return True


def write_into_plain(func: Any, args: tuple, kwargs: dict) -> Any:
    """``func`` writing into the plain tensor ``args[0]`` with every DTensor
    operand gathered to its full value (differentiable ``full_tensor``,
    pending sums completed): the plain tensor is a replicated value, as a
    host array is on JAX, and autograd records the write on it. Wrapping
    the plain tensor in a replicated DTensor over its storage instead (what
    ``promote`` does) records the write on that DTensor, and every later use
    of the plain tensor drops the gradient (keras-hub RWKV-7 writes each
    step into an ``ops.zeros`` buffer: ``out[:, t:t+1] = ...``)."""
    def full(value):
        if isinstance(value, DTensor):
            return value.full_tensor()
        if isinstance(value, _SEQ) and any(isinstance(v, DTensor) for v in value):
            return type(value)(full(v) for v in value)
        return value

    return func(args[0], *(full(a) for a in args[1:]), **{k: full(v) for k, v in kwargs.items()})


def replicate(value: Any, mesh) -> DTensor:
    """A plain tensor or numpy array as a DTensor replicated on ``mesh``.

    Differentiable: a plain tensor that requires grad gets the full gradient
    (every rank's contribution reduced), as JAX gives a replicated input.
    """
    tensor = value if isinstance(value, torch.Tensor) else as_host_tensor(value)
    device = state.torch_device() if state.mode() != "plain" else tensor.device
    if tensor.device != device:
        tensor = tensor.to(device)
    return DTensor.from_local(
        tensor, mesh, [Replicate()] * mesh.ndim, run_check=False,
        shape=tensor.shape, stride=tensor.stride(),
    )


def _promote_one(value: Any, mesh) -> Any:
    if isinstance(value, DTensor):
        return value
    if isinstance(value, torch.Tensor) or isinstance(value, np.ndarray):
        return replicate(value, mesh)
    if isinstance(value, _SEQ) and any(
        isinstance(v, (torch.Tensor, np.ndarray)) and not isinstance(v, DTensor) for v in value
    ):
        return type(value)(_promote_one(v, mesh) for v in value)
    return value


def promote(args: tuple, kwargs: dict, mesh) -> tuple[tuple, dict]:
    """``(args, kwargs)`` with plain tensors and numpy arrays replicated on ``mesh``."""
    return (
        tuple(_promote_one(a, mesh) for a in args),
        {k: _promote_one(v, mesh) for k, v in kwargs.items()},
    )
