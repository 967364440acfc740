"""Bad arguments give parity errors, never another exception type or a hang.

hypothesis draws layout entries (names, tuples, None, junk types, repeats),
shapes and meshes and feeds them to DeviceMesh / TensorLayout / LayoutMap /
distribute_tensor and the collectives inside ``torch_impl.simulate(8)``:
each call either succeeds or raises a ``parity.ParityError`` subclass.
Every example runs under a deadline, and the test under pytest-timeout.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import parity

pytestmark = pytest.mark.timeout(240)

NAMES = ["data", "model", "x", "a", "b", "c"]
JUNK = st.sampled_from([0, 1, -1, 2.5, b"data", object(), {}, {"a": 1}, set(), True, "", [], [[]],
                        ("data", None), ("data", 3), np.int64(1)])
NAME = st.sampled_from(NAMES)
ENTRY = st.one_of(st.none(), NAME, st.tuples(NAME), st.tuples(NAME, NAME),
                  st.lists(NAME, max_size=3), JUNK)
# Whole-argument junk (an int where a sequence goes) still raises TypeError or
# AttributeError in the neutral types: see test_known_non_parity_errors.
AXES = st.one_of(st.lists(ENTRY, max_size=4), st.tuples(ENTRY, ENTRY), NAME)
MESHES = st.sampled_from([((8,), ("x",)), ((2, 4), ("data", "model")), ((4, 2), ("data", "model")),
                          ((2, 2, 2), ("a", "b", "c")), ((2, 2), ("data", "model"))])
SHAPE = st.lists(st.integers(0, 9), min_size=0, max_size=4).map(tuple)
SETTINGS = settings(max_examples=60, deadline=5000,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def only_parity_errors(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except parity.ParityError:
        return None


@SETTINGS
@given(shape=st.lists(st.one_of(st.integers(-2, 9), JUNK), max_size=3),
       names=st.lists(st.one_of(NAME, JUNK.filter(lambda v: v.__hash__ is not None)), max_size=3),
       devices=st.one_of(st.none(), st.lists(st.sampled_from(["cpu:0", "cpu:1", 3]), max_size=8)))
def test_device_mesh_rejects_bad_arguments_with_parity_errors(shape, names, devices):
    devices = devices if devices is not None else [f"cpu:{i}" for i in range(8)]
    expected = _first_mesh_problem(shape, names, devices)
    if expected is None:
        mesh = parity.DeviceMesh(shape, names, devices)
        assert mesh.shape == tuple(int(s) for s in shape) and mesh.axis_names == tuple(names)
        assert list(mesh.devices.flat) == list(devices)
        return
    with pytest.raises(parity.LayoutError, match=expected):
        parity.DeviceMesh(shape, names, devices)


def _first_mesh_problem(shape, names, devices) -> str | None:
    """The message (a regex) of the first check a mesh of these arguments
    fails, in the order Keras's DeviceMesh checks them; None when valid."""
    if not shape or not names:
        return "Shape and axis_names cannot be empty"
    if len(shape) != len(names):
        return "Shape and axis_names should have same size"
    if any(not isinstance(n, str) or not n for n in names):
        return "Mesh axis names must be non-empty strings"
    if len(set(names)) != len(names):
        return "Mesh axis names must be unique"
    if any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1 for n in shape):
        return "Mesh axis sizes must be positive integers"
    if int(np.prod(shape)) != len(devices):
        return "Shape does not match the number of devices"
    return None


