"""A pending reduction over mesh axes of size 1 is a relabel
(``parity.torch_impl.collectives.relabel``; issue 24, item 2): the same
local tensor under the completed placements, no ``DTensor.redistribute``,
and the same values, placements and gradient as DTensor's redistribute,
which is the reference here. Simulated ranks, mesh (1, 2) ``batch, model``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

from parity import DeviceMesh, TensorLayout
from parity.errors import ParityError
from parity import torch_impl as T
from parity.torch_impl.collectives.relabel import is_relabel, relabeled

pytestmark = pytest.mark.filterwarnings("error::UserWarning")


@pytest.fixture
def pending():
    """``(w, p)``: a weight sharded on ``model`` and ``p``, a differentiable
    function of it pending a sum on the size-1 ``batch`` axis."""
    with T.simulate(2):
        mesh = DeviceMesh((1, 2), ("batch", "model"))
        host = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
        w = T.distribute_variable(host, TensorLayout((None, "model"), mesh))
        p = DTensor.from_local(w.to_local() * 3.0, w.device_mesh, [Partial(), Shard(1)])
        yield w, p


def test_completing_a_sum_on_a_size_one_axis_relabels_the_same_block(pending):
    w, p = pending
    target = (Replicate(), Shard(1))
    want = p.redistribute(p.device_mesh, target)
    got = relabeled(p, target)
    assert is_relabel(p, target)
    assert tuple(got.placements) == tuple(want.placements) == target
    assert got._local_tensor is p._local_tensor  # nothing copied
    np.testing.assert_array_equal(T.to_numpy(got), T.to_numpy(want))
    (g_want,) = torch.autograd.grad((want * want).sum(), [w], retain_graph=True)
    (g_got,) = torch.autograd.grad((got * got).sum(), [w])
    assert tuple(g_got.placements) == tuple(g_want.placements)
    np.testing.assert_array_equal(T.to_numpy(g_got), T.to_numpy(g_want))


def test_the_relabel_is_twice_differentiable_as_redistribute_is(pending):
    w, p = pending
    target = (Replicate(), Shard(1))
    grads = []
    for out in (p.redistribute(p.device_mesh, target), relabeled(p, target)):
        (g,) = torch.autograd.grad((out.sin()).sum(), [w], create_graph=True)
        (gg,) = torch.autograd.grad(g.sum(), [w], retain_graph=True)
        grads.append((T.to_numpy(g), T.to_numpy(gg), tuple(gg.placements)))
    np.testing.assert_array_equal(grads[0][0], grads[1][0])
    np.testing.assert_array_equal(grads[0][1], grads[1][1])
    assert grads[0][2] == grads[1][2]


def test_anything_that_moves_data_is_not_a_relabel(pending):
    _, p = pending
    assert not is_relabel(p, (Replicate(), Replicate()))  # a gather on model (size 2)
    assert not is_relabel(p, tuple(p.placements))  # nothing changes
    q = DTensor.from_local(p.to_local(), p.device_mesh, [Replicate(), Partial()])
    assert not is_relabel(q, (Replicate(), Replicate()))  # a sum on model (size 2)
    with pytest.raises(ParityError, match=r"Partial\(sum\), Shard\(dim=1\).*Replicate\(\), Replicate\(\).*\(1, 2\)"):
        relabeled(p, (Replicate(), Replicate()))


def test_a_relabel_in_a_new_simulate_block_is_on_that_blocks_mesh():
    # Two simulate() blocks build equal torch meshes (DTensorSpec compares
    # meshes by value): the relabeled spec cached in the first must not be
    # handed to the second, whose process group is another.
    def relabel_on_new_mesh():
        mesh = T.to_torch_mesh(DeviceMesh((1, 2), ("batch", "model")))
        p = DTensor.from_local(torch.ones(2, 3), mesh, [Partial(), Shard(1)], run_check=False)
        return mesh, relabeled(p, (Replicate(), Shard(1)))

    with T.simulate(2):
        first, out = relabel_on_new_mesh()
        assert out.device_mesh is first
    with T.simulate(2):
        second, out = relabel_on_new_mesh()
        assert second is not first and second == first
        assert out.device_mesh is second
