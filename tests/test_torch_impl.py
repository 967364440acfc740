"""parity.torch_impl on 8 simulated ranks, checked against JAX's block rule
(``TensorLayout.shards``, itself checked against JAX in test_backend_parity)
and against a numpy model of the SPMD collectives."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import MESHES, cpu_devices
from hypothesis import given, settings
from hypothesis import strategies as st

import parity
from parity.layout_space import all_specs
from parity.torch_impl.layouts.specs import to_placements, to_spec


def host_array(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def layout_cases():
    for mesh_id, (shape, names) in MESHES.items():
        for rank in (1, 2, 3):
            for spec in all_specs(names, rank):
                yield pytest.param(mesh_id, spec, id=f"{mesh_id}-{spec}")


def check_blocks(ti, x, host, layout):
    """Each device holds exactly the slice JAX gives it, and nothing more."""
    for device, bounds in layout.shards(host.shape).items():
        block = ti.local_block(x, device).numpy()
        expected = host[tuple(slice(a, b) for a, b in bounds)]
        np.testing.assert_array_equal(block, expected, err_msg=f"device {device}")


@pytest.mark.parametrize("mesh_id,spec", list(layout_cases()))
def test_every_layout_places_each_block_where_jax_does(sim8, mesh_id, spec):
    ti = sim8
    mesh = parity.DeviceMesh(*MESHES[mesh_id])
    layout = parity.TensorLayout.from_spec(spec, mesh)
    host = host_array((8, 16, 8)[: len(spec)])
    x = ti.distribute_tensor(host, layout)
    placement = ti.describe(x)
    assert placement.spec == spec
    assert placement.shards == layout.shards(host.shape)
    assert placement.pending == ()
    check_blocks(ti, x, host, layout)
    np.testing.assert_array_equal(ti.to_numpy(x), host)


@pytest.mark.parametrize("mesh_id", list(MESHES))
def test_placements_round_trip_to_spec(mesh_id):
    shape, names = MESHES[mesh_id]
    for rank in (1, 2, 3):
        for spec in all_specs(names, rank):
            placements = to_placements(spec, shape, names)
            assert to_spec(placements, rank, shape, names) == (spec, ())


def test_reversed_axis_order_needs_a_strided_shard(sim8):
    # The example: P(("model", "data")) on a (2, 4) mesh, 16 elements.
    mesh = parity.DeviceMesh((2, 4), ("data", "model"))
    layout = parity.TensorLayout((("model", "data"),), mesh)
    x = sim8.distribute_tensor(np.arange(16, dtype=np.float32), layout)
    assert sim8.describe(x).shards[1] == ((4, 6),)
    np.testing.assert_array_equal(sim8.local_block(x, 1).numpy(), [4, 5])
    assert type(x.placements[0]).__name__ == "_StridedShard"


def test_sharded_variable_stores_one_nth_of_the_bytes_per_rank(sim8):
    mesh = parity.DeviceMesh((2, 4), ("data", "model"))
    host = host_array((64, 32))
    var = sim8.distribute_variable(host, parity.TensorLayout(("data", "model"), mesh))
    assert isinstance(var, torch.nn.Parameter) and var.requires_grad
    for device in range(8):
        block = sim8.local_block(var, device)
        assert block.untyped_storage().nbytes() == host.nbytes // 8
    np.testing.assert_array_equal(sim8.to_numpy(var), host)


def test_mesh_with_permuted_devices_maps_device_index_to_its_rank(sim8):
    devices = cpu_devices(8)[::-1]
    mesh = parity.DeviceMesh((2, 4), ("data", "model"), devices)
    layout = parity.TensorLayout(("data", "model"), mesh)
    host = host_array((4, 8))
    x = sim8.distribute_tensor(host, layout)
    check_blocks(sim8, x, host, layout)
    assert int(x.device_mesh.mesh.flatten()[0]) == 7


def spmd_blocks(host, layout):
    mesh = layout.device_mesh
    return {
        d: host[tuple(slice(a, b) for a, b in bounds)]
        for d, bounds in layout.shards(host.shape).items()
    }, mesh


def group_of(mesh, device, axis_name):
    """Devices sharing every coordinate of ``device`` but ``axis_name``'s, in axis order."""
    coords = np.array(np.unravel_index(np.arange(mesh.size), mesh.shape)).T
    axis = mesh.axis_index(axis_name)
    mine = coords[device]
    return [
        d
        for d in range(mesh.size)
        if all(coords[d][k] == mine[k] for k in range(len(mesh.shape)) if k != axis)
    ]


NUMPY_REDUCE = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}


