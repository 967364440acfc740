"""JAX's output-sharding rules (explicit axis types), per op family.

Each rule reads the specs of an op's DTensor operands and returns a ``Plan``:
the spec each operand is resharded to *before* the op (through the
differentiable ``redistribute``, so autograd records it) and the spec of each
output (what JAX's sharding-in-types rule gives). Where JAX's explicit mode
refuses an op as ambiguous, the rule still returns a plan -- the choice JAX's
auto mode and Keras make: complete the reduction, keep the first operand's
sharding -- and marks it ``chosen``.

| family (torch names)                     | JAX rule                          | operands resharded to           |
|------------------------------------------|-----------------------------------|---------------------------------|
| elementwise (add, mul, where, exp, ...)  | broadcasting_sharding_rule: per   | the output spec (size-1 dims    |
|                                          | dim the one non-None spec         | replicated); in-place: self's   |
| reductions (sum, mean, amax, argmax ...) | _reduce_op_sharding_rule: reduced | sum/mean/amax/amin: as they are |
|                                          | dims dropped (keepdim: None)      | (then psum); others: reduced    |
|                                          |                                   | dims gathered                   |
| cumulative (cumsum, cumprod)             | _cumred: the operand's spec       | the scanned dim gathered        |
| softmax, log_softmax                     | composed: the operand's spec      | the softmax dim gathered        |
| layer_norm, rms_norm                     | composed: broadcast of a, w, b    | normalized dims gathered        |
| matmul, mm, bmm, linear, einsum          | _dot_general_sharding_rule: batch | contracting dims sharded alike  |
|                                          | + lhs free + rhs free             | (a replicated side is sliced)   |
| transpose, permute, movedim, t           | _transpose: spec permuted         | --                              |
| reshape, view, flatten, (un)squeeze      | _reshape_sharding_rule: split or  | --                              |
|                                          | merge a sharded major dim         |                                 |
| cat, stack                               | _concatenate: operands' common    | the joined dim gathered         |
|                                          | spec (stack: new dim None)        |                                 |
| split, chunk, tensor_split, unbind       | _split: the operand's spec        | the split dim gathered          |
| indexing with slices, pad                | _slice/_pad: the operand's spec   | the sliced/padded dims gathered |

Any output spec is fitted to the output's shape: a dim that does not divide
by its shard count is replicated (JAX refuses uneven shards; that case is
``chosen``). Ops with no rule run as DTensor runs them, with every pending
reduction completed.
"""

from __future__ import annotations

import dataclasses
import math
import string
from collections.abc import Callable, Sequence
from typing import Any

from torch.distributed.tensor import DTensor

from parity.layout import Spec
from parity.torch_impl.semantics import specs as S

Locator = tuple  # ("a", i) | ("a", i, j) | ("k", name) | ("k", name, j)


@dataclasses.dataclass
class Plan:
    """What to do around one op.

    ``inputs``: operand locator -> spec to reshard to before the op.
    ``outputs``: spec per tensor output (flattened order), ``None`` for "as
    DTensor gives it, reductions completed"; or a callable from the outputs
    to that list (for rules that need the output shapes).
    ``linear``: pending sums may pass through (``defer``).
    ``chosen``: JAX's explicit mode refuses this op; the plan is auto mode's.
    """

    inputs: dict = dataclasses.field(default_factory=dict)
    outputs: Any = None
    linear: bool = False
    chosen: bool = False


