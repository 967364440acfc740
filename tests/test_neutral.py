"""The backend-neutral types: DeviceMesh, TensorLayout, LayoutMap, Placement."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
import types

import numpy as np
import pytest
from conftest import cpu_devices

import parity


@pytest.fixture
def mesh():
    return parity.DeviceMesh((2, 4), ("data", "model"), cpu_devices(8))


def test_import_parity_loads_neither_torch_nor_jax():
    code = "import parity, sys; print('torch' in sys.modules, 'jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize(
    "shape,names,message",
    [
        ((), ("a",), "cannot be empty"),
        ((8,), (), "cannot be empty"),
        ((2, 4), ("a",), "same size"),
        ((2, 2), ("a", "b"), "number of devices"),
        ((2, 4), ("a", "a"), "unique"),
    ],
)
def test_device_mesh_rejects_bad_input_like_keras(shape, names, message):
    with pytest.raises(ValueError, match=message) as info:
        parity.DeviceMesh(shape, names, cpu_devices(8))
    assert isinstance(info.value, parity.LayoutError)


def test_device_mesh_without_devices_uses_the_active_backend(monkeypatch):
    # A stand-in backend whose devices no default could produce.
    fake = types.ModuleType("parity_test_fake_backend")
    fake.list_devices = lambda: ["cpu:5", "cpu:2", "cpu:7", "cpu:0"]
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    monkeypatch.setitem(parity.backends.BACKEND_MODULES, "fake", fake.__name__)
    with parity.use_backend("fake"):
        mesh = parity.DeviceMesh((2, 2), ("a", "b"))
    assert mesh.devices.tolist() == [["cpu:5", "cpu:2"], ["cpu:7", "cpu:0"]]


def test_device_mesh_without_devices_names_an_unknown_backend(monkeypatch):
    monkeypatch.setenv("PARITY_BACKEND", "nonsense")
    with pytest.raises(parity.ParityError, match="Unknown backend 'nonsense'"):
        parity.DeviceMesh((8,), ("x",))


def test_device_mesh_devices_are_read_only(mesh):
    with pytest.raises(ValueError, match="read-only"):
        mesh.devices[0, 0] = "cpu:7"
    assert mesh.devices[0, 0] == "cpu:0"


def test_device_mesh_attributes_cannot_be_set(mesh):
    with pytest.raises(AttributeError, match="DeviceMesh is immutable"):
        mesh._devices = None
    with pytest.raises(AttributeError, match="DeviceMesh is immutable"):
        mesh.extra = 1


def test_device_mesh_does_not_share_the_callers_device_array():
    devices = np.array(cpu_devices(8), dtype=object)
    mesh = parity.DeviceMesh((2, 4), ("data", "model"), devices)
    devices[0] = "cpu:7"
    assert mesh.devices.flat[0] == "cpu:0"


def test_device_meshes_equal_by_shape_names_and_devices(mesh):
    same = parity.DeviceMesh((2, 4), ("data", "model"), cpu_devices(8))
    assert same == mesh and hash(same) == hash(mesh) and len({same, mesh}) == 1
    assert mesh != parity.DeviceMesh((2, 4), ("data", "model"), cpu_devices(8)[::-1])
    assert mesh != parity.DeviceMesh((2, 4), ("d", "model"), cpu_devices(8))
    assert mesh != parity.DeviceMesh((4, 2), ("data", "model"), cpu_devices(8))


def test_device_mesh_survives_pickle_and_deepcopy(mesh):
    for copy_ in (pickle.loads(pickle.dumps(mesh)), copy.deepcopy(mesh)):
        assert copy_ == mesh and hash(copy_) == hash(mesh)
        assert not copy_.devices.flags.writeable


def test_layout_spec_normalizes_entries(mesh):
    layout = parity.TensorLayout((None, "x", ["b", "a"], ("c",)))
    assert layout.spec == ((), ("x",), ("b", "a"), ("c",))
    assert layout.axes == (None, "x", ("b", "a"), "c")


def test_layout_rejects_junk_entries():
    with pytest.raises(parity.LayoutError, match="is not None, a mesh axis name"):
        parity.TensorLayout((3,))
    with pytest.raises(parity.LayoutError, match="sequence"):
        parity.TensorLayout("data")


def test_layout_is_a_hashable_value(mesh):
    a = parity.TensorLayout(("data", None), mesh)
    assert a == parity.TensorLayout(["data", None], mesh)
    assert len({a, parity.TensorLayout(("data", None), mesh)}) == 1
    assert a != parity.TensorLayout((None, "data"), mesh)


def test_layout_attributes_cannot_be_set(mesh):
    layout = parity.TensorLayout(("data", None), mesh)
    with pytest.raises(AttributeError, match="TensorLayout is immutable"):
        layout._spec = (("model",), ())
    with pytest.raises(AttributeError, match="TensorLayout is immutable"):
        layout._device_mesh = None
    assert layout.spec == (("data",), ()) and layout.device_mesh is mesh


def test_layout_with_mesh_is_a_new_value(mesh):
    unbound = parity.TensorLayout(("data", None))
    bound = unbound.with_mesh(mesh)
    assert unbound.device_mesh is None and bound.device_mesh is mesh
    assert unbound != bound


def test_layout_shards_follow_partition_spec_order(mesh):
    major_data = parity.TensorLayout((("data", "model"),), mesh).shards((16,))
    major_model = parity.TensorLayout((("model", "data"),), mesh).shards((16,))
    assert major_data[1] == ((2, 4),)
    assert major_model[1] == ((4, 6),)


def test_layout_without_mesh_cannot_check_shapes():
    with pytest.raises(parity.LayoutError, match="no device mesh"):
        parity.TensorLayout(("data",)).check_shape((8,))


def test_layout_map_exact_key_wins_over_regex(mesh):
    layout_map = parity.LayoutMap(mesh)
    layout_map["dense.*kernel"] = (None, "model")
    layout_map["dense_1.kernel"] = ("model", None)
    assert layout_map["dense_1.kernel"].spec == (("model",), ())
    assert layout_map["dense_2.kernel"].spec == ((), ("model",))


def test_layout_map_uses_fullmatch(mesh):
    layout_map = parity.LayoutMap(mesh)
    layout_map["dense.*kernel"] = (None, "model")
    assert layout_map["dense_1.kernel.extra"] is None
    assert layout_map["my_dense_1.kernel"] is None


def test_layout_map_several_matches_is_an_error(mesh):
    layout_map = parity.LayoutMap(mesh)
    layout_map["dense.*"] = (None, "model")
    layout_map[".*kernel"] = ("model", None)
    with pytest.raises(ValueError, match="matches multiple layout specification keys"):
        layout_map["dense.kernel"]


def test_layout_map_slash_and_dot_paths_match_each_other(mesh):
    layout_map = parity.LayoutMap(mesh)
    layout_map["dense/kernel"] = (None, "model")
    layout_map["block.attention.*bias"] = ("model",)
    assert layout_map["dense.kernel"].spec == ((), ("model",))
    assert layout_map["dense/kernel"].spec == ((), ("model",))
    assert layout_map["block/attention/query/bias"].spec == (("model",),)


def test_layout_map_binds_its_mesh_and_refuses_duplicates(mesh):
    layout_map = parity.LayoutMap(mesh)
    layout_map["a"] = parity.TensorLayout(("data",))
    assert layout_map["a"].device_mesh is mesh
    with pytest.raises(ValueError, match="already exist"):
        layout_map["a"] = ("model",)
    with pytest.raises(parity.LayoutError, match="'expert'"):
        layout_map["b"] = ("expert",)


def test_placement_equality_is_spec_shape_and_shards(mesh):
    layout = parity.TensorLayout(("data", "model"), mesh)
    shards = layout.shards((4, 8))
    a = parity.Placement((4, 8), "float32", mesh.shape, mesh.axis_names, layout.spec, shards)
    b = parity.Placement((4, 8), "int32", mesh.shape, mesh.axis_names, layout.spec, shards)
    assert a == b and hash(a) == hash(b)
    assert parity.Placement.from_json(a.to_json()) == a
    moved = dict(shards)
    moved[0], moved[1] = shards[1], shards[0]
    c = parity.Placement((4, 8), "float32", mesh.shape, mesh.axis_names, layout.spec, moved)
    assert a != c
    assert "device 0 holds" in a.differences(c)[0]


def test_placement_fields_cannot_be_set(mesh):
    layout = parity.TensorLayout(("data", "model"), mesh)
    a = parity.Placement((4, 8), "float32", mesh.shape, mesh.axis_names, layout.spec,
                         layout.shards((4, 8)))
    with pytest.raises(AttributeError):
        a.spec = ((), ())
    with pytest.raises(TypeError):
        a.shards[0] = ((0, 4), (0, 8))
    with pytest.raises(AttributeError):
        a.shards._items = {}


def test_placement_shards_equal_a_plain_dict_and_survive_pickle(mesh):
    layout = parity.TensorLayout(("data", None), mesh)
    shards = layout.shards((4, 8))
    a = parity.Placement((4, 8), "float32", mesh.shape, mesh.axis_names, layout.spec, shards)
    assert a.shards == shards and dict(a.shards) == shards
    assert pickle.loads(pickle.dumps(a)) == a and hash(pickle.loads(pickle.dumps(a))) == hash(a)
