"""Issue 26: every op on Explicit axes as JAX 0.10.2 types it or refuses it.

Each case runs one op on 8 simulated devices, on a (2, 4) mesh
``("data", "model")`` whose axes are Explicit, with operands placed by
``device_put(x, P(...))`` under ``set_mesh``: in JAX itself (``jnp`` /
``lax``) and in ``torch_impl`` under ``jax_semantics()`` (the torch call a
user writes). Where JAX raises its ``ShardingTypeError`` parity must raise
``parity.ShardingTypeError`` naming the operands' specs and a ``reshard``
(the one thing parity may answer differently: JAX's ``jnp.repeat`` and
``jnp.matmul`` of differently sharded batch dims refuse with a
``ValueError``); where JAX answers, ``str(typeof)`` and the values
must be equal. Nothing here is a hand-written expectation: the expected
outcome is JAX's, computed in the test.

The op list covers elementwise ops with mismatched specs, ``where``,
reductions over sharded dims, reshapes, transposes, joins, squeeze/expand,
basic and advanced indexing, gathers, scans, sorts, pads, rolls, flips,
tiles, splits, diagonals, contractions, softmax and layer norm.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import parity
from parity import P, jax_ref

jax_ref.simulate(8)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from parity import torch_impl as ti  # noqa: E402

JaxShardingTypeError = jax._src.core.ShardingTypeError  # noqa: SLF001

RNG = np.random.default_rng(26)
ARRAYS = {
    "A": RNG.standard_normal((8, 8)).astype(np.float32),
    "B": RNG.standard_normal((8, 8)).astype(np.float32),
    "V": RNG.standard_normal((8,)).astype(np.float32),
    "C": RNG.standard_normal((8, 1)).astype(np.float32),
    "T": RNG.standard_normal((8, 8, 8)).astype(np.float32),
    "I": np.array([3, 1, 0, 7, 2, 2, 5, 4], dtype=np.int32),
    "J": np.argsort(RNG.standard_normal((8, 8)), axis=1).astype(np.int32),
}
SPECS = {
    "dm": P("data", "model"), "md": P("model", "data"), "d_": P("data", None),
    "_m": P(None, "model"), "m_": P("model", None), "_d": P(None, "data"), "__": P(),
    "D_": P(("data", "model"), None), "d": P("data"), "m": P("model"), "_": P(None),
    "d__": P("data", None, None), "_dm": P(None, "data", "model"), "__m": P(None, None, "model"),
}


def _ln(np_):
    def f(x):
        m = x.mean(-1, keepdims=True) if np_ is jnp else x.mean(-1, keepdim=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True) if np_ is jnp else ((x - m) ** 2).mean(
            -1, keepdim=True)
        return (x - m) / np_.sqrt(v + 1e-5)
    return f


# name -> (jax fn, torch fn, operand arrays, spec combinations)
OPS: dict[str, tuple] = {
    # elementwise: equal, compatible and conflicting specs
    "add": (lambda a, b: a + b, lambda a, b: a + b, "AB",
            ["dm dm", "dm __", "d_ _m", "dm md", "d_ m_", "_m _d"]),
    "mul_row": (lambda a, v: a * v, lambda a, v: a * v, "AV", ["dm m", "dm d", "d_ _", "_m d"]),
    "add_col": (lambda a, c: a + c, lambda a, c: a + c, "AC", ["d_ d_", "d_ m_", "_m d_"]),
    "maximum": (jnp.maximum, torch.maximum, "AB", ["dm d_", "md dm"]),
    "where": (lambda a, b: jnp.where(a > 0, a, b), lambda a, b: torch.where(a > 0, a, b), "AB",
              ["dm dm", "dm __", "d_ _m", "__ d_"]),
    "where_scalar": (lambda a, b: jnp.where(b > 0, a, 0.0),
                     lambda a, b: torch.where(b > 0, a, 0.0), "AB", ["dm __", "dm dm", "d_ m_"]),
    "where_vector": (lambda a, v: jnp.where(a > 0, a, v), lambda a, v: torch.where(a > 0, a, v),
                     "AV", ["d_ _", "_m m", "dm d"]),
    "tensor_where": (lambda a, b: jnp.where(a > 0, a, b), lambda a, b: a.where(a > 0, b), "AB",
                     ["dm dm", "dm __"]),
    # reductions
    "sum0": (lambda a: a.sum(0), lambda a: a.sum(0), "A", ["dm", "_m", "D_"]),
    "mean1_keep": (lambda a: a.mean(1, keepdims=True), lambda a: a.mean(1, keepdim=True), "A",
                   ["dm", "_m"]),
    "argmax1": (lambda a: a.argmax(1), lambda a: a.argmax(1).int(), "A", ["dm", "_m"]),
    "var1": (lambda a: a.var(1), lambda a: a.var(1, correction=0), "A", ["dm", "_m"]),
    "logsumexp0": (lambda a: jax.nn.logsumexp(a, 0), lambda a: torch.logsumexp(a, 0), "A",
                   ["d_", "_m"]),
    # torch's median is the lower middle value: jnp.quantile's "lower" method
    "median1": (lambda a: jnp.quantile(a, 0.5, axis=1, method="lower"),
                lambda a: a.median(1).values, "A", ["d_", "_m"]),
    # scans, sorts, top-k
    "cumsum0": (lambda a: jnp.cumsum(a, 0), lambda a: torch.cumsum(a, 0), "A", ["d_", "_m"]),
    "cummax1": (lambda a: jax.lax.cummax(a, 1), lambda a: torch.cummax(a, 1).values, "A",
                ["d_", "_m"]),
    "sort0": (lambda a: jnp.sort(a, 0), lambda a: torch.sort(a, 0).values, "A",
              ["dm", "_m", "D_"]),
    "sort_last": (lambda a: jnp.sort(a, -1), lambda a: torch.sort(a).values, "T",
                  ["d__", "__m"]),
    "argsort1": (lambda a: jnp.argsort(a, 1), lambda a: torch.argsort(a, 1).int(), "A",
                 ["dm", "d_"]),
    "msort": (lambda a: jnp.sort(a, 0), lambda a: torch.msort(a), "A", ["d_", "_m"]),
    "topk": (lambda a: jax.lax.top_k(a, 3)[0], lambda a: torch.topk(a, 3).values, "A",
             ["d_", "_m"]),
    # reshapes, transposes, squeeze / expand
    "reshape64": (lambda a: a.reshape(64), lambda a: a.reshape(64), "A", ["dm", "_m", "md"]),
    "reshape_split": (lambda a: a.reshape(2, 4, 8), lambda a: a.reshape(2, 4, 8), "A",
                      ["dm", "md", "_d"]),
    "reshape_4_16": (lambda a: a.reshape(4, 16), lambda a: a.reshape(4, 16), "A", ["d_", "__"]),
    "flatten_last": (lambda t: t.reshape(8, 64), lambda t: t.flatten(1), "T",
                     ["d__", "_dm", "__m"]),
    "transpose": (lambda a: a.T, lambda a: a.T, "A", ["dm", "D_"]),
    "expand_dims": (lambda a: a[None], lambda a: a.unsqueeze(0), "A", ["dm"]),
    "squeeze": (lambda c: c.squeeze(1), lambda c: c.squeeze(1), "C", ["d_", "m_"]),
    "broadcast_to": (lambda v: jnp.broadcast_to(v, (8, 8)), lambda v: v.expand(8, 8), "V",
                     ["m", "d"]),
    # joins and splits
    "concat0": (lambda a, b: jnp.concatenate([a, b], 0), lambda a, b: torch.cat([a, b], 0),
                "AB", ["dm dm", "d_ __", "_m m_"]),
    "stack": (lambda a, b: jnp.stack([a, b], 0), lambda a, b: torch.stack([a, b], 0), "AB",
              ["dm dm", "dm d_"]),
    "split0": (lambda a: jnp.split(a, 2, 0)[1], lambda a: torch.split(a, 4, 0)[1], "A",
               ["dm", "D_", "_m"]),
    "split_uneven": (lambda a: jnp.split(a, [3], 0)[1], lambda a: torch.split(a, [3, 5], 0)[1],
                     "A", ["d_", "_m"]),
    "chunk4": (lambda a: jnp.split(a, 4, 0)[0], lambda a: torch.chunk(a, 4, 0)[0], "A",
               ["d_", "m_"]),
    "unbind0": (lambda a: jnp.unstack(a, axis=0)[0], lambda a: torch.unbind(a, 0)[0], "A",
                ["d_", "_m"]),
    # basic indexing
    "slice0": (lambda a: a[1:5], lambda a: a[1:5], "A", ["dm", "_m", "D_"]),
    "full_slice": (lambda a: a[0:8], lambda a: a[0:8], "A", ["d_"]),
    "int0": (lambda a: a[0], lambda a: a[0], "A", ["d_", "_m"]),
    "slice1": (lambda a: a[:, 1:5], lambda a: a[:, 1:5], "A", ["dm", "d_"]),
    # an empty result is no gather in JAX: the spec is kept, never ambiguous
    # (with P("data", None) JAX 0.10.2's result is malformed -- its shards
    # keep the unsharded shape -- so only the sliced dim's own axis is here)
    "slice_empty": (lambda a: a[:, 8:], lambda a: a[:, 8:], "A", ["_m"]),
    "step0": (lambda a: a[::2], lambda a: a[::2], "A", ["m_", "_d"]),
    "ellipsis_int": (lambda a: a[..., 2], lambda a: a[..., 2], "A", ["d_", "_m"]),
    "new_axis": (lambda a: a[:, None], lambda a: a[:, None], "A", ["dm"]),
    # advanced indexing and gathers
    "index_array": (lambda a, i: a[i], lambda a, i: a[i.long()], "AI", ["d_ _", "_m _", "__ d"]),
    "index_array1": (lambda a, i: a[:, i], lambda a, i: a[:, i.long()], "AI", ["d_ _", "_m _"]),
    "index_select": (lambda a, i: jnp.take(a, i, axis=0),
                     lambda a, i: torch.index_select(a, 0, i.long()), "AI",
                     ["d_ _", "_m _", "_m d"]),
    "take_along1": (lambda a, j: jnp.take_along_axis(a, j, 1),
                    lambda a, j: torch.gather(a, 1, j.long()), "AJ",
                    ["d_ d_", "d_ __", "__ m_", "d_ m_", "_m __"]),
    "embedding": (lambda a, i: jnp.take(a, i, axis=0), lambda a, i: F.embedding(i.long(), a),
                  "AI", ["_m _", "d_ _", "__ d"]),
    "diagonal": (lambda a: jnp.diagonal(a), lambda a: torch.diagonal(a), "A", ["d_", "__"]),
    "diagonal_batch": (lambda t: jnp.diagonal(t, axis1=1, axis2=2),
                       lambda t: torch.diagonal(t, dim1=1, dim2=2), "T", ["d__", "_dm"]),
    "trace": (jnp.trace, torch.trace, "A", ["d_", "__"]),
    # pads, rolls, flips, tiles, diffs
    "pad0": (lambda a: jnp.pad(a, ((1, 1), (0, 0))), lambda a: F.pad(a, (0, 0, 1, 1)), "A",
             ["dm", "md", "_m"]),
    "pad_2_2": (lambda a: jnp.pad(a, ((2, 2), (0, 0))), lambda a: F.pad(a, (0, 0, 2, 2)), "A",
                ["m_"]),
    "pad_reflect": (lambda a: jnp.pad(a, ((2, 2), (0, 0)), mode="reflect"),
                    lambda a: F.pad(a[None], (0, 0, 2, 2), mode="reflect")[0], "A",
                    ["d_", "_m"]),
    "pad_circular": (lambda a: jnp.pad(a, ((2, 2), (0, 0)), mode="wrap"),
                     lambda a: F.pad(a[None], (0, 0, 2, 2), mode="circular")[0], "A",
                     ["d_", "m_"]),
    "roll0": (lambda a: jnp.roll(a, 2, 0), lambda a: torch.roll(a, 2, 0), "A",
              ["dm", "md", "_m"]),
    "roll_two": (lambda a: jnp.roll(a, (2, 4), (0, 1)), lambda a: torch.roll(a, (2, 4), (0, 1)),
                 "A", ["dm", "md"]),
    "roll_flat": (lambda a: jnp.roll(a, 3), lambda a: torch.roll(a, 3), "A", ["d_", "__"]),
    "roll_flat8": (lambda a: jnp.roll(a, 8), lambda a: torch.roll(a, 8), "A", ["d_", "_m"]),
    # a flat roll comes back with the spec of the reshape back: (data, model) on dim 0
    "roll_flat16": (lambda a: jnp.roll(a, 16), lambda a: torch.roll(a, 16), "A", ["dm", "md"]),
    "flip0": (lambda a: jnp.flip(a, 0), lambda a: torch.flip(a, [0]), "A", ["dm"]),
    "tile": (lambda a: jnp.tile(a, (2, 1)), lambda a: torch.tile(a, (2, 1)), "A", ["d_", "_m"]),
    "tensor_repeat": (lambda a: jnp.tile(a, (1, 1, 2)), lambda a: a.repeat(1, 1, 2), "A",
                      ["d_", "_m"]),
    "repeat_interleave": (lambda a: jnp.repeat(a, 2, 1),
                          lambda a: torch.repeat_interleave(a, 2, 1), "A", ["d_", "_m"]),
    "diff0": (lambda a: jnp.diff(a, axis=0), lambda a: torch.diff(a, dim=0), "A", ["d_", "_m"]),
    "narrow": (lambda a: jax.lax.slice_in_dim(a, 2, 6, axis=0),
               lambda a: torch.narrow(a, 0, 2, 4), "A", ["d_", "m_"]),
    "tril": (jnp.tril, torch.tril, "A", ["dm"]),
    # contractions
    "matmul": (lambda a, b: a @ b, lambda a, b: a @ b, "AB",
               ["dm dm", "d_ _m", "_m m_", "d_ __"]),
    "matvec": (lambda a, v: a @ v, lambda a, v: a @ v, "AV", ["d_ _", "_m m", "_m _"]),
    "batch_matmul": (lambda s, t: s @ t, lambda s, t: s @ t, "TT",
                     ["d__ d__", "d__ __", "__ d__", "d__ _dm"]),
    "batch_einsum": (lambda s, t: jnp.einsum("bij,bjk->bik", s, t),
                     lambda s, t: torch.einsum("bij,bjk->bik", s, t), "TT", ["d__ __", "d__ __m"]),
    "matmul_3x2": (lambda s, a: s @ a, lambda s, a: s @ a, "TA", ["d__ __", "__m m_"]),
    "gram": (lambda a: a.T @ a, lambda a: a.T @ a, "A", ["d_", "_m"]),
    "outer": (jnp.outer, torch.outer, "VV", ["d d", "d m"]),
    "einsum_rowdot": (lambda a, b: jnp.einsum("ij,ij->i", a, b),
                      lambda a, b: torch.einsum("ij,ij->i", a, b), "AB", ["d_ d_", "dm d_"]),
    # layers
    "softmax1": (lambda a: jax.nn.softmax(a, 1), lambda a: torch.softmax(a, 1), "A",
                 ["dm", "_m"]),
    "layer_norm": (_ln(jnp), _ln(torch), "A", ["dm", "d_"]),
    "F_layer_norm": (_ln(jnp), lambda a: F.layer_norm(a, (8,)), "A", ["dm", "d_"]),
}

CASES = [(name, specs) for name, (_, _, _, combos) in OPS.items() for specs in combos]


def _mesh(types, backend_devices=None):
    return parity.make_mesh((2, 4), ("data", "model"), axis_types=types, devices=backend_devices)


def _jax_outcome(name, specs, types=None):
    fn, _, arrays, _ = OPS[name]
    with jax_ref.set_mesh(_mesh(types, jax_ref.list_devices())):
        xs = [jax_ref.device_put(ARRAYS[k], SPECS[s]) for k, s in zip(arrays, specs.split())]
        try:
            out = fn(*xs)
        except JaxShardingTypeError as err:
            return "refused", str(err)
        except ValueError as err:  # jnp.repeat over a sharded dim: "pass out_sharding";
            # jnp.matmul of batch dims sharded differently: "Incompatible types"
            if "out_sharding" not in str(err) and "Incompatible types for matmul" not in str(err):
                raise
            return "refused", str(err)
        return str(jax.typeof(out)), np.asarray(out)


def _torch_outcome(name, specs, types=None):
    _, fn, arrays, _ = OPS[name]
    with ti.set_mesh(_mesh(types)), ti.jax_semantics():
        xs = [ti.device_put(ARRAYS[k], SPECS[s]) for k, s in zip(arrays, specs.split())]
        try:
            out = fn(*xs)
        except parity.ShardingTypeError as err:
            return "refused", err
        return str(ti.typeof(out)), ti.to_numpy(out)


@pytest.mark.parametrize(("name", "specs"), CASES, ids=[f"{n}-{s}" for n, s in CASES])
def test_op_on_explicit_axes_as_jax(sim8, name, specs):
    _same_outcome(_jax_outcome(name, specs), _torch_outcome(name, specs))


# A mesh with one Explicit and one Auto axis: JAX types (and refuses) by the
# Explicit axis alone; the Auto one is not part of the type.
MIXED = [("where", "dm __"), ("sort0", "dm"), ("slice0", "dm"), ("roll0", "md"),
         ("index_select", "_m d"), ("reshape64", "_m"), ("pad0", "md"), ("tile", "d_"),
         ("split_uneven", "d_"), ("matmul", "_m m_"), ("take_along1", "d_ __"),
         # conflicting on both axes: auto mode would keep the first operand's
         # Auto axis; JAX's types hold the Explicit one
         ("add", "d_ m_"), ("take_along1", "d_ m_"), ("where", "d_ m_"), ("concat0", "d_ m_")]


@pytest.mark.parametrize("types", [("explicit", "auto"), ("auto", "explicit")])
@pytest.mark.parametrize(("name", "specs"), MIXED, ids=[f"{n}-{s}" for n, s in MIXED])
def test_op_on_mixed_axes_as_jax(sim8, name, specs, types):
    _same_outcome(_jax_outcome(name, specs, types), _torch_outcome(name, specs, types))


def _same_outcome(theirs, ours):
    if theirs[0] == "refused":
        assert ours[0] == "refused", f"JAX refuses ({theirs[1][:160]}); parity gave {ours[0]}"
        err = ours[1]  # names the operands' specs and the reshard that fixes it
        assert err.category == "ambiguous-sharding" and err.specs and any(map(any, err.specs))
        assert "reshard(argument" in err.fix and f"Fix: {err.fix}" in str(err), str(err)
        return
    assert ours[0] != "refused", f"JAX types it {theirs[0]}; parity refused: {ours[1]}"
    assert ours[0] == theirs[0]
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-5, atol=1e-5)
