"""torch's ``_foreach_*`` ops over DTensors on several meshes under
``jax_semantics()`` (``semantics/foreach.py``): one call per mesh, each
element as the elementwise op on its own mesh gives it. torch's Adam with
``foreach=True`` (its default on CUDA) hands one call every parameter, and
FSDP2 + TP puts them on two meshes: examples/train_llama.py on a GPU raised
``MeshMismatchError`` at ``torch._foreach_mul_`` in Adam's step."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import parity
from parity import torch_impl as ti

L = parity.TensorLayout
RNG = np.random.default_rng(0)
A = RNG.standard_normal((8, 8)).astype(np.float32)
B = RNG.standard_normal((16,)).astype(np.float32)


def _params():
    two_d = parity.DeviceMesh((2, 4), ("dp", "tp"))
    one_d = parity.DeviceMesh((8,), ("x",))
    a = ti.distribute_variable(A, L(("dp", "tp"), two_d))
    b = ti.distribute_variable(B, L(("x",), one_d))
    return a, b


def _loss_backward(params):
    for p in params:  # one loss per mesh: a sum across meshes is JAX's refusal too
        (p * p * p).sum().backward()


@pytest.mark.parametrize("name", ["Adam", "AdamW", "SGD"])
def test_a_foreach_optimizer_over_two_meshes_equals_the_unsharded_step(sim8, name):
    make = {"Adam": lambda ps, f: torch.optim.Adam(ps, lr=0.1, foreach=f),
            "AdamW": lambda ps, f: torch.optim.AdamW(ps, lr=0.1, weight_decay=0.1, foreach=f),
            "SGD": lambda ps, f: torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=f)}[name]
    plain = [torch.tensor(A, requires_grad=True), torch.tensor(B, requires_grad=True)]
    opt = make(plain, False)
    sharded = list(_params())
    placements = [tuple(p.placements) for p in sharded]
    sharded_opt = make(sharded, True)
    with ti.jax_semantics():
        for _ in range(2):
            for ps, o in ((plain, opt), (sharded, sharded_opt)):
                o.zero_grad()
                _loss_backward(ps)
                o.step()
    for got, want, placed in zip(sharded, plain, placements):
        assert tuple(got.placements) == placed
        np.testing.assert_allclose(ti.to_numpy(got.detach()), want.detach().numpy(),
                                   rtol=1e-6, atol=1e-6)


def test_out_of_place_foreach_results_come_back_in_element_order(sim8):
    a, b = _params()
    with ti.jax_semantics():
        sums = torch._foreach_add([a, b], [a, b])
        norms = torch._foreach_norm([a, b])
    assert [tuple(s.placements) for s in sums] == [tuple(a.placements), tuple(b.placements)]
    np.testing.assert_array_equal(ti.to_numpy(sums[0].detach()), 2 * A)
    np.testing.assert_array_equal(ti.to_numpy(sums[1].detach()), 2 * B)
    np.testing.assert_allclose([float(ti.to_numpy(n)) for n in norms],
                               [np.linalg.norm(A), np.linalg.norm(B)], rtol=1e-6)


def test_in_place_foreach_equals_plain_dtensor_s(sim8):
    # plain DTensor runs a foreach op per element (its own mesh each); the
    # mode's one-mesh rule refused it before the split
    a, b = _params()
    c, d = _params()
    with torch.no_grad():
        torch._foreach_mul_([a, b], 0.5)
        with ti.jax_semantics():
            torch._foreach_mul_([c, d], 0.5)
    for got, want in ((c, a), (d, b)):
        assert tuple(got.placements) == tuple(want.placements)
        np.testing.assert_array_equal(ti.to_numpy(got.detach()), ti.to_numpy(want.detach()))
