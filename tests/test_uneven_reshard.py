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
import pytest
import sequential_collectives
import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

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


def test_blocks_answer_the_collectives_layout_questions_once(sim8):
    """``specs.blocks_of``: spec, axis names, evenness and the masked partial
    sum in one cached answer; for placements no PartitionSpec describes,
    ``described()`` raises ``spec_of``'s own ``LayoutError``."""
    from parity.errors import LayoutError
    from parity.torch_impl.layouts import specs
    from parity.torch_impl.runtime.torch_compat import StridedShard

    mesh = meshes.to_torch_mesh(parity.DeviceMesh((2, 2, 2), ("a", "b", "c")))
    uneven = distribute_tensor(torch.from_numpy(HOST), mesh, [Shard(0)] * 3)
    blocks = specs.blocks_of(uneven)
    assert (blocks.spec, blocks.axis_names, blocks.even, blocks.masked) == (
        (("a", "b", "c"), ()), ("a", "b", "c"), False, False)
    even = distribute_tensor(torch.ones(8, 4), mesh, [Shard(0), Shard(1), Replicate()])
    assert specs.blocks_of(even).even and specs.blocks_of(even).described() == (("a",), ("b",))
    odd = DTensor.from_local(torch.ones(2, 4), mesh,
                             [StridedShard(0, split_factor=3), Shard(0), Replicate()],
                             run_check=False, shape=(8, 4), stride=(4, 1))
    blocks = specs.blocks_of(odd)
    assert blocks.spec is None and not blocks.even
    with pytest.raises(LayoutError) as raised:
        specs.spec_of(odd)
    with pytest.raises(LayoutError) as described:
        blocks.described()
    assert (str(described.value), described.value.what, described.value.value) == (
        str(raised.value), raised.value.what, raised.value.value)


def test_merge_needed_refuses_uneven_and_strided_operands(sim8):
    """DTensor's own call runs under the flattened meshes only where every
    operand is evenly split, without strided shards, on two or more mesh
    dims (``flat_groups.merge_needed``)."""
    from parity.torch_impl.collectives import flat_groups
    from parity.torch_impl.runtime.torch_compat import StridedShard

    mesh = meshes.to_torch_mesh(parity.DeviceMesh((2, 2, 2), ("a", "b", "c")))
    uneven = distribute_tensor(torch.from_numpy(HOST), mesh, [Shard(0)] * 3)
    even = distribute_tensor(torch.ones(8, 4), mesh, [Shard(0), Shard(1), Replicate()])
    one_axis = distribute_tensor(torch.ones(8, 4), mesh, [Shard(0), Replicate(), Replicate()])
    strided = DTensor.from_local(torch.ones(2, 4), mesh,
                                 [StridedShard(0, split_factor=2), Shard(0), Replicate()],
                                 run_check=False, shape=(8, 4), stride=(4, 1))
    assert flat_groups.merge_needed(mesh, ((even,), {}))
    assert not flat_groups.merge_needed(mesh, ((one_axis,), {}))
    assert not flat_groups.merge_needed(mesh, ((even, uneven), {}))
    assert not flat_groups.merge_needed(mesh, ((even,), {"other": strided}))