def collective_cases():
    for mesh_id in ("8", "2x4", "2x2x2"):
        shape, names = MESHES[mesh_id]
        for spec in list(all_specs(names, 2))[::3]:
            for axis_name in names:
                yield pytest.param(mesh_id, spec, axis_name, id=f"{mesh_id}-{spec}-{axis_name}")


@pytest.mark.parametrize("mesh_id,spec,axis_name", list(collective_cases()))
def test_collectives_follow_the_spmd_model(sim8, mesh_id, spec, axis_name):
    ti = sim8
    mesh = parity.DeviceMesh(*MESHES[mesh_id])
    layout = parity.TensorLayout.from_spec(spec, mesh)
    host = host_array((16, 16), seed=1)
    x = ti.distribute_tensor(host, layout)
    blocks, _ = spmd_blocks(host, layout)
    size = mesh.axis_size(axis_name)
    for op, reduce in NUMPY_REDUCE.items():
        out = ti.all_reduce(x, op, axis_name=axis_name)
        assert ti.describe(out).spec == parity.layout.spec_without_axis(spec, axis_name)
        for d in range(mesh.size):
            group = [blocks[g] for g in group_of(mesh, d, axis_name)]
            np.testing.assert_allclose(
                ti.local_block(out, d).numpy(), reduce(np.stack(group), axis=0), rtol=1e-5, atol=1e-5
            )
    for axis in (0, 1):
        gathered = ti.all_gather(x, axis, axis_name)
        out_spec = parity.layout.spec_without_axis(spec, axis_name)
        assert ti.describe(gathered).spec == out_spec
        for d in range(mesh.size):
            group = [blocks[g] for g in group_of(mesh, d, axis_name)]
            np.testing.assert_array_equal(
                ti.local_block(gathered, d).numpy(), np.concatenate(group, axis=axis)
            )
        if blocks[0].shape[axis] % size:
            with pytest.raises(parity.ShardingError):
                ti.reduce_scatter(x, axis, axis_name)
            continue
        scattered = ti.reduce_scatter(x, axis, axis_name)
        expected_spec = list(out_spec)
        expected_spec[axis] = expected_spec[axis] + (axis_name,)
        assert ti.describe(scattered).spec == tuple(expected_spec)
        for d in range(mesh.size):
            group_devices = group_of(mesh, d, axis_name)
            k = group_devices.index(d)
            total = np.sum(np.stack([blocks[g] for g in group_devices]), axis=0)
            chunk = np.split(total, size, axis=axis)[k]
            np.testing.assert_allclose(ti.local_block(scattered, d).numpy(), chunk, rtol=1e-5, atol=1e-5)


def test_all_reduce_uses_only_the_named_axis_group(sim8):
    mesh = parity.DeviceMesh((2, 4), ("data", "model"))
    x = sim8.distribute_tensor(np.ones((2, 4), np.float32), parity.TensorLayout(("data", "model"), mesh))
    out = sim8.all_reduce(x, "sum", axis_name="model")
    np.testing.assert_array_equal(sim8.to_numpy(out), [[4.0], [4.0]])


def test_all_gather_variable_replicates(sim8):
    mesh = parity.DeviceMesh((2, 4), ("data", "model"))
    host = host_array((8, 8))
    x = sim8.distribute_tensor(host, parity.TensorLayout(("model", "data"), mesh))
    full = sim8.all_gather_variable(x)
    assert sim8.describe(full).spec == ((), ())
    for d in range(8):
        np.testing.assert_array_equal(sim8.local_block(full, d).numpy(), host)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_resharding_between_any_two_layouts_keeps_values_and_places_blocks(data):
    from parity import torch_impl as ti

    mesh_id = data.draw(st.sampled_from(list(MESHES)))
    shape, names = MESHES[mesh_id]
    rank = data.draw(st.integers(1, 3))
    specs = list(all_specs(names, rank))
    src = data.draw(st.sampled_from(specs))
    dst = data.draw(st.sampled_from(specs))
    host = host_array((8, 8, 8)[:rank], seed=2)
    with ti.simulate(8):
        mesh = parity.DeviceMesh(shape, names)
        x = ti.distribute_tensor(host, parity.TensorLayout.from_spec(src, mesh))
        target = parity.TensorLayout.from_spec(dst, mesh)
        y = ti.distribute_tensor(x, target)
        assert ti.describe(y).spec == dst
        check_blocks(ti, y, host, target)


