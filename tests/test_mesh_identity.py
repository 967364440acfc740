"""Meshes with the same devices and names are one mesh (issue 23); when two
meshes really differ, the error says which field differs.

The FSDP2 case (a ``["tp"]`` slice of a ``("dp", "tp")`` mesh against a 1-D
``("tp",)`` mesh of the same ranks, which torch compares unequal) needs real
ranks (a slice of a simulated mesh is rank 0's view only): it runs in
``tests/multiprocess/torch_stack_worker.py``."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.distributed.device_mesh import DeviceMesh as TorchMesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

import parity
from parity import torch_impl as ti
from parity.torch_impl.layouts import mesh_identity


def test_a_users_torch_mesh_comes_back_from_the_parity_mesh():
    with ti.simulate(4):
        users = TorchMesh("cpu", torch.arange(4).reshape(2, 2), mesh_dim_names=("dp", "tp"))
        back = ti.to_torch_mesh(ti.to_parity_mesh(users))
        assert back is users


def test_differences_name_the_field():
    with ti.simulate(4):
        a = TorchMesh("cpu", torch.arange(4).reshape(2, 2), mesh_dim_names=("dp", "tp"))
        b = TorchMesh("cpu", torch.arange(4).reshape(2, 2), mesh_dim_names=("dp", "model"))
        c = TorchMesh("cpu", torch.tensor([[0, 2], [1, 3]]), mesh_dim_names=("dp", "tp"))
        d = TorchMesh("cpu", torch.arange(4), mesh_dim_names=("dp",))
        assert mesh_identity.differences(a, a) == () and mesh_identity.same_mesh(a, a)
        assert mesh_identity.differences(a, b) == ("axis names ('dp', 'tp') vs ('dp', 'model')",)
        assert mesh_identity.differences(a, c) == ("ranks [[0, 1], [2, 3]] vs [[0, 2], [1, 3]]",)
        assert not mesh_identity.same_mesh(a, c)
        assert "shape (2, 2) vs (4,)" in mesh_identity.differences(a, d)
        x = DTensor.from_local(torch.ones(2, 4), a, [Shard(0), Replicate()], run_check=False)
        y = DTensor.from_local(torch.ones(2, 4), c, [Shard(0), Replicate()], run_check=False)
        with ti.jax_semantics(), pytest.raises(parity.MeshMismatchError,
                                               match=r"differ in ranks \[\[0, 1\], \[2, 3\]\]"):
            x + y
        with pytest.raises(parity.MeshMismatchError, match="differ in axis names"):
            ti.distribute_tensor(x, parity.TensorLayout(("dp", None), ti.to_parity_mesh(b)))


def test_a_slice_and_a_mesh_of_its_ranks_are_one_mesh():
    """torch compares a ``["tp"]`` slice of a 2-D mesh unequal to a 1-D mesh
    of the same ranks (root rank map, layout); for parity they are one mesh.
    (Ops across the two: on real ranks, tests/multiprocess/torch_stack_worker.py;
    a slice of a simulated mesh holds rank 0's view only.)"""
    with ti.simulate(8):
        root = TorchMesh("cpu", torch.arange(8).reshape(2, 4), mesh_dim_names=("dp", "tp"))
        sliced = root["tp"]
        own = TorchMesh("cpu", torch.arange(4), mesh_dim_names=("tp",))
        assert sliced != own
        assert mesh_identity.differences(sliced, own) == ()
        assert mesh_identity.same_mesh(sliced, own)
        other = TorchMesh("cpu", torch.arange(4, 8), mesh_dim_names=("tp",))
        assert mesh_identity.differences(sliced, other) == ("ranks [0, 1, 2, 3] vs [4, 5, 6, 7]",)


def test_parity_mesh_cache_is_bounded_and_per_generation():
    """torch meshes built in a loop do not grow the torch -> parity mesh
    cache past its bound, and still convert; a new ``simulate()`` block
    (a new runtime generation) starts from an empty cache."""
    from parity.torch_impl.layouts import meshes

    with ti.simulate(4):
        built = [TorchMesh("cpu", torch.arange(4).reshape(2, 2), mesh_dim_names=("dp", f"t{i}"))
                 for i in range(meshes.PARITY_MESH_LIMIT + 8)]
        found = [ti.to_parity_mesh(m) for m in built]
        assert len(meshes._parity_mesh_cache) == meshes.PARITY_MESH_LIMIT
        assert found[0].axis_names == ("dp", "t0")  # the first one, since forgotten
        assert ti.to_parity_mesh(built[0]) == found[0]  # converted again, equal
        held = built[-1]
    with ti.simulate(4):
        mesh = ti.to_parity_mesh(TorchMesh("cpu", torch.arange(4), mesh_dim_names=("x",)))
        assert mesh.axis_names == ("x",)
        assert all(entry[0] is not held for entry in meshes._parity_mesh_cache.values())


def test_rehoming_a_deferred_pending_sum_keeps_its_value():
    # a sum kept pending (the default scope) moves to another object of the
    # same mesh as its raw blocks: parity's to_local would complete it, and
    # the completed block under Partial would count the sum once per rank
    rng = np.random.default_rng(0)
    xh = rng.standard_normal((4, 8)).astype(np.float32)
    wh = rng.standard_normal((8, 4)).astype(np.float32)
    with ti.simulate(4):
        a = TorchMesh("cpu", torch.arange(4), mesh_dim_names=("tp",))
        b = TorchMesh("cpu", torch.arange(4), mesh_dim_names=("tp",))
        x = distribute_tensor(torch.tensor(xh), a, [Shard(1)])
        w = distribute_tensor(torch.tensor(wh), a, [Shard(0)])
        with ti.jax_semantics():
            y = x @ w
            assert y.placements[0].is_partial()
            moved = mesh_identity.rehome(y, b)
        assert moved.device_mesh is b and moved.placements[0].is_partial()
        np.testing.assert_allclose(ti.to_numpy(moved), xh @ wh, rtol=1e-5, atol=1e-5)
