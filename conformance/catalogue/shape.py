"""Data movement and indexing (group ``shape``): the broad entries (reshape,
transpose, concatenate, split, slice, pad...: divisible and indivisible
shapes) and the JAX twins of PyTorch OpInfo shape, gather and scatter ops.
Exact, except sums that round differently in another order (noted below).

Index inputs are ``int32`` in ``[0, N)`` with ``N`` the indexed dim's size;
torch's index ops want ``int64``, so the torch side calls ``.long()`` (a
cast, not part of the op under test).
"""

from __future__ import annotations

from conformance.catalogue.entry import F32, M2, TWIN_BUDGET, Arg, Op, ShapeSet

_AXIS = ({"axis": 0}, {"axis": 1})

# (name, jax, torch, shapes, variants, differentiable)
_ONE = [
    ("flip", "jnp.flip(a, axis)", "torch.flip(a, [axis])", ((8, 16),), _AXIS, True),
    ("roll", "jnp.roll(a, shift, axis)", "torch.roll(a, shift, axis)", ((8, 16),),
     ({"shift": 3, "axis": 0}, {"shift": -5, "axis": 1}), True),
    ("rot90", "jnp.rot90(a)", "torch.rot90(a)", ((8, 16),), ({},), True),
    ("fliplr", "jnp.fliplr(a)", "torch.fliplr(a)", ((8, 16),), ({},), True),
    ("flipud", "jnp.flipud(a)", "torch.flipud(a)", ((8, 16),), ({},), True),
    ("tile", "jnp.tile(a, reps)", "torch.tile(a, reps)", ((8, 16),),
     ({"reps": [2, 1]}, {"reps": [1, 2]}), True),
    ("repeat", "jnp.repeat(a, 2, axis=axis)", "torch.repeat_interleave(a, 2, dim=axis)",
     ((8, 16),), _AXIS, True),
    ("broadcast_to", "jnp.broadcast_to(a, shape)", "torch.broadcast_to(a, shape)", ((8, 16),),
     ({"shape": [4, 8, 16]},), True),
    ("expand", "jnp.broadcast_to(a, (4,) + a.shape)", "a.expand(4, *a.shape)", ((8, 16),),
     ({},), True),
    ("swapaxes", "jnp.swapaxes(a, 0, 2)", "torch.swapaxes(a, 0, 2)", ((8, 4, 16),), ({},), True),
    ("moveaxis", "jnp.moveaxis(a, 0, -1)", "torch.movedim(a, 0, -1)", ((8, 4, 16),), ({},),
     True),
    ("ravel", "jnp.ravel(a)", "torch.ravel(a)", ((8, 16),), ({},), True),
    ("unflatten", "jnp.reshape(a, (a.shape[0], 4, -1))", "torch.unflatten(a, 1, (4, -1))",
     ((8, 16),), ({},), True),
    ("atleast_3d", "jnp.atleast_3d(a)", "torch.atleast_3d(a)", ((8, 16),), ({},), True),
    ("matrix_T", "a.T", "a.T", ((8, 16),), ({},), True),
    ("matrix_mT", "a.mT", "a.mT", ((4, 8, 16),), ({},), True),
    ("tril", "jnp.tril(a, k)", "torch.tril(a, k)", ((16, 16),), ({"k": 0}, {"k": -2}), True),
    ("triu", "jnp.triu(a, k)", "torch.triu(a, k)", ((16, 16),), ({"k": 0}, {"k": 3}), True),
    ("diagonal", "jnp.diagonal(a, offset)", "torch.diagonal(a, offset)", ((16, 16),),
     ({"offset": 0}, {"offset": 2}), True),
    ("diag", "jnp.diag(a)", "torch.diag(a)", ((16,),), ({},), True),
    ("trace", "jnp.trace(a)", "torch.trace(a)", ((16, 16),), ({},), True),
    ("narrow", "lax.slice_in_dim(a, 2, 6, axis=axis)", "torch.narrow(a, axis, 2, 4)",
     ((8, 16),), _AXIS, True),
    ("strided_slice", "a[::2, 1::3]", "a[::2, 1::3]", ((8, 16),), ({},), True),
    ("negative_index", "a[-3]", "a[-3]", ((8, 16),), ({},), True),
    ("unstack", "tuple(jnp.unstack(a, axis=axis))", "tuple(torch.unbind(a, axis))", ((8, 4),),
     _AXIS, True),
    ("chunk_even", "tuple(jnp.split(a, 4, axis=1))", "tuple(torch.chunk(a, 4, dim=1))",
     ((8, 16),), ({},), True),
]