class Call:
    """An op call with its DTensor operands located."""

    __slots__ = ("name", "args", "kwargs", "mesh", "sizes", "_tensors")

    def __init__(self, name: str, args: tuple, kwargs: dict, mesh) -> None:
        self.name, self.args, self.kwargs, self.mesh = name, args, kwargs, mesh
        self.sizes = S.axis_sizes(mesh)
        self._tensors = None

    def tensors(self) -> list[tuple[Locator, DTensor]]:
        if self._tensors is None:
            found = []
            for i, a in enumerate(self.args):
                if isinstance(a, DTensor):
                    found.append((("a", i), a))
                elif isinstance(a, (list, tuple)):
                    found.extend((("a", i, j), v) for j, v in enumerate(a) if isinstance(v, DTensor))
            for k, a in self.kwargs.items():
                if isinstance(a, DTensor):
                    found.append((("k", k), a))
                elif isinstance(a, (list, tuple)):
                    found.extend((("k", k, j), v) for j, v in enumerate(a) if isinstance(v, DTensor))
            self._tensors = found
        return self._tensors

    def arg(self, index: int, *names: str, default=None):
        for n in names:
            if n in self.kwargs:
                return self.kwargs[n]
        return self.args[index] if len(self.args) > index else default


# ---------------------------------------------------------------- elementwise

def broadcast_spec(operands: Sequence[tuple[Spec, Sequence[int]]], out_shape, sizes):
    """JAX's ``broadcasting_sharding_rule`` over right-aligned operands:
    ``(spec, chosen)``. Conflicts (two different shardings of one dim, or an
    axis on two dims) are resolved by keeping the first (``chosen``)."""
    ndim = len(out_shape)
    result: list[tuple[str, ...]] = []
    chosen = False
    for d in range(ndim):
        pick: tuple[str, ...] | None = None
        for spec, shape in operands:
            k = d - (ndim - len(shape))
            if k < 0:
                continue
            names = spec[k]
            if not names:
                continue
            if pick is None:
                pick = names
            elif names != pick:
                chosen = True
        result.append(pick or ())
    deduped = S.dedupe(result)
    fitted = S.fit_to_shape(deduped, out_shape, sizes)
    return fitted, chosen or deduped != tuple(result) or fitted != deduped


def _aligned(out_spec: Spec, out_shape, shape) -> Spec:
    off = len(out_shape) - len(shape)
    return tuple(
        () if (size == 1 and out_shape[off + k] != 1) else out_spec[off + k]
        for k, size in enumerate(shape)
    )


def _broadcast_shape(shapes):
    ndim = max(len(s) for s in shapes)
    out = []
    for d in range(ndim):
        size = 1
        for s in shapes:
            k = d - (ndim - len(s))
            if k >= 0 and s[k] != 1:
                size = s[k]
        out.append(size)
    return tuple(out)


def elementwise(call: Call) -> Plan:
    ops = call.tensors()
    shapes = [tuple(t.shape) for _, t in ops]
    out_shape = _broadcast_shape(shapes)
    specs = [S.spec_of(t) for _, t in ops]
    inplace = call.name.endswith("_") and not call.name.endswith("__") or call.name.startswith("__i")
    if inplace and ops[0][0] == ("a", 0):
        out_spec, chosen = specs[0], False
        out_shape = shapes[0]
    else:
        out_spec, chosen = broadcast_spec(list(zip(specs, shapes)), out_shape, call.sizes)
    inputs = {loc: _aligned(out_spec, out_shape, shape) for (loc, _), shape in zip(ops, shapes)}
    linear = call.name in LINEAR_ELEMENTWISE and _linear_operands(call)
    return Plan(inputs, [out_spec], linear=linear, chosen=chosen)


def _linear_operands(call: Call) -> bool:
    """add/sub: every tensor operand pending alike; mul/div: one tensor and
    scalars (dividing *by* a pending value is not linear)."""
    ops = call.tensors()
    if call.name in ("mul", "__mul__", "__rmul__", "mul_", "div", "__truediv__", "true_divide",
                     "div_", "__imul__", "__itruediv__"):
        if len(ops) != 1 or (call.name in ("div", "__truediv__", "true_divide", "div_")
                             and ops[0][0] != ("a", 0)):
            return False
        return True
    if call.name in ("neg", "__neg__", "negative", "clone", "contiguous"):
        return True
    placements = {tuple(t.placements) for _, t in ops}
    return len(placements) == 1 and all(S.has_partial(t) for _, t in ops)


