"""A backward's parameter-gradient reductions in one launch per group, as
XLA's all-reduce combiner launches them.

A leaf that needs a gradient reaches every op through a redistribute that
brings its gradient back in the leaf's placement (``redistribute_to(...,
guard=True)``). Where the op's gradient is a pending sum on a mesh axis the
leaf is replicated on (a weight's gradient from batch-sharded activations),
that redistribute's backward launches one all_reduce per leaf. Here the
completion waits instead: the node ``defer_gradient`` puts after the
redistribute passes the gradient on with the leaf's placements and its
*unreduced* block, autograd accumulates it into ``leaf.grad``, and the
bucket remembers the leaf. ``GradientBucket.flush`` -- at the end of the
backward, or earlier -- completes every remembered ``.grad`` at once: per
(mesh, pending mesh axes, dtype, device) it flattens and concatenates the
blocks, launches one all_reduce (one over the flattened group for several
axes) and gives each leaf its slice back as a new ``.grad`` with the
leaf's placement. The values are those of one all_reduce per leaf (a sum
per element over the same ranks; on groups of two, and on simulated ranks,
bit for bit).

A root of the backward that holds a pending sum or mean -- a loss under
``jax_semantics(defer=True)``, whose mean stays pending -- is reduced in the
same launch (``add_root``); the root itself is not changed, its completion
is remembered for ``redistribute.resolve_pending`` (reading the loss then
launches nothing). Under the default semantics the forward has completed the
loss already.

A bucket is open only while a ``backward()`` that accumulates into
``.grad`` runs (``open_bucket``, used by ``semantics.backward_scope``), on
the thread that ran the forward: ``autograd.grad``, a backward with
``create_graph``, one started on another thread or outside
``jax_semantics()``, and compiled code (dynamo never sees this node) complete
as before. The completion happens earlier, with everything pending, where a
reader needs it:

* the leaf has a tensor hook or a post-accumulate-grad hook (they would see
  the block) -- flushed before the leaf's gradient is passed on;
* ``leaf.grad`` already holds a gradient (accumulation would add a block to
  a completed value) -- that gradient is completed at once, as before;
* a second use of the same leaf pending on other axes -- flushed first;
* ``.grad`` read or written under ``jax_semantics()`` while something is
  pending (a hook on another tensor, a callback) -- the mode calls
  ``flush_pending`` first.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.distributed.tensor import DTensor, Partial, Replicate

from parity.torch_impl.collectives.flat_groups import registered as registered_flat_mesh


class GradientBucket:
    """The leaves whose ``.grad`` holds an unreduced block, and the
    backward's roots that wait with them, by group."""

    def __init__(self) -> None:
        # id(leaf) -> (weakref to the leaf, mesh, pending mesh dims)
        self._pending: dict[int, tuple[weakref.ref, object, tuple[int, ...]]] = {}
        self._roots: list[DTensor] = []

    def __bool__(self) -> bool:
        return bool(self._pending) or bool(self._roots)

    def pending_dims(self, leaf: torch.Tensor) -> tuple[int, ...] | None:
        found = self._pending.get(id(leaf))
        return None if found is None or found[0]() is not leaf else found[2]

    def add(self, leaf: torch.Tensor, mesh, dims: tuple[int, ...]) -> None:
        self._pending[id(leaf)] = (weakref.ref(leaf), mesh, dims)
        PENDING[0] += 1

    def add_root(self, root: torch.Tensor) -> None:
        """A root of the backward that holds a pending sum or mean (kept by
        ``jax_semantics(defer=True)``, a loss): completed in the same launch
        as the gradients, and its completion remembered for ``resolve_pending``
        (the root itself is not changed). Any other root: nothing."""
        if isinstance(root, DTensor) and root_dims(root):
            self._roots.append(root)

    def flush(self) -> None:
        """Complete every pending ``.grad`` and root: one all_reduce per
        (mesh, pending mesh dims, dtype, device)."""
        if not self:
            return
        entries, self._pending = list(self._pending.values()), {}
        roots, self._roots = self._roots, []
        PENDING[0] -= len(entries)
        groups: dict[tuple, list[tuple[torch.Tensor | None, DTensor]]] = {}
        with torch.no_grad(), _internal():
            for ref, mesh, dims in entries:
                leaf = ref()
                grad = None if leaf is None else leaf.grad
                if not isinstance(grad, DTensor):  # the leaf is gone, or its grad was reset
                    continue
                block = grad._local_tensor
                groups.setdefault((id(mesh), dims, block.dtype, block.device), []).append(
                    (leaf, grad))
        for root in roots:
            block = root._local_tensor
            groups.setdefault((id(root.device_mesh), root_dims(root), block.dtype,
                               block.device), []).append((None, root))
        for (_, dims, _, _), members in groups.items():
            _complete(members, dims)


