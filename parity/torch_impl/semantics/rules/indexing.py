"""Indexing and padding (JAX's ``_slice`` / ``_pad`` rules,
``parity.sharding_rules.structure`` and ``.slicing``): the indexed or padded
dims are gathered, the others keep their spec.

Where JAX's explicit mode refuses the op the plan is ``chosen``: basic
indexing of a sharded dim (``jnp`` indexes through a gather), advanced
indexing (tensors, bools, lists) along a sharded dim or by a sharded index
(the plan then only says so: DTensor runs the op as without a rule), a
constant pad whose output a sharded padded dim's shard count does not
divide, and reflect / replicate pads of a sharded dim (JAX slices one-row
pieces off it).
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor

from parity import sharding_rules as R
from parity.torch_impl.layouts import specs as S
from parity.torch_impl.semantics.rules.registry import Call, NotCovered, Plan, rule_for, torch_ops


def _index_rank(item) -> int | None:
    """Dims an advanced index consumes: a bool mask its rank, any other
    index 1; ``None`` for an item that is not an index."""
    if isinstance(item, torch.Tensor):
        return item.ndim if item.dtype == torch.bool else 1
    if isinstance(item, (list, tuple)):
        return 1
    return None


@rule_for(*torch_ops("__getitem__"))
def getitem(call: Call) -> Plan:
    if len(call.args) != 2 or not isinstance(call.args[0], DTensor):
        raise NotCovered
    loc, x = ("a", 0), call.args[0]
    items = call.args[1] if isinstance(call.args[1], tuple) else (call.args[1],)
    spec = S.spec_of(x)
    found = R.index(spec, items, tuple(x.shape))
    if found is None:
        return _advanced(call, x, spec, items)
    before, out, chosen = found
    sizes = call.sizes
    return Plan({loc: before}, lambda outs: [R.fit_to_shape(out, outs[0].shape, sizes)],
                chosen=chosen)


def _advanced(call: Call, x: DTensor, spec, items: tuple) -> Plan:
    """Advanced indexing: DTensor's own (no plan) unless JAX refuses it --
    an indexed dim sharded, or an index sharded (``take_refused``)."""
    touched = R.advanced_dims(items, x.ndim, _index_rank)
    if touched is None:
        raise NotCovered  # torch refuses it
    indices = [(loc, t) for loc, t in call.tensors() if loc != ("a", 0)]
    if not R.take_refused(spec, touched, [S.spec_of(t) for _, t in indices]):
        raise NotCovered
    fix = {("a", 0): R.replicate_dims(spec, touched)}
    fix.update((loc, ((),) * t.ndim) for loc, t in indices)
    return Plan({}, None, chosen=True, fix=fix)


@rule_for(*torch_ops("pad"))
def pad(call: Call) -> Plan:
    loc, x = call.only_self()
    widths = call.arg(1, "pad")
    if not isinstance(widths, (list, tuple)) or not all(isinstance(w, int) for w in widths):
        raise NotCovered
    mode = call.arg(2, "mode", default="constant")
    spec, sizes, shape = S.spec_of(x), call.sizes, tuple(x.shape)
    padded = R.pad_dims(x.ndim, widths)
    out_shape = list(shape)
    for k, w in enumerate(widths):
        out_shape[x.ndim - 1 - k // 2] += w
    if mode == "circular":  # jnp.pad(mode="wrap"): slices of the pad widths, concatenated
        chosen = R.varying_refused(spec, shape, out_shape, sizes) or any(
            R.pieces_refused(spec[x.ndim - 1 - k // 2], (abs(w),), sizes)
            for k, w in enumerate(widths))
    elif mode == "constant":
        chosen = R.varying_refused(spec, shape, out_shape, sizes)
    else:  # reflect / replicate (jnp's "reflect" / "edge"): one-row slices of the dim
        chosen = any(spec[d] for d in padded)
    return Plan({loc: R.replicate_dims(spec, padded)},
                lambda outs: [R.fit_to_shape(spec, outs[0].shape, sizes)], chosen=chosen)