LINEAR_ELEMENTWISE = frozenset(
    "add __add__ __radd__ add_ __iadd__ sub __sub__ __rsub__ sub_ __isub__ subtract "
    "mul __mul__ __rmul__ mul_ __imul__ multiply div __truediv__ true_divide div_ "
    "__itruediv__ neg __neg__ negative clone contiguous".split()
)

ELEMENTWISE = frozenset(
    """add __add__ __radd__ add_ __iadd__ sub __sub__ __rsub__ sub_ __isub__ subtract rsub
    mul __mul__ __rmul__ mul_ __imul__ multiply div __truediv__ __rtruediv__ true_divide div_
    __itruediv__ divide floor_divide __floordiv__ __rfloordiv__ remainder __mod__ fmod
    pow __pow__ __rpow__ pow_ float_power maximum minimum fmax fmin where clamp clip clamp_
    clamp_min clamp_max neg __neg__ negative abs __abs__ exp exp2 expm1 log log2 log10 log1p
    sqrt rsqrt square tanh sigmoid relu relu_ gelu silu mish softplus elu leaky_relu
    hardtanh relu6 sin cos tan asin acos atan atan2 sinh cosh erf erfc reciprocal sign
    floor ceil round trunc frac eq ne lt le gt ge __eq__ __ne__ __lt__ __le__ __gt__ __ge__
    logical_and logical_or logical_not logical_xor __and__ __or__ __xor__ __invert__
    bitwise_and bitwise_or bitwise_not isnan isinf isfinite nan_to_num lerp addcmul addcdiv
    masked_fill copy_ fill_ zero_ float double half bfloat16 int long bool to type_as
    clone contiguous detach sigmoid_ tanh_ exp_ log_softmax_placeholder""".split()
)


# ----------------------------------------------------------------- reductions

_PARTIAL_FRIENDLY = frozenset("sum mean amax amin nansum nanmean all any".split())
REDUCTIONS = frozenset(
    "sum mean amax amin nansum nanmean prod argmax argmin logsumexp var std all any "
    "max min norm count_nonzero median".split()
)


def _dims(value, ndim) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return (value % ndim if ndim else 0,)
    if isinstance(value, (list, tuple)):
        if not value:
            return None
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return tuple(sorted({v % ndim for v in value}))
    raise _NoRule


class _NoRule(Exception):
    pass


def reduction(call: Call) -> Plan | None:
    ops = call.tensors()
    (loc, x), = ops[:1] or [(None, None)]
    if x is None or loc != ("a", 0):
        return None
    if call.name in ("max", "min") and len(ops) > 1:
        return elementwise(call)
    if call.name in ("var", "std") and isinstance(call.arg(1), bool):
        dims_value = call.kwargs.get("dim")
    elif call.name == "norm":
        dims_value = call.arg(2, "dim")
    else:
        dims_value = call.arg(1, "dim", "axis")
    try:
        dims = _dims(dims_value, x.ndim)
    except _NoRule:
        return None
    keepdim = call.kwargs.get("keepdim", call.kwargs.get("keepdims"))
    if keepdim is None:
        pos = 3 if call.name == "norm" else 2
        keepdim = call.args[pos] if len(call.args) > pos and isinstance(call.args[pos], bool) else False
    spec = S.spec_of(x)
    all_dims = tuple(range(x.ndim)) if dims is None else dims
    if keepdim:
        out = S.replicate_dims(spec, all_dims)
    else:
        out = tuple(n for d, n in enumerate(spec) if d not in all_dims)
    friendly = call.name in _PARTIAL_FRIENDLY or (
        call.name in ("max", "min", "prod") and dims is None
    )
    inputs = {} if friendly else {loc: S.replicate_dims(spec, all_dims)}
    if not friendly and call.name in ("max", "min", "prod") and dims is None:
        inputs = {}
    linear = call.name in ("sum", "mean", "nansum")
    return Plan(inputs, lambda outs: [out] * len(outs), linear=linear)


