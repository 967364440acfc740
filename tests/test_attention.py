"""``scaled_dot_product_attention`` under ``jax_semantics()`` runs on each
rank's (batch, head) block (``semantics.attention``): the value of the op on
the unsharded tensors, gradients with their inputs' placements, the output
sharded like JAX partitions attention (batch, heads, query sequence kept;
key sequence and feature dims gathered), and no DTensor strategy search
(torch 2.13 takes tens of seconds per call, then refuses a sharded head dim).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor

import parity
from parity import torch_impl as ti

L = parity.TensorLayout
B, H, T, E = 2, 4, 8, 16


@pytest.fixture
def mesh(sim8):
    return parity.DeviceMesh((2, 4), ("data", "model"))


def host(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def put(array, spec, mesh):
    return ti.distribute_tensor(array, L(spec, mesh)).requires_grad_()


def reference(arrays, **kwargs):
    plain = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = F.scaled_dot_product_attention(*plain, **kwargs)
    out.square().sum().backward()
    return out.detach().numpy(), [p.grad.numpy() for p in plain]


def run(arrays, specs, mesh, **kwargs):
    xs = [put(a, s, mesh) for a, s in zip(arrays, specs)]
    with ti.jax_semantics():
        out = F.scaled_dot_product_attention(*xs, **kwargs)
        out.square().sum().backward()
    return out, xs


LAYOUTS = [
    # heads sharded on both operands alike: nothing moves
    [(None, "model", None, None)] * 3,
    # batch and heads, query sequence too
    [("data", "model", None, None), ("data", "model", None, None), ("data", "model", None, None)],
    [("data", None, "model", None), ("data", None, None, None), ("data", None, None, None)],
    # the head (feature) dim sharded: the case torch 2.13 refuses
    [(None, "data", None, "model"), ("data", None, None, "model"), ("data", None, None, "model")],
    # key sequence sharded (contracted: gathered)
    [(None, None, None, None), (None, "model", "data", None), (None, None, "data", "model")],
]


@pytest.mark.parametrize("specs", LAYOUTS, ids=str)
def test_attention_gives_the_unsharded_values_and_gradients_in_place(mesh, specs):
    arrays = [host((B, H, T, E), seed) for seed in range(3)]
    want, want_grads = reference(arrays)
    out, xs = run(arrays, specs, mesh)
    np.testing.assert_allclose(ti.to_numpy(out), want, rtol=1e-5, atol=1e-5)
    for x, g in zip(xs, want_grads):
        assert tuple(x.grad.placements) == tuple(x.placements)
        np.testing.assert_allclose(ti.to_numpy(x.grad), g, rtol=1e-4, atol=1e-5)


def test_attention_keeps_batch_heads_and_query_sequence_sharded(mesh):
    arrays = [host((B, H, T, E), seed) for seed in range(3)]
    out, _ = run(arrays, [("data", "model", None, None)] * 3, mesh)
    assert ti.describe(out).spec == (("data",), ("model",), (), ())
    out, _ = run(arrays, [(None, None, "model", None), (None,) * 4, (None, None, None, "data")], mesh)
    assert ti.describe(out).spec == ((), (), ("model",), ("data",))


def test_causal_attention_gathers_the_query_sequence(mesh):
    arrays = [host((B, H, T, E), seed) for seed in range(3)]
    want, _ = reference(arrays, is_causal=True)
    out, _ = run(arrays, [(None, None, "model", None)] * 3, mesh, is_causal=True)
    np.testing.assert_allclose(ti.to_numpy(out), want, rtol=1e-5, atol=1e-5)
    assert ti.describe(out).spec[2] == ()


@pytest.mark.parametrize("mask_shape", [(T, T), (B, 1, T, T)], ids=str)
def test_a_plain_mask_is_cut_to_each_ranks_block(mesh, mask_shape):
    arrays = [host((B, H, T, E), seed) for seed in range(3)]
    mask = np.random.default_rng(7).random(mask_shape) > 0.3
    mask[..., 0] = True  # every query attends to something
    want, _ = reference(arrays, attn_mask=torch.tensor(mask))
    out, _ = run(arrays, [("data", "model", "data", None)[:2] + (None, None)] * 3, mesh,
                 attn_mask=torch.tensor(mask))
    np.testing.assert_allclose(ti.to_numpy(out), want, rtol=1e-5, atol=1e-5)
    out, _ = run(arrays, [(None, "model", "data", None), (None, "model", None, None),
                          (None, "model", None, None)], mesh, attn_mask=torch.tensor(mask))
    np.testing.assert_allclose(ti.to_numpy(out), want, rtol=1e-5, atol=1e-5)


def test_grouped_query_attention_keeps_each_group_on_its_rank(mesh):
    q = host((B, 8, T, E), 0)
    k, v = host((B, 4, T, E), 1), host((B, 4, T, E), 2)
    want, want_grads = reference([q, k, v], enable_gqa=True)
    out, xs = run([q, k, v], [(None, "model", None, None)] * 3, mesh, enable_gqa=True)
    np.testing.assert_allclose(ti.to_numpy(out), want, rtol=1e-5, atol=1e-5)
    assert ti.describe(out).spec[1] == ("model",)
    for x, g in zip(xs, want_grads):
        np.testing.assert_allclose(ti.to_numpy(x.grad), g, rtol=1e-4, atol=1e-5)


def test_attention_runs_no_dtensor_strategy(mesh, monkeypatch):
    """The point of the module: DTensor's sharding propagation never sees
    the call (it is what took tens of seconds and then refused)."""
    from torch.distributed.tensor._sharding_prop import ShardingPropagator

    seen = []
    original = ShardingPropagator.propagate_op_sharding_non_cached

    def spy(self, op_schema):
        seen.append(str(op_schema.op))
        return original(self, op_schema)

    monkeypatch.setattr(ShardingPropagator, "propagate_op_sharding_non_cached", spy)
    arrays = [host((B, H, T, E), seed) for seed in range(3)]
    xs = [put(a, (None, "data", None, "model"), mesh) for a in arrays]
    with ti.jax_semantics(), torch.no_grad():
        out = F.scaled_dot_product_attention(*xs)
    assert isinstance(out, DTensor)
    assert not [op for op in seen if "attention" in op], seen