def test_distribute_data_input_in_one_process_is_the_global_batch(sim8):
    mesh = parity.DeviceMesh((2, 4), ("batch", "model"))
    batch = host_array((8, 4))
    x = sim8.distribute_data_input(batch, parity.TensorLayout(("batch", None), mesh), "batch")
    np.testing.assert_array_equal(sim8.to_numpy(x), batch)
    assert sim8.describe(x).spec == (("batch",), ())


# -- errors -----------------------------------------------------------------


@pytest.fixture
def mesh24(sim8):
    return parity.DeviceMesh((2, 4), ("data", "model"))


def test_unknown_axis_raises_layout_error(mesh24):
    with pytest.raises(parity.LayoutError, match="'expert'") as info:
        parity.TensorLayout(("expert", None), mesh24)
    assert (info.value.what, info.value.value) == ("axes", ("expert", None))


def test_axis_used_twice_raises_layout_error(mesh24):
    with pytest.raises(parity.LayoutError, match="used twice") as info:
        parity.TensorLayout(("data", "data"), mesh24)
    assert (info.value.what, info.value.value) == ("axes", ("data", "data"))


def test_rank_mismatch_raises_layout_error(sim8, mesh24):
    with pytest.raises(parity.LayoutError, match="rank 2") as info:
        sim8.distribute_tensor(np.ones((4, 4)), parity.TensorLayout(("data",), mesh24))
    assert (info.value.what, info.value.value) == ("shape", (4, 4))


def test_indivisible_dim_raises_sharding_error_instead_of_uneven_chunks(sim8, mesh24):
    with pytest.raises(parity.IndivisibleError, match="Dim 1 of shape \\(4, 6\\) has size 6") as info:
        sim8.distribute_tensor(np.ones((4, 6)), parity.TensorLayout(("data", "model"), mesh24))
    err = info.value
    assert (err.dim, err.size, err.axes, err.shards) == (1, 6, ("model",), 4)


def test_device_count_mismatch_raises(sim8):
    with pytest.raises(parity.LayoutError, match="number of devices") as info:
        parity.DeviceMesh((4, 4), ("data", "model"))
    assert (info.value.what, info.value.value) == ("devices", (8,))


def test_collective_bad_arguments_raise_layout_error(sim8, mesh24):
    x = sim8.distribute_tensor(np.ones((4, 4), np.float32), parity.TensorLayout(("data", None), mesh24))
    with pytest.raises(parity.LayoutError, match="'expert' is not a mesh axis") as info:
        sim8.all_reduce(x, "sum", axis_name="expert")
    assert (info.value.what, info.value.value) == ("axis_name", "expert")
    with pytest.raises(parity.LayoutError, match="'prod'") as info:
        sim8.all_reduce(x, "prod", axis_name="data")
    assert (info.value.what, info.value.value) == ("op", "prod")
    with pytest.raises(parity.LayoutError, match="axis=2") as info:
        sim8.all_gather(x, 2, "model")
    assert (info.value.what, info.value.value) == ("axis", 2)


def test_plain_tensor_to_collective_raises_parity_error(sim8):
    with pytest.raises(parity.ParityError, match="distribute_tensor"):
        sim8.all_reduce(torch.ones(4), "sum", axis_name="data")


@pytest.mark.parametrize("call", [
    lambda ti, x: ti.all_reduce(x, "sum", axis_name="data"),
    lambda ti, x: ti.all_gather(x, 0, "data"),
    lambda ti, x: ti.reduce_scatter(x, 1, "model"),
], ids=["all_reduce", "all_gather", "reduce_scatter"])
def test_collectives_refuse_a_gradient_instead_of_a_wrong_one(sim8, mesh24, call):
    """As in jax_ref (collectives need concrete arrays): a tensor that
    requires grad is refused with a parity error naming the fix; under
    no_grad the same call works. (Without the check the gradient came back
    multiplied by the group size.)"""
    x = sim8.distribute_tensor(host_array((8, 16)), parity.TensorLayout(("data", None), mesh24))
    x.requires_grad_()
    with pytest.raises(parity.ParityError, match="not differentiable.*torch.no_grad"):
        call(sim8, x)
    with torch.no_grad():
        out = call(sim8, x)
    assert not out.requires_grad
    np.testing.assert_allclose(
        sim8.to_numpy(out), sim8.to_numpy(call(sim8, x.detach())), rtol=1e-6)


def test_jax_ref_collectives_are_not_differentiable_either():
    from parity import jax_ref as jr

    jr.simulate(8)
    import jax
    import jax.numpy as jnp

    mesh = parity.DeviceMesh((2, 4), ("data", "model"), jr.list_devices())
    x = jr.distribute_tensor(host_array((8, 16)), parity.TensorLayout(("data", None), mesh))
    with pytest.raises(parity.ParityError, match="concrete array"):
        jax.grad(lambda t: jnp.sum(jr.all_reduce(t, "sum", "data")))(x)