def cumulative(call: Call) -> Plan | None:
    ops = call.tensors()
    if not ops or ops[0][0] != ("a", 0):
        return None
    loc, x = ops[0]
    dim = call.arg(1, "dim", "axis")
    if not isinstance(dim, int):
        return None
    spec = S.spec_of(x)
    target = S.replicate_dims(spec, [dim % x.ndim])
    return Plan({loc: target}, lambda outs: [target] * len(outs), linear=call.name == "cumsum",
                chosen=target != spec)


def softmax(call: Call) -> Plan | None:
    ops = call.tensors()
    if len(ops) != 1 or ops[0][0] != ("a", 0):
        return None
    loc, x = ops[0]
    dim = call.arg(1, "dim", "axis")
    if not isinstance(dim, int):
        return None
    spec = S.spec_of(x)
    return Plan({loc: S.replicate_dims(spec, [dim % x.ndim])}, [spec])


def norm_layer(call: Call) -> Plan | None:
    ops = call.tensors()
    if not ops or ops[0][0] != ("a", 0):
        return None
    x = ops[0][1]
    shape = call.arg(1, "normalized_shape")
    try:
        k = len(shape)
    except TypeError:
        k = 1
    spec, chosen = broadcast_spec(
        [(S.spec_of(t), tuple(t.shape)) for _, t in ops], tuple(x.shape), call.sizes
    )
    normalized = range(x.ndim - k, x.ndim)
    inputs = {ops[0][0]: S.replicate_dims(spec, normalized)}
    for loc, t in ops[1:]:
        inputs[loc] = ((),) * t.ndim
    return Plan(inputs, [spec], chosen=chosen)


# --------------------------------------------------------------- contractions

def _contract(call: Call, operands, letters, out_letters) -> Plan:
    """A generic dot_general/einsum rule over lettered operand dims."""
    sizes = call.sizes
    dim_size: dict[str, int] = {}
    per_letter: dict[str, list[tuple[str, ...]]] = {}
    for (_, t), lets in zip(operands, letters):
        spec = S.spec_of(t)
        for letter, names, size in zip(lets, spec, t.shape):
            per_letter.setdefault(letter, []).append(names)
            dim_size[letter] = max(dim_size.get(letter, 1), int(size))
    chosen = False
    used: set[str] = set()
    assign: dict[str, tuple[str, ...]] = {}

    def pick(letter: str, batch: bool = False) -> tuple[str, ...]:
        nonlocal chosen
        options = [n for n in per_letter.get(letter, []) if n]
        if len({o for o in options}) > 1:
            chosen = True
        names = options[0] if options else ()
        if batch:  # dot_general: the batch spec is the lhs's
            names = per_letter[letter][0]
        kept = tuple(n for n in names if n not in used)
        if kept != names:
            chosen = True
        kept = S.fit_to_shape((kept,), (dim_size[letter],), sizes)[0]
        used.update(kept)
        return kept

    for letter in out_letters:
        assign[letter] = pick(letter, batch=len(per_letter.get(letter, [])) > 1)
    shared = [l for l in per_letter if l not in assign and len(per_letter[l]) > 1]
    for letter in shared:
        sharded = [n for n in per_letter[letter] if n]
        if len(sharded) == len(per_letter[letter]) and len(sharded) > 0:
            chosen = True  # contracting dims sharded on both sides: ambiguous in JAX
        assign[letter] = pick(letter)
    for letter in per_letter:
        if letter not in assign:  # summed within one operand
            assign[letter] = pick(letter)
    inputs = {
        loc: tuple(assign[l] for l in lets) for (loc, _), lets in zip(operands, letters)
    }
    out = tuple(assign[l] for l in out_letters)
    # (sum_r p_r) @ b == sum_r (p_r @ b): a pending operand may stay pending
    # when it is the only one.
    linear = sum(S.has_partial(t) for _, t in operands) <= 1
    return Plan(inputs, [out], linear=linear, chosen=chosen)


