"""A backward's parameter-gradient reductions in one launch per group, as
XLA's all-reduce combiner launches them.

A leaf that needs a gradient reaches every op through a node that brings its
gradient back in the leaf's placement (``redistribute_to(..., guard=True)``).
Where the op's gradient is a pending sum on mesh axes the leaf is replicated
on (a weight's gradient from batch-sharded activations), that node's
backward launched one all_reduce per leaf. When the leaf keeps its
placement for the op, the node is ``leaf_entry``'s: its backward hands the
unreduced block to the bucket of the running ``backward()`` instead and
passes no gradient on. ``GradientBucket.flush`` -- when the backward ends,
or earlier -- reduces every waiting block at once: per (mesh, pending mesh
axes, dtype, device) it flattens and concatenates the blocks, launches one
all_reduce (one over the flattened group for several axes) and accumulates
each slice into its leaf's ``.grad`` (set when ``None``, added in place
otherwise, as autograd's accumulation does), in the leaf's placement. Each
element is the sum over the same ranks that the leaf's own all_reduce gave
(bit for bit on groups of two and on simulated ranks; a larger gloo or NCCL
group may add in another order).

A root of the backward that holds a pending sum or mean -- a loss under
``jax_semantics(defer=True)``, whose mean stays pending -- is reduced in the
same launch (``add_root``; its starting gradient, ones, is made without
completing it); the root itself is not changed, its completion is
remembered for ``redistribute.resolve_pending`` (reading the loss then
launches nothing). Under the default semantics the forward has completed the
loss already.

A bucket is open only while a ``backward()`` that accumulates into
``.grad`` runs (``open_bucket``, used by ``semantics.backward_scope``) on
the thread that ran the forward: ``autograd.grad``, a backward with
``create_graph``, one started on another thread or outside
``jax_semantics()``, and compiled code (dynamo never sees this node)
complete each gradient as before. So does a gradient that is not the
leaf's one contribution to the backward (its blocks would be summed before
the all_reduce and round differently), or whose leaf has a tensor hook or a
post-accumulate-grad hook (they see completed values: everything waiting is
flushed first), or whose ``.grad`` already holds a value. ``.grad`` read or
written under ``jax_semantics()`` while blocks wait (a hook on another
tensor, a callback) flushes them first: the mode calls ``flush_pending``.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.distributed.tensor import DTensor, Partial, Replicate

from parity.torch_impl.collectives.blocks import all_reduce_block
from parity.torch_impl.collectives.flat_groups import group as flat_group
from parity.torch_impl.layouts.tensors import contiguous_stride
from parity.torch_impl.runtime.torch_compat import DTensorSpec, TensorMeta


class GradientBucket:
    """The unreduced gradient blocks of one backward, and its roots that
    wait with them."""

    def __init__(self) -> None:
        # id(leaf) -> (weakref to the leaf, mesh, pending mesh dims, gradient)
        self._pending: dict[int, tuple[weakref.ref, object, tuple[int, ...], DTensor]] = {}
        self._roots: list[DTensor] = []

    def __bool__(self) -> bool:
        return bool(self._pending) or bool(self._roots)

    def pending(self, leaf: torch.Tensor) -> bool:
        found = self._pending.get(id(leaf))
        return found is not None and found[0]() is leaf

    def add(self, leaf: torch.Tensor, dims: tuple[int, ...], grad: DTensor) -> None:
        """``grad`` (pending sums on mesh dims ``dims``) waits for ``leaf``."""
        self._pending[id(leaf)] = (weakref.ref(leaf), grad.device_mesh, dims, grad)
        PENDING[0] += 1

    def add_root(self, root: torch.Tensor, grad: torch.Tensor | None) -> torch.Tensor | None:
        """A root of the backward that holds a pending sum or mean (kept by
        ``jax_semantics(defer=True)``, a loss) waits here: completed in the
        same launch as the gradients, its completion remembered for
        ``resolve_pending`` (the root itself is not changed). Returns the
        gradient to start from: for a pending scalar root with none given,
        ones in the completed placement (what the completed root's
        ``ones_like`` gives; made here, the root is not completed for it).
        Any other root: nothing waits, ``grad`` comes back."""
        if not isinstance(root, DTensor) or not root_dims(root):
            return grad
        self._roots.append(root)
        if grad is None and root.numel() == 1:
            return _completed(root, torch.ones_like(root._local_tensor))
        return grad

    def flush(self) -> None:
        """Reduce every waiting block and root: one all_reduce per (mesh,
        pending mesh dims, dtype, device)."""
        if not self:
            return
        entries, self._pending = list(self._pending.values()), {}
        roots, self._roots = self._roots, []
        PENDING[0] -= len(entries)
        groups: dict[tuple, list[tuple[torch.Tensor | None, DTensor]]] = {}
        for ref, mesh, dims, grad in entries:
            leaf = ref()
            if leaf is None:  # the leaf is gone: nobody can read its gradient
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


def _completed_placements(x: DTensor) -> list:
    return [Replicate() if isinstance(p, Partial) else p for p in x.placements]


def _accumulate(leaf: torch.Tensor, grad: DTensor) -> None:
    """``leaf.grad`` set to ``grad`` or added to in place, as autograd's
    ``AccumulateGrad`` does (no grad mode)."""
    if leaf.grad is None:
        leaf.grad = grad
    else:
        leaf.grad += grad


def _complete(members: list[tuple[torch.Tensor | None, DTensor]], dims: tuple[int, ...]) -> None:
    """One all_reduce over mesh dims ``dims`` (their flattened group when
    several) for all ``members``' blocks: a leaf's waiting gradient
    (``(leaf, grad)``) is accumulated into its ``.grad``, a root
    (``(None, root)``) gets its completion remembered (``remember_resolved``; a mean
    divided by the group's size after the sum, as its own all_reduce does)."""
    mesh = members[0][1].device_mesh
    blocks = [t._local_tensor for _, t in members]
    group = flat_group(mesh, dims)
    with torch.no_grad(), _internal():
        if len(blocks) > 1:
            flat = torch.cat([b.reshape(-1) for b in blocks])
        else:  # the block may be shared with other tensors: reduced into a new one
            flat = blocks[0].reshape(-1).clone()
        # a group of one (mesh axes of size 1) has nothing to add, as DTensor knows
        total = all_reduce_block(flat, "sum", group, in_place=True) if group.size > 1 else flat
        offset, roots = 0, []
        for (leaf, t), block in zip(members, blocks):
            value = total[offset:offset + block.numel()].view(block.shape)
            offset += block.numel()
            if leaf is not None:
                _accumulate(leaf, _completed(t, value))
                continue
            if any(isinstance(p, Partial) and p.reduce_op == "avg" for p in t.placements):
                value = value / group.size
            roots.append((t, value))
    for root, value in roots:  # differentiable, as the root's own completion is
        remember_resolved(root, _Resolved.apply(root, value))


def _completed(x: DTensor, block: torch.Tensor) -> DTensor:
    """``x``'s completion, given its reduced ``block`` (contiguous): ``x``'s
    shape, each pending mesh dim replicated."""
    meta = TensorMeta(x.shape, contiguous_stride(x.shape), x.dtype)
    spec = DTensorSpec(x.device_mesh, tuple(_completed_placements(x)), tensor_meta=meta)
    return DTensor(block, spec, requires_grad=False)


# A root's remembered completion: ``(x._version, completion)``, taken by
# ``redistribute.resolve_pending`` while ``x`` is not changed in place.
RESOLVED_ATTR = "_parity_resolved"


def remember_resolved(x: DTensor, done: DTensor) -> None:
    """``done`` is ``x`` with its pending reductions completed, for as long
    as ``x`` is not changed in place (``RESOLVED_ATTR``)."""
    setattr(x, RESOLVED_ATTR, (x._version, done))


class _Resolved(torch.autograd.Function):
    """``x``'s completion from a block reduced elsewhere: the values
    ``value``, ``x``'s placements with each pending dim replicated; the
    backward is DTensor's for ``Partial -> Replicate`` (the gradient kept
    replicated)."""

    @staticmethod
    def forward(ctx, x: DTensor, value: torch.Tensor) -> DTensor:  # type: ignore[override]
        ctx.placements = tuple(_completed_placements(x))
        return _completed(x, value)

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


def flush_pending(leaf: torch.Tensor) -> None:
    """Reduce everything waiting in the open bucket that holds ``leaf``'s
    gradient: ``leaf.grad`` is about to be read or set (the mode calls this
    for ``.grad`` access while ``PENDING[0]``; this module's own accesses
    are let through)."""
    if _local.internal:
        return
    for bucket in list(_open):
        if bucket.pending(leaf):
            bucket.flush()


class _Target:
    """What a leaf's entry node knows of its leaf (a non-tensor argument: the
    node's one edge is to the leaf itself)."""

    __slots__ = ("leaf", "mesh", "placements", "holder", "lay_out", "__weakref__")

    def __init__(self, leaf: DTensor, holder: _Holder, lay_out) -> None:
        self.leaf = weakref.ref(leaf)
        self.mesh = leaf.device_mesh
        self.placements = tuple(leaf.placements)
        self.holder = holder
        self.lay_out = lay_out  # (grad, placements) -> grad in those placements


# id(leaf) -> (weakref to the leaf, its live entry nodes' _Target): more than
# one means a gradient that is not the leaf's only contribution. Kept here,
# not on the leaf (an attribute would go into pickles of the parameter).
_uses: dict[int, tuple[weakref.ref, "weakref.WeakSet[_Target]"]] = {}


def _uses_of(leaf: DTensor, create: bool = False) -> "weakref.WeakSet[_Target] | tuple":
    key = id(leaf)
    found = _uses.get(key)
    if found is not None and found[0]() is leaf:
        return found[1]
    if not create:
        return ()

    def forget(ref: weakref.ref, key: int = key) -> None:
        if _uses.get(key, (None,))[0] is ref:
            del _uses[key]

    uses: "weakref.WeakSet[_Target]" = weakref.WeakSet()
    _uses[key] = (weakref.ref(leaf, forget), uses)
    return uses


class _LeafEntry(torch.autograd.Function):
    @staticmethod
    def forward(ctx, leaf: DTensor, target: _Target) -> DTensor:  # type: ignore[override]
        ctx.set_materialize_grads(False)
        ctx.target = target
        # the leaf's block under a new DTensor, as DTensor's redistribute
        # returns it when nothing moves
        return DTensor(leaf._local_tensor, leaf._spec, requires_grad=False)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        target = ctx.target
        if grad is None:
            return None, None
        if _defers(target, grad):
            return None, None  # the bucket accumulates it into .grad
        if tuple(grad.placements) != target.placements:
            # what DTensor's redistribute node gave the leaf: its placement, in
            # one collective where several mesh axes change (a completion over
            # mesh axes of size 1 moves nothing: relabeled)
            grad = target.lay_out(grad, target.placements)
        return grad, None


def _defers(target: _Target, grad: DTensor) -> bool:
    """Whether ``grad`` waits in the bucket (added to it here)."""
    bucket = target.holder.bucket
    leaf = target.leaf()
    if bucket is None or leaf is None or not isinstance(grad, DTensor):
        return False
    dims = _deferrable_dims(grad, target.placements)
    if not dims or len(_uses_of(leaf)) > 1:
        return False
    if all(target.mesh.size(d) == 1 for d in dims):
        return False  # nothing to reduce: DTensor's redistribute launches nothing either
    with _internal():
        if _has_hooks(leaf):
            bucket.flush()  # the hook sees completed values, all before it too
            return False
        if bucket.pending(leaf) or leaf.grad is not None:
            return False  # accumulated as before; a waiting block is added later
        bucket.add(leaf, dims, grad)
    return True


def _deferrable_dims(grad: DTensor, leaf_placements: tuple) -> tuple[int, ...]:
    """The mesh dims of ``grad``'s pending sums, when completing them gives
    the leaf's placements (``()`` otherwise: a pending max, a sum on an axis
    the leaf is sharded on, another difference; those complete as before)."""
    dims = tuple(d for d, p in enumerate(grad.placements) if isinstance(p, Partial))
    if not dims or any(grad.placements[d].reduce_op != "sum" for d in dims):
        return ()
    return dims if tuple(_completed_placements(grad)) == leaf_placements else ()


def _has_hooks(leaf: torch.Tensor) -> bool:
    return bool(leaf._backward_hooks) or bool(getattr(leaf, "_post_accumulate_grad_hooks", None))


def leaf_entry(leaf: DTensor, lay_out) -> DTensor:
    """``leaf`` as an op's operand in its own placement, behind the node that
    brings its gradient back in that placement -- the completion of a
    pending sum waiting for this thread's bucket (see the module docstring)
    or, where it cannot wait, ``lay_out(grad, placements)`` (the caller's
    redistribute: this module imports none). Eager only: under dynamo,
    DTensor's own ``redistribute``."""
    if torch.compiler.is_compiling():
        return leaf.redistribute(leaf.device_mesh, leaf.placements)
    target = _Target(leaf, _local.holder, lay_out)
    _uses_of(leaf, create=True).add(target)
    return _LeafEntry.apply(leaf, target)