def test_no_ranks_outside_simulate_raises_parity_error():
    from parity import torch_impl as ti

    mesh = parity.DeviceMesh((1,), ("x",), ["cpu:0"])
    with pytest.raises(parity.ParityError, match="simulate"):
        ti.distribute_tensor(np.ones(4), parity.TensorLayout(("x",), mesh))


def test_simulate_cannot_nest():
    from parity import torch_impl as ti

    with ti.simulate(4):
        with pytest.raises(parity.ParityError, match="already"):
            with ti.simulate(4):
                pass
    assert ti.list_devices() == ["cpu:0"]


def test_simulate_lists_its_devices_and_cleans_up():
    from parity import torch_impl as ti

    with ti.simulate(8):
        assert ti.list_devices() == cpu_devices(8)
        assert ti.get_device_count() == 8
        assert ti.num_processes() == 1 and ti.process_id() == 0
    assert not torch.distributed.is_initialized()


def test_describe_reports_the_uneven_blocks_of_a_raw_dtensor(sim8):
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = parity.DeviceMesh((2, 4), ("data", "model"))
    raw = distribute_tensor(torch.arange(30.0).reshape(5, 6), sim8.to_torch_mesh(mesh), [Shard(0), Shard(1)])
    placement = sim8.describe(raw)
    assert placement.shards[3] == ((0, 3), (6, 6))
    for device, bounds in placement.shards.items():
        held = tuple(sim8.local_block(raw, device).shape)
        assert held == tuple(b - a for a, b in bounds)


def test_scalar_variable_keeps_rank_zero(sim8):
    mesh = parity.DeviceMesh((2, 4), ("data", "model"))
    var = sim8.distribute_variable(np.array(0, np.int64), parity.TensorLayout((), mesh))
    assert tuple(var.shape) == () and not var.requires_grad
    assert sim8.to_numpy(var) == 0


def test_ranks_use_nccl_only_when_each_local_rank_has_a_gpu(monkeypatch):
    from parity.torch_impl.runtime import devices

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert devices._one_gpu_per_local_rank({"LOCAL_WORLD_SIZE": "2"})
    assert devices._one_gpu_per_local_rank({})  # one process, no torchrun
    # NCCL refuses two ranks on one GPU: gloo on CPU instead, and say so.
    with pytest.warns(UserWarning, match="4 local ranks but 2 visible GPU"):
        assert not devices._one_gpu_per_local_rank({"LOCAL_WORLD_SIZE": "4"})


def test_ranks_use_gloo_without_cuda(monkeypatch):
    from parity.torch_impl.runtime import devices

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not devices._one_gpu_per_local_rank({"LOCAL_WORLD_SIZE": "1"})


def test_collective_results_live_on_the_current_mesh_in_every_simulate_block():
    from parity import torch_impl as ti

    for _ in range(2):  # the second block's torch mesh equals the first's
        with ti.simulate(8):
            mesh = parity.DeviceMesh((2, 4), ("data", "model"))
            x = ti.distribute_tensor(host_array((8, 8)), parity.TensorLayout(("data", "model"), mesh))
            for y in (ti.all_reduce(x, "sum", axis_name="model"), ti.all_gather(x, 0, "data"),
                      ti.reduce_scatter(x, 1, "data")):
                assert y.device_mesh is x.device_mesh


# -- donation ----------------------------------------------------------------

DONATING = {
    "all_reduce": lambda ti, x: ti.all_reduce(x, "sum", axis_name="model", donate=True),
    "all_gather": lambda ti, x: ti.all_gather(x, 1, "model", donate=True),
    "reduce_scatter": lambda ti, x: ti.reduce_scatter(x, 0, "data", donate=True),
}
NOT_DONATING = {
    "all_reduce": lambda ti, x: ti.all_reduce(x, "sum", axis_name="model"),
    "all_gather": lambda ti, x: ti.all_gather(x, 1, "model"),
    "reduce_scatter": lambda ti, x: ti.reduce_scatter(x, 0, "data"),
}


@pytest.mark.parametrize("name", list(DONATING))
def test_a_donating_collective_returns_the_same_value(sim8, mesh24, name):
    host = np.arange(64, dtype=np.float32).reshape(8, 8)
    layout = parity.TensorLayout(("data", "model"), mesh24)
    expected = NOT_DONATING[name](sim8, sim8.distribute_tensor(host, layout))
    got = DONATING[name](sim8, sim8.distribute_tensor(host, layout))
    assert sim8.describe(got) == sim8.describe(expected)
    np.testing.assert_array_equal(sim8.to_numpy(got), sim8.to_numpy(expected))


