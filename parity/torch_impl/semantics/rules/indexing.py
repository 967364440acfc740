"""Basic indexing and padding (JAX's ``_slice`` / ``_pad`` rules,
``parity.sharding_rules.structure``): the indexed or padded dims are
gathered, the others keep their spec. Advanced indexing (tensors, bools,
lists) is not covered here.
"""

from __future__ import annotations

from parity import sharding_rules as R
from parity.torch_impl.layouts import specs as S
from parity.torch_impl.semantics.rules.registry import Call, NotCovered, Plan, rule_for, torch_ops


@rule_for(*torch_ops("__getitem__"))
def getitem(call: Call) -> Plan:
    loc, x = call.only_self()
    if len(call.args) != 2:
        raise NotCovered
    items = call.args[1] if isinstance(call.args[1], tuple) else (call.args[1],)
    found = R.index(S.spec_of(x), items)
    if found is None:
        raise NotCovered  # advanced indexing
    before, out = found
    sizes = call.sizes
    return Plan({loc: before}, lambda outs: [R.fit_to_shape(out, outs[0].shape, sizes)])


@rule_for(*torch_ops("pad"))
def pad(call: Call) -> Plan:
    loc, x = call.only_self()
    widths = call.arg(1, "pad")
    if not isinstance(widths, (list, tuple)):
        raise NotCovered
    spec, sizes = S.spec_of(x), call.sizes
    return Plan({loc: R.replicate_dims(spec, R.pad_dims(x.ndim, widths))},
                lambda outs: [R.fit_to_shape(spec, outs[0].shape, sizes)])
