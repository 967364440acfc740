"""JAX's explicit-sharding model (issue 26), group ``explicit``: ops on a
mesh whose axes are ``Explicit`` (the case's ``mesh.axis_types``), operands
placed by ``B.device_put(a, P(...))`` under ``B.set_mesh(mesh)``, the output
sharding being the operands' *type* (``B.typeof``), and ``shard_map``
bodies with each ``B.lax`` collective. ``B`` is the backend module
(``parity.jax_ref`` / ``parity.torch_impl``), ``P`` is ``parity.P``: the
same expression runs on both sides.

Each op carries its own layout combinations (``Op.fixed``): the consistent
ones whose output type JAX fixes, and the inconsistent ones JAX refuses with
its ``ShardingTypeError`` (``ambiguous-sharding`` on both sides). The cases
run on the ``2x4`` mesh (``("data", "model")``, both axes Explicit).
"""

from __future__ import annotations

from conformance.catalogue.entry import F32, Arg, Op, ShapeSet

# Layout combinations (per input; case-file layout lists).
DM, MR, RM, DR, RR = ("data", "model"), ("model", None), (None, "model"), ("data", None), (None, None)
FR = (["data", "model"], None)  # dim 0 over both axes (8 shards)
R, D, M = (None,), ("data",), ("model",)
IDX8, IDX16 = Arg("int32", "index:8"), Arg("int32", "index:16")
IN = "P('data', 'model')"
UM = "P('data', None, unreduced={'model'})"


def _shard_map(body: str, out_specs: str) -> str:
    return f"B.shard_map(lambda x: {body}, in_specs={IN}, out_specs={out_specs})(a)"


