"""The embedding gather Keras runs (``ops.take(table, ids, axis=0)`` ->
``F.embedding``) with JAX auto mode's values and placements (issue 12, point 1).

keras-hub's ``get_layout_map`` lays a token embedding out ``("model",
"batch")`` while ids come ``("batch", None)``: plain DTensor fails there
(``MaskPartial``: "The shape of the mask ... does not match"). JAX's explicit
mode calls the gather ambiguous; auto mode (what Keras uses) answers. The
specs here are checked against auto mode's own output shardings, the values
and gradients against ``jax.grad`` and numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import parity
from parity import jax_ref
from parity.sharding_rules.gather import take_rows

jax_ref.simulate(8)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from parity import torch_impl as ti  # noqa: E402

L = parity.TensorLayout
AXES = ("batch", "model")
VOCAB, FEATURES = 128, 32
# (table spec, ids spec): keras-hub's case first, then the other ways the two
# axes can meet (feature axis taken from the ids, vocabulary axis shared, a
# dim over two axes, 1-D ids).
CASES = [
    (("model", "batch"), ("batch", None)),
    (("model", None), ("batch", None)),
    ((None, "model"), ("batch", None)),
    (("batch", "model"), ("batch", None)),
    (("model", "batch"), (None, "model")),
    (("model", None), (None, "model")),
    ((None, "model"), (("batch", "model"), None)),
    ((None, "batch"), (("batch", "model"), None)),
    ((None, ("batch", "model")), ("batch", None)),
    ((None, None), ("batch", "model")),
    (("model", "batch"), ("batch",)),
]


def _norm(spec) -> tuple:
    """A spec as parity writes it: a tuple of axis-name tuples."""
    return tuple(() if n is None else (n,) if isinstance(n, str) else tuple(n) for n in spec)


def _pspec(spec):
    return jax.sharding.PartitionSpec(*[None if not n else n[0] if len(n) == 1 else n
                                        for n in _norm(spec)])


def _arrays(ids_ndim: int):
    rng = np.random.default_rng(0)
    table = rng.standard_normal((VOCAB, FEATURES)).astype(np.float32)
    ids = rng.integers(0, VOCAB, size=(8, 8)[:ids_ndim]).astype(np.int64)
    return table, ids


def _jax_auto(table_spec, ids_spec, table, ids):
    """Auto mode's output spec, value and the table's gradient of
    ``sum(take(table, ids) ** 2)``."""
    mesh = parity.DeviceMesh((2, 4), AXES, jax_ref.list_devices())
    amesh = jax_ref.to_jax_mesh(mesh, axis_types="auto")
    t = jax.device_put(table, jax.sharding.NamedSharding(amesh, _pspec(table_spec)))
    i = jax.device_put(ids, jax.sharding.NamedSharding(amesh, _pspec(ids_spec)))
    with jax.set_mesh(amesh):
        out = jax.jit(lambda t, i: jnp.take(t, i, axis=0))(t, i)
        grad = jax.jit(jax.grad(lambda t, i: (jnp.take(t, i, axis=0) ** 2).sum()))(t, i)
    spec = _norm(out.sharding.spec)
    return spec + ((),) * (out.ndim - len(spec)), np.asarray(out), np.asarray(grad)


@pytest.mark.parametrize("table_spec,ids_spec", CASES, ids=str)
def test_take_rows_gives_jax_auto_modes_output_spec(table_spec, ids_spec):
    table, ids = _arrays(len(ids_spec))
    want, _, _ = _jax_auto(table_spec, ids_spec, table, ids)
    _, _, out, _ = take_rows(_norm(table_spec), _norm(ids_spec))
    assert out == want


def test_take_rows_gathers_the_rows_and_keeps_the_features():
    table_before, ids_before, out, chosen = take_rows((("model",), ("batch",)), (("batch",), ()))
    assert table_before == ((), ("batch",))
    assert ids_before == ((), ())
    assert out == ((), (), ("batch",))
    assert chosen  # JAX's explicit mode refuses this gather


def test_take_rows_of_an_unsharded_table_keeps_the_ids_spec_and_is_not_a_choice():
    assert take_rows(((), ()), (("batch",), ("model",))) == (
        ((), ()), (("batch",), ("model",)), (("batch",), ("model",), ()), False)


def test_take_rows_refuses_a_table_that_is_not_2d():
    with pytest.raises(ValueError, match="2-D table"):
        take_rows(((),), ((),))


def _torch_lookup(table_spec, ids_spec, table, ids, call):
    mesh = parity.DeviceMesh((2, 4), AXES)
    weight = ti.distribute_variable(table, L(table_spec, mesh))
    tids = ti.distribute_tensor(ids, L(ids_spec, mesh))
    with ti.jax_semantics():
        out = call(tids, weight)
        (out ** 2).sum().backward()
    return weight, out


LOOKUPS = {
    "F.embedding": lambda ids, w: F.embedding(ids, w),
    "torch.embedding": lambda ids, w: torch.embedding(w, ids),
    "keyword arguments": lambda ids, w: F.embedding(input=ids, weight=w),
}


@pytest.mark.parametrize("call", LOOKUPS, ids=str)
@pytest.mark.parametrize("table_spec,ids_spec", CASES, ids=str)
def test_embedding_has_jax_auto_modes_values_spec_and_gradient(sim8, table_spec, ids_spec, call):
    table, ids = _arrays(len(ids_spec))
    want_spec, want, want_grad = _jax_auto(table_spec, ids_spec, table, ids)
    weight, out = _torch_lookup(table_spec, ids_spec, table, ids, LOOKUPS[call])
    got = ti.describe(out)
    assert got.spec == want_spec and got.pending == (), got
    np.testing.assert_allclose(ti.to_numpy(out), want, rtol=1e-6)
    grad = ti.describe(weight.grad)
    assert grad.spec == _norm(table_spec) and grad.pending == (), grad  # the table's own layout
    np.testing.assert_allclose(ti.to_numpy(weight.grad), want_grad, rtol=1e-5, atol=1e-5)


def test_plain_dtensor_fails_on_keras_hubs_embedding_layout(sim8):
    """What parity fixes: DTensor's own strategy for this layout pair."""
    table, ids = _arrays(2)
    mesh = parity.DeviceMesh((2, 4), AXES)
    weight = ti.distribute_variable(table, L(("model", "batch"), mesh))
    tids = ti.distribute_tensor(ids, L(("batch", None), mesh))
    with pytest.raises(IndexError, match="mask"):
        ti.to_numpy(F.embedding(tids, weight))