@pytest.mark.parametrize("shape,names,message", [
    ((), ("a",), "Shape and axis_names cannot be empty"),
    ((2,), ("a", "b"), "should have same size"),
    ((2, 4), ("a", ""), "non-empty strings. Received: ''"),
    ((2, 4), ("a", 3), "non-empty strings. Received: 3"),
    ((2, 4), ("a", "a"), "must be unique"),
    ((2, 2.5), ("a", "b"), r"positive integers. Received: shape=\(2, 2.5\)"),
    ((2, True), ("a", "b"), "positive integers"),
    ((0, 8), ("a", "b"), "positive integers"),
    ((4, 4), ("a", "b"), r"shape=\(4, 4\); devices.shape=\(8,\)"),
    ("24", ("a", "b"), "shape must be a sequence of ints; got '24'"),
    ((2, 4), "ab", "axis_names must be a sequence of strings; got 'ab'"),
])
def test_device_mesh_names_each_bad_argument(shape, names, message):
    with pytest.raises(parity.LayoutError, match=message):
        parity.DeviceMesh(shape, names, [f"cpu:{i}" for i in range(8)])


@SETTINGS
@given(axes=AXES, mesh=MESHES, shape=SHAPE)
def test_tensor_layout_rejects_bad_entries_with_parity_errors(axes, mesh, shape):
    m = parity.DeviceMesh(*mesh, devices=[f"cpu:{i}" for i in range(int(np.prod(mesh[0])))])
    layout = only_parity_errors(parity.TensorLayout, axes, m)
    if layout is not None:
        only_parity_errors(layout.shards, shape)


@SETTINGS
@given(key=st.text(max_size=8), path=st.text(max_size=8),
       axes=AXES)
def test_layout_map_rejects_bad_keys_and_layouts_with_parity_errors(key, path, axes):
    m = parity.DeviceMesh((2, 4), ("data", "model"), [f"cpu:{i}" for i in range(8)])
    lm = parity.LayoutMap(m)
    only_parity_errors(lm.__setitem__, key, axes)
    only_parity_errors(lm.__getitem__, path)


@pytest.fixture(scope="module")
def sim8():
    from parity import torch_impl

    with torch_impl.simulate(8):
        yield torch_impl


@SETTINGS
@given(axes=AXES, mesh=MESHES, shape=SHAPE)
def test_distribute_tensor_fuzz_gives_only_parity_errors(sim8, axes, mesh, shape):
    m = only_parity_errors(parity.DeviceMesh, *mesh)  # a 4-device mesh on 8 ranks: refused
    layout = m and only_parity_errors(parity.TensorLayout, axes, m)
    if layout is None:
        return
    host = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    x = only_parity_errors(sim8.distribute_tensor, host, layout)
    if x is not None:
        np.testing.assert_array_equal(sim8.to_numpy(x), host)


@SETTINGS
@given(axes=st.lists(st.one_of(st.none(), NAME), min_size=2, max_size=2), mesh=MESHES,
       # (an unhashable op, e.g. {}, raises TypeError: see test_known_non_parity_errors)
       op=st.one_of(st.sampled_from(["sum", "mean", "max", "min", "prod", ""]),
                    JUNK.filter(lambda v: v.__hash__ is not None)),
       axis=st.one_of(st.integers(-4, 4), JUNK), axis_name=st.one_of(NAME, JUNK, st.none()),
       which=st.sampled_from(["all_reduce", "all_gather", "reduce_scatter"]))
def test_collectives_fuzz_gives_only_parity_errors(sim8, axes, mesh, op, axis, axis_name, which):
    m = only_parity_errors(parity.DeviceMesh, *mesh)
    layout = m and only_parity_errors(parity.TensorLayout, axes, m)
    if layout is None:
        return
    x = only_parity_errors(sim8.distribute_tensor, np.ones((8, 8), np.float32), layout)
    if x is None:
        return
    if which == "all_reduce":
        only_parity_errors(sim8.all_reduce, x, op, axis_name=axis_name)
    elif which == "all_gather":
        only_parity_errors(sim8.all_gather, x, axis, axis_name)
    else:
        only_parity_errors(sim8.reduce_scatter, x, axis, axis_name, op)