def root_dims(x: DTensor) -> tuple[int, ...]:
    """The pending mesh dims of ``x`` when they are all sums or all means
    (``()`` otherwise)."""
    ops = {p.reduce_op for p in x.placements if isinstance(p, Partial)}
    if len(ops) != 1 or not ops <= {"sum", "avg"}:
        return ()
    return tuple(d for d, p in enumerate(x.placements) if isinstance(p, Partial))


def _complete(members: list[tuple[torch.Tensor | None, DTensor]], dims: tuple[int, ...]) -> None:
    """One all_reduce over mesh dims ``dims`` for all ``members``' blocks: a
    leaf's gradient (``(leaf, leaf.grad)``) gets its slice back as its
    ``.grad``, a root (``(None, root)``) its completion remembered
    (``resolved``; a mean divided by the group's size after the sum, as the
    mean's own all_reduce does)."""
    mesh = members[0][1].device_mesh
    blocks = [t._local_tensor for _, t in members]
    with torch.no_grad(), _internal():
        flat = torch.cat([b.reshape(-1) for b in blocks]) if len(blocks) > 1 else \
            blocks[0].reshape(-1)
        pending = [Partial("sum") if d in dims else Replicate() for d in range(mesh.ndim)]
        summed = DTensor.from_local(flat, mesh, pending, run_check=False)
        if len(dims) > 1:  # one all_reduce over the flattened group (redistribute.merged)
            with registered_flat_mesh(mesh, dims):
                total = summed.redistribute(mesh, [Replicate()] * mesh.ndim).to_local()
        else:
            total = summed.redistribute(mesh, [Replicate()] * mesh.ndim).to_local()
        offset = 0
        done = []
        for block in blocks:
            done.append(total[offset:offset + block.numel()].view(block.shape))
            offset += block.numel()
        for (leaf, t), value in zip(members, done):
            if leaf is not None:
                leaf.grad = DTensor.from_local(value, mesh, t.placements, run_check=False,
                                               shape=t.shape, stride=t.stride())
    size = 1
    for d in dims:
        size *= mesh.size(d)
    for (leaf, t), value in zip(members, done):
        if leaf is None:
            if any(isinstance(p, Partial) and p.reduce_op == "avg" for p in t.placements):
                with torch.no_grad():
                    value = value / size
            remember_resolved(t, _Resolved.apply(t, value))


RESOLVED_ATTR = "_parity_resolved"


def remember_resolved(x: DTensor, done: DTensor) -> None:
    """``done`` is ``x`` with its pending reductions completed, for as long
    as ``x`` is not changed in place (``resolved``)."""
    setattr(x, RESOLVED_ATTR, (x._version, done))


def resolved(x: DTensor) -> DTensor | None:
    """The completion remembered for ``x`` (``None``: none, or ``x`` was
    changed in place since)."""
    found = getattr(x, RESOLVED_ATTR, None)
    return found[1] if found is not None and found[0] == x._version else None


class _Resolved(torch.autograd.Function):
    """``x``'s completion from a block reduced elsewhere: the values
    ``value``, ``x``'s placements with each pending dim replicated; the
    backward is DTensor's for ``Partial -> Replicate`` (the gradient kept
    replicated)."""

    @staticmethod
    def forward(ctx, x: DTensor, value: torch.Tensor) -> DTensor:  # type: ignore[override]
        placements = [Replicate() if isinstance(p, Partial) else p for p in x.placements]
        ctx.placements = tuple(placements)
        return DTensor.from_local(value, x.device_mesh, placements, run_check=False,
                                  shape=x.shape, stride=x.stride())

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        if isinstance(grad, DTensor) and tuple(grad.placements) != ctx.placements:
            grad = grad.redistribute(grad.device_mesh, ctx.placements)
        return grad, None


