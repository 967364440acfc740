"""JAX's output-sharding rules (explicit axis types), per op family.

Each rule reads the specs of an op's DTensor operands and returns a ``Plan``:
the spec each operand is resharded to *before* the op (through the
differentiable ``redistribute``, so autograd records it) and the spec of each
output (what JAX's sharding-in-types rule gives). The algebra itself is
framework-free (``parity.sharding_rules``); a rule here only parses the torch
call. Rules are registered on the torch callables they cover
(``registry.rule_for``, closed once they are imported). Where JAX's explicit mode refuses an op as
ambiguous, the rule still returns a plan -- the choice JAX's auto mode and
Keras make: complete the reduction, keep the first operand's sharding -- and
marks it ``chosen``.

| family (module)            | JAX rule                          | operands resharded to           |
|----------------------------|-----------------------------------|---------------------------------|
| elementwise (add, mul,     | broadcasting_sharding_rule: per   | the output spec (size-1 dims    |
| where, exp, ...)           | dim the one non-None spec         | replicated); in-place: self's   |
| reductions (sum, mean,     | _reduce_op_sharding_rule: reduced | sum/mean/amax/amin: as they are |
| amax, argmax ...)          | dims dropped (keepdim: None)      | (then psum); others: reduced    |
|                            |                                   | dims gathered                   |
| reductions: cumulative,    | _cumred, sort, top_k: the         | the scanned / sorted dim        |
| sort, argsort, topk        | operand's spec                    | gathered                        |
| layers: softmax            | composed: the operand's spec      | the softmax dim gathered        |
| layers: layer_norm,        | composed: broadcast of a, w, b    | normalized dims gathered        |
| rms_norm                   |                                   |                                 |
| layers: batch_norm         | composed: the input's spec        | channel dim as the running      |
|                            |                                   | statistics, the rest gathered   |
| contractions (matmul, mm,  | _dot_general_sharding_rule: batch | contracting dims sharded alike  |
| bmm, linear, einsum,       | + lhs free + rhs free             | (a replicated side is sliced)   |
| inner, tensordot,          |                                   |                                 |
| multi_dot)                 |                                   |                                 |
| shapes: transpose, permute | _transpose: spec permuted         | --                              |
| shapes: reshape, view,     | _reshape_sharding_rule: split or  | --                              |
| flatten, (un)squeeze       | merge a sharded major dim         |                                 |
| shapes: cat, stack         | _concatenate: operands' common    | the joined dim gathered         |
|                            | spec (stack: new dim None)        |                                 |
| shapes: split, chunk, ...  | _split: the operand's spec        | the split dim gathered          |
| indexing: slices, pad      | _slice/_pad: the operand's spec   | the sliced/padded dims gathered |
| gathers: index_select,     | gather: jnp.take refused along a  | take_along: gathered dim        |
| take, gather,              | sharded dim or by a sharded index | unsharded, other dims alike     |
| take_along_dim             | (else DTensor's)                  |                                 |
| rearrange: flip, rot90,    | _rev, select, _slice, _split: the | the touched dims gathered       |
| tril/triu, narrow, glu,    | operand's spec (rot90: two dims   |                                 |
| repeat_interleave, diag,   | swapped; diag: (spec, None);      |                                 |
| diagonal, trace, diff,     | diagonal: other dims, then None;  |                                 |
| roll, tile, repeat         | tile: new dims None)              |                                 |
| linalg: eigh, eigvalsh     | batch dims kept                   | the matrix dims gathered        |
| fft: fft, rfft, fftn, ...     | fft: the operand's spec           | the transformed dims gathered   |
| spatial: conv*, *pool*     | conv_general_dilated: batch dim   | batch (pooling: and channel)    |
|                            | kept; reduce_window (max/avg/lp   | kept, the rest gathered         |
|                            | pooling): the operand's spec      |                                 |

Any output spec is fitted to the output's shape: a dim that does not divide
by its shard count is replicated (JAX refuses uneven shards; that case is
``chosen``). Ops with no rule run as DTensor runs them, with every pending
reduction completed.
"""

from parity.torch_impl.semantics.rules import (  # noqa: F401 - registers the families
    contractions,
    elementwise,
    embedding,
    fft,
    gathers,
    indexing,
    layers,
    linalg,
    rearrange,
    reductions,
    shapes,
    spatial,
)
from parity.torch_impl.semantics.rules.registry import (
    Call,
    NotCovered,
    Plan,
    RegistryClosedError,
    close,
    covered,
    covers,
    plan_for,
    torch_ops,
)

close()  # every family above has registered: the rule set is fixed from here on

__all__ = ["Call", "NotCovered", "Plan", "RegistryClosedError", "covered", "covers", "plan_for",
           "torch_ops"]