@SETTINGS
@given(bad=st.one_of(JUNK, st.just(np.ones((2, 2))), st.just([1, 2])))
def test_non_distributed_inputs_give_parity_errors(sim8, bad):
    for fn in (sim8.describe, sim8.all_gather_variable):
        only_parity_errors(fn, bad)
    only_parity_errors(sim8.all_reduce, bad, "sum", axis_name="x")


def _in_sim8(fn):
    from parity import torch_impl
    from parity.torch_impl.runtime import state

    if state.mode() == "simulated":  # the module's sim8 fixture is still open
        return fn(torch_impl)
    with torch_impl.simulate(8):
        return fn(torch_impl)


def _mesh8():
    return parity.DeviceMesh((2, 4), ("data", "model"), [f"cpu:{i}" for i in range(8)])


FOUND_BY_FUZZING = {  # each once raised TypeError/AttributeError instead of a parity error
    "DeviceMesh names=int": lambda: parity.DeviceMesh([2], 1, ["cpu:0", "cpu:1"]),
    "DeviceMesh names hold a dict": lambda: parity.DeviceMesh([2], [{}], ["cpu:0", "cpu:1"]),
    "TensorLayout axes=int": lambda: parity.TensorLayout(0),
    "LayoutMap key=int": lambda: parity.LayoutMap(_mesh8()).__setitem__(0, (None,)),
    "all_reduce op=dict": lambda: _in_sim8(lambda ti: ti.all_reduce(
        ti.distribute_tensor(np.ones(8, np.float32), parity.TensorLayout(("x",), parity.DeviceMesh((8,), ("x",)))),
        {}, axis_name="x")),
}


@pytest.mark.parametrize("name", sorted(FOUND_BY_FUZZING))
def test_inputs_found_by_fuzzing_raise_parity_errors(name):
    with pytest.raises(parity.ParityError):
        FOUND_BY_FUZZING[name]()


# -- case files ----------------------------------------------------------------

JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-3, 20), st.floats(allow_nan=False),
                      st.sampled_from(["matmul", "add", "all_reduce", "data", "model", "float32",
                                       "int8", "x", "", "2x4"]))
JSON = st.recursive(JSON_LEAF, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                      st.dictionaries(st.text(max_size=6), kids, max_size=4)),
                    max_leaves=20)


def _case_like():
    layout = st.lists(st.one_of(st.none(), st.sampled_from(["data", "model", "x", "zz"]),
                                st.lists(st.sampled_from(["data", "model"]), max_size=2), JSON_LEAF),
                      max_size=3)
    inp = st.fixed_dictionaries(
        {"shape": st.one_of(st.lists(st.integers(-1, 9), max_size=3), JSON),
         "dtype": st.one_of(st.sampled_from(["float32", "int32", "bfloat16", "float9"]), JSON_LEAF),
         "layout": st.one_of(layout, JSON)},
        optional={"values": JSON})
    return st.fixed_dictionaries(
        {"id": st.one_of(st.text(max_size=6), JSON_LEAF),
         "op": st.one_of(st.sampled_from(["matmul", "add", "all_reduce", "all_gather",
                                          "reduce_scatter", "distribute_tensor", "nope"]), JSON_LEAF),
         "mesh": st.one_of(st.fixed_dictionaries({"shape": st.lists(st.integers(0, 4), max_size=3),
                                                  "axis_names": st.lists(st.sampled_from(
                                                      ["data", "model", "x", "a"]), max_size=3)}), JSON),
         "inputs": st.one_of(st.lists(inp, max_size=3), JSON)},
        optional={"kwargs": JSON, "grad": JSON_LEAF})


@SETTINGS
@given(data=st.one_of(JSON, st.fixed_dictionaries({"cases": st.lists(_case_like(), max_size=3)})))
def test_case_file_fuzz_gives_only_case_file_or_parity_errors(data):
    cases = pytest.importorskip("conformance.cases")
    try:
        cases.parse_cases(data)
    except (cases.CaseFileError, parity.ParityError):
        pass