def _explicit() -> list[Op]:
    ops: list[Op] = []

    def op(name, expr, args, shapes, fixed, tol="elementwise", grad=True, variants=({},),
           doc="", torch=None):
        ops.append(Op(name, "explicit", expr, torch or expr, args, (ShapeSet("div", shapes),), variants,
                      tol=tol, grad=grad, budget=(0, len(fixed), 0), fixed=fixed, doc=doc))

    # Explicit variants of existing ops: consistent and inconsistent shardings.
    op("explicit_matmul", "a @ b", (F32, F32), ((8, 16), (16, 8)),
       ((DR, RR), (DR, RM), (RM, MR), (DM, MR), (RR, RM)), tol="matmul",
       doc="a @ b on Explicit axes: the output type follows the operands' types; a "
           "contraction over a sharded dim is JAX's ShardingTypeError")
    op("explicit_einsum", "jnp.einsum('ij,jk->ik', a, b)", (F32, F32), ((8, 16), (16, 8)),
       ((DR, RM), (DM, MR), (RR, RR)), tol="matmul", torch="torch.einsum('ij,jk->ik', a, b)",
       doc="einsum on Explicit axes (same rules as matmul)")
    op("explicit_add", "a + b", (F32, F32), ((8, 16), (8, 16)),
       ((DM, DM), (DR, DR), (DR, RR), (DR, RM), (DM, RM), (MR, DR)),
       doc="a + b on Explicit axes: equal types, a replicated dim meets a sharded one, "
           "or two different shardings of one dim (ShardingTypeError)")
    _explicit_variants(op)
    # out_sharding= (JAX 0.10.2's keyword on jnp.matmul / dot / einsum): the
    # contraction a bare op refuses (contracting dim sharded on both sides)
    # runs, and the result's type is kwargs.target.
    op("explicit_matmul_out_sharding", "B.matmul(a, b, out_sharding=P(*target))", (F32, F32),
       ((8, 16), (16, 8)), ((DM, MR), (RM, MR), (DR, RR)), tol="matmul",
       variants=({"target": list(DR)}, {"target": list(DM)}),
       doc="B.matmul(a, b, out_sharding=P(*target)) on Explicit axes: the result's type "
           "is kwargs.target, also where a @ b is JAX's ShardingTypeError")
    op("explicit_einsum_out_sharding",
       "B.einsum('ij,jk->ik', a, b, out_sharding=P(*target))", (F32, F32),
       ((8, 16), (16, 8)), ((DM, MR), (DR, RM)), tol="matmul",
       variants=({"target": list(RR)}, {"target": list(MR)}),
       doc="B.einsum(..., out_sharding=P(*target)) on Explicit axes (as matmul)")
    op("explicit_dot_out_sharding", "B.dot(a, b, out_sharding=P(*target))", (F32, F32),
       ((8, 16), (16, 8)), ((RM, MR),), tol="matmul", variants=({"target": list(RM)},),
       doc="B.dot(a, b, out_sharding=P(*target)) on Explicit axes (as matmul)")
    # reshard / with_sharding_constraint to a target layout (kwargs.target).
    op("explicit_reshard", "B.reshard(a * 1.0, P(*target))", (F32,), ((8, 16),),
       ((DM,), (DR,), (RR,)), tol="exact",
       variants=({"target": list(RM)}, {"target": list(MR)}, {"target": list(RR)}),
       doc="B.reshard to kwargs.target: the result's type is the target's, the "
           "gradient's the operand's")
    # On a mesh whose axes are all Explicit, with_sharding_constraint is an
    # assert (JAX): the operand's type must already be the target.
    op("explicit_with_sharding_constraint", "B.with_sharding_constraint(a * 1.0, P(*target))",
       (F32,), ((8, 16),), ((DR,), (RR,)), tol="exact",
       variants=({"target": list(DR)}, {"target": list(RR)}),
       doc="B.with_sharding_constraint on Explicit axes: an assert that the type is "
           "kwargs.target (a different one is an error on both sides)")
    # Unreduced values (P(..., unreduced={'model'})): a contraction whose sum
    # is kept pending, reshard into and out of unreduced, the linear ops JAX
    # keeps them through, and the ops it refuses on them. Every case ends in
    # a reshard to P(*target) (JAX cannot read an unreduced array's values).
    op("explicit_unreduced_matmul",
       f"B.reshard(B.matmul(a, b, out_sharding={UM}), P(*target))", (F32, F32),
       ((8, 16), (16, 8)), ((DM, MR), (DR, RR)), tol="matmul",
       variants=({"target": list(DR)}, {"target": list(RR)}),
       doc=f"B.matmul(a, b, out_sharding={UM}) keeps the sum over 'model' pending "
           "(a contraction over a dim not sharded over 'model' is JAX's ShardingTypeError), "
           "then B.reshard to kwargs.target completes it")
    op("explicit_unreduced_add",
       f"B.reshard(B.reshard(a * 1.0, {UM}) + B.reshard(b * 1.0, {UM}), P(*target))", (F32, F32),
       ((8, 16), (8, 16)), ((DM, DR), (RR, DM)), variants=({"target": list(DM)},),
       doc=f"two values resharded to {UM}, added (still unreduced), resharded to kwargs.target")
    op("explicit_unreduced_sum", f"B.reshard(B.reshard(a * 1.0, {UM}).sum(dim), P(*target))",
       (F32,), ((8, 16),), ((DM,), (RM,)), tol="reduction",
       variants=({"dim": 1, "target": ["data"]}, {"dim": 0, "target": [None]}),
       doc=f"sum over kwargs.dim of a value unreduced over 'model' ({UM}) stays unreduced "
           "(over dim 0, sharded over 'data', the sum over 'data' is completed)")
    op("explicit_unreduced_refused", f"B.reshard(a * 1.0, {UM}) * 2.0", (F32,), ((8, 16),),
       ((DM,),), doc=f"a value unreduced over 'model' times a scalar: JAX's ShardingTypeError "
                     "(mul needs both sides reduced alike)")
    op("explicit_unreduced_meets_reduced", f"B.reshard(a * 1.0, {UM}) + a", (F32,), ((8, 16),),
       ((DR,),), doc="an unreduced value plus a reduced one: JAX's ShardingTypeError (no "
                     "implicit communication)")
    # shard_map bodies with each lax collective (in_specs P('data', 'model')).
    bodies = {
        "psum": ("B.lax.psum(x, 'model')", "P('data', None)", True),
        "pmean": ("B.lax.pmean(x, 'model')", "P('data', None)", True),
        "pmax": ("B.lax.pmax(x, 'model')", "P('data', None)", False),
        "pmin": ("B.lax.pmin(x, 'data')", "P(None, 'model')", False),
        "all_gather": ("B.lax.all_gather(x, 'model', axis=1, tiled=True)", IN, True),
        "psum_scatter": ("B.lax.psum_scatter(x, 'model', scatter_dimension=0, tiled=True)",
                         IN, True),
        "ppermute": ("B.lax.ppermute(x, 'model', [(0, 1), (1, 2), (2, 3), (3, 0)])", IN, True),
        "all_to_all": ("B.lax.all_to_all(x, 'model', 0, 1, tiled=True)", IN, True),
        "axis_index": ("x * B.lax.axis_index('model')", IN, True),
    }
    for name, (body, out_specs, grad) in bodies.items():
        # psum also meets an operand whose type is not in_specs (an error).
        op(f"shard_map_{name}", _shard_map(body, out_specs), (F32,), ((8, 16),),
           ((DM,), (RR,)) if name == "psum" else ((DM,),), tol="reduction", grad=grad,
           doc=f"shard_map over P('data', 'model') whose body is {body}"
               + ("" if grad else " (JAX defines no gradient)"))
    return ops