# How many leaves wait in any bucket (the mode reads it per op: a list
# item is cheaper than a call).
PENDING = [0]


class _Holder:
    """The bucket of this thread's running ``backward()`` (``None``: none)."""

    __slots__ = ("bucket",)

    def __init__(self) -> None:
        self.bucket: GradientBucket | None = None


class _Local(threading.local):
    def __init__(self) -> None:
        self.holder = _Holder()
        self.internal = False  # this module reads or sets a .grad: no flush


_local = _Local()
_open: "weakref.WeakSet[GradientBucket]" = weakref.WeakSet()


@contextmanager
def _internal() -> Iterator[None]:
    outer, _local.internal = _local.internal, True
    try:
        yield
    finally:
        _local.internal = outer


@contextmanager
def open_bucket(accumulates: bool) -> Iterator[GradientBucket | None]:
    """This thread's bucket for one backward call: a new one when the call
    accumulates into ``.grad`` (``backward()`` without ``create_graph``),
    none for ``autograd.grad`` (``accumulates=False``); flushed on the way
    out, whatever happened. Nested calls each get their own."""
    holder = _local.holder
    outer = holder.bucket
    bucket = GradientBucket() if accumulates else None
    holder.bucket = bucket
    if bucket is not None:
        _open.add(bucket)
    try:
        yield bucket
    finally:
        holder.bucket = outer
        if bucket is not None:
            _open.discard(bucket)
            bucket.flush()


def flush_pending() -> None:
    """Complete every pending ``.grad`` of every open bucket: a reader of
    ``.grad`` is about to see it (the mode calls this for ``.grad`` reads and
    writes while ``PENDING[0]``; this module's own are let through)."""
    if _local.internal:
        return
    for bucket in list(_open):
        bucket.flush()


class _Target:
    """What the node knows of its leaf (a non-tensor argument, so the node
    has no edge to the leaf of its own)."""

    __slots__ = ("leaf", "placements", "holder")

    def __init__(self, leaf: DTensor, holder: _Holder) -> None:
        self.leaf = weakref.ref(leaf)
        self.placements = tuple(leaf.placements)
        self.holder = holder


class _DeferGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: DTensor, target: _Target) -> DTensor:  # type: ignore[override]
        ctx.target = target
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        target = ctx.target
        bucket = target.holder.bucket
        leaf = target.leaf()
        if bucket is None or leaf is None or not isinstance(grad, DTensor):
            return grad, None
        dims = _deferrable_dims(grad, target.placements)
        if not dims:
            return grad, None
        with _internal():
            already = bucket.pending_dims(leaf)
            if already is not None and already != dims:
                bucket.flush()  # leaf.grad holds a block pending on other axes
                already = None
            if already is None:
                hooked = _has_hooks(leaf)
                if hooked:
                    bucket.flush()  # the hook sees completed values, all before it too
                if hooked or leaf.grad is not None:
                    return grad, None  # completed now, as before
                bucket.add(leaf, grad.device_mesh, dims)
        placements = [Replicate() if d in dims else p for d, p in enumerate(grad.placements)]
        return (DTensor.from_local(grad._local_tensor, grad.device_mesh, placements,
                                   run_check=False, shape=grad.shape, stride=grad.stride()),
                None)


def _deferrable_dims(grad: DTensor, leaf_placements: tuple) -> tuple[int, ...]:
    """The mesh dims of ``grad``'s pending sums, when the leaf is replicated
    on each (``()`` otherwise: a pending max, or a sum the leaf is sharded
    on, completes as before)."""
    dims = []
    for d, p in enumerate(grad.placements):
        if isinstance(p, Partial):
            if p.reduce_op != "sum" or not isinstance(leaf_placements[d], Replicate):
                return ()
            dims.append(d)
    return tuple(dims)


def _has_hooks(leaf: torch.Tensor) -> bool:
    return bool(leaf._backward_hooks) or bool(getattr(leaf, "_post_accumulate_grad_hooks", None))


def defer_gradient(out: DTensor, leaf: DTensor) -> DTensor:
    """``out`` (``leaf`` redistributed for an op) behind the node that
    defers the completion of ``leaf``'s gradient to this thread's bucket
    (see the module docstring). Eager only: under dynamo ``out`` itself."""
    if torch.compiler.is_compiling():
        return out
    return _DeferGradient.apply(out, _Target(leaf, _local.holder))
