"""Gathers by an index tensor other than the embedding lookup:
``index_select`` and ``take`` (``jnp.take``), ``gather`` and
``take_along_dim`` (``jnp.take_along_axis``)
(``parity.sharding_rules.gather``).

JAX's explicit mode refuses ``jnp.take`` along a sharded dim or by a
sharded index: those plans are ``chosen`` and only say so (DTensor runs the
op as without a rule, the fix names the reshards JAX needs); the others
are not covered (DTensor's own). ``take_along_axis`` lays out the operand
and the index alike (the gathered dim unsharded, the other dims the one
non-replicated spec of the two); JAX refuses a sharded gathered dim or two
different specs of one dim.
"""

from __future__ import annotations

from parity import sharding_rules as R
from parity.torch_impl.layouts import specs as S
from parity.torch_impl.semantics.rules.registry import Call, NotCovered, Plan, rule_for, torch_ops


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _refusal(call: Call, x_loc, dims) -> Plan:
    """The plan of a ``jnp.take``-like gather of ``dims`` of the operand at
    ``x_loc``: ``chosen`` with its fix where JAX refuses, else not covered."""
    located = dict(call.tensors())
    x = located.get(x_loc)
    if x is None:
        raise NotCovered
    spec = S.spec_of(x)
    dims = range(x.ndim) if dims is None else dims
    indices = [(loc, t) for loc, t in located.items() if loc != x_loc]
    if not R.take_refused(spec, dims, [S.spec_of(t) for _, t in indices]):
        raise NotCovered
    fix = {x_loc: R.replicate_dims(spec, dims)}
    fix.update((loc, ((),) * t.ndim) for loc, t in indices)
    return Plan({}, None, chosen=True, fix=fix)


@rule_for(*torch_ops("index_select"))
def index_select(call: Call) -> Plan:
    dim = call.arg(1, "dim")
    x = call.arg(0, "input")
    if not _int(dim) or getattr(x, "ndim", 0) == 0:
        raise NotCovered
    return _refusal(call, ("a", 0) if call.args else ("k", "input"), [dim % x.ndim])


@rule_for(*torch_ops("take"))
def take(call: Call) -> Plan:
    """``torch.take``: a gather from the flattened operand."""
    return _refusal(call, ("a", 0) if call.args else ("k", "input"), None)


@rule_for(*torch_ops("gather", "take_along_dim"))
def take_along(call: Call) -> Plan:
    ops = dict(call.tensors())
    x_loc = ("a", 0) if call.args else ("k", "input")
    if call.name == "gather":
        dim, i_loc = call.arg(1, "dim"), ("a", 2) if len(call.args) > 2 else ("k", "index")
    else:
        dim, i_loc = call.arg(2, "dim"), ("a", 1) if len(call.args) > 1 else ("k", "indices")
    x, index = ops.get(x_loc), ops.get(i_loc)
    if (x is None or index is None or not _int(dim) or x.ndim == 0 or x.shape != index.shape
            or len(ops) != 2 or call.kwargs.get("out") is not None):
        raise NotCovered  # a flattened take_along_dim, a smaller index, out=
    dim %= x.ndim
    before, out, chosen = R.take_along(S.spec_of(x), S.spec_of(index), dim)
    return Plan({x_loc: before, i_loc: before}, [out], chosen=chosen)
