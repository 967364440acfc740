"""DTensor's masked partial sum (``_MaskPartial``) under ``jax_semantics()``.

DTensor's own lookup of a row-sharded embedding table (``F.embedding`` run
outside the mode) leaves each rank's rows pending, with a mask shaped as the
ids; the mask fits the lookup's shape and no other, and DTensor releases it
at the first completion. keras-hub's ``Gemma4AssistantCausalLM`` reshaped such
a lookup ("IndexError: The shape of the mask [128] at index 0 does not match
the shape of the indexed tensor [8, 16, 16]"; issue 27). Under the mode, a
shape op on it gives plain torch's values and gradients and JAX's layout:
the masked sum is completed before the op, also with ``defer=True`` (which
lets an ordinary pending sum through reshapes), and a second use of it takes
the same completion.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import parity
from parity import jax_ref

jax_ref.simulate(8)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from parity import torch_impl as ti  # noqa: E402

L = parity.TensorLayout
AXES = ("batch", "model")
VOCAB, FEATURES, IDS = 128, 32, 128
TABLE_SPEC = ("model", "batch")  # keras-hub's token embedding: vocabulary over "model"
# The shape ops a lookup's result meets: keras-hub reshapes it to (batch,
# seq, tokens, features) and transposes the last two.
SHAPE_OPS = {
    "reshape": lambda g: g.reshape(2, 4, 16, FEATURES),
    "view": lambda g: g.view(8, 16, FEATURES),
    "transpose": lambda g: g.transpose(0, 1),
    "flatten": lambda g: g.flatten(),
    "unsqueeze": lambda g: g.unsqueeze(0),
    "slice": lambda g: g[3:50],
}


def _arrays():
    rng = np.random.default_rng(0)
    table = rng.standard_normal((VOCAB, FEATURES)).astype(np.float32)
    ids = rng.integers(0, VOCAB, size=(IDS,)).astype(np.int64)
    return table, ids


def _masked_lookup(table, ids):
    """The table as a leaf and DTensor's own lookup of ``ids`` in it (no
    mode): a masked partial sum over "model"."""
    mesh = parity.DeviceMesh((2, 4), AXES)
    weight = ti.distribute_variable(table, L(TABLE_SPEC, mesh))
    lookup = F.embedding(ti.distribute_tensor(ids, L((None,), mesh)), weight)
    assert "MaskPartial" in str(lookup.placements), lookup.placements  # DTensor's own
    return weight, lookup


def _jax_spec(table, ids, op):
    """JAX auto mode's output spec of ``op(take(table, ids))``."""
    mesh = parity.DeviceMesh((2, 4), AXES, jax_ref.list_devices())
    amesh = jax_ref.to_jax_mesh(mesh, axis_types="auto")
    sharding = jax.sharding.NamedSharding(amesh, jax.sharding.PartitionSpec(*TABLE_SPEC))
    t = jax.device_put(table, sharding)
    with jax.set_mesh(amesh):
        out = jax.jit(lambda t, i: op(jnp.take(t, i, axis=0)))(t, jnp.asarray(ids))
    spec = tuple(() if n is None else (n,) if isinstance(n, str) else tuple(n)
                 for n in out.sharding.spec)
    return spec + ((),) * (out.ndim - len(spec))


def _jax_op(name):
    """The shape op on a jax array (``view`` and ``flatten`` as reshapes)."""
    return {
        "view": lambda g: g.reshape(8, 16, FEATURES),
        "transpose": lambda g: g.T,
        "flatten": lambda g: g.reshape(-1),
        "unsqueeze": lambda g: g[None],
    }.get(name, SHAPE_OPS[name])


@pytest.mark.parametrize("defer", [False, True], ids=["complete", "defer"])
@pytest.mark.parametrize("name", SHAPE_OPS)
def test_a_shape_op_on_a_masked_partial_sum_gives_torchs_values_and_gradient(sim8, name,
                                                                             defer):
    table, ids = _arrays()
    op = SHAPE_OPS[name]
    weight, lookup = _masked_lookup(table, ids)
    with ti.jax_semantics(defer=defer):
        out = op(lookup)
        again = op(lookup)  # the mask is spent: the first completion is taken
        ((out ** 2).sum() + (again * 3).sum()).backward()
    plain = torch.tensor(table, requires_grad=True)
    want = op(F.embedding(torch.as_tensor(ids), plain))
    ((want ** 2).sum() + (want * 3).sum()).backward()
    got = ti.describe(out)
    assert got.pending == () and got.spec == _jax_spec(table, ids, _jax_op(name)), got
    np.testing.assert_array_equal(ti.to_numpy(out), want.detach().numpy())
    np.testing.assert_array_equal(ti.to_numpy(again), want.detach().numpy())
    assert ti.describe(weight.grad).pending == ()
    np.testing.assert_allclose(ti.to_numpy(weight.grad), plain.grad.numpy(), rtol=1e-6)


def test_keras_hubs_centroid_head_on_a_masked_partial_sum(sim8):
    """``Gemma4AssistantCausalLM._apply_centroid_logits``'s ops after the
    lookup: reshape to (batch, seq, tokens, features), a matmul with the
    transposed rows, the logits reshaped."""
    table, ids = _arrays()
    hidden = np.random.default_rng(1).standard_normal((2, 4, 1, FEATURES)).astype(np.float32)
    _, lookup = _masked_lookup(table, ids)
    with ti.jax_semantics(defer=True):
        rows = lookup.reshape(2, 4, 16, FEATURES)
        logits = torch.matmul(torch.as_tensor(hidden), rows.transpose(2, 3)).squeeze(-2)
        flat = logits.reshape(8, 16)
    want = (hidden @ table[ids].reshape(2, 4, 16, FEATURES).transpose(0, 1, 3, 2))
    np.testing.assert_allclose(ti.to_numpy(flat), want.reshape(8, 16), rtol=1e-5, atol=1e-6)


def test_plain_dtensor_fails_reshaping_its_masked_partial_sum(sim8):
    """What the mode fixes: DTensor carries the mask through the reshape and
    fails completing it."""
    table, ids = _arrays()
    _, lookup = _masked_lookup(table, ids)
    with pytest.raises(IndexError, match="shape of the mask"):
        ti.to_numpy(lookup.reshape(2, 4, 16, FEATURES))
