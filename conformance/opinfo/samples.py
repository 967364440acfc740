"""PyTorch's OpInfo samples, made shardable: which ops, which samples, which layouts.

Shape policy (documented in ``conformance.opinfo.harness``): OpInfo's sample
functions size their tensors with the module constants ``XS, S, M, L``
(3, 5, 10, 20), which no mesh axis of 2 or 4 divides. While samples are
generated those constants are set to ``SHAPE_POLICY`` (2, 4, 8, 16) in every
``torch.testing._internal`` module that defines them, so a sample's
``(S, M)`` tensor becomes ``(4, 8)``; an op whose sample function fails under
the new sizes falls back to torch's own constants (its record says
``"shape_policy": "torch"``). Samples are generated with a fixed seed, so a
worker restarted after a timeout regenerates the same samples.

Layouts: each mesh has four *schemes*; a scheme turns a tensor's shape into a
spec (a mesh-axis tuple per dim) and is applied to every sharded operand:

* ``first``: the first dim divisible by mesh axis 0's size, sharded on it;
* ``last``: the last dim divisible by the last axis's size, on that axis;
* ``split``: ``first`` for axis 0 plus the last *other* dim divisible by the
  product of the remaining axes, sharded over them (needs 2 dims);
* ``joint``: the largest dim divisible by the device count, over all axes.

A tensor a scheme does not fit stays replicated; a case where no operand is
sharded is not run. Per sample the fast default takes the first two schemes
(in this order) that shard some operand and give distinct layouts; ``full``
takes all four.
"""

from __future__ import annotations

import contextlib
import functools
import math
import sys
from collections.abc import Iterator, Sequence
from typing import Any

SHAPE_POLICY = {"XS": 2, "S": 4, "M": 8, "L": 16}
MESHES: dict[str, tuple[tuple[int, ...], tuple[str, ...]]] = {
    "2x4": ((2, 4), ("data", "model")),
    "2x2x2": ((2, 2, 2), ("a", "b", "c")),
}
ALL_SCHEMES = ("first", "last", "split", "joint")

# Ops whose values are uninitialised memory: no reference exists (exact op
# names: a word match also dropped deterministic ops such as ``normalize``).
_UNINITIALISED = frozenset({"empty", "empty_like", "empty_strided", "empty_permuted",
                            "new_empty", "new_empty_strided"})
# Random factories without a tensor operand to shard (op_db does not mark
# them ``is_factory_function``).
_RANDOM_FACTORIES = frozenset({"randn", "randint"})

# Random ops whose values jax_semantics() makes the unsharded program's
# (parity/torch_impl/semantics/random.py): counted, not skipped. OpInfo seeds
# each call of these (``wrapper_set_seed``), so the reference and every case
# draw from the same generator state. (fractional_max_pool draws its random
# samples with a plain ``torch.rand`` of the batch and channel sizes: the
# unsharded program's values under the same seed.)
RANDOM_COUNTED = frozenset({
    "cauchy", "exponential", "geometric", "log_normal", "normal.in_place", "uniform",
    "nn.functional.rrelu", "randn_like", "rand_like", "randint_like", "multinomial",
    "normal", "normal.number_mean", "bernoulli", "nn.functional.dropout",
    "nn.functional.dropout2d", "nn.functional.dropout3d", "nn.functional.alpha_dropout",
    "nn.functional.feature_alpha_dropout.with_train",
    "nn.functional.feature_alpha_dropout.without_train",
    "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
})

Spec = tuple[tuple[str, ...], ...]


@functools.lru_cache(maxsize=1)
def op_db() -> tuple[Any, ...]:
    """PyTorch's ``op_db`` (imports ``torch.testing._internal``: ~30 s, needs
    the ``expecttest`` package)."""
    from torch.testing._internal.common_methods_invocations import op_db as db

    return tuple(db)


