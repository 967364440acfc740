"""Inside a ``shard_map`` body: which manual mesh axes each value varies
along (JAX's ``vma``), and ``pvary``.

JAX types every value in a ``shard_map`` body with the set of manual axes
it *varies* along (``float32[4,2]{V:data}``): an input varies along the
axes its ``in_specs`` entry names, a value made in the body varies along
none, an op's result along the union of its operands', and the collectives
change it (``psum`` over ``a`` removes ``a``). Where an invariant operand
meets a varying one, JAX inserts ``pvary`` -- the identity, whose transpose
is ``psum`` -- so that gradients of invariant values are summed over the
ranks that used them. ``check_vma=True`` also refuses ``out_specs`` that
claim replication over an axis the output varies along.

Here the body's tensors carry their set in an attribute (``_parity_vma``),
and a ``TorchFunctionMode`` (``BodyMode``) propagates it through every op
and inserts ``pvary`` on operands that require grad.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from parity.mesh import DeviceMesh
from parity.torch_impl.runtime.torch_compat import funcol, tree_flatten, tree_unflatten

_ATTR = "_parity_vma"


@dataclasses.dataclass(frozen=True)
class Scope:
    """One running ``shard_map`` body: its parity ``mesh``, torch mesh,
    ``manual`` axes and ``check_vma``; ``template``, a block of the body
    (new per-rank tensors are made from it, so that over simulated ranks
    they are ``LocalTensor``s also while ``torch.compile`` traces), and
    ``coordinates``, each manual axis's coordinate once asked (``lax``)."""

    mesh: DeviceMesh
    torch_mesh: Any
    manual: tuple[str, ...]
    check_vma: bool
    template: torch.Tensor | None = None
    coordinates: dict = dataclasses.field(default_factory=dict, compare=False, hash=False)


class _Scopes(threading.local):
    def __init__(self) -> None:
        self.stack: list[Scope] = []


_scopes = _Scopes()


def current() -> Scope | None:
    """The innermost running ``shard_map`` body of this thread, or ``None``."""
    return _scopes.stack[-1] if _scopes.stack else None


def push(scope: Scope) -> None:
    _scopes.stack.append(scope)


def pop() -> None:
    _scopes.stack.pop()


def vma_of(t: Any) -> frozenset[str]:
    """The manual axes ``t`` varies along (none for a value made in the body)."""
    return getattr(t, _ATTR, frozenset())


def with_vma(t: torch.Tensor, vma: frozenset[str] | set[str]) -> torch.Tensor:
    """``t`` marked as varying along ``vma``; returns ``t``."""
    setattr(t, _ATTR, frozenset(vma))
    return t


def require_scope(what: str) -> Scope:
    """The running body; ``ParityError`` outside every ``shard_map``."""
    scope = current()
    if scope is None:
        from parity.errors import ParityError

        raise ParityError(
            f"{what} names a mesh axis, which only has a meaning inside a shard_map body. "
            "Fix: call it from the function given to backend.shard_map.")
    return scope


def axis_group(scope: Scope, name: str) -> tuple[Any, int]:
    """The funcol group of manual axis ``name``: ``(torch mesh, dim)``.

    Raises ``LayoutError`` for a name that is not a manual axis.
    """
    if name not in scope.manual:
        from parity.errors import LayoutError

        raise LayoutError(
            f"Mesh axis {name!r} is not a manual axis of this shard_map; its manual axes are "
            f"{scope.manual}. Fix: name one of them (or add it to axis_names).",
            what="axis_name", value=name)
    return scope.torch_mesh, scope.mesh.axis_index(name)


_is_compiling = torch.compiler.is_compiling  # dynamo folds it (by identity) to True


def fresh(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a new tensor object (a view eagerly; a copy under
    ``torch.compile``). A compiled function over simulated ranks must not
    return a view of a functional collective's result (or of a tensor made
    inside it): AOTAutograd rebuilds such an output from its base at run
    time and, with ``LocalTensor`` blocks, returned the trace-time
    FakeTensors (no grad: ``.numpy() is not supported for tensor
    subclasses`` when read) or baked one into the graph (grad: "Unexpected
    fake buffer _tensor_constant0"), torch 2.13."""
    return t.clone() if _is_compiling() else t.view_as(t)


def all_reduce(t: torch.Tensor, op: str, axes: tuple[str, ...], scope: Scope) -> torch.Tensor:
    """``t`` reduced with ``op`` (``"sum"``, ``"max"``, ``"min"``) over the
    ranks along ``axes`` (no autograd); a fresh tensor under compile."""
    for name in axes:
        t = funcol.wait_tensor(funcol.all_reduce(t, op, axis_group(scope, name)))
    return t.clone() if _is_compiling() else t


def psum_plain(t: torch.Tensor, axes: tuple[str, ...], scope: Scope) -> torch.Tensor:
    """The sum of ``t`` over the ranks along ``axes`` (no autograd)."""
    return all_reduce(t, "sum", axes, scope)


class _PVary(torch.autograd.Function):
    """Identity forward; backward sums the cotangent over ``axes``."""

    @staticmethod
    def forward(ctx, t, axes, scope):
        ctx.axes, ctx.scope = axes, scope
        return fresh(t)

    @staticmethod
    def backward(ctx, ct):
        return psum_plain(ct, ctx.axes, ctx.scope), None, None


def pvary(t: torch.Tensor, axes: tuple[str, ...], scope: Scope) -> torch.Tensor:
    """``t`` typed as varying also along ``axes`` (JAX's ``pvary``)."""
    out = _PVary.apply(t, tuple(axes), scope) if t.requires_grad else fresh(t)
    return with_vma(out, vma_of(t) | set(axes))


def align(t: torch.Tensor, vma: frozenset[str], scope: Scope) -> torch.Tensor:
    """``t`` made to vary along ``vma`` (a superset of its own) by ``pvary``."""
    missing = tuple(a for a in scope.manual if a in vma and a not in vma_of(t))
    return pvary(t, missing, scope) if missing else t


class BodyMode(TorchFunctionMode):
    """Propagates ``vma`` through every op of a ``shard_map`` body and
    inserts ``pvary`` where an invariant operand that requires grad meets a
    varying one."""

    def __init__(self, scope: Scope) -> None:
        super().__init__()
        self.scope = scope

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        leaves, spec = tree_flatten((args, kwargs))
        tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
        union: frozenset[str] = frozenset().union(*(vma_of(t) for t in tensors))
        if union:
            leaves = [align(x, union, self.scope)
                      if isinstance(x, torch.Tensor) and x.requires_grad and vma_of(x) != union
                      else x for x in leaves]
            args, kwargs = tree_unflatten(leaves, spec)
        out = func(*args, **kwargs)
        if union:
            for leaf in tree_flatten(out)[0]:
                if isinstance(leaf, torch.Tensor):
                    with_vma(leaf, union)
        return out
