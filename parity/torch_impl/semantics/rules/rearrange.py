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
| ``roll``                             | the operand's (two slices joined)   |
| ``tile``, ``Tensor.repeat``          | the operand's, new leading dims     |
|                                      | replicated (a sharded dim tiled:    |
|                                      | ``chosen``)                         |
| ``diagonal``, ``diag`` of a matrix,  | the other dims' specs, then the     |
| ``trace``                            | diagonal replicated (a sharded      |
|                                      | diagonal dim: ``chosen``)           |
| ``diff``                             | the operand's (a slice of n - 1)    |

A slice, split or roll keeps a sharded dim only where its shard count
divides the pieces (``sharding_rules.slicing``); else JAX refuses:
``chosen``. A call form outside these (tensor repeats, ``diff`` with
``prepend`` / ``append``, ``out=``) is not covered: DTensor runs it and the
result is replicated.
"""

from __future__ import annotations

import torch

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
    if x.ndim == 2:
        return _diagonal(call, 0, 1)  # the diagonal of a matrix
    if x.ndim != 1:
        raise NotCovered
    return _keep(call, [0], (S.spec_of(x)[0], ()))


@rule_for(*torch_ops("diagonal"))
def diagonal(call: Call) -> Plan:
    _, x = call.only_self()
    d1, d2 = call.arg(2, "dim1", default=0), call.arg(3, "dim2", default=1)
    if not _int(d1) or not _int(d2) or x.ndim < 2 or d1 % x.ndim == d2 % x.ndim:
        raise NotCovered  # named dims, or a call torch refuses
    return _diagonal(call, d1 % x.ndim, d2 % x.ndim)


@rule_for(*torch_ops("trace"))
def trace(call: Call) -> Plan:
    """The sum of the diagonal (``jnp.trace``: a diagonal, then a sum)."""
    loc, x = call.only_self()
    if x.ndim != 2:
        raise NotCovered  # torch refuses it
    before, _, chosen = R.diagonal(S.spec_of(x), 0, 1)
    return Plan({loc: before}, [()], chosen=chosen)


def _diagonal(call: Call, d1: int, d2: int) -> Plan:
    loc, x = call.only_self()
    before, out, chosen = R.diagonal(S.spec_of(x), d1, d2)
    sizes = call.sizes
    return Plan({loc: before}, lambda outs: [R.fit_to_shape(out, outs[0].shape, sizes)],
                chosen=chosen)


@rule_for(*torch_ops("narrow", "narrow_copy"))
def narrow(call: Call) -> Plan:
    _, x = call.only_self()
    dim, length = call.arg(1, "dim"), call.arg(3, "length")
    if not _int(dim) or not _int(length):
        raise NotCovered
    dim %= x.ndim
    names = S.spec_of(x)[dim]
    refused = x.shape[dim] != length and R.pieces_refused(names, (length,), call.sizes)
    return _keep(call, [dim], chosen=refused)


@rule_for(*torch_ops("diff"))
def diff(call: Call) -> Plan:
    """``diff`` along ``dim``: JAX subtracts two slices of ``size - n``,
    which a sharded dim's shard count must divide."""
    _, x = call.only_self()
    n, dim = call.arg(1, "n", default=1), call.arg(2, "dim", default=-1)
    if (not _int(n) or not _int(dim) or call.arg(3, "prepend") is not None
            or call.arg(4, "append") is not None or x.ndim == 0):
        raise NotCovered
    dim %= x.ndim
    names = S.spec_of(x)[dim]
    size = x.shape[dim]
    pieces = [max(size - k, 0) for k in range(1, n + 1)]
    return _keep(call, [dim], chosen=R.pieces_refused(names, pieces, call.sizes))


@rule_for(*torch_ops("roll"))
def roll(call: Call) -> Plan:
    loc, x = call.only_self()
    shifts, dims = call.arg(1, "shifts"), call.arg(2, "dims")
    shifts = [shifts] if _int(shifts) else shifts
    if not isinstance(shifts, (list, tuple)) or not all(_int(s) for s in shifts):
        raise NotCovered
    if dims is None or (isinstance(dims, (list, tuple)) and not dims):
        if len(shifts) != 1:
            raise NotCovered  # torch refuses it
        dims = None
    else:
        dims = _dims(dims)
        if len(dims) != len(shifts) or x.ndim == 0:
            raise NotCovered  # torch refuses it
        dims = [d % x.ndim for d in dims]
    before, out, chosen = R.roll(S.spec_of(x), tuple(x.shape), shifts, dims, call.sizes)
    return Plan({loc: before}, [out], chosen=chosen)


@rule_for(*torch_ops("tile", "repeat"))
def tile(call: Call) -> Plan:
    """``torch.tile(x, reps)`` and ``x.repeat(*sizes)`` (``jnp.tile``)."""
    loc, x = call.only_self()
    reps = call.args[1:] if len(call.args) > 2 else call.arg(1, "dims", "repeats", "sizes")
    reps = [reps] if _int(reps) else reps
    if not isinstance(reps, (list, tuple, torch.Size)) or not all(_int(r) for r in reps):
        raise NotCovered
    if call.name == "repeat" and len(reps) < x.ndim:
        raise NotCovered  # torch refuses it
    before, out, chosen = R.tile(S.spec_of(x), tuple(reps))
    sizes = call.sizes
    return Plan({loc: before}, lambda outs: [R.fit_to_shape(out, outs[0].shape, sizes)],
                chosen=chosen)


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