def op_key(op: Any) -> str:
    """``name`` or ``name.variant`` (OpInfo's ``variant_test_name``)."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def float32_ops(names: Sequence[str] = ()) -> list[Any]:
    """OpInfos that support float32 on CPU, optionally only ``names`` (op keys
    or bare names, which select every variant). Raises ``KeyError`` naming
    an unknown name."""
    import torch

    ops = [o for o in op_db() if torch.float32 in o.supported_dtypes("cpu")]
    if not names:
        return ops
    keys = {op_key(o) for o in ops} | {o.name for o in ops}
    unknown = [n for n in names if n not in keys]
    if unknown:
        raise KeyError(f"no float32 OpInfo named {unknown}; names are op_db's "
                       "`name` or `name.variant_test_name`")
    return [o for o in ops if op_key(o) in names or o.name in names]


def skip_reason(op: Any) -> str | None:
    """Why an op as a whole has no unsharded reference, or ``None``."""
    if op.name in _UNINITIALISED:
        return "uninitialised values: no deterministic reference"
    if op.name in _RANDOM_FACTORIES:
        return "random factory function: no tensor operand to shard"
    if getattr(op, "is_factory_function", False):
        return "factory function: no tensor operand to shard"
    return None


@contextlib.contextmanager
def _constants(values: dict[str, int]) -> Iterator[None]:
    modules = [m for n, m in list(sys.modules.items())
               if n.startswith("torch.testing._internal") and m is not None]
    saved = []
    for module in modules:
        for name, value in values.items():
            if isinstance(getattr(module, name, None), int):
                saved.append((module, name, getattr(module, name)))
                setattr(module, name, value)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


# Ops whose samples hold sizes the shape policy cannot rescale alike
# (segment_reduce's offsets/lengths index the data: rescaled data is shorter
# than they say, and the op then reads past it, plain tensors included):
# always torch's own sizes.
_TORCH_SIZES = frozenset({"_segment_reduce"})


def samples(op: Any, requires_grad: bool, rescale: bool = True) -> tuple[list[Any], str]:
    """``(samples, policy)``: the op's float32 CPU samples under the shape
    policy (``"rescaled"``), or torch's own sizes (``"torch"``) when the
    sample function fails with the rescaled constants. Seeded: repeatable.
    Errors of the sample function itself (torch's own sizes) propagate."""
    import torch

    def generate():
        torch.manual_seed(0)
        return list(op.sample_inputs("cpu", torch.float32, requires_grad=requires_grad))

    with plain_mode():
        if rescale and op.name not in _TORCH_SIZES:
            try:
                with _constants(SHAPE_POLICY):
                    return generate(), "rescaled"
            except Exception:  # noqa: BLE001 - any failure: fall back to torch's sizes
                pass
        return generate(), "torch"


def plain_mode() -> contextlib.AbstractContextManager:
    """A context where tensors are plain again: simulated ranks'
    ``LocalTensorMode`` is off inside (no-op outside simulation)."""
    from torch.distributed import _local_tensor

    disable = getattr(_local_tensor, "maybe_disable_local_tensor_mode", None)
    if disable is not None:
        return disable()
    from torch.utils._python_dispatch import _disable_current_modes

    return _disable_current_modes()


def tensor_leaves(sample: Any) -> tuple[list[Any], Any]:
    """``(leaves, spec)`` of ``(input, args, kwargs)`` (torch pytree)."""
    from torch.utils._pytree import tree_flatten

    return tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))


def scheme_spec(shape: Sequence[int], scheme: str, mesh_shape: Sequence[int],
                axis_names: Sequence[str]) -> Spec | None:
    """The spec ``scheme`` gives a tensor of ``shape``; ``None`` when it does
    not fit (the tensor stays replicated). Raises ``KeyError`` for an unknown
    scheme."""
    rank = len(shape)
    spec: list[tuple[str, ...]] = [() for _ in range(rank)]

    def divisible(dim: int, size: int) -> bool:
        return shape[dim] > 0 and shape[dim] % size == 0

    if scheme == "first":
        dims = [d for d in range(rank) if divisible(d, mesh_shape[0])]
        if not dims:
            return None
        spec[dims[0]] = (axis_names[0],)
    elif scheme == "last":
        dims = [d for d in range(rank) if divisible(d, mesh_shape[-1])]
        if not dims:
            return None
        spec[dims[-1]] = (axis_names[-1],)
    elif scheme == "split":
        firsts = [d for d in range(rank) if divisible(d, mesh_shape[0])]
        rest = math.prod(mesh_shape[1:])
        if not firsts:
            return None
        others = [d for d in range(rank) if d != firsts[0] and divisible(d, rest)]
        if not others:
            return None
        spec[firsts[0]] = (axis_names[0],)
        spec[others[-1]] = tuple(axis_names[1:])
    elif scheme == "joint":
        total = math.prod(mesh_shape)
        dims = [d for d in range(rank) if divisible(d, total)]
        if not dims:
            return None
        spec[max(dims, key=lambda d: (shape[d], -d))] = tuple(axis_names)
    else:
        raise KeyError(f"unknown layout scheme {scheme!r}; schemes: {ALL_SCHEMES}")
    return tuple(spec)


def spec_text(spec: Spec | None) -> str:
    """``(data,_)`` style text; ``plain`` for ``None``."""
    if spec is None:
        return "plain"
    return "(" + ",".join("+".join(e) if e else "_" for e in spec) + ")"
