"""A pending sum over several mesh axes is completed by ONE collective
(issue 25, item 4): DTensor alone takes one all_reduce per mesh axis and
logs "While redistributing from (Partial(sum), Partial(sum)) to (Replicate(),
Replicate()), 2 sequential all_reduce operations will be performed".

Launches are counted with torch's own ``CommDebugMode``; the warning is read
from torch's logger after clearing torch's warn-once cache (so a warning
issued by an earlier test cannot hide one here).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from conftest import MESHES
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor.debug import CommDebugMode

from parity import DeviceMesh, TensorLayout
from parity import torch_impl as T
from parity.torch_impl.collectives.merge_plan import merge_groups

_REDISTRIBUTE_LOG = "torch.distributed.tensor._redistribute"


@pytest.fixture
def warnings_seen(caplog):
    from torch.distributed.tensor import _redistribute

    _redistribute._warned_flatten_issues.clear()
    caplog.set_level(logging.WARNING, logger=_REDISTRIBUTE_LOG)
    yield lambda: [r.getMessage() for r in caplog.records if "sequential" in r.getMessage()]


def _all_reduces(comm: CommDebugMode) -> int:
    counts = comm.get_comm_counts()
    return sum(n for op, n in counts.items() if "all_reduce" in str(op))


def _sharded_on_every_axis(shape, names):
    spec = [tuple(names[:-1]), (names[-1],)] if len(names) > 2 else [(names[0],), (names[1],)]
    return tuple(spec)


@pytest.mark.parametrize("mesh_name", ["2x4", "2x2x2"])
def test_sum_over_every_axis_is_one_all_reduce(mesh_name, warnings_seen):
    shape, names = MESHES[mesh_name]
    value = np.arange(64, dtype=np.float32).reshape(8, 8)
    with T.simulate(8), T.jax_semantics(defer=False):  # completed by the sum itself
        mesh = DeviceMesh(shape, names)
        x = T.distribute_tensor(value, TensorLayout(_sharded_on_every_axis(shape, names), mesh))
        with CommDebugMode() as comm:
            total = x.sum()
        assert tuple(total.placements) == (torch.distributed.tensor.Replicate(),) * len(shape)
        assert float(total.item()) == float(value.sum())
    assert _all_reduces(comm) == 1, comm.get_comm_counts()
    assert warnings_seen() == []


def test_mean_over_every_axis_is_one_all_reduce(warnings_seen):
    # a pending mean (Partial("avg") on both axes): torch merges it as a sum
    # over the flattened group, then divides
    value = np.arange(64, dtype=np.float32).reshape(8, 8)
    with T.simulate(8), T.jax_semantics(defer=False):  # completed by the mean itself
        mesh = DeviceMesh((2, 4), ("data", "model"))
        x = T.distribute_tensor(value, TensorLayout(("data", "model"), mesh))
        with CommDebugMode() as comm:
            mean = x.mean()
        assert float(mean.item()) == float(value.mean())
    assert _all_reduces(comm) == 1, comm.get_comm_counts()
    assert warnings_seen() == []


@pytest.mark.parametrize("mesh_name", ["2x4", "2x2x2"])
def test_gradient_of_broadcast_operand_is_one_all_reduce(mesh_name, warnings_seen):
    # the gradient of a replicated scalar multiplied into a tensor sharded on
    # every axis is a sum over every axis: pending on all of them in backward
    shape, names = MESHES[mesh_name]
    value = np.arange(64, dtype=np.float32).reshape(8, 8) / 64
    with T.simulate(8), T.jax_semantics(defer=False):  # the loss completed in the forward
        mesh = DeviceMesh(shape, names)
        x = T.distribute_tensor(value, TensorLayout(_sharded_on_every_axis(shape, names), mesh))
        w = T.distribute_variable(np.float32(2.0), TensorLayout((), mesh))
        loss = (x * w).sum()
        with CommDebugMode() as comm:
            loss.backward()
        np.testing.assert_allclose(T.to_numpy(w.grad), value.sum(), rtol=1e-6)
    assert _all_reduces(comm) == 1, comm.get_comm_counts()
    assert warnings_seen() == []


def test_contraction_over_a_dim_split_on_both_axes_logs_no_warning(warnings_seen):
    # a contraction over a dim split on both axes, into an output the rule
    # shards: the merged redistribute gives the right value, no warning
    value = np.arange(64, dtype=np.float32).reshape(8, 8)
    with T.simulate(8), T.jax_semantics():
        mesh = DeviceMesh((2, 4), ("data", "model"))
        x = T.distribute_tensor(value, TensorLayout((None, ("data", "model")), mesh))
        y = x @ T.distribute_tensor(value, TensorLayout((("data", "model"), None), mesh))
        np.testing.assert_allclose(T.to_numpy(y), value @ value, rtol=1e-6)
    assert warnings_seen() == []


def test_a_second_simulate_block_gets_its_own_flattened_group():
    # the flattened group belongs to one process-group generation: a second
    # simulate() block must not reuse the first one's (OpInfo's copysign
    # gradient on (2, 2, 2) raised "Could not resolve the process group
    # registered under the name ..." from its second run on)
    a = np.arange(32, dtype=np.float32).reshape(8, 1, 4) - 10
    b = np.arange(32, dtype=np.float32).reshape(8, 4) - 20
    for _ in range(2):
        with T.simulate(8), T.jax_semantics():
            mesh = DeviceMesh((2, 2, 2), ("a", "b", "c"))
            x = T.distribute_tensor(a, TensorLayout(("a", None, None), mesh)).requires_grad_()
            y = T.distribute_tensor(b, TensorLayout(("a", None), mesh)).requires_grad_()
            torch.copysign(x, y).sum().backward()
            ref = torch.tensor(a, requires_grad=True)
            torch.copysign(ref, torch.tensor(b)).sum().backward()
            np.testing.assert_array_equal(T.to_numpy(x.grad), ref.grad.numpy())


def _gathers(comm: CommDebugMode) -> int:
    counts = comm.get_comm_counts()
    return sum(n for op, n in counts.items() if "all_gather" in str(op))


@pytest.mark.parametrize("reduce", [torch.amax, torch.amin])
def test_max_and_min_over_every_axis_are_one_all_reduce(reduce, warnings_seen):
    # a pending maximum (Partial("max") on both axes) is completed over the
    # flattened group as a sum is: DTensor merges equal changes of any op
    value = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    with T.simulate(8), T.jax_semantics():
        mesh = DeviceMesh((2, 4), ("data", "model"))
        x = T.distribute_tensor(value, TensorLayout(("data", "model"), mesh))
        with CommDebugMode() as comm:
            top = reduce(x)
        assert float(top.item()) == float(reduce(torch.from_numpy(value)))
    assert _all_reduces(comm) == 1, comm.get_comm_counts()
    assert warnings_seen() == []


def test_fallback_gathers_a_dim_split_over_both_axes_in_one_all_gather(warnings_seen):
    # segment_reduce has no DTensor strategy: the fallback gathers its
    # operand, split over (data, model) on one dim -- one all_gather over the
    # flattened group, not one per mesh axis
    value = np.arange(32, dtype=np.float32).reshape(8, 4)
    lengths = torch.tensor([2, 0, 3, 3])
    with T.simulate(8), T.jax_semantics():
        mesh = DeviceMesh((2, 4), ("data", "model"))
        x = T.distribute_tensor(value, TensorLayout((("data", "model"), None), mesh))
        with CommDebugMode() as comm:
            y = torch.segment_reduce(x, "sum", lengths=lengths)
        np.testing.assert_array_equal(
            T.to_numpy(y), torch.segment_reduce(torch.from_numpy(value), "sum",
                                                lengths=lengths).numpy())
    assert _gathers(comm) == 1, comm.get_comm_counts()
    assert warnings_seen() == []


def test_merge_groups_pairs_the_axes_that_change_alike():
    r, s0, s1 = Replicate(), Shard(0), Shard(1)
    assert merge_groups((Partial("sum"), Partial("avg")), (r, r)) == ((0, 1),)
    assert merge_groups((Partial("max"), Partial("max"), s1), (r, r, s1)) == ((0, 1),)
    assert merge_groups((s0, s0, s1), (r, r, r)) == ((0, 1),)
    assert merge_groups((Partial("max"), Partial("min")), (r, r)) == ()
    assert merge_groups((s0, r), (r, r)) == ()


def test_fallback_gathers_a_dim_split_out_of_mesh_order_in_one_all_gather(warnings_seen):
    # kron runs on the gathered operands (its DTensor strategy gives strided
    # placements no spec describes); an operand split over ("c", "b") -- out
    # of mesh order, a strided shard, which DTensor gathers one axis at a time
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    b = np.arange(8, dtype=np.float32).reshape(2, 4) - 3
    with T.simulate(8), T.jax_semantics():
        mesh = DeviceMesh((2, 2, 2), ("a", "b", "c"))
        xb = T.distribute_tensor(b, TensorLayout((None, ("c", "b")), mesh)).requires_grad_()
        with CommDebugMode() as comm:
            y = torch.kron(T.distribute_tensor(a, TensorLayout((None, None), mesh)), xb)
        y.sum().backward()
        np.testing.assert_array_equal(T.to_numpy(y), np.kron(a, b))
        np.testing.assert_array_equal(T.to_numpy(xb.grad),
                                      np.full_like(b, a.sum()))
        assert tuple(xb.grad.placements) == tuple(xb.placements)
    assert _gathers(comm) == 1, comm.get_comm_counts()
    assert warnings_seen() == []


def test_fallback_operand_gathered_in_one_all_gather_is_contiguous():
    # the one all_gather puts blocks in place with a permute; kron views its
    # operands and refused the permuted copy ("view size is not compatible
    # with input tensor's size and stride"; OpInfo kron on (2, 4))
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    b = np.arange(128, dtype=np.float32).reshape(8, 16)
    with T.simulate(8), T.jax_semantics():
        mesh = DeviceMesh((2, 4), ("data", "model"))
        x = T.distribute_tensor(a, TensorLayout((None, "model"), mesh))
        y = T.distribute_tensor(b, TensorLayout((None, "model"), mesh))
        np.testing.assert_array_equal(T.to_numpy(torch.kron(x, y)), np.kron(a, b))


@pytest.mark.parametrize("add_scalar", [lambda y: y - 1, lambda y: 1 - y, lambda y: y + 0.5,
                                        lambda y: torch.add(y, 1.0, alpha=2)],
                         ids=["sub", "rsub", "add", "add-alpha"])
def test_defer_completes_a_sum_before_a_scalar_is_added_in_one_all_reduce(add_scalar,
                                                                           warnings_seen):
    # under defer a scalar added to a pending sum is not linear: the sum is
    # completed first, one all_reduce over both axes as without defer (it was
    # left to DTensor: one all_reduce per axis, or a reduce-scatter and gathers)
    value = np.arange(64, dtype=np.float32).reshape(8, 8) / 64
    results = {}
    for defer in (False, True):
        with T.simulate(4), T.jax_semantics(defer=defer):
            mesh = DeviceMesh((2, 2), ("batch", "model"))
            x = T.distribute_tensor(value, TensorLayout((None, ("batch", "model")), mesh))
            w = T.distribute_tensor(value, TensorLayout((("batch", "model"), None), mesh))
            with CommDebugMode() as comm:
                z = add_scalar(x @ w)
            results[defer] = (T.to_numpy(z), tuple(z.placements), comm.get_comm_counts())
    values, placements, counts = results[True]
    assert {str(op): n for op, n in counts.items()} == {"c10d_functional.all_reduce": 1}, counts
    assert placements == (Replicate(), Replicate()) == results[False][1]
    np.testing.assert_array_equal(values, results[False][0])
    assert warnings_seen() == []


def test_the_suite_guard_fails_a_block_where_dtensor_splits_a_collective():
    # tests/conftest.py runs every test inside sequential_collectives.forbidden;
    # DTensor's own redistribute of a dim split over both axes warns (one
    # all_gather per axis), parity's does not
    import sequential_collectives

    value = np.arange(64, dtype=np.float32).reshape(8, 8)
    with T.simulate(8):
        mesh = DeviceMesh((2, 4), ("data", "model"))
        x = T.distribute_tensor(value, TensorLayout((("data", "model"), None), mesh))
        with pytest.raises(AssertionError, match="in this block.*2 sequential all_gather.*merged"):
            with sequential_collectives.forbidden("this block"):
                x.redistribute(x.device_mesh, [Replicate(), Replicate()])
        with sequential_collectives.forbidden("parity's gather"):
            np.testing.assert_array_equal(T.to_numpy(T.all_gather_variable(x)), value)


# DTensor gathered these one mesh axis at a time ("2 sequential all_gather
# operations"): strided shards (a dim split over axes out of mesh order),
# re-nested shards, and the backward of a scatter over both axes.
# (mesh, source, target, all_gathers forward, all_gathers backward)
RESHARDS = [
    ("2x4", (("model", "data"), None), (("data",), None), 1, 1),
    ("2x4", (("data", "model"), None), (("model", "data"), None), 1, 1),
    ("2x4", (("model", "data"), None), (None, ("model", "data")), 1, 1),
    ("2x2x2", (None, ("c", "b")), (("b",), ("a",)), 1, 1),
    ("2x2x2", (("c", "b"), None), (("a", "c", "b"), None), 1, 1),
    ("2x2x2", (("c", "a"), None), (None, ("b", "a", "c")), 1, 1),
    ("2x2x2", (("a", "b", "c"), None), (("c",), None), 1, 1),  # (S0,S0,S0) -> (R,R,S0)
    ("2x2x2", (None, ("a", "b", "c")), (("c",), ("b",)), 1, 1),
    ("2x4", (None, None), (("data", "model"), None), 0, 1),  # its backward gathers
]


@pytest.mark.parametrize("mesh_name, src, dst, forward_gathers, backward_gathers", RESHARDS)
def test_reshard_dtensor_splits_is_one_all_gather_and_its_gradient_too(
        mesh_name, src, dst, forward_gathers, backward_gathers):
    shape, names = MESHES[mesh_name]
    value = np.arange(64, dtype=np.float32).reshape(8, 8)
    weight = np.arange(64, dtype=np.float32).reshape(8, 8)[::-1].copy()
    with T.simulate(8), T.jax_semantics():
        mesh = DeviceMesh(shape, names)
        x = T.distribute_tensor(value, TensorLayout(src, mesh)).requires_grad_()
        w = T.distribute_tensor(weight, TensorLayout(dst, mesh))
        with CommDebugMode() as forward:
            y = T.distribute_tensor(x, TensorLayout(dst, mesh))
        assert T.describe(y).spec == tuple(tuple(e) if e else () for e in dst)
        np.testing.assert_array_equal(T.to_numpy(y), value)
        with CommDebugMode() as backward:
            (y * w).sum().backward()
        np.testing.assert_array_equal(T.to_numpy(x.grad), weight)
        assert tuple(x.grad.placements) == tuple(x.placements)
    assert _gathers(forward) == forward_gathers, forward.get_comm_counts()
    assert _gathers(backward) == backward_gathers, backward.get_comm_counts()


def test_gathered_mesh_dims_counts_every_shard_of_a_changed_dim():
    from parity.torch_impl.collectives.merge_plan import gathered_mesh_dims
    from parity.torch_impl.collectives.merge_plan import whole_needed as needed
    from parity.torch_impl.runtime.torch_compat import StridedShard

    r, s0, s1 = Replicate(), Shard(0), Shard(1)
    strided = StridedShard(0, split_factor=2)
    assert gathered_mesh_dims((r, strided, s0), (s0, strided, s0)) == (1, 2)  # one added
    assert gathered_mesh_dims((strided, s0), (s0, r)) == (0, 1)
    assert gathered_mesh_dims((s1, strided, s0), (s1, r, s0)) == (1, 2)  # dim 1 untouched
    assert gathered_mesh_dims((s1, s0), (s1, s0)) == ()
    # what DTensor merges itself (one change, to Replicate, on every gathered axis): not needed
    assert not needed((s0, s0), (r, r)) and not needed((s0, s0, s1), (r, r, s1))
    assert needed((s0, s0, s0), (r, r, s0)) and needed((s0, s1), (r, r))
    assert not needed((Partial("sum"), s0), (r, r))  # pending: an all_reduce, merged elsewhere


def test_an_op_dtensor_replicates_by_itself_under_implicit_replication_is_one_all_gather():
    # fallback.run_implicit (a plain tensor made inside an op beside a
    # DTensor, as fractional max pooling's regions): DTensor's own strategy
    # replicates the operand split over both axes -- with the flattened
    # meshes registered, one all_gather, not one per axis
    from parity.torch_impl.semantics import fallback

    value = np.random.default_rng(0).standard_normal((8, 8, 4, 4)).astype(np.float32)
    regions = torch.rand(1, 8, 3, generator=torch.Generator().manual_seed(0))

    def pool(x):
        return torch.ops.aten.fractional_max_pool3d(x, [2, 2, 2], [3, 2, 2], regions)[0]

    with T.simulate(8):
        mesh = DeviceMesh((2, 4), ("data", "model"))
        x = T.distribute_tensor(value, TensorLayout((("data", "model"), None, None, None), mesh))
        with CommDebugMode() as comm:
            out = fallback.run_implicit(pool, (x,), {}, x.device_mesh)
        np.testing.assert_array_equal(T.to_numpy(out), pool(torch.from_numpy(value)).numpy())
    assert _gathers(comm) == 1, comm.get_comm_counts()
