"""An in-place write of a DTensor that needs a gradient into a plain tensor
(``operands.write_into_plain``): the plain tensor is a replicated value, as
a host array on JAX, and the gradient flows back through it. Wrapping the
plain tensor in a replicated DTensor over its storage recorded the write on
that DTensor, and the plain tensor's later uses dropped the gradient
silently (keras-hub RWKV-7's ``out[:, t:t+1] = ...`` into an ``ops.zeros``
buffer, issue 27)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import parity

L = parity.TensorLayout
B, T, H, N = 8, 4, 8, 4
rng = np.random.default_rng(0)
V = rng.normal(size=(B, T, H, N)).astype(np.float32)
C = rng.normal(size=(B, T, H, N)).astype(np.float32)
SPEC = ("data", None, "model", None)


def write_steps(v, c, out):
    for t in range(T):
        out[:, t:t + 1] = (v[:, t] * 2.0).reshape(B, 1, H, N)
    return (out * c).sum()


def reference_grad():
    v = torch.tensor(V, requires_grad=True)
    write_steps(v, torch.tensor(C), torch.zeros(B, T, H, N)).backward()
    return v.grad.numpy()


def mesh():
    return parity.DeviceMesh((2, 4), ("data", "model"))


@pytest.mark.parametrize("buffer", ["plain", (None,) * 4, SPEC])
def test_the_gradient_flows_back_through_a_buffer_written_in_place(sim8, buffer):
    ti = sim8
    m = mesh()
    v = ti.distribute_tensor(V, L(SPEC, m)).requires_grad_()
    with ti.jax_semantics():
        out = (torch.zeros(B, T, H, N) if buffer == "plain"
               else ti.distribute_tensor(np.zeros((B, T, H, N), np.float32), L(buffer, m)))
        loss = write_steps(v, ti.distribute_tensor(C, L(SPEC, m)), out)
        loss.backward()
    np.testing.assert_allclose(ti.to_numpy(v.grad), reference_grad(), rtol=1e-6)
    np.testing.assert_allclose(ti.to_numpy(loss), (2.0 * V * C).sum(), rtol=1e-5)
