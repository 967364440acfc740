"""Ops whose output dims change size while the operand's sharding stays:
JAX's ``_get_sharding_for_varying_out_shape`` (the rule of ``lax.slice``,
``lax.pad`` and ``lax.split``) and the ``jnp`` functions JAX builds from
those primitives (``roll``, ``diff``, ``tile``, ``pad``'s modes).

The rule keeps the operand's spec on every dim; a sharded dim whose size
changes must still divide by its shard count in the output, else JAX's
explicit mode refuses the op (``ShardingTypeError``: "slicing on sharded
dims where out dim (1) is not divisible ..."). Each function answers
``chosen`` for such a refusal; the spec it gives then is auto mode's.
"""

from __future__ import annotations

from collections.abc import Sequence

from parity.layout import Spec
from parity.sharding_rules.basics import AxisSizes, shard_count
from parity.sharding_rules.reshape import reshape_spec


def varying_refused(spec: Spec, shape: Sequence[int], out_shape: Sequence[int],
                    sizes: AxisSizes) -> bool:
    """Whether JAX refuses an op that keeps ``spec`` while ``shape`` becomes
    ``out_shape`` (same rank): a sharded dim changed size to one its shard
    count does not divide."""
    return any(size != out and names and out % shard_count(names, sizes)
               for names, size, out in zip(spec, shape, out_shape))


def pieces_refused(names: Sequence[str], pieces: Sequence[int], sizes: AxisSizes) -> bool:
    """Whether JAX refuses cutting a dim sharded over ``names`` into
    ``pieces`` (the sizes of the slices or the split's parts)."""
    count = shard_count(names, sizes) if names else 1
    return any(p % count for p in pieces)


def roll(spec: Spec, shape: Sequence[int], shifts: Sequence[int], dims: Sequence[int] | None,
         sizes: AxisSizes) -> tuple[Spec, Spec, bool]:
    """``(operand spec before, output spec, chosen)`` of ``jnp.roll`` /
    ``torch.roll``: per rolled dim (non-negative) JAX concatenates two
    slices of sizes ``n - i`` and ``i`` (``i = -shift mod n``), which a
    sharded dim's shard count must divide. ``dims=None`` rolls the flattened
    array (``shifts`` has one entry): the reshape to one dim and back must
    be one JAX types (the output has the spec of the reshape back: ``(8,
    2)`` over ``('model',), ('data',)`` comes back ``('model', 'data'),
    ()``), and the flat dim's shard count must divide ``i``. The rolled
    dims are gathered before the op; along given dims the output keeps
    ``spec``."""
    if dims is None:
        numel = 1
        for s in shape:
            numel *= s
        flat = reshape_spec(shape, spec, (numel,), sizes) if shape else ((),)
        back = None if flat is None else reshape_spec((numel,), flat, shape, sizes)
        i = (-shifts[0]) % numel if numel else 0
        chosen = flat is None or back is None or pieces_refused(flat[0], (numel - i, i), sizes)
        return ((),) * len(spec), spec if chosen else back, chosen
    chosen = False
    for d, s in zip(dims, shifts):
        n = shape[d]
        i = (-s) % n if n else 0
        chosen = chosen or pieces_refused(spec[d], (n - i, i), sizes)
    return tuple(() if d in set(dims) else names for d, names in enumerate(spec)), spec, chosen


def tile(spec: Spec, reps: Sequence[int]) -> tuple[Spec, Spec, bool]:
    """``(operand spec before, output spec, chosen)`` of ``jnp.tile`` /
    ``torch.tile`` (``reps`` as given: shorter than the rank is padded with
    leading 1s, longer adds leading replicated dims). JAX refuses a sharded
    dim tiled more than once; the tiled dims are gathered before the op."""
    ndim = len(spec)
    reps = (1,) * (ndim - len(reps)) + tuple(reps)
    own = reps[len(reps) - ndim:]
    chosen = any(names and r != 1 for names, r in zip(spec, own))
    before = tuple(() if r != 1 else names for names, r in zip(spec, own))
    out = ((),) * (len(reps) - ndim) + before
    return before, out, chosen
