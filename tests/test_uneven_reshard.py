"""A DTensor sharded unevenly (a raw DTensor's: 10 rows over 8 ranks) is
gathered axis by axis by ``redistribute.merged``, not through a flattened
mesh: DTensor's all_gather over a flattened mesh assumes even chunks and
silently corrupts uneven nested blocks (torch 2.13; pytorch#194457, an open
fix). Found by the OpInfo column: ``leaky_relu``'s gradient on (2, 2, 2),
whose backward DTensor lays out as ``(S0, S0, S0)`` over 10 rows, came back
with rows of zeros. DTensor logs its per-axis gathers ("2 sequential
all_gather"): the price of correct values, kept out of the suite's guard
here."""

from __future__ import annotations

import numpy as np
import sequential_collectives
import torch
import torch.nn.functional as F
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

import parity
from parity.torch_impl.collectives import redistribute
from parity.torch_impl.layouts import meshes

HOST = np.random.default_rng(0).standard_normal((10, 10)).astype(np.float32) * 3


def test_an_uneven_nested_shard_is_gathered_right(sim8):
    mesh = meshes.to_torch_mesh(parity.DeviceMesh((2, 2, 2), ("a", "b", "c")))
    x = distribute_tensor(torch.from_numpy(HOST), mesh, [Shard(0)] * 3)
    with sequential_collectives.collected():
        out = redistribute.merged(x, (Shard(0), Replicate(), Replicate()))
    assert tuple(out.placements) == (Shard(0), Replicate(), Replicate())
    np.testing.assert_array_equal(sim8.to_numpy(out), HOST)


def test_leaky_relu_gradient_on_a_three_axis_mesh(sim8):
    ref = torch.tensor(HOST, requires_grad=True)
    F.leaky_relu(ref).sum().backward()
    mesh = parity.DeviceMesh((2, 2, 2), ("a", "b", "c"))
    for layout in (("a", None), (None, "c"), ("b", None)):
        x = sim8.distribute_variable(HOST, parity.TensorLayout(layout, mesh))
        with sequential_collectives.collected(), sim8.jax_semantics():
            F.leaky_relu(x).sum().backward()
        assert x.grad.placements == x.placements
        np.testing.assert_array_equal(sim8.to_numpy(x.grad), ref.grad.numpy())
