"""Convolution and pooling: batch-parallel, spatial dims gathered.

JAX's ``conv_general_dilated`` rule keeps the batch dim's sharding (and the
output-feature dim's, from the kernel) and refuses a sharded spatial dim;
DTensor's tensor-parallel convolution gives wrong shapes and values for a
sharded spatial dim with stride or padding (and fails in backward: "Stride
must be 1 when there is padding"). Here:

* convolutions: the input keeps its batch dim's spec (an unbatched input is
  replicated); the rest of the input, the weight and the bias are
  replicated; the output is sharded on the batch dim as the input was;
* pooling (max, avg, adaptive, lp, fractional, unpool): the input keeps its
  batch and channel dims' specs (pooling is per channel) and gathers the
  spatial dims; every output (values, and indices where returned) has that
  spec on its leading dims. Max, avg and lp pooling are JAX's
  ``reduce_window``, whose rule keeps the operand's spec on every dim
  (``_get_sharding_for_varying_out_shape``: JAX refuses an output dim the
  spec no longer divides, ``chosen``): their outputs get the input's spec
  back on the spatial dims too, fitted to the output's shape. Adaptive,
  fractional pooling and unpooling have no JAX primitive: spatial dims
  replicated.
"""

from __future__ import annotations

from parity import sharding_rules as R
from parity.torch_impl.layouts import specs as S
from parity.torch_impl.semantics.rules.registry import Call, NotCovered, Plan, rule_for, torch_ops

_CONV = {f"conv{k}d": k for k in (1, 2, 3)} | {f"conv_transpose{k}d": k for k in (1, 2, 3)}
_POOL = {
    f"{kind}{k}d": k
    for k in (1, 2, 3)
    for kind in ("max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool", "lp_pool",
                 "_max_pool", "_adaptive_max_pool", "max_unpool")
} | {f"max_pool{k}d_with_indices": k for k in (1, 2, 3)} | {
    f"adaptive_max_pool{k}d_with_indices": k for k in (1, 2, 3)
} | {"fractional_max_pool2d": 2, "fractional_max_pool3d": 3}
# JAX's reduce_window: outputs keep the operand's spec on the spatial dims too
_WINDOW = frozenset(name for name in _POOL if name.lstrip("_").startswith(("max_pool", "avg_pool",
                                                                             "lp_pool")))


def _leading(call: Call, spatial: int, kept: int, window: bool = False) -> Plan:
    """Input (argument 0) keeps the specs of its first ``kept`` dims of the
    batched layout (fewer when unbatched), every other DTensor operand is
    replicated; outputs take the input's kept specs on their leading dims
    (``window``: the input's whole spec, on outputs of the input's rank)."""
    ops = call.tensors()
    if not ops or ops[0][0] != ("a", 0):
        raise NotCovered
    loc, x = ops[0]
    lead = x.ndim - spatial  # dims before the spatial ones
    if lead < 0:
        raise NotCovered  # torch refuses the input itself
    keep = max(0, kept - (spatial + kept - x.ndim)) if x.ndim < spatial + kept else kept
    spec = S.spec_of(x)
    before = tuple(names if d < keep else () for d, names in enumerate(spec))
    inputs = {loc: before}
    for other, t in ops[1:]:
        inputs[other] = ((),) * t.ndim
    sizes = call.sizes

    def outputs(outs):
        return [R.fit_to_shape(spec if window and o.ndim == x.ndim
                               else before[:keep] + ((),) * (o.ndim - keep), o.shape, sizes)
                if o.ndim >= keep else None for o in outs]

    return Plan(inputs, outputs)


@rule_for(*torch_ops(*_CONV))
def convolution(call: Call) -> Plan:
    return _leading(call, _CONV[call.name], kept=1)


@rule_for(*torch_ops(*_POOL))
def pooling(call: Call) -> Plan:
    return _leading(call, _POOL[call.name], kept=2, window=call.name in _WINDOW)
