"""Reductions and scans: JAX's ``_reduce_op_sharding_rule`` and ``_cumred``
(``parity.sharding_rules.structure.reduce``).

sum/mean/amax/amin/nansum/nanmean/all/any (and a full max/min/prod) run on
the operand as it is: DTensor leaves a pending reduction over the sharded
reduced dims, which the mode completes. Every other reduction (argmax,
var, median, ...) has its reduced dims gathered first. Scans, sorts and
topk gather their dim; JAX's explicit mode refuses them (and median, which
sorts) along a sharded dim (``chosen``).
"""

from __future__ import annotations

import torch

from parity import sharding_rules as R
from parity.torch_impl.layouts import specs as S
from parity.torch_impl.semantics.rules.elementwise import elementwise
from parity.torch_impl.semantics.rules.registry import Call, NotCovered, Plan, rule_for, torch_ops

_PARTIAL_FRIENDLY = frozenset("sum mean amax amin nansum nanmean all any".split())
_WHOLE_FRIENDLY = frozenset("max min prod".split())  # friendly when reducing every dim
_SELECTING = frozenset("amax amin max min".split())  # gradient goes to the selected element
REDUCTION_NAMES = ("sum mean amax amin nansum nanmean prod argmax argmin logsumexp var std all any "
                   "max min norm count_nonzero median").split()


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _dims(value, ndim: int) -> tuple[int, ...] | None:
    """The reduced dims (``None``: all); ``NotCovered`` for a form other
    than an int or a sequence of ints."""
    if value is None:
        return None
    if _int(value):
        return (value % ndim if ndim else 0,)
    if isinstance(value, (list, tuple)):
        if not value:
            return None
        if all(_int(v) for v in value):
            return tuple(sorted({v % ndim for v in value}))
    raise NotCovered


@rule_for(*torch_ops(*REDUCTION_NAMES))
def reduction(call: Call) -> Plan:
    ops = call.tensors()
    if not ops or ops[0][0] != ("a", 0):
        raise NotCovered
    loc, x = ops[0]
    if call.name in ("max", "min") and len(ops) > 1:
        return elementwise(call)  # torch.max(a, b): elementwise maximum
    if call.name in ("var", "std") and isinstance(call.arg(1), bool):
        dims_value = call.kwargs.get("dim")  # var(x, unbiased)
    elif call.name == "norm":
        dims_value = call.arg(2, "dim")
    else:
        dims_value = call.arg(1, "dim", "axis")
    dims = _dims(dims_value, x.ndim)
    keepdim = call.kwargs.get("keepdim", call.kwargs.get("keepdims"))
    if keepdim is None:
        pos = 3 if call.name == "norm" else 2
        keepdim = call.args[pos] if len(call.args) > pos and isinstance(call.args[pos], bool) else False
    spec = S.spec_of(x)
    out = R.reduce(spec, dims, bool(keepdim))
    friendly = call.name in _PARTIAL_FRIENDLY or (call.name in _WHOLE_FRIENDLY and dims is None)
    if call.name in _SELECTING and x.requires_grad and torch.is_grad_enabled():
        # DTensor's gradient of a max over a sharded dim is wrong (inf/NaN
        # when the maximum is not in the first shard): gather the dims.
        friendly = False
    all_dims = range(x.ndim) if dims is None else dims
    inputs = {} if friendly else {loc: R.replicate_dims(spec, all_dims)}
    linear = call.name in ("sum", "mean", "nansum")
    # jnp.median sorts along the reduced dims: JAX refuses a sharded one
    chosen = call.name == "median" and any(spec[d] for d in all_dims)
    return Plan(inputs, lambda outs: [out] * len(outs), linear=linear, chosen=chosen)


@rule_for(*torch_ops("cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"))
def cumulative(call: Call) -> Plan:
    ops = call.tensors()
    if not ops or ops[0][0] != ("a", 0):
        raise NotCovered
    loc, x = ops[0]
    dim = call.arg(1, "dim", "axis")
    if not _int(dim):
        raise NotCovered
    target, chosen = R.sort_along(S.spec_of(x), dim % x.ndim)
    return Plan({loc: target}, lambda outs: [target] * len(outs), linear=call.name == "cumsum",
                chosen=chosen)


@rule_for(*torch_ops("sort", "argsort", "msort", "topk"))
def sorting(call: Call) -> Plan:
    """sort / argsort / msort / topk along one dim (``jnp.sort``,
    ``argsort``, ``lax.top_k``): the dim gathered, the other dims kept; JAX
    refuses a sharded one. Every output (values, indices) has that spec,
    fitted to its shape (topk's dim has ``k`` entries)."""
    if call.kwargs.get("out") is not None:
        raise NotCovered
    loc, x = call.only_self()
    if call.name == "msort":
        dim = 0
    elif call.name == "topk":
        dim = call.arg(2, "dim", default=-1)
    else:
        dim = call.arg(1, "dim", default=-1)
    if not _int(dim) or x.ndim == 0:
        raise NotCovered  # a 0-d sort, or a named dim
    target, chosen = R.sort_along(S.spec_of(x), dim % x.ndim)
    sizes = call.sizes
    return Plan({loc: target}, lambda outs: [R.fit_to_shape(target, o.shape, sizes)
                                             for o in outs], chosen=chosen)


@rule_for(*torch_ops("quantile", "nanquantile"))
def quantile(call: Call) -> Plan:
    """A reduction whose output has a leading dim per entry of a vector
    ``q`` (replicated, as ``jnp.quantile`` gives). JAX sorts along the
    reduced dims, which must be unsharded: a sharded one is ``chosen``."""
    if call.kwargs.get("out") is not None:
        raise NotCovered
    ops = call.tensors()
    if not ops or ops[0][0] != ("a", 0):
        raise NotCovered
    x, q = ops[0][1], call.arg(1, "q")
    if isinstance(q, torch.Tensor) and q.ndim > 1:
        raise NotCovered  # torch refuses it
    lead = ((),) if isinstance(q, torch.Tensor) and q.ndim == 1 else ()
    dims = _dims(call.arg(2, "dim"), x.ndim)
    keepdim = call.arg(3, "keepdim", default=False)
    if not isinstance(keepdim, bool):
        raise NotCovered
    spec = S.spec_of(x)
    out = lead + R.reduce(spec, dims, keepdim)
    reduced = range(x.ndim) if dims is None else dims
    chosen = any(spec[d] for d in reduced)
    sizes = call.sizes
    return Plan({}, lambda outs: [R.fit_to_shape(out, o.shape, sizes) if o.ndim == len(out)
                                  else None for o in outs], chosen=chosen)
