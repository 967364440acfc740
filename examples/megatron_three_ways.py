"""One Megatron-style MLP, ``relu(x @ w1) @ w2`` with ``w1`` split by
columns and ``w2`` by rows over ``model`` and the batch over ``data``,
written three ways, each run on both backends (JAX and DTensor) with the
same values and the same types.

    python examples/megatron_three_ways.py

1. **Auto axes** (``parity.DeviceMesh``'s default, JAX's ``Mesh``'s): write
   the math; the contraction over the sharded hidden dim is completed for you.
2. **Explicit axes** (``parity.make_mesh``'s default, ``jax.make_mesh``'s):
   shardings are types (``typeof``); ``h @ w2`` with the hidden dim sharded
   on both sides is ambiguous and raises ``ShardingTypeError``, so the
   program says what it wants with ``reshard``.
3. **shard_map**: write the per-device program; the hidden dim's partial
   sums meet in one ``lax.psum`` over ``model``.
"""

import contextlib

import numpy as np

import parity
from parity import P, jax_ref, torch_impl

jax_ref.simulate(8)  # JAX sees 8 CPU devices (before JAX starts)

rng = np.random.default_rng(0)
X = rng.standard_normal((8, 16)).astype(np.float32)
W1 = (rng.standard_normal((16, 32)) * 0.3).astype(np.float32)
W2 = (rng.standard_normal((32, 16)) * 0.3).astype(np.float32)
EXPECTED = np.maximum(X @ W1, 0) @ W2


def relu(h):
    return h * (h > 0)  # the same expression on a jax.Array and a torch tensor


def inputs(backend):
    return (backend.device_put(X, P("data", None)), backend.device_put(W1, P(None, "model")),
            backend.device_put(W2, P("model", None)))


def auto_axes(backend, devices):
    mesh = parity.make_mesh((2, 4), ("data", "model"), axis_types=parity.AxisType.Auto,
                            devices=devices)
    with backend.set_mesh(mesh):
        x, w1, w2 = inputs(backend)
        return relu(x @ w1) @ w2


def explicit_axes(backend, devices):
    mesh = parity.make_mesh((2, 4), ("data", "model"), devices=devices)  # Explicit
    with backend.set_mesh(mesh):
        x, w1, w2 = inputs(backend)
        h = relu(x @ w1)
        assert str(backend.typeof(h)) == "float32[8@data,32@model]"
        try:
            h @ w2  # the hidden dim is sharded on both sides: which output sharding?
            raise AssertionError("an Explicit mesh must refuse the ambiguous contraction")
        except Exception as err:  # JAX's ShardingTypeError / parity.ShardingTypeError
            assert "ShardingTypeError" in type(err).__name__
        # Say it: gather the hidden activations and the second weight.
        y = backend.reshard(h, P("data", None)) @ backend.reshard(w2, P(None, None))
        assert str(backend.typeof(y)) == "float32[8@data,16]"
        return y


def with_shard_map(backend, devices):
    mesh = parity.make_mesh((2, 4), ("data", "model"), devices=devices)
    lax = backend.lax

    def block(x, w1, w2):  # x: [4, 16], w1: [16, 8], w2: [8, 16] on each device
        return lax.psum(relu(x @ w1) @ w2, "model")

    with backend.set_mesh(mesh):
        mlp = backend.shard_map(block, in_specs=(P("data", None), P(None, "model"),
                                                 P("model", None)),
                                out_specs=P("data", None))
        y = mlp(*inputs(backend))
        assert str(backend.typeof(y)) == "float32[8@data,16]"
        return y


def run(backend, devices, semantics):
    out = {}
    for way in (auto_axes, explicit_axes, with_shard_map):
        with semantics():
            y = way(backend, devices)
        out[way.__name__] = (backend.describe(y), backend.to_numpy(y))
    return out


jax_out = run(jax_ref, jax_ref.list_devices(), contextlib.nullcontext)
with torch_impl.simulate(8):
    torch_out = run(torch_impl, None, torch_impl.jax_semantics)

for way, (placement, value) in jax_out.items():
    assert torch_out[way][0] == placement, way
    np.testing.assert_allclose(value, EXPECTED, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(torch_out[way][1], EXPECTED, rtol=1e-5, atol=1e-5)
    print(f"{way}: spec {placement.spec} on both backends, values equal")