def matmul(call: Call) -> Plan | None:
    ops = call.tensors()
    if len(ops) != 2 or len(call.args) + len(call.kwargs) != 2:
        return None
    (la, a), (lb, b) = ops
    if call.name == "__rmatmul__":
        (la, a), (lb, b) = (lb, b), (la, a)
    if a.ndim < 1 or b.ndim < 1:
        return None
    if a.ndim == 1 and b.ndim == 1:
        return _contract(call, [(la, a), (lb, b)], ["k", "k"], "")
    if a.ndim == 1:
        lets_b = _batch_letters(b.ndim - 2) + "kn"
        return _contract(call, [(la, a), (lb, b)], ["k", lets_b], lets_b[:-2] + "n")
    if b.ndim == 1:
        lets_a = _batch_letters(a.ndim - 2) + "mk"
        return _contract(call, [(la, a), (lb, b)], [lets_a, "k"], lets_a[:-1])
    batch = max(a.ndim, b.ndim) - 2
    letters = _batch_letters(batch)
    ba, bb = letters[batch - (a.ndim - 2):], letters[batch - (b.ndim - 2):]
    # a broadcast (size-1) batch dim is not a shared dim
    if any(a.shape[i] != b.shape[i - (a.ndim - b.ndim)] for i in range(a.ndim - 2)
           if i - (a.ndim - b.ndim) >= 0):
        return None
    return _contract(call, [(la, a), (lb, b)], [ba + "mk", bb + "kn"], letters + "mn")


def _batch_letters(n: int) -> str:
    return "ABCDEFGHIJ"[:n]


def linear(call: Call) -> Plan | None:
    ops = call.tensors()
    x, w = call.arg(0, "input"), call.arg(1, "weight")
    bias = call.arg(2, "bias")
    if not isinstance(x, DTensor) or not isinstance(w, DTensor) or w.ndim != 2:
        return None
    locs = {id(t): loc for loc, t in ops}
    lets_x = _batch_letters(x.ndim - 1) + "k"
    plan = _contract(call, [(locs[id(x)], x), (locs[id(w)], w)], [lets_x, "nk"],
                     lets_x[:-1] + "n")
    if isinstance(bias, DTensor):
        out = plan.outputs[0]
        bias_names = S.spec_of(bias)[0]
        if not out[-1] and bias_names and not (set(bias_names) & {n for d in out for n in d}):
            out = out[:-1] + (bias_names,)
            plan.inputs[locs[id(w)]] = (bias_names, plan.inputs[locs[id(w)]][1])
            plan.outputs = [out]
        plan.inputs[locs[id(bias)]] = (out[-1],)
        plan.linear = False
    return plan


def einsum(call: Call) -> Plan | None:
    eq = call.arg(0, "equation")
    if not isinstance(eq, str) or "..." in eq or "->" not in eq:
        return None
    ops = call.tensors()
    lhs, out_letters = eq.replace(" ", "").split("->")
    letters = lhs.split(",")
    if len(letters) != len(ops) or any(len(l) != t.ndim for l, (_, t) in zip(letters, ops)):
        return None
    if any(len(set(l)) != len(l) for l in letters):
        return None
    return _contract(call, ops, letters, out_letters)


# ----------------------------------------------------------------- shape ops

def _perm_plan(spec: Spec, perm: Sequence[int]) -> Plan:
    return Plan({}, [tuple(spec[p] for p in perm)])


