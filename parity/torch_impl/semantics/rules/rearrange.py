"""Ops that move or mask elements within a dim: the operand's spec carries
over (JAX's ``rev``, ``select``, ``slice`` and ``split`` rules).

In JAX's explicit mode these keep the operand's sharding, even along the
dim they touch (JAX moves the data: ``_rev_sharding_rule`` returns the
operand's sharding; ``_get_sharding_for_varying_out_shape`` keeps it for
slices and splits whose output dim still divides by the dim's shard count,
and refuses the op otherwise). Here the touched dims are gathered before
the op (so DTensor computes on whole rows) and the output is laid out with
the operand's spec again, fitted to the output's shape (a dim it no longer
divides is replicated: JAX refuses that case, ``chosen``):

| op                                   | output spec                         |
|--------------------------------------|-------------------------------------|
| ``flip``, ``fliplr``, ``flipud``     | the operand's                       |
| ``rot90``                            | the operand's, the two dims swapped |
|                                      | for an odd ``k``                    |
| ``tril``, ``triu``                   | the operand's (a mask from iota)    |
| ``diag`` of a vector                 | ``(spec[0], None)``                 |
| ``narrow``, ``narrow_copy``          | the operand's (a slice)             |
| ``repeat_interleave`` (int repeats,  | the operand's (JAX refuses a        |
| an int dim)                          | sharded repeated dim: ``chosen``)   |
| ``glu``                              | the operand's (a split in halves)   |

A call form outside these (``diag`` of a matrix, which JAX refuses as an
ambiguous gather; tensor repeats; ``out=``) is not covered: DTensor runs it
and the result is replicated.
"""

from __future__ import annotations

from parity import sharding_rules as R
from parity.torch_impl.layouts import specs as S
from parity.torch_impl.semantics.rules.registry import Call, NotCovered, Plan, rule_for, torch_ops


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _dims(value) -> list[int]:
    if _int(value):
        return [value]
    if isinstance(value, (list, tuple)) and value and all(_int(v) for v in value):
        return list(value)
    raise NotCovered


def _keep(call: Call, touched, out_spec=None, chosen: bool = False) -> Plan:
    """Gather ``touched`` dims of ``self``; the output gets ``out_spec``
    (default: the operand's spec), fitted to its shape."""
    if call.kwargs.get("out") is not None:
        raise NotCovered  # the result must be the out= tensor itself
    loc, x = call.only_self()
    spec, sizes = S.spec_of(x), call.sizes
    touched = sorted({d % x.ndim for d in touched}) if x.ndim else []
    target = spec if out_spec is None else out_spec
    return Plan({loc: R.replicate_dims(spec, touched)},
                lambda outs: [R.fit_to_shape(target, o.shape, sizes) if o.ndim == len(target)
                              else None for o in outs], chosen=chosen)


@rule_for(*torch_ops("flip", "fliplr", "flipud"))
def flip(call: Call) -> Plan:
    if call.name == "fliplr":
        return _keep(call, [1])
    if call.name == "flipud":
        return _keep(call, [0])
    dims = call.args[1:] if len(call.args) > 2 else call.arg(1, "dims")
    return _keep(call, _dims(dims))


@rule_for(*torch_ops("rot90"))
def rot90(call: Call) -> Plan:
    _, x = call.only_self()
    k, dims = call.arg(1, "k", default=1), call.arg(2, "dims", default=(0, 1))
    dims = _dims(dims)
    if not _int(k) or len(dims) != 2 or x.ndim < 2:
        raise NotCovered  # torch refuses these itself
    d0, d1 = dims[0] % x.ndim, dims[1] % x.ndim
    spec = S.spec_of(x)
    if k % 2:
        spec = R.permute(spec, R.swap_perm(x.ndim, d0, d1))
    return _keep(call, [d0, d1], spec)


@rule_for(*torch_ops("tril", "triu"))
def triangle(call: Call) -> Plan:
    _, x = call.only_self()
    if x.ndim < 2:
        raise NotCovered  # torch refuses it
    return _keep(call, [x.ndim - 2, x.ndim - 1])


@rule_for(*torch_ops("diag"))
def diag(call: Call) -> Plan:
    _, x = call.only_self()
    if x.ndim != 1:
        raise NotCovered  # the diagonal of a matrix: JAX refuses (an ambiguous gather)
    return _keep(call, [0], (S.spec_of(x)[0], ()))


@rule_for(*torch_ops("narrow", "narrow_copy"))
def narrow(call: Call) -> Plan:
    dim = call.arg(1, "dim")
    if not _int(dim):
        raise NotCovered
    return _keep(call, [dim])


@rule_for(*torch_ops("repeat_interleave"))
def repeat_interleave(call: Call) -> Plan:
    _, x = call.only_self()
    repeats, dim = call.arg(1, "repeats"), call.arg(2, "dim")
    if not _int(repeats) or not _int(dim):
        raise NotCovered  # tensor repeats, or the flattening form (dim=None)
    dim %= x.ndim
    return _keep(call, [dim], chosen=bool(S.spec_of(x)[dim]))


@rule_for(*torch_ops("glu"))
def glu(call: Call) -> Plan:
    dim = call.arg(1, "dim", default=-1)
    if not _int(dim):
        raise NotCovered
    return _keep(call, [dim])