# (name, jax, torch, shapes, arg kinds ("f": float32, "iN": index in [0, N)), variants)
_MULTI = [
    ("hstack", "jnp.hstack([a, b])", "torch.hstack([a, b])", ((8, 16), (8, 16)), "ff", ({},)),
    ("vstack", "jnp.vstack([a, b])", "torch.vstack([a, b])", ((8, 16), (8, 16)), "ff", ({},)),
    ("dstack", "jnp.dstack([a, b])", "torch.dstack([a, b])", ((8, 16), (8, 16)), "ff", ({},)),
    ("column_stack", "jnp.column_stack([a, b])", "torch.column_stack([a, b])",
     ((8, 16), (8, 16)), "ff", ({},)),
    ("concat3", "jnp.concatenate([a, b, c], axis=1)", "torch.cat([a, b, c], dim=1)",
     ((8, 16), (8, 8), (8, 16)), "fff", ({},)),
    ("index_select", "jnp.take(a, b, axis=axis)", "torch.index_select(a, axis, b.long())",
     ((8, 16), (8,)), "fi8", ({"axis": 0}, {"axis": 1})),
    ("take_along_axis", "jnp.take_along_axis(a, b, axis=axis)",
     "torch.take_along_dim(a, b.long(), dim=axis)", ((8, 16), (8, 16)), "fi8", _AXIS),
    ("gather", "jnp.take_along_axis(a, b, axis=1)", "torch.gather(a, 1, b.long())",
     ((8, 16), (8, 8)), "fi16", ({},)),
    ("index_add", "jnp.asarray(a).at[b].add(c)", "torch.index_add(a, 0, b.long(), c)",
     ((16, 8), (8,), (8, 8)), "fi16f", ({},)),
    ("scatter_add", "jnp.asarray(a).at[b, jnp.arange(a.shape[1])[None, :]].add(c)",
     "torch.scatter_add(a, 0, b.long(), c)", ((16, 8), (8, 8), (8, 8)), "fi16f", ({},)),
    ("masked_fill", "jnp.where(b, 0.5, a)", "a.masked_fill(b, 0.5)", ((8, 16), (8, 16)), "fb",
     ({},)),
    ("index_tensor", "a[b]", "a[b.long()]", ((16, 8), (8,)), "fi16", ({},)),
    ("boolean_where_scalar", "jnp.where(b, a, 0.0)", "torch.where(b, a, 0.0)",
     ((8, 16), (8, 16)), "fb", ({},)),
]


def _broad() -> list[Op]:
    """Pure data movement: exact."""
    ops: list[Op] = []

    def shape_op(name, jx, tx, shape_sets, variants=({},), **kw):
        ops.append(Op(name, "shape", jx, tx, kw.pop("args", (F32,)), shape_sets, variants,
                      tol="exact", **{"budget": (3, 6, 6), **kw}))

    shape_op("reshape", "jnp.reshape(a, shape)", "torch.reshape(a, shape)",
             (ShapeSet("div", ((8, 16),)), ShapeSet("indiv", ((6, 10),), False)),
             ({"shape": [-1]}, {"shape": [2, 4, -1]}, {"shape": [16, -1]}))
    shape_op("flatten", "jnp.reshape(a, (a.shape[0], -1))", "torch.flatten(a, 1)",
             (ShapeSet("div", ((8, 8, 16),)),), budget=(4, 10, 10))
    shape_op("transpose", "jnp.transpose(a)", "torch.transpose(a, 0, 1)", M2, budget=(3, 11, 8))
    shape_op("permute", "jnp.transpose(a, perm)", "torch.permute(a, perm)",
             (ShapeSet("div", ((8, 8, 16),)),), ({"perm": [2, 0, 1]}, {"perm": [1, 0, 2]}),
             budget=(4, 8, 8))
    shape_op("squeeze", "jnp.squeeze(a, axis=axis)", "torch.squeeze(a, dim=axis)",
             (ShapeSet("div", ((8, 1, 16),)),), ({"axis": 1},), budget=(3, 11, 10))
    shape_op("expand_dims", "jnp.expand_dims(a, axis)", "torch.unsqueeze(a, axis)", M2,
             ({"axis": 0}, {"axis": 2}))
    shape_op("concatenate", "jnp.concatenate([a, b], axis=axis)", "torch.cat([a, b], dim=axis)",
             (ShapeSet("div", ((8, 16), (8, 16))), ShapeSet("indiv", ((6, 10), (6, 10)), False)),
             ({"axis": 0}, {"axis": 1}), args=(F32, F32), budget=(4, 8, 8))
    shape_op("stack", "jnp.stack([a, b], axis=axis)", "torch.stack([a, b], dim=axis)",
             (ShapeSet("div", ((8, 16), (8, 16))),), ({"axis": 0}, {"axis": 2}),
             args=(F32, F32), budget=(4, 8, 8))
    shape_op("split", "tuple(jnp.split(a, sections, axis=axis))",
             "tuple(torch.tensor_split(a, sections, dim=axis))", M2,
             ({"sections": 2, "axis": 0}, {"sections": 4, "axis": 1}))
    shape_op("slice", "a[1:5, 2:]", "a[1:5, 2:]", M2, budget=(3, 8, 8))
    shape_op("pad", "jnp.pad(a, ((1, 2), (0, 3)))", "F.pad(a, (0, 3, 1, 2))", M2)
    return ops


def _arg(kind: str) -> Arg:
    if kind == "f":
        return Arg()
    if kind == "b":
        return Arg("bool", "bool")
    return Arg("int32", f"index:{kind[1:]}")


def _kinds(text: str) -> list[str]:
    out, i = [], 0
    while i < len(text):
        j = i + 1
        while j < len(text) and text[j].isdigit():
            j += 1
        out.append(text[i:j])
        i = j
    return out


def _opinfo_twins() -> list[Op]:
    out = []
    for name, jx, tx, shapes, variants, grad in _ONE:
        # trace sums the diagonal: the order of a sharded sum rounds differently
        out.append(Op(name, "shape", jx, tx, (_arg("f"),), (ShapeSet("div", shapes),), variants,
                      tol="reduction" if name == "trace" else "exact", grad=grad,
                      budget=TWIN_BUDGET))
    for name, jx, tx, shapes, kinds, variants in _MULTI:
        args = tuple(_arg(k) for k in _kinds(kinds))
        # duplicate indices add in an order neither library fixes: rounding
        tol = "reduction" if name in ("index_add", "scatter_add") else "exact"
        out.append(Op(name, "shape", jx, tx, args, (ShapeSet("div", shapes),), variants,
                      tol=tol, budget=TWIN_BUDGET))
    return out


OPS: tuple[Op, ...] = (*_broad(), *_opinfo_twins())