def transpose(call: Call) -> Plan | None:
    ops = call.tensors()
    if len(ops) != 1 or ops[0][0] != ("a", 0):
        return None
    x = ops[0][1]
    spec = S.spec_of(x)
    n = x.ndim
    if call.name == "t":
        return _perm_plan(spec, list(range(n))[::-1])
    if call.name in ("permute",):
        dims = call.args[1:] if len(call.args) > 2 else call.arg(1, "dims")
        if isinstance(dims, int):
            dims = (dims,)
        return _perm_plan(spec, [d % n for d in dims])
    if call.name == "movedim":
        src, dst = call.arg(1, "source"), call.arg(2, "destination")
        src = [src] if isinstance(src, int) else list(src)
        dst = [dst] if isinstance(dst, int) else list(dst)
        src, dst = [s % n for s in src], [d % n for d in dst]
        perm = [None] * n
        for s, d in zip(src, dst):
            perm[d] = s
        rest = iter(i for i in range(n) if i not in src)
        perm = [p if p is not None else next(rest) for p in perm]
        return _perm_plan(spec, perm)
    d0, d1 = call.arg(1, "dim0", "axis0"), call.arg(2, "dim1", "axis1")
    if not isinstance(d0, int) or not isinstance(d1, int):
        return None
    perm = list(range(n))
    perm[d0 % n], perm[d1 % n] = perm[d1 % n], perm[d0 % n]
    return _perm_plan(spec, perm)


def reshape(call: Call) -> Plan | None:
    ops = call.tensors()
    if len(ops) != 1 or ops[0][0] != ("a", 0):
        return None
    x = ops[0][1]
    spec, shape, sizes = S.spec_of(x), tuple(x.shape), call.sizes

    def outputs(outs):
        result = []
        for o in outs:
            new = reshape_spec(shape, spec, tuple(o.shape), sizes)
            result.append(None if new is None else S.fit_to_shape(new, o.shape, sizes))
        return result

    # DTensor's view rules mishandle strided shards: gather those dims first.
    strided = {p.dim for p in x.placements if type(p).__name__ == "_StridedShard"}
    inputs = {ops[0][0]: S.replicate_dims(spec, strided)} if strided else {}
    return Plan(inputs, outputs, linear=True)


def reshape_spec(shape, spec, new_shape, sizes) -> Spec | None:
    """Port of JAX's ``_reshape_sharding_rule`` (``None``: JAX refuses)."""
    if all(not n for n in spec):
        return ((),) * len(new_shape)
    if [s for s in shape if s != 1] == [s for s in new_shape if s != 1]:
        it = iter(n for s, n in zip(shape, spec) if s != 1)
        return tuple(() if s == 1 else next(it) for s in new_shape)
    try:
        is_split, out_split = _split_on_one_axis(list(shape), list(new_shape))
        if is_split:
            new_spec = []
            for out, names in zip(out_split, spec):
                if isinstance(out, list):
                    if not names:
                        new_spec.extend([()] * len(out))
                    else:
                        new_spec.extend(_split_partitions(names, out, sizes))
                else:
                    new_spec.append(names)
            return tuple(new_spec)
        is_merge, merge = (False, [])
        if len(new_shape) < len(shape):
            is_merge, merge = _split_on_one_axis(list(new_shape), list(shape))
        if is_merge:
            new_spec = []
            it = iter(spec)
            for size, group in zip(new_shape, merge):
                if isinstance(group, list):
                    tup = [next(it) for _ in group]
                    if all(not t for t in tup):
                        new_spec.append(())
                        continue
                    flat = list(tup)
                    while flat and not flat[-1]:
                        flat.pop()
                    if any(not t for t in flat):
                        return None
                    names = tuple(n for t in flat for n in t)
                    new_spec.extend(_split_partitions(names, [size], sizes))
                else:
                    new_spec.append(next(it))
            return tuple(new_spec)
    except _NoRule:
        return None
    return None