def _explicit_variants(op) -> None:
    """Explicit variants of the catalogue's other ops, each with a layout
    JAX types and one it refuses (JAX 0.10.2, eager: ``tests/test_explicit_ops.py``
    checks a broader table against JAX itself)."""
    op("explicit_where", "jnp.where(a > 0, a, b)", (F32, F32), ((8, 16), (8, 16)),
       ((DM, DM), (DM, RR)), torch="torch.where(a > 0, a, b)",
       doc="where(a > 0, a, b): lax.select wants one sharding for operands of one shape")
    op("explicit_mul_broadcast", "a * b", (F32, F32), ((8, 16), (16,)), ((DM, M), (DM, D)),
       doc="a * b, b broadcast along dim 0: its dim must be sharded as a's dim 1")
    op("explicit_sum", "jnp.sum(a, axis=1)", (F32,), ((8, 16),), ((DM,), (MR,)),
       tol="reduction", torch="torch.sum(a, dim=1)",
       doc="sum over a sharded dim: the reduced dim's axes leave the type")
    op("explicit_softmax", "jax.nn.softmax(a, axis=1)", (F32,), ((8, 16),), ((DM,),),
       tol="transcendental", torch="torch.softmax(a, dim=1)",
       doc="softmax over a sharded dim keeps the operand's type")
    op("explicit_layer_norm",
       "(a - a.mean(-1, keepdims=True)) / jnp.sqrt(a.var(-1, keepdims=True) + 1e-5)",
       (F32,), ((8, 16),), ((DM,),), tol="reduction", torch="F.layer_norm(a, (16,))",
       doc="layer norm over a sharded dim keeps the operand's type")
    op("explicit_reshape", "jnp.reshape(a, (128,))", (F32,), ((8, 16),), ((DR,), (RM,)),
       tol="exact", torch="torch.reshape(a, (128,))",
       doc="a merge keeps a sharded major dim; a sharded minor dim is refused")
    op("explicit_transpose", "a.T", (F32,), ((8, 16),), ((DM,),), tol="exact",
       doc="a.T permutes the type")
    op("explicit_expand_dims", "jnp.expand_dims(a, 0)", (F32,), ((8, 16),), ((DM,),),
       tol="exact", torch="torch.unsqueeze(a, 0)", doc="a new dim is replicated")
    op("explicit_concatenate", "jnp.concatenate([a, b], axis=0)", (F32, F32),
       ((8, 16), (8, 16)), ((DM, DM), (DM, DR)), tol="exact",
       torch="torch.cat([a, b], dim=0)",
       doc="concatenate keeps the operands' one type; two types are refused")
    op("explicit_stack", "jnp.stack([a, b])", (F32, F32), ((8, 16), (8, 16)),
       ((DR, DR), (DR, RM)), tol="exact", torch="torch.stack([a, b])",
       doc="stack: a new replicated dim before the operands' one type")
    op("explicit_slice", "a[1:5]", (F32,), ((8, 16),), ((RM,), (DR,)), tol="exact",
       doc="basic indexing (a gather in eager JAX): a sharded indexed dim is refused")
    op("explicit_narrow", "lax.slice_in_dim(a, 2, 6, axis=0)", (F32,), ((8, 16),),
       ((DR,), (FR,)), tol="exact", torch="torch.narrow(a, 0, 2, 4)",
       doc="lax.slice keeps a sharded dim whose shard count divides the slice")
    op("explicit_index", "a[b]", (F32, IDX8), ((8, 16), (8,)), ((RM, R), (DR, R)),
       tol="exact", torch="a[b.long()]", grad=False,
       doc="advanced indexing along a sharded dim is refused")
    op("explicit_take_along_axis", "jnp.take_along_axis(a, b, axis=1)", (F32, IDX16),
       ((8, 16), (8, 16)), ((DR, DR), (RM, RR)), tol="exact", grad=False,
       torch="torch.gather(a, 1, b.long())",
       doc="take_along_axis: the gathered dim unsharded in both, the other dims alike")
    op("explicit_cumsum", "jnp.cumsum(a, axis=1)", (F32,), ((8, 16),), ((DR,), (RM,)),
       tol="reduction", torch="torch.cumsum(a, dim=1)",
       doc="a scan along a sharded dim is refused")
    # No gradient: JAX 0.10.2's sort JVP sorts an iota with the operand and
    # refuses their different types ("Arguments to sort must have equal
    # shardings") even along an unsharded dim; parity's gradient runs.
    op("explicit_sort", "jnp.sort(a, axis=1)", (F32,), ((8, 16),), ((DR,), (DM,)),
       tol="exact", torch="torch.sort(a, dim=1).values", grad=False,
       doc="sorting along a sharded dim is refused (no gradient: JAX 0.10.2's sort JVP "
           "refuses a sharded operand)")
    op("explicit_pad", "jnp.pad(a, ((1, 1), (0, 0)))", (F32,), ((8, 16),), ((DR,), (MR,)),
       tol="exact", torch="F.pad(a, (0, 0, 1, 1))",
       doc="a pad keeps a sharded dim whose shard count divides the new size")
    op("explicit_roll", "jnp.roll(a, shift, 1)", (F32,), ((8, 16),), ((RM,),), tol="exact",
       variants=({"shift": 4}, {"shift": 2}), torch="torch.roll(a, shift, 1)",
       doc="roll joins two slices: a sharded dim keeps its type where its shard count "
           "divides both (kwargs.shift)")
    op("explicit_flip", "jnp.flip(a, 0)", (F32,), ((8, 16),), ((DM,),), tol="exact",
       torch="torch.flip(a, [0])", doc="flip keeps the operand's type")
    op("explicit_tile", "jnp.tile(a, (1, 2))", (F32,), ((8, 16),), ((DR,), (RM,)),
       tol="exact", torch="torch.tile(a, (1, 2))",
       doc="tiling a sharded dim is refused")
    op("explicit_split", "tuple(jnp.split(a, 2, axis=0))", (F32,), ((8, 16),), ((DM,), (FR,)),
       tol="exact", torch="tuple(torch.split(a, 4, dim=0))",
       doc="split keeps a sharded dim whose shard count divides the pieces")
    op("explicit_batch_matmul", "a @ b", (F32, F32), ((4, 8, 16), (4, 16, 8)),
       ((("data", None, None), ("data", None, "model")),
        (("data", None, "model"), ("data", "model", None))), tol="matmul",
       doc="batched a @ b: the batch dim's type kept; a contracting dim sharded on both "
           "sides is refused")


OPS: tuple[Op, ...] = tuple(_explicit())
