"""The backward of an in-place op on a view when the gradient arriving there
is a pending sum (``semantics/pending_clone.py``): under ``jax_semantics()``
its gradients are plain torch's; outside, DTensor's error stands. Found in
keras-hub's Gemma3n (AltUp's ``predictions += hidden_states``; issue 27)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import parity

L = parity.TensorLayout
RNG = np.random.default_rng(0)
STATES = RNG.standard_normal((2, 8, 8, 32)).astype(np.float32)
COEFS = RNG.standard_normal((8, 8, 2, 2)).astype(np.float32)
OUT = RNG.standard_normal((32, 16)).astype(np.float32)


def altup_like(states, coefs, out):
    # In-place add on a permuted view: autograd records CopySlices. The
    # contraction with ``out`` (hidden on "batch", 16 on "model") sends a
    # pending sum over "model" back into it.
    predictions = torch.matmul(states.permute(1, 2, 3, 0), coefs).permute(3, 0, 1, 2)
    predictions += states
    return torch.tanh(predictions @ out).sum()


def leaves(ti):
    mesh = parity.DeviceMesh((2, 4), ("batch", "model"))
    return (ti.distribute_variable(STATES, L((None, None, None, "batch"), mesh)),
            ti.distribute_variable(COEFS, L((None,) * 4, mesh)),
            ti.distribute_variable(OUT, L(("batch", "model"), mesh)))


def test_an_in_place_op_on_a_view_takes_a_pending_gradient_under_jax_semantics(sim8):
    ti = sim8
    states, coefs, out = leaves(ti)
    with ti.jax_semantics():
        altup_like(states, coefs, out).backward()
    plain = [torch.tensor(a, requires_grad=True) for a in (STATES, COEFS, OUT)]
    altup_like(*plain).backward()
    for got, want in zip((states, coefs, out), plain):
        np.testing.assert_allclose(ti.to_numpy(got.grad), want.grad.numpy(), rtol=1e-5, atol=1e-5)
    # The gradients come back laid out as their leaves.
    assert ti.describe(out.grad).spec == (("batch",), ("model",))


def test_outside_jax_semantics_dtensor_s_own_answer(sim8):
    """Plain DTensor on the same program: torch 2.13 refuses the reshard of
    the pending gradient (why ``pending_clone`` exists); torch 2.14 computes
    it, and then its gradients are plain torch's too."""
    ti = sim8
    states, coefs, out = leaves(ti)
    if torch.__version__ < "2.14":
        with pytest.raises(RuntimeError, match="to P\\(sum\\) not supported"):
            altup_like(states, coefs, out).backward()
        return
    altup_like(states, coefs, out).backward()
    plain = [torch.tensor(a, requires_grad=True) for a in (STATES, COEFS, OUT)]
    altup_like(*plain).backward()
    for got, want in zip((states, coefs, out), plain):
        np.testing.assert_allclose(ti.to_numpy(got.grad), want.grad.numpy(), rtol=1e-5, atol=1e-5)