def _split_partitions(names, out, sizes):
    it = iter(names)
    parts = []
    for o in out:
        dim = []
        while o > 1:
            n = next(it, None)
            if n is None:
                break
            o, rem = divmod(o, sizes[n])
            if rem:
                raise _NoRule
            dim.append(n)
        parts.append(tuple(dim))
    if next(it, None) is not None:
        raise _NoRule
    return parts


def _split_on_one_axis(op_shape, new_sizes):
    if len(new_sizes) <= len(op_shape):
        return False, []
    orig = op_shape
    num_1s = 0
    while op_shape and new_sizes and op_shape[-1] == 1 and new_sizes[-1] == 1:
        num_1s += 1
        op_shape, new_sizes = op_shape[:-1], new_sizes[:-1]
    i = j = count = 0
    out = []
    while j < len(new_sizes):
        if i >= len(op_shape):
            raise _NoRule
        if op_shape[i] == new_sizes[j]:
            out.append(op_shape[i])
        else:
            count += 1
            if count > 1:
                raise _NoRule
            temp = [new_sizes[j]]
            next_j, next_i = j + 1, i + 1
            while math.prod(temp) != op_shape[i] or (
                next_j < len(new_sizes) and new_sizes[next_j] == 1
            ):
                if math.prod(temp) > op_shape[i]:
                    return False, []
                if (math.prod(temp) == op_shape[i] and next_i < len(op_shape)
                        and new_sizes[next_j] == op_shape[next_i]):
                    break
                j += 1
                if j >= len(new_sizes):
                    return False, []
                temp.append(new_sizes[j])
                next_j += 1
            out.append(temp)
        i += 1
        j += 1
    out.extend([1] * num_1s)
    if len(orig) != len(out):
        raise _NoRule
    return True, out


def join(call: Call) -> Plan | None:
    """cat/concatenate/stack: JAX's _concatenate_sharding_rule."""
    seq = call.arg(0, "tensors")
    if not isinstance(seq, (list, tuple)) or not seq or not all(isinstance(t, DTensor) for t in seq):
        return None
    dim = call.arg(1, "dim", "axis", default=0)
    if not isinstance(dim, int):
        return None
    first = S.spec_of(seq[0])
    chosen = any(S.spec_of(t) != first for t in seq[1:])
    loc0 = ("a", 0) if call.args and call.args[0] is seq else ("k", "tensors")
    if call.name == "stack":
        d = dim % (seq[0].ndim + 1)
        out = first[:d] + ((),) + first[d:]
        inputs = {loc0 + (j,): first for j in range(len(seq))}
    else:
        d = dim % seq[0].ndim
        out = first
        inputs = {loc0 + (j,): S.replicate_dims(first, [d]) for j in range(len(seq))}
    sizes = call.sizes

    def outputs(outs):
        fitted = S.fit_to_shape(out, outs[0].shape, sizes)
        return [fitted]

    return Plan(inputs, outputs, chosen=chosen)


def split(call: Call) -> Plan | None:
    ops = call.tensors()
    if len(ops) != 1 or ops[0][0] != ("a", 0):
        return None
    loc, x = ops[0]
    spec = S.spec_of(x)
    if call.name == "unbind":
        dim = call.arg(1, "dim", default=0) % x.ndim
        out = spec[:dim] + spec[dim + 1:]
        return Plan({loc: S.replicate_dims(spec, [dim])}, lambda outs: [out] * len(outs))
    dim = call.arg(2, "dim", "axis", default=0)
    if not isinstance(dim, int):
        return None
    dim %= x.ndim
    sizes = call.sizes
    return Plan(
        {loc: S.replicate_dims(spec, [dim])},
        lambda outs: [S.fit_to_shape(spec, o.shape, sizes) for o in outs],
    )