def test_rms_norm_over_the_embeddings_sharded_features_has_jax_gradients(sim8):
    """What follows the lookup in keras-hub's decoders: an RMS norm over the
    feature dim, which the gather leaves sharded on "batch". The mean over a
    sharded dim is a pending mean (``Partial("avg")``), whose backward DTensor
    could not take ("from one partial type (P(sum)) to another (P(avg))")."""
    table, ids = _arrays(2)
    scale = np.linspace(0.5, 1.5, FEATURES).astype(np.float32)

    def loss(t, i, s, take, rsqrt):
        h = take(t, i)
        return ((h * rsqrt((h * h).mean(-1, keepdims=True) + 1e-6) * s) ** 2).sum()

    mesh = parity.DeviceMesh((2, 4), AXES, jax_ref.list_devices())
    amesh = jax_ref.to_jax_mesh(mesh, axis_types="auto")
    jt = jax.device_put(table, jax.sharding.NamedSharding(amesh, _pspec(("model", "batch"))))
    ji = jax.device_put(ids, jax.sharding.NamedSharding(amesh, _pspec(("batch", None))))
    with jax.set_mesh(amesh):
        want = jax.jit(jax.grad(lambda t, i: loss(t, i, scale, lambda a, b: jnp.take(a, b, axis=0),
                                                  jax.lax.rsqrt)))(jt, ji)
    tmesh = parity.DeviceMesh((2, 4), AXES)
    weight = ti.distribute_variable(table, L(("model", "batch"), tmesh))
    tids = ti.distribute_tensor(ids, L(("batch", None), tmesh))
    with ti.jax_semantics():
        h = F.embedding(tids, weight)
        norm = torch.rsqrt(torch.mean(h * h, dim=-1, keepdim=True) + 1e-6)
        ((h * norm * torch.as_tensor(scale)) ** 2).sum().backward()
    assert ti.describe(weight.grad).spec == (("model",), ("batch",))
    np.testing.assert_allclose(ti.to_numpy(weight.grad), np.asarray(want), rtol=1e-4, atol=1e-5)
