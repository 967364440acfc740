"""Shape ops: transposes, reshapes, joins and splits
(``parity.sharding_rules.structure`` and ``.reshape``).

Transposes permute the spec; reshapes follow JAX's split/merge rule
(a strided shard, which DTensor's view rules mishandle, is gathered first);
cat/stack keep the first operand's spec (the joined dim gathered, a stacked
dim replicated); split/chunk/unbind gather the split dim. Output specs that
need the output's shape are fitted to it (a dim they do not divide is
replicated). JAX's explicit mode refuses (``chosen``) a reshape its rule
cannot type, a split whose pieces a sharded dim's shard count does not
divide, and unbinding a sharded dim.
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor

from parity import sharding_rules as R
from parity.torch_impl.layouts import specs as S
from parity.torch_impl.semantics.rules.registry import Call, NotCovered, Plan, rule_for, torch_ops


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _dim_list(value) -> list[int]:
    if _int(value):
        return [value]
    if isinstance(value, (list, tuple)) and all(_int(v) for v in value):
        return list(value)
    raise NotCovered


@rule_for(*torch_ops("transpose", "swapaxes", "swapdims", "permute", "movedim", "moveaxis", "t"))
def transpose(call: Call) -> Plan:
    _, x = call.only_self()
    spec, n = S.spec_of(x), x.ndim
    if call.name == "t":
        perm = list(range(n))[::-1]
    elif call.name == "permute":
        dims = call.args[1:] if len(call.args) > 2 else call.arg(1, "dims")
        perm = [d % n for d in _dim_list(dims)]
    elif call.name in ("movedim", "moveaxis"):
        src, dst = call.arg(1, "source"), call.arg(2, "destination")
        perm = R.movedim_perm(n, _dim_list(src), _dim_list(dst))
    else:
        d0, d1 = call.arg(1, "dim0", "axis0"), call.arg(2, "dim1", "axis1")
        if not _int(d0) or not _int(d1):
            raise NotCovered
        perm = R.swap_perm(n, d0, d1)
    return Plan({}, [R.permute(spec, perm)])


_PROPERTIES = [(torch.Tensor.T.__get__, "T"), (torch.Tensor.H.__get__, "H"),
               (torch.Tensor.mT.__get__, "mT"), (torch.Tensor.mH.__get__, "mH")]


@rule_for(*_PROPERTIES)
def transpose_property(call: Call) -> Plan:
    """``x.T`` / ``x.H`` reverse the dims, ``x.mT`` / ``x.mH`` swap the last
    two (the conjugate changes no placement)."""
    _, x = call.only_self()
    spec, n = S.spec_of(x), x.ndim
    if call.name in ("T", "H"):
        perm = list(range(n))[::-1]
    else:
        if n < 2:
            raise NotCovered  # torch refuses it
        perm = R.swap_perm(n, -2, -1)
    return Plan({}, [R.permute(spec, perm)])


@rule_for(*torch_ops("reshape", "view", "flatten", "unflatten", "squeeze", "unsqueeze", "view_as",
                     "reshape_as", "ravel", "squeeze_copy"))
def reshape(call: Call) -> Plan:
    loc, x = call.only_self()
    spec, shape, sizes = S.spec_of(x), tuple(x.shape), call.sizes

    def outputs(outs):
        result = []
        for o in outs:
            new = R.reshape_spec(shape, spec, tuple(o.shape), sizes)
            result.append(None if new is None else R.fit_to_shape(new, o.shape, sizes))
        return result

    if any(spec) and R.reshape_spec(shape, spec, _meta_shapes(call)[0], sizes) is None:
        # JAX's rule has no answer (auto mode reshards): reshape the gathered
        # array. DTensor's view would make strided shards here, whose
        # gradient its view rules cannot bring back (and whose redistribute
        # asserts once a flattened mesh exists). JAX's explicit mode refuses it.
        return Plan({loc: ((),) * x.ndim}, outputs, linear=True, chosen=True)
    strided = {p.dim for p in x.placements if type(p).__name__ == "_StridedShard"}
    inputs = {loc: R.replicate_dims(spec, strided)} if strided else {}
    return Plan(inputs, outputs, linear=True)


def _meta_shapes(call: Call) -> list[tuple[int, ...]]:
    """The output shapes of ``call`` (a reshape or a split), from the same
    call on meta tensors of the operands' shapes (torch's own -1 inference,
    dim wrapping, section sizes and argument errors)."""
    def meta(t):
        return torch.empty(t.shape, dtype=t.dtype, device="meta") if isinstance(t, DTensor) else t

    args = tuple(meta(a) for a in call.args)
    kwargs = {k: meta(v) for k, v in call.kwargs.items()}
    fn = getattr(torch.Tensor, call.name, None) or getattr(torch, call.name)
    out = fn(*args, **kwargs)
    return [tuple(out.shape)] if isinstance(out, torch.Tensor) else [tuple(o.shape) for o in out]


@rule_for(*torch_ops("cat", "concat", "concatenate", "stack"))
def join(call: Call) -> Plan:
    seq = call.arg(0, "tensors")
    if not isinstance(seq, (list, tuple)) or not seq or not all(isinstance(t, DTensor) for t in seq):
        raise NotCovered  # a plain tensor among the operands
    dim = call.arg(1, "dim", "axis", default=0)
    if not _int(dim):
        raise NotCovered  # a named dim
    specs = [S.spec_of(t) for t in seq]
    loc0 = ("a", 0) if call.args and call.args[0] is seq else ("k", "tensors")
    if call.name == "stack":
        before, out, chosen = R.stack(specs, dim % (seq[0].ndim + 1))
    else:
        before, out, chosen = R.concat(specs, dim % seq[0].ndim)
    sizes = call.sizes
    return Plan({loc0 + (j,): before for j in range(len(seq))},
                lambda outs: [R.fit_to_shape(out, outs[0].shape, sizes)], chosen=chosen)


@rule_for(*torch_ops("split", "tensor_split", "chunk", "unbind", "split_with_sizes"))
def split(call: Call) -> Plan:
    loc, x = call.only_self()
    spec, sizes = S.spec_of(x), call.sizes
    if call.name == "unbind":
        dim = call.arg(1, "dim", default=0)
        if not _int(dim):
            raise NotCovered
        before, piece = R.split(spec, dim % x.ndim, keep_dim=False)
        # jnp.unstack: JAX refuses a sharded unstacked dim
        return Plan({loc: before}, lambda outs: [piece] * len(outs), chosen=before != spec)
    dim = call.arg(2, "dim", "axis", default=0)
    if not _int(dim):
        raise NotCovered
    dim %= x.ndim
    before, _ = R.split(spec, dim)
    # each piece keeps the operand's spec, fitted to its shape (JAX's split
    # keeps it where the shard count divides every piece, else refuses)
    chosen = bool(spec[dim]) and R.pieces_refused(
        spec[dim], [shape[dim] for shape in _meta_shapes(call)], sizes)
    return Plan({loc: before}, lambda outs: [R.fit_to_shape(spec, o.shape, sizes) for o in outs],
                chosen=chosen)



def _promoted(name: str, spec, ndim: int):
    """``(spec after the op's atleast_Nd / column promotion, joined dim of
    the promoted operand, joined dim of the operand itself or None)`` for
    hstack / vstack / dstack / column_stack (torch's and jnp's promotions)."""
    if name in ("vstack", "row_stack"):
        if ndim == 0:
            return ((), ()), 0, None
        if ndim == 1:
            return ((),) + spec, 0, None
        return spec, 0, 0
    if name == "dstack":
        if ndim == 0:
            return ((), (), ()), 2, None
        if ndim == 1:
            return ((),) + spec + ((),), 2, None
        if ndim == 2:
            return spec + ((),), 2, None
        return spec, 2, 2
    if name == "column_stack" and ndim <= 1:
        return (spec or ((),)) + ((),), 1, None
    if ndim == 0:  # hstack of scalars: a vector
        return ((),), 0, None
    if ndim == 1:  # hstack of vectors joins dim 0
        return spec, 0, 0
    return spec, 1, 1


@rule_for(*torch_ops("hstack", "vstack", "dstack", "column_stack", "row_stack"))
def join_promoted(call: Call) -> Plan:
    """JAX's ``_concatenate`` after the promotion: the operands' common
    spec (the joined dim kept), the joined dim gathered first."""
    if call.kwargs.get("out") is not None:
        raise NotCovered
    seq = call.arg(0, "tensors")
    if not isinstance(seq, (list, tuple)) or not seq or not all(isinstance(t, DTensor) for t in seq):
        raise NotCovered  # a plain tensor among the operands
    loc0 = ("a", 0) if call.args and call.args[0] is seq else ("k", "tensors")
    inputs, promoted = {}, []
    for j, t in enumerate(seq):
        spec = S.spec_of(t)
        after, _, own = _promoted(call.name, spec, t.ndim)
        promoted.append(after)
        if own is not None:
            inputs[loc0 + (j,)] = R.replicate_dims(spec, [own])
    out = promoted[0]
    sizes = call.sizes
    return Plan(inputs, lambda outs: [R.fit_to_shape(out, outs[0].shape, sizes)
                                      if outs[0].ndim == len(out) else None],
                chosen=any(p != out for p in promoted[1:]))
