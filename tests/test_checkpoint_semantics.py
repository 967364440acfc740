"""Activation checkpointing under ``jax_semantics()`` (issue 23).

The recompute of ``torch.utils.checkpoint`` runs inside the backward; the
backward now runs with parity's mode on (``semantics/backward_scope.py``).
Values and gradients on 8 simulated ranks are compared with the same
computation on unsharded plain tensors (torch itself, no checkpoint), and
each gradient must have its parameter's placement."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor
from torch.utils.checkpoint import CheckpointError, checkpoint

import parity
from parity import torch_impl as ti

L = parity.TensorLayout


def _host(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _attention(t):
    return F.scaled_dot_product_attention(t, t, t)


def _block(x, w1, w2):
    # attention, then an MLP whose weights are split over "model"
    h = F.scaled_dot_product_attention(x, x, x, is_causal=True) + x
    h = F.layer_norm(h, h.shape[-1:])
    return torch.relu(h @ w1) @ w2


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_checkpointed_attention_matches_unsharded(reentrant):
    """The issue's smallest form: both forms raised before (CheckpointError /
    no sharding strategy for the flash-attention backward)."""
    xh = _host((8, 2, 8, 16), 0)
    ref = torch.tensor(xh, requires_grad=True)
    _attention(ref).sum().backward()
    with ti.simulate(8):
        mesh = parity.DeviceMesh((8,), ("data",))
        x = ti.distribute_variable(xh, L(("data", None, None, None), mesh))
        with ti.jax_semantics():
            y = checkpoint(_attention, x, use_reentrant=reentrant)
            y.sum().backward()
        np.testing.assert_allclose(ti.to_numpy(y.detach()), _attention(ref).detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
        assert isinstance(x.grad, DTensor) and x.grad.placements == x.placements
        np.testing.assert_allclose(ti.to_numpy(x.grad), ref.grad.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_checkpointed_block_on_2d_mesh(reentrant):
    """A transformer-like block, batch over "data", MLP weights over
    "model", checkpointed; gradients equal the unsharded ones, each in its
    parameter's placement; ``torch.autograd.grad`` too."""
    xh, w1h, w2h = _host((4, 2, 8, 16), 1), _host((16, 32), 2), _host((32, 16), 3)
    refs = [torch.tensor(a, requires_grad=True) for a in (xh, w1h, w2h)]
    _block(*refs).square().mean().backward()
    with ti.simulate(8):
        mesh = parity.DeviceMesh((2, 4), ("data", "model"))
        x = ti.distribute_variable(xh, L(("data", None, None, None), mesh))
        w1 = ti.distribute_variable(w1h, L((None, "model"), mesh))
        w2 = ti.distribute_variable(w2h, L(("model", None), mesh))
        with ti.jax_semantics():
            loss = checkpoint(_block, x, w1, w2, use_reentrant=reentrant).square().mean()
            loss.backward(retain_graph=not reentrant)
        assert abs(loss.full_tensor().item() - _block(*refs).square().mean().item()) < 1e-5
        for p, ref in zip((x, w1, w2), refs):
            assert p.grad.placements == p.placements, (p.grad.placements, p.placements)
            np.testing.assert_allclose(ti.to_numpy(p.grad), ref.grad.numpy(), rtol=1e-4,
                                       atol=1e-5)
        if not reentrant:  # reentrant checkpoint refuses autograd.grad (torch's own rule)
            with ti.jax_semantics():
                gx, gw1 = torch.autograd.grad(loss, (x, w1))
            assert gw1.placements == w1.placements
            np.testing.assert_allclose(ti.to_numpy(gw1), refs[1].grad.numpy(), rtol=1e-4,
                                       atol=1e-5)


def test_backward_outside_the_scope_still_fails_as_plain_dtensor():
    """The backward carries the mode only when it starts inside
    ``jax_semantics()``; outside it the recompute is plain DTensor's (the
    test would pass if the mode leaked out of its scope)."""
    xh = _host((8, 2, 8, 16), 0)
    with ti.simulate(8):
        mesh = parity.DeviceMesh((8,), ("data",))
        x = ti.distribute_variable(xh, L(("data", None, None, None), mesh))
        with ti.jax_semantics():
            y = checkpoint(_attention, x, use_reentrant=False)
        with pytest.raises(CheckpointError):
            y.sum().backward()