def getitem(call: Call) -> Plan | None:
    ops = call.tensors()
    if len(ops) != 1 or ops[0][0] != ("a", 0) or len(call.args) != 2:
        return None
    loc, x = ops[0]
    index = call.args[1]
    if not isinstance(index, tuple):
        index = (index,)
    if any(not (isinstance(i, (int, slice)) or i is None or i is Ellipsis) or isinstance(i, bool)
           for i in index):
        return None
    if sum(i is Ellipsis for i in index) > 1:
        return None
    consumed = sum(1 for i in index if i is not None and i is not Ellipsis)
    if Ellipsis in index:
        k = index.index(Ellipsis)
        index = index[:k] + (slice(None),) * (x.ndim - consumed) + index[k + 1:]
    else:
        index = index + (slice(None),) * (x.ndim - consumed)
    spec = S.spec_of(x)
    touched, out, d = [], [], 0
    for i in index:
        if i is None:
            out.append(())
            continue
        if isinstance(i, int):
            touched.append(d)
        elif i != slice(None):
            touched.append(d)
            out.append(spec[d])
        else:
            out.append(spec[d])
        d += 1
    sizes = call.sizes
    return Plan({loc: S.replicate_dims(spec, touched)},
                lambda outs: [S.fit_to_shape(tuple(out), outs[0].shape, sizes)])


def pad(call: Call) -> Plan | None:
    ops = call.tensors()
    if len(ops) != 1 or ops[0][0] != ("a", 0):
        return None
    loc, x = ops[0]
    widths = call.arg(1, "pad")
    if not isinstance(widths, (list, tuple)):
        return None
    padded = [x.ndim - 1 - k // 2 for k, w in enumerate(widths) if w]
    spec = S.spec_of(x)
    sizes = call.sizes
    return Plan({loc: S.replicate_dims(spec, padded)},
                lambda outs: [S.fit_to_shape(spec, outs[0].shape, sizes)])


def squeeze_like(call: Call) -> Plan | None:
    return reshape(call)


# ------------------------------------------------------------------- lookup

RULES: dict[str, Callable[[Call], Plan | None]] = {}
for _n in ELEMENTWISE:
    RULES[_n] = elementwise
for _n in REDUCTIONS:
    RULES[_n] = reduction
for _n in ("cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"):
    RULES[_n] = cumulative
for _n in ("softmax", "log_softmax"):
    RULES[_n] = softmax
for _n in ("layer_norm", "rms_norm"):
    RULES[_n] = norm_layer
for _n in ("matmul", "__matmul__", "__rmatmul__", "mm", "bmm"):
    RULES[_n] = matmul
RULES["linear"] = linear
RULES["einsum"] = einsum
for _n in ("transpose", "swapaxes", "swapdims", "permute", "movedim", "moveaxis", "t"):
    RULES[_n] = transpose
RULES["moveaxis"] = lambda call: transpose(_renamed(call, "movedim"))
for _n in ("reshape", "view", "flatten", "unflatten", "squeeze", "unsqueeze", "view_as",
           "reshape_as", "expand_dims", "ravel"):
    RULES[_n] = reshape
for _n in ("cat", "concat", "concatenate", "stack"):
    RULES[_n] = join
for _n in ("split", "tensor_split", "chunk", "unbind", "split_with_sizes"):
    RULES[_n] = split
RULES["__getitem__"] = getitem
for _n in ("cross_entropy", "nll_loss"):
    RULES[_n] = lambda call: Plan({loc: ((),) * t.ndim for loc, t in call.tensors()}, None)
RULES["pad"] = pad


def _renamed(call: Call, name: str) -> Call:
    return Call(name, call.args, call.kwargs, call.mesh)


def plan_for(name: str, args: tuple, kwargs: dict, mesh) -> Plan | None:
    """The plan of op ``name``, or ``None`` when no rule applies."""
    rule = RULES.get(name)
    if rule is None:
        return None
    try:
        return rule(Call(name, args, kwargs, mesh))
    except (_NoRule, TypeError, IndexError, ValueError, KeyError):
        return None