USES = {
    "an op": lambda ti, x: x + 1,
    "to_numpy": lambda ti, x: ti.to_numpy(x),
    "another collective": lambda ti, x: ti.all_reduce(x, "sum", axis_name="data"),
    "describe": lambda ti, x: ti.describe(x),
    "its local tensor": lambda ti, x: x.to_local() * 2,
    "all_gather_variable": lambda ti, x: ti.all_gather_variable(x),
}


@pytest.mark.parametrize("use", list(USES))
@pytest.mark.parametrize("name", list(DONATING))
def test_a_donated_tensor_raises_on_any_later_use(sim8, mesh24, name, use):
    from parity.errors import DonatedArrayError

    x = sim8.distribute_tensor(np.ones((8, 8), np.float32), parity.TensorLayout(("data", "model"), mesh24))
    DONATING[name](sim8, x)
    with pytest.raises(DonatedArrayError, match=f"donated to {name}") as info:
        USES[use](sim8, x)
    assert info.value.what == name


def test_a_tensor_not_donated_stays_usable(sim8, mesh24):
    host = np.ones((8, 8), np.float32)
    x = sim8.distribute_tensor(host, parity.TensorLayout(("data", "model"), mesh24))
    sim8.all_reduce(x, "sum", axis_name="model")
    np.testing.assert_array_equal(sim8.to_numpy(x), host)


# -- per-call plans ----------------------------------------------------------


def test_a_cached_plan_still_checks_a_bad_argument_on_every_call(sim8, mesh24):
    x = sim8.distribute_tensor(np.ones((8, 8), np.float32), parity.TensorLayout(("data", "model"), mesh24))
    sim8.all_reduce(x, "sum", axis_name="model")  # caches the plan for (spec, sum, model)
    for _ in range(2):
        with pytest.raises(parity.LayoutError, match="axis_name='expert' is not a mesh axis"):
            sim8.all_reduce(x, "sum", axis_name="expert")
        with pytest.raises(parity.LayoutError, match="op='prod'"):
            sim8.all_reduce(x, "prod", axis_name="model")
        with pytest.raises(parity.LayoutError, match="axis_name=\\['model'\\]"):
            sim8.all_reduce(x, "sum", axis_name=["model"])


def test_a_cached_plan_keeps_mean_of_integers_floating(sim8, mesh24):
    x = sim8.distribute_tensor(np.arange(64, dtype=np.int32).reshape(8, 8),
                               parity.TensorLayout(("data", "model"), mesh24))
    for _ in range(2):
        out = sim8.all_reduce(x, "mean", axis_name="data")
        assert out.dtype == torch.float32 and sim8.to_numpy(out).dtype == np.float32


# -- one collective per gather -------------------------------------------------


@pytest.mark.parametrize("spec", [(("data", "model"), ()), (("model", "data"), ()),
                                  (("data",), ("model",)), (("model",), ("data",))])
@pytest.mark.parametrize("gather", ["to_numpy", "all_gather_variable"])
def test_gathering_an_array_sharded_over_two_axes_is_one_collective(sim8, mesh24, spec, gather):
    from torch.distributed.tensor.debug import CommDebugMode

    host = np.arange(64, dtype=np.float32).reshape(8, 8)
    x = sim8.distribute_tensor(host, parity.TensorLayout.from_spec(spec, mesh24))
    with CommDebugMode() as comm:
        out = getattr(sim8, gather)(x)
    assert comm.get_total_counts() == 1, comm.get_comm_counts()
    np.testing.assert_array_equal(sim8.to_numpy(out), host)


def test_gathering_an_array_sharded_over_two_axes_logs_no_torch_warning(sim8, mesh24, caplog):
    x = sim8.distribute_tensor(np.ones((8, 8), np.float32),
                               parity.TensorLayout((("model", "data"), None), mesh24))
    with caplog.at_level("WARNING"):
        sim8.to_numpy(x)
        sim8.all_gather_variable(x)
    assert not [r for r in caplog.records if r.name.startswith("torch")], caplog.text


def test_all_gather_variable_of_a_tensor_that_requires_grad_stays_differentiable(sim8, mesh24):
    x = sim8.distribute_variable(np.ones((8, 8), np.float32),
                                 parity.TensorLayout((("data", "model"), None), mesh24))
    y = sim8.all_gather_variable(x)
    assert y.requires_grad and sim8.describe(y).spec == ((), ())
