"""A gather through parity's flattened group leaves DTensor's later
redistributes as they were (issue 11): torch asserts "_StridedShard
redistribute assumes no flattened transforms" when a flattened mesh is
registered on the root mesh and a redistribute involves a strided shard (a
view of a dim split over two mesh axes makes one). Each test gathers first,
then runs the strided case on the same mesh."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import sequential_collectives
import torch
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.debug import CommDebugMode

import parity
from parity import torch_impl as ti
from parity.torch_impl.runtime.torch_compat import flatten_registry

L = parity.TensorLayout
HOST = np.arange(128, dtype=np.float32).reshape(8, 16)


@pytest.fixture
def mesh(sim8):
    return parity.DeviceMesh((2, 4), ("data", "model"))


def gather_over_two_axes(mesh):
    """The one-collective gather (``to_numpy``) of an array split over both
    mesh axes: it makes the flattened group of (data, model)."""
    x = ti.distribute_tensor(HOST, L((None, ("data", "model")), mesh))
    np.testing.assert_array_equal(ti.to_numpy(x), HOST)
    return x


def test_plain_dtensor_strided_redistribute_after_a_parity_gather(mesh):
    x = gather_over_two_axes(mesh)
    flat = torch.ravel(x)  # plain DTensor: strided shards over both axes
    assert any(type(p).__name__ == "_StridedShard" for p in flat.placements)
    # the user's own call of DTensor's redistribute: its per-axis gathers (and
    # warning) are torch's, kept out of the suite's guard (tests/conftest.py)
    with sequential_collectives.collected():
        whole = flat.redistribute(flat.device_mesh, [Replicate(), Replicate()])
    np.testing.assert_array_equal(ti.to_numpy(whole), HOST.ravel())


def test_ravel_of_a_dim_split_over_two_axes_after_a_gather(mesh):
    x = gather_over_two_axes(mesh)
    with ti.jax_semantics():
        y = torch.ravel(x)
    np.testing.assert_array_equal(ti.to_numpy(y), HOST.ravel())


def test_ravel_gradient_of_a_dim_split_over_two_axes(mesh):
    x = gather_over_two_axes(mesh).detach().requires_grad_()
    with ti.jax_semantics():
        y = torch.ravel(x)
        (y * y).sum().backward()
    assert tuple(x.grad.placements) == tuple(x.placements)
    np.testing.assert_array_equal(ti.to_numpy(x.grad), 2 * HOST)


def test_unflatten_that_jax_refuses_keeps_values_and_gradient_placement(mesh):
    # (data, model) over 16 split into (4, 4): JAX's rule has no answer
    x = gather_over_two_axes(mesh).detach().requires_grad_()
    with ti.jax_semantics():
        y = x.unflatten(1, (4, 4))
        (y * y).sum().backward()
    np.testing.assert_array_equal(ti.to_numpy(y), HOST.reshape(8, 4, 4))
    assert tuple(x.grad.placements) == tuple(x.placements)
    np.testing.assert_array_equal(ti.to_numpy(x.grad), 2 * HOST)


def test_gather_registers_no_flattened_mesh(mesh):
    gather_over_two_axes(mesh)
    torch_mesh = ti.to_torch_mesh(mesh)
    registry = flatten_registry(torch_mesh)
    assert registry is None or not [k for k in registry if k.startswith("parity_flat:")]


def test_differentiable_gather_over_two_axes_is_still_one_collective(mesh, caplog):
    x = ti.distribute_variable(HOST, L((("data", "model"), None), mesh))
    with CommDebugMode() as comm, caplog.at_level(logging.WARNING):
        y = ti.all_gather_variable(x)
    assert y.requires_grad
    assert comm.get_total_counts() == 1, comm.get_comm_counts()
    assert not [r for r in caplog.records if r.name.startswith("torch")], caplog.text
    np.testing.assert_array_equal(ti.to_numpy(y), HOST)


def test_an_op_without_a_rule_never_returns_a_placement_no_spec_describes(mesh):
    """``torch.ops.aten.view`` has no rule: DTensor flattens (data, model)
    into ``(Shard(0), _StridedShard(0, sf=4))``, which no PartitionSpec
    describes; the mode gathers the strided mesh dim instead of returning
    it (``describe``/``to_numpy`` would raise on it)."""
    x = ti.distribute_tensor(np.arange(64, dtype=np.float32).reshape(8, 8),
                             parity.TensorLayout(("data", "model"), mesh))
    with ti.jax_semantics():
        y = torch.ops.aten.view(x, [64])
    assert ti.describe(y).spec == (("data",),)
    np.testing.assert_array_equal(ti.to_numpy(y), np.arange(64, dtype=np.float32))


def test_aten_reshape_of_a_dim_split_over_two_axes_gives_the_values(mesh):
    """``torch.ops.aten.reshape`` bypasses parity's reshape rule; DTensor's
    view rule sizes the (data, model) block wrong and the local reshape
    fails (``shape '[1, 16]' is invalid for input of size 8``): the mode
    runs it again on gathered operands."""
    x = ti.distribute_tensor(np.arange(64, dtype=np.float32).reshape(8, 8),
                             parity.TensorLayout((("data", "model"), None), mesh))
    with ti.jax_semantics():
        y = torch.ops.aten.reshape(x, [4, 16])
    np.testing.assert_array_equal(ti.to_numpy(y), np.arange(64, dtype=np.float32).reshape(4, 16))


def test_aten_reshape_to_a_bad_shape_still_raises_torchs_error(mesh):
    x = ti.distribute_tensor(np.arange(64, dtype=np.float32).reshape(8, 8),
                             parity.TensorLayout((("data", "model"), None), mesh))
    with ti.jax_semantics(), pytest.raises(RuntimeError, match=r"\[4, 17\]' is invalid for input of size 64"):
        torch.ops.aten.reshape(x, [4, 17])
