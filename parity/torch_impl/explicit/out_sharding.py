"""``out_sharding=`` on contractions, as JAX 0.10.2 accepts it on
``jnp.matmul``, ``jnp.dot`` and ``jnp.einsum``.

JAX computes the contraction with the output sharding asked for: operands
whose contracting dims are sharded -- which Explicit axes refuse without
one ("Please specify the output sharding via the `out_sharding`
parameter") -- are summed over those axes, and the result's type is
``out_sharding``. Here the op runs with the ambient mesh's axes Auto (what
``jax.sharding.auto_axes`` does, and what JAX's documentation says
``out_sharding`` amounts to): parity's rule picks the layout and completes
the sum, and the result is resharded to ``out_sharding`` (differentiable;
gradients come back in each operand's sharding). Without ``out_sharding``
each is the plain torch op under the mode.

An ``out_sharding`` with ``unreduced=`` (``P("data", None,
unreduced={"model"})``) keeps the sum pending instead: each rank multiplies
its own blocks (DTensor's zero-communication strategy, a ``Partial`` over
the contracting axes), and the result is typed unreduced over them
(``float32[8@data,8]{U:model}``). As in JAX, the unreduced axes must be the
ones the contracting dims are sharded over (else ``ShardingTypeError``).

| parity (``torch_impl.``)                   | JAX                                      |
|--------------------------------------------|------------------------------------------|
| ``matmul(a, b, out_sharding=P(...))``      | ``jnp.matmul(a, b, out_sharding=...)``   |
| ``dot(a, b, out_sharding=P(...))``         | ``jnp.dot(a, b, out_sharding=...)``      |
| ``einsum(spec, *ops, out_sharding=P(...))``| ``jnp.einsum(spec, *ops, out_sharding=)``|
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from parity import ambient
from parity.axis_types import AxisType
from torch.distributed.tensor import DTensor, Partial

from parity.errors import LayoutError, ShardingTypeError
from parity.layout import TensorLayout
from parity.partition_spec import PartitionSpec
from parity.torch_impl.collectives.redistribute import redistribute_to, resolve_pending
from parity.torch_impl.explicit.api import reshard
from parity.torch_impl.layouts.specs import spec_of
from parity.torch_impl.semantics import axis_overrides, unreduced
from parity.torch_impl.semantics.traced_errors import raise_error


def _with_out_sharding(op: Callable[..., torch.Tensor], operands: tuple, out_sharding: Any,
                       what: str) -> torch.Tensor:
    def compute() -> torch.Tensor:
        return op(*operands)

    if out_sharding is None:
        return compute()
    if isinstance(out_sharding, TensorLayout):
        mesh = out_sharding.require_mesh()
    elif isinstance(out_sharding, PartitionSpec):
        mesh = ambient.get_mesh()
        if mesh is None:
            raise LayoutError(
                f"{what}: out_sharding={out_sharding!r} needs an ambient mesh. Fix: run inside "
                "`with backend.set_mesh(mesh):`, or pass a parity.TensorLayout.",
                what="out_sharding", value=out_sharding)
    else:
        raise LayoutError(
            f"{what}: out_sharding must be a parity.P(...) or a TensorLayout, got "
            f"{type(out_sharding).__name__}: {out_sharding!r}.",
            what="out_sharding", value=out_sharding)
    if isinstance(out_sharding, PartitionSpec) and out_sharding.unreduced:
        return _pending(op, operands, out_sharding, mesh, what)
    with axis_overrides.overridden({name: AxisType.Auto for name in mesh.axis_names}):
        out = compute()
    return reshard(out, out_sharding)


def _pending(op: Callable[..., torch.Tensor], operands: tuple, out_sharding: PartitionSpec,
             mesh, what: str) -> torch.Tensor:
    """The contraction with its sum over ``out_sharding.unreduced`` left
    pending. Raises ``ShardingTypeError`` when the contracting dims are not
    sharded over exactly those axes (JAX's error)."""
    # Each operand through a guard node: its gradient comes back completed,
    # in its own sharding (DTensor's backward alone would leave a Partial).
    guarded = tuple(redistribute_to(resolve_pending(t), spec_of(t), guard=True)
                    if isinstance(t, DTensor) else t for t in operands)
    with torch._C.DisableTorchFunction():  # DTensor's own strategy: each rank's blocks
        out = op(*guarded)
    names = mesh.axis_names
    contracting = tuple(n for n, p in zip(names, out.placements) if isinstance(p, Partial))
    wanted = tuple(n for n in names if n in out_sharding.unreduced)
    if contracting != wanted:
        raise_error(
            ShardingTypeError,
            f"{what}: out_sharding's unreduced axes should be equal to the contracting specs "
            f"(JAX's rule). Got unreduced axes={set(wanted)} and contracting axes "
            f"{set(contracting) or '{}'}. Fix: shard the contracting dims of both operands over "
            f"{sorted(wanted)} (reshard), or drop unreduced=.",
            op=what, fix=f"reshard the contracting dims to {wanted}")
    return reshard(unreduced.typed(out, wanted, what), out_sharding)


def matmul(a: Any, b: Any, *, out_sharding: Any = None) -> torch.Tensor:
    """``a @ b`` laid out as ``out_sharding`` (``jnp.matmul``'s keyword).
    Raises ``LayoutError`` for an ``out_sharding`` that is not a spec, a
    ``P`` with no ambient mesh, or one of the wrong rank; like ``reshard``
    otherwise."""
    return _with_out_sharding(torch.matmul, (a, b), out_sharding, "matmul")


def dot(a: Any, b: Any, *, out_sharding: Any = None) -> torch.Tensor:
    """``jnp.dot(a, b, out_sharding=...)``: the sum over ``a``'s last dim and
    ``b``'s second-to-last (its only one for a vector); a scalar operand
    multiplies. Raises like ``matmul``."""
    def product(a: Any, b: Any) -> torch.Tensor:
        if a.ndim == 0 or b.ndim == 0:
            return a * b
        return torch.tensordot(a, b, dims=([a.ndim - 1], [max(b.ndim - 2, 0)]))

    return _with_out_sharding(product, (a, b), out_sharding, "dot")


def einsum(subscripts: str, *operands: Any, out_sharding: Any = None) -> torch.Tensor:
    """``torch.einsum(subscripts, *operands)`` laid out as ``out_sharding``
    (``jnp.einsum``'s keyword). Raises like ``matmul``."""
    return _with_out_sharding(lambda *ops: torch.einsum(subscripts, *ops), operands, out_sharding,
                              "einsum")
