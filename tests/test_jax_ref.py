"""parity.jax_ref on 8 simulated CPU devices: JAX's own block placement
(``devices_indices_map``) agrees with ``TensorLayout.shards`` for every
layout, and the collectives agree with a numpy model of their SPMD meaning
written here, independently of the backend."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from conftest import MESHES, cpu_devices

import parity
from parity import jax_ref
from parity.layout_space import all_specs

jax_ref.simulate(8)  # before anything starts JAX's backend

import jax  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

LAYOUT_SHAPES = {1: (16,), 2: (8, 16), 3: (8, 16, 8)}
COLLECTIVE_SHAPE = (64, 64)  # every block still divides by every axis size
OPS = ("sum", "mean", "max", "min")


def make_mesh(mesh_id: str) -> parity.DeviceMesh:
    shape, names = MESHES[mesh_id]
    return parity.DeviceMesh(shape, names, jax_ref.list_devices())


def host_array(shape, seed=0):
    # Small integers as float32: sums and means by 2, 4, 8 are exact.
    return np.random.default_rng(seed).integers(-8, 9, shape).astype(np.float32)


def block_of(host, bounds):
    return host[tuple(slice(a, b) for a, b in bounds)]


# ---------------------------------------------------------------- devices


def test_simulate_gives_eight_named_cpu_devices():
    assert jax_ref.list_devices() == cpu_devices(8)
    assert jax_ref.list_devices("cpu") == cpu_devices(8)
    assert jax_ref.get_device_count() == 8


def test_simulate_again_with_the_same_count_is_a_no_op():
    jax_ref.simulate(8)
    assert jax_ref.get_device_count() == 8


def test_simulate_after_backend_start_with_another_count_raises():
    with pytest.raises(parity.ParityError, match="already started its backend with 8"):
        jax_ref.simulate(4)


@pytest.mark.parametrize("n", [0, -1, 2.0, True])
def test_simulate_rejects_a_count_that_is_not_a_positive_int(n):
    with pytest.raises(parity.ParityError, match="positive int"):
        jax_ref.simulate(n)


def test_one_process_has_process_count_one_and_id_zero():
    assert (jax_ref.num_processes(), jax_ref.process_id()) == (1, 0)


def test_initialize_after_backend_start_raises():
    with pytest.raises(parity.ParityError, match="before JAX starts its backend"):
        jax_ref.initialize("localhost:1234", 2, 0)


def test_initialize_rejects_more_addresses_than_processes_from_keras_env(monkeypatch):
    monkeypatch.setenv("KERAS_DISTRIBUTION_JOB_ADDRESSES", "10.0.0.1:1234,10.0.0.2:2345")
    monkeypatch.setenv("KERAS_DISTRIBUTION_NUM_PROCESSES", "3")
    with pytest.raises(parity.ParityError, match="has 2 jobs, but num_processes is 3"):
        jax_ref.initialize()


# ---------------------------------------------------------------- meshes


def test_mesh_has_explicit_axes_by_default_and_is_cached():
    mesh = make_mesh("2x4")
    jax_mesh = jax_ref.to_jax_mesh(mesh)
    assert jax_mesh.axis_types == (AxisType.Explicit, AxisType.Explicit)
    assert dict(jax_mesh.shape) == {"data": 2, "model": 4}
    assert jax_ref.to_jax_mesh(make_mesh("2x4")) is jax_mesh
    assert jax_ref._to_backend_mesh(mesh) is jax_mesh


def test_mesh_with_auto_axes():
    jax_mesh = jax_ref.to_jax_mesh(make_mesh("2x2x2"), axis_types="auto")
    assert jax_mesh.axis_types == (AxisType.Auto,) * 3


def test_mesh_rejects_unknown_axis_types():
    with pytest.raises(parity.ParityError, match="'manual'.*'auto', 'explicit'"):
        jax_ref.to_jax_mesh(make_mesh("8"), axis_types="manual")


def test_mesh_devices_are_looked_up_by_name_in_mesh_order():
    mesh = parity.DeviceMesh((2, 4), ("data", "model"), cpu_devices(8)[::-1])
    devices = jax_ref.to_jax_mesh(mesh).devices
    assert [(d.platform, d.id) for d in devices.flat] == [("cpu", i) for i in range(7, -1, -1)]


def test_mesh_with_a_device_jax_lacks_raises():
    mesh = parity.DeviceMesh((8,), ("x",), [f"cpu:{i}" for i in range(1, 9)])
    with pytest.raises(parity.LayoutError, match="'cpu:8' not found"):
        jax_ref.to_jax_mesh(mesh)


def test_mesh_with_the_wrong_device_count_raises():
    with pytest.raises(parity.LayoutError, match="does not match the number of devices"):
        parity.DeviceMesh((2, 4), ("data", "model"), jax_ref.list_devices()[:4])


def test_mesh_converts_back_to_the_same_device_mesh():
    mesh = make_mesh("4x2")
    assert jax_ref.to_parity_mesh(jax_ref.to_jax_mesh(mesh)) == mesh


def test_named_sharding_splits_a_dim_over_two_axes_major_first():
    layout = parity.TensorLayout((("model", "data"), None), make_mesh("2x4"))
    sharding = jax_ref.to_named_sharding(layout)
    assert sharding.spec == P(("model", "data"), None)
    assert jax_ref._to_backend_layout(layout) == sharding


# ---------------------------------------------------------------- layouts


def layout_params():
    for mesh_id, (_, names) in MESHES.items():
        for rank in (1, 2, 3):
            for spec in all_specs(names, rank):
                yield pytest.param(mesh_id, spec, id=f"{mesh_id}-{spec}")


@pytest.mark.parametrize("mesh_id,spec", list(layout_params()))
def test_every_layout_places_blocks_where_layout_shards_says(mesh_id, spec):
    mesh = make_mesh(mesh_id)
    layout = parity.TensorLayout.from_spec(spec, mesh)
    host = host_array(LAYOUT_SHAPES[len(spec)])
    x = jax_ref.distribute_tensor(host, layout)
    placement = jax_ref.describe(x)
    assert placement.shape == host.shape
    assert placement.spec == spec
    assert placement.shards == layout.shards(host.shape)
    assert (placement.dtype, placement.pending) == ("float32", ())
    assert (placement.mesh_shape, placement.axis_names) == (mesh.shape, mesh.axis_names)
    for device, bounds in placement.shards.items():
        np.testing.assert_array_equal(
            jax_ref.local_block(x, device), block_of(host, bounds), err_msg=f"device {device}"
        )
    np.testing.assert_array_equal(jax_ref.to_numpy(x), host)


@pytest.mark.parametrize("mesh_id", list(MESHES))
def test_every_layout_on_auto_axes_has_the_same_placement(mesh_id):
    mesh = make_mesh(mesh_id)
    for rank, shape in LAYOUT_SHAPES.items():
        host = host_array(shape)
        for spec in all_specs(mesh.axis_names, rank):
            layout = parity.TensorLayout.from_spec(spec, mesh)
            x = jax_ref.distribute_tensor(host, layout, axis_types="auto")
            assert x.sharding.mesh.axis_types[0] == AxisType.Auto
            assert jax_ref.describe(x).shards == layout.shards(shape), spec
            assert jax_ref.describe(x).spec == spec


def test_device_index_is_the_position_in_the_mesh_not_the_device_id():
    mesh = parity.DeviceMesh((8,), ("x",), cpu_devices(8)[::-1])
    x = jax_ref.distribute_tensor(np.arange(16.0), parity.TensorLayout(("x",), mesh))
    assert jax_ref.describe(x).shards[0] == ((0, 2),)
    assert x.addressable_shards[0].device.id in range(8)
    holder = {s.device.id: s.index for s in x.addressable_shards}
    assert holder[7] == (slice(0, 2),)


def test_describe_pads_a_partition_spec_shorter_than_the_rank():
    jax_mesh = jax_ref.to_jax_mesh(make_mesh("2x4"))
    x = jax.device_put(host_array((8, 4)), NamedSharding(jax_mesh, P("data")))
    assert jax_ref.describe(x).spec == (("data",), ())


def test_describe_rejects_host_and_single_device_arrays():
    with pytest.raises(parity.ParityError, match="got ndarray"):
        jax_ref.describe(np.ones(4))
    with pytest.raises(parity.ParityError, match="SingleDeviceSharding"):
        jax_ref.describe(jax.numpy.ones(4))


def test_jax_disables_x64_so_int64_and_float64_arrive_as_32_bit():
    layout = parity.TensorLayout(("x",), make_mesh("8"))
    assert jax_ref.describe(jax_ref.distribute_tensor(np.arange(8), layout)).dtype == "int32"
    assert jax_ref.describe(jax_ref.distribute_tensor(np.ones(8), layout)).dtype == "float32"


def test_distribute_tensor_accepts_a_python_list():
    layout = parity.TensorLayout((None, "model"), make_mesh("2x4"))
    x = jax_ref.distribute_tensor([[1, 2, 3, 4]] * 2, layout)
    assert x.shape == (2, 4)
    np.testing.assert_array_equal(jax_ref.local_block(x, 1), [[2], [2]])


def test_distribute_tensor_inside_jit_constrains_the_layout():
    layout = parity.TensorLayout(("data", "model"), make_mesh("2x4"))
    y = jax.jit(lambda v: jax_ref.distribute_tensor(v * 2, layout))(host_array((8, 8)))
    assert jax_ref.describe(y).shards == layout.shards((8, 8))


def test_distribute_variable_stores_one_block_per_device():
    layout = parity.TensorLayout(("data", "model"), make_mesh("2x4"))
    var = jax_ref.distribute_variable(host_array((64, 32)), layout)
    assert {s.data.shape for s in var.addressable_shards} == {(32, 8)}


def test_distribute_data_input_in_one_process_equals_distribute_tensor():
    layout = parity.TensorLayout(("data", None), make_mesh("2x4"))
    batch = host_array((16, 3))
    x = jax_ref.distribute_data_input(batch, layout, batch_dim_name="data")
    assert jax_ref.describe(x) == jax_ref.describe(jax_ref.distribute_tensor(batch, layout))
    np.testing.assert_array_equal(jax_ref.to_numpy(x), batch)


def test_distribute_data_input_rejects_an_unknown_batch_dim_name():
    layout = parity.TensorLayout(("data", None), make_mesh("2x4"))
    with pytest.raises(parity.LayoutError, match="'batch' is not in the mesh"):
        jax_ref.distribute_data_input(host_array((16, 3)), layout, batch_dim_name="batch")


def test_all_gather_variable_is_fully_replicated_with_the_same_values():
    host = host_array((8, 16))
    x = jax_ref.distribute_tensor(host, parity.TensorLayout(("data", "model"), make_mesh("2x4")))
    y = jax_ref.all_gather_variable(x)
    placement = jax_ref.describe(y)
    assert placement.spec == ((), ())
    assert set(placement.shards.values()) == {((0, 8), (0, 16))}
    np.testing.assert_array_equal(jax_ref.to_numpy(y), host)


# ---------------------------------------------------------------- resharding

RESHARDS = [
    (("data", "model"), ("model", "data")),
    ((("data", "model"), None), (None, ("model", "data"))),
    ((None, None), ("data", "model")),
    (("model", None), (None, None)),
    ((("model", "data"), None), (("data", "model"), None)),
]


@pytest.mark.parametrize("source,target", RESHARDS, ids=str)
def test_distribute_tensor_reshards_a_distributed_array(source, target):
    mesh = make_mesh("2x4")
    host = host_array((8, 16))
    x = jax_ref.distribute_tensor(host, parity.TensorLayout(source, mesh))
    target_layout = parity.TensorLayout(target, mesh)
    y = jax_ref.distribute_tensor(x, target_layout)
    assert jax_ref.describe(y).shards == target_layout.shards(host.shape)
    np.testing.assert_array_equal(jax_ref.to_numpy(y), host)


def test_resharding_moves_an_auto_array_onto_explicit_axes():
    layout = parity.TensorLayout(("data", "model"), make_mesh("2x4"))
    x = jax_ref.distribute_tensor(host_array((8, 8)), layout, axis_types="auto")
    y = jax_ref.distribute_tensor(x, layout)
    assert y.sharding.mesh.axis_types == (AxisType.Explicit, AxisType.Explicit)


# ---------------------------------------------------------------- layout errors


def test_layout_with_an_unknown_axis_raises():
    with pytest.raises(parity.LayoutError, match="'batch'.*mesh axes are") as info:
        parity.TensorLayout(("batch", None), make_mesh("2x4"))
    assert (info.value.what, info.value.value) == ("axes", ("batch", None))


def test_layout_using_an_axis_twice_raises():
    with pytest.raises(parity.LayoutError, match="used twice"):
        parity.TensorLayout(("data", ("model", "data")), make_mesh("2x4"))


def test_distribute_with_a_rank_mismatch_raises():
    layout = parity.TensorLayout(("data",), make_mesh("2x4"))
    with pytest.raises(parity.LayoutError, match="1 entries but the tensor has rank 2"):
        jax_ref.distribute_tensor(host_array((8, 8)), layout)


def test_distribute_with_an_indivisible_dim_raises_sharding_error():
    layout = parity.TensorLayout((None, "model"), make_mesh("2x4"))
    with pytest.raises(parity.ShardingError, match="size 10, which does not divide by 4"):
        jax_ref.distribute_tensor(host_array((2, 10)), layout)


def test_distribute_with_a_layout_without_mesh_raises_with_a_fix():
    with pytest.raises(parity.LayoutError, match="has no device mesh. Fix") as info:
        jax_ref.distribute_tensor(host_array((8,)), parity.TensorLayout(("x",)))
    assert (info.value.what, info.value.value) == ("device_mesh", None)


@pytest.mark.parametrize("axis_types", ["explicit", "auto"])
def test_jax_itself_refuses_an_indivisible_shape(axis_types):
    jax_mesh = jax_ref.to_jax_mesh(make_mesh("2x4"), axis_types)
    with pytest.raises(ValueError, match="evenly divide"):
        jax.device_put(np.arange(10.0), NamedSharding(jax_mesh, P("model")))


# ---------------------------------------------------------------- collectives
# The numpy model: every device's block comes from layout.shards; a group is
# the devices equal on every other mesh axis, ordered by their coordinate on
# the collective's axis.


def groups_along(mesh_shape, axis):
    coords = list(itertools.product(*(range(s) for s in mesh_shape)))  # devices.flat order
    groups: dict[tuple, list[int]] = {}
    for device, coord in enumerate(coords):
        groups.setdefault(coord[:axis] + coord[axis + 1 :], []).append(device)
    return list(groups.values())


NP_REDUCE = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}


def model_blocks(kind, blocks, mesh, axis_name, op="sum", axis=0):
    out = {}
    for group in groups_along(mesh.shape, mesh.axis_names.index(axis_name)):
        members = [blocks[d] for d in group]
        if kind == "all_gather":
            result = [np.concatenate(members, axis=axis)] * len(group)
        else:
            reduced = NP_REDUCE[op](np.stack(members), axis=0)
            if kind == "all_reduce":
                result = [reduced] * len(group)
            else:
                result = np.split(reduced, len(group), axis=axis)
        out.update(zip(group, result))
    return out


def expected_spec(kind, spec, axis_name, axis):
    out = [tuple(n for n in names if n != axis_name) for names in spec]
    if kind == "reduce_scatter":
        out[axis] = out[axis] + (axis_name,)
    return tuple(out)


def collective_params():
    rng = random.Random(0)
    for mesh_id, (_, names) in MESHES.items():
        sharded = [s for s in all_specs(names, 2) if any(s)]
        specs = [((), ())] + rng.sample(sharded, 2)
        for axis_name, spec in itertools.product(names, specs):
            yield mesh_id, axis_name, spec


def check_collective(kind, mesh_id, axis_name, spec, op="sum", axis=0):
    mesh = make_mesh(mesh_id)
    layout = parity.TensorLayout.from_spec(spec, mesh)
    host = host_array(COLLECTIVE_SHAPE, seed=1)
    x = jax_ref.distribute_tensor(host, layout)
    if kind == "all_reduce":
        y = jax_ref.all_reduce(x, op, axis_name=axis_name)
    elif kind == "all_gather":
        y = jax_ref.all_gather(x, axis, axis_name)
    else:
        y = jax_ref.reduce_scatter(x, axis, axis_name, op)
    blocks = {d: block_of(host, b) for d, b in layout.shards(host.shape).items()}
    model = model_blocks(kind, blocks, mesh, axis_name, op, axis % 2)
    out_spec = expected_spec(kind, spec, axis_name, axis % 2)
    placement = jax_ref.describe(y)
    assert placement.spec == out_spec
    assert placement.shards == parity.TensorLayout.from_spec(out_spec, mesh).shards(y.shape)
    whole = jax_ref.to_numpy(y)
    for device, expected in model.items():
        block = jax_ref.local_block(y, device)
        np.testing.assert_allclose(block, expected, err_msg=f"device {device}")
        np.testing.assert_allclose(block_of(whole, placement.shards[device]), expected)


COLLECTIVES = list(collective_params())


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("mesh_id,axis_name,spec", COLLECTIVES, ids=str)
def test_all_reduce_matches_the_numpy_model(mesh_id, axis_name, spec, op):
    check_collective("all_reduce", mesh_id, axis_name, spec, op=op)


@pytest.mark.parametrize("axis", [0, -1])
@pytest.mark.parametrize("mesh_id,axis_name,spec", COLLECTIVES, ids=str)
def test_all_gather_matches_the_numpy_model(mesh_id, axis_name, spec, axis):
    check_collective("all_gather", mesh_id, axis_name, spec, axis=axis)


@pytest.mark.parametrize("op,axis", [("sum", 0), ("mean", -1), ("max", 0), ("min", 1)])
@pytest.mark.parametrize("mesh_id,axis_name,spec", COLLECTIVES, ids=str)
def test_reduce_scatter_matches_the_numpy_model(mesh_id, axis_name, spec, op, axis):
    check_collective("reduce_scatter", mesh_id, axis_name, spec, op=op, axis=axis)


def test_all_reduce_on_an_auto_mesh_array_matches_explicit():
    layout = parity.TensorLayout(("data", "model"), make_mesh("2x4"))
    host = host_array((8, 8))
    auto_x = jax_ref.distribute_tensor(host, layout, axis_types="auto")
    auto = jax_ref.all_reduce(auto_x, "sum", "data")
    explicit = jax_ref.all_reduce(jax_ref.distribute_tensor(host, layout), "sum", "data")
    assert jax_ref.describe(auto) == jax_ref.describe(explicit)
    np.testing.assert_array_equal(jax_ref.to_numpy(auto), jax_ref.to_numpy(explicit))


def sharded_2x4():
    return jax_ref.distribute_tensor(
        host_array((8, 8)), parity.TensorLayout(("data", "model"), make_mesh("2x4"))
    )


COLLECTIVE_CALLS = {
    "all_reduce": lambda x, name: jax_ref.all_reduce(x, "sum", axis_name=name),
    "all_gather": lambda x, name: jax_ref.all_gather(x, 0, name),
    "reduce_scatter": lambda x, name: jax_ref.reduce_scatter(x, 0, name),
}


@pytest.mark.parametrize("kind", list(COLLECTIVE_CALLS))
def test_collective_with_an_unknown_axis_name_raises_naming_the_axes(kind):
    with pytest.raises(parity.LayoutError, match=r"axis_name='batch'.*\('data', 'model'\)") as info:
        COLLECTIVE_CALLS[kind](sharded_2x4(), "batch")
    assert (info.value.what, info.value.value) == ("axis_name", "batch")


@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter"])
@pytest.mark.parametrize("axis", [2, -3, 1.0])
def test_collective_with_an_axis_out_of_range_raises(kind, axis):
    call = getattr(jax_ref, kind)
    with pytest.raises(parity.LayoutError, match=r"axis=.*\[-2, 2\)"):
        call(sharded_2x4(), axis, "model")


@pytest.mark.parametrize("kind", ["all_reduce", "reduce_scatter"])
def test_collective_with_an_unknown_op_raises_naming_the_ops(kind):
    x = sharded_2x4()
    with pytest.raises(parity.LayoutError, match=r"op='prod'.*'sum', 'mean', 'max', 'min'"):
        if kind == "all_reduce":
            jax_ref.all_reduce(x, "prod", axis_name="model")
        else:
            jax_ref.reduce_scatter(x, 0, "model", op="prod")


def test_reduce_scatter_of_an_indivisible_block_raises_sharding_error():
    x = jax_ref.distribute_tensor(
        host_array((2, 8)), parity.TensorLayout(("data", None), make_mesh("2x4"))
    )
    with pytest.raises(parity.ShardingError, match="block has size 1 on dim 0"):
        jax_ref.reduce_scatter(x, 0, "model")


def test_collective_on_a_host_array_raises():
    with pytest.raises(parity.ParityError, match="distribute_tensor"):
        jax_ref.all_reduce(np.ones(8), "sum", axis_name="x")


@pytest.mark.parametrize("call", [
    lambda x: jax_ref.all_reduce(x, "sum", axis_name="model", donate=True),
    lambda x: jax_ref.all_gather(x, 1, "model", donate=True),
    lambda x: jax_ref.reduce_scatter(x, 0, "data", donate=True),
])
def test_a_donated_array_raises_donated_array_error_when_used_again(call):
    from parity.errors import DonatedArrayError

    mesh = make_mesh("2x4")
    x = jax_ref.distribute_tensor(host_array((8, 8)), parity.TensorLayout(("data", "model"), mesh))
    call(x)
    with pytest.raises(DonatedArrayError, match="donated"):
        jax_ref.to_numpy(x)
    with pytest.raises(DonatedArrayError, match="donated"):
        jax_ref.all_reduce(x, "sum", axis_name="data")
