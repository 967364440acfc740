"""Case files: parsing, validation errors that name the field, values."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conformance.cases import CaseFileError, load_case_file, parse_cases
from conformance.records.values import decode, draw, encode, host_values

GOOD = {"cases": [
    {"id": "matmul/contract-model", "op": "matmul",
     "mesh": {"shape": [2, 4], "axis_names": ["data", "model"]},
     "inputs": [{"shape": [8, 12], "dtype": "float32", "layout": ["data", "model"]},
                {"shape": [12, 6], "dtype": "float32", "layout": ["model", None]}],
     "kwargs": {}, "grad": False}]}


def _with(path, value):
    data = json.loads(json.dumps(GOOD))
    target = data["cases"][0]
    *head, last = path
    for key in head:
        target = target[key]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return data


def test_spec_example_parses():
    (case,) = parse_cases(GOOD)
    assert case.op == "matmul" and case.mesh_shape == (2, 4)
    assert case.inputs[0].spec == (("data",), ("model",))
    assert case.inputs[1].spec == (("model",), ())
    assert case.to_json()["inputs"][1]["layout"] == ["model", None]


def test_case_file_extensions_host_scalar_values_and_tuple_entries():
    data = {"cases": [{"id": "x", "op": "add", "mesh": {"shape": [2, 4], "axis_names": ["d", "m"]},
                       "inputs": [{"shape": [8, 4], "dtype": "float32", "layout": [["d", "m"], None]},
                                  {"scalar": 2.5}]},
                      {"id": "y", "op": "add", "mesh": {"shape": [8]},
                       "inputs": [{"values": [[1.0, 2.0]], "layout": [None, None]},
                                  {"shape": [1, 2], "dtype": "float32", "layout": None}]}]}
    x, y = parse_cases(data)
    assert x.inputs[0].spec == (("d", "m"), ()) and x.inputs[1].kind == "scalar"
    assert y.axis_names == ("x",) and y.inputs[0].shape == (1, 2) and y.inputs[1].kind == "host"
    assert host_values(y.to_json())[0].tolist() == [[1.0, 2.0]]


@pytest.mark.parametrize("path,value,field", [
    (("op",), "nope", "cases[0].op"),
    (("id",), KeyError, "cases[0].id"),
    (("mesh",), {"shape": [2, 0]}, "cases[0].mesh.shape"),
    (("mesh", "axis_names"), ["a"], "cases[0].mesh.axis_names"),
    (("inputs",), [], "cases[0].inputs"),
    (("inputs", 0, "layout"), ["data"], "cases[0].inputs[0].layout"),
    (("inputs", 0, "layout"), ["data", "nope"], "cases[0].inputs[0].layout[1]"),
    (("inputs", 0, "layout"), ["data", "data"], "cases[0].inputs[0].layout[1]"),
    (("inputs", 1, "layout"), KeyError, "cases[0].inputs[1].layout"),
    (("inputs", 1, "dtype"), "float64", "cases[0].inputs[1].dtype"),
    (("inputs", 1, "shape"), "12x6", "cases[0].inputs[1].shape"),
    (("inputs", 1, "colour"), 1, "cases[0].inputs[1].colour"),
    (("grad",), "yes", "cases[0].grad"),
    (("kwargs",), [], "cases[0].kwargs"),
    (("wat",), 1, "cases[0].wat"),
])
def test_bad_case_files_raise_an_error_naming_the_field(path, value, field):
    with pytest.raises(CaseFileError) as err:
        parse_cases(_with(path, value))
    assert str(err.value).startswith(field + ":"), str(err.value)


SOFTMAX = {"id": "sm", "op": "softmax", "mesh": {"shape": [2, 4], "axis_names": ["data", "model"]},
           "inputs": [{"shape": [8, 16], "dtype": "float32", "layout": ["data", None]}],
           "kwargs": {"axis": -1}}


def _write(tmp_path, *cases):
    path = tmp_path / "cases.json"
    path.write_text(json.dumps({"cases": list(cases)}))
    return path


def test_a_kwarg_the_op_does_not_take_is_refused_with_the_valid_kwargs(tmp_path):
    path = _write(tmp_path, {**SOFTMAX, "kwargs": {"dim": 1}})
    with pytest.raises(CaseFileError, match=r"cases\[0\]\.kwargs\.dim: softmax has no kwarg "
                                            r"'dim'; softmax takes: axis: integer"):
        load_case_file(path)


def test_a_kwarg_of_the_wrong_type_is_refused_naming_its_type(tmp_path):
    path = _write(tmp_path, {**SOFTMAX, "kwargs": {"axis": "last"}})
    with pytest.raises(CaseFileError, match=r"cases\[0\]\.kwargs\.axis: 'last' does not fit; "
                                            r"axis: integer"):
        load_case_file(path)


def test_a_missing_required_kwarg_is_refused(tmp_path):
    path = _write(tmp_path, {**SOFTMAX, "kwargs": {}})
    with pytest.raises(CaseFileError, match=r"cases\[0\]\.kwargs: missing 'axis'"):
        load_case_file(path)


def test_a_reduction_op_outside_the_choices_is_refused_with_the_choices(tmp_path):
    case = {"id": "ar", "op": "all_reduce", "mesh": {"shape": [8]},
            "inputs": [{"shape": [8, 16], "dtype": "float32", "layout": ["x", None]}],
            "kwargs": {"op": "prod", "axis_name": "x"}}
    with pytest.raises(CaseFileError, match=r"kwargs\.op: 'prod' does not fit; op: one of "
                                            r"'sum', 'mean', 'max', 'min'"):
        load_case_file(_write(tmp_path, case))


def test_a_missing_input_is_refused_with_the_op_s_arity(tmp_path):
    case = _with(("inputs",), GOOD["cases"][0]["inputs"][:1])["cases"][0]
    with pytest.raises(CaseFileError, match=r"cases\[0\]\.inputs: matmul takes 2 input"):
        load_case_file(_write(tmp_path, case))


def test_shapes_that_do_not_fit_the_op_are_refused_with_jax_s_reason(tmp_path):
    case = _with(("inputs", 1, "shape"), [10, 6])["cases"][0]
    with pytest.raises(CaseFileError, match=r"cases\[0\]\.inputs: inputs \(\[8, 12\], \[10, 6\]\)"
                                            r" .* do not fit matmul: JAX says"):
        load_case_file(_write(tmp_path, case))


def test_an_axis_out_of_range_for_an_op_is_refused(tmp_path):
    path = _write(tmp_path, {**SOFTMAX, "kwargs": {"axis": 2}})
    with pytest.raises(CaseFileError, match=r"do not fit softmax"):
        load_case_file(path)


def test_a_collective_s_unknown_axis_name_is_kept_for_the_backends_to_reject(tmp_path):
    case = {"id": "ag", "op": "all_gather", "mesh": {"shape": [8]},
            "inputs": [{"shape": [8, 16], "dtype": "float32", "layout": ["x", None]}],
            "kwargs": {"axis": 0, "axis_name": "nope"}}
    (parsed,) = load_case_file(_write(tmp_path, case))
    assert parsed.kwargs["axis_name"] == "nope"


def test_the_json_schema_refuses_what_the_parser_refuses(tmp_path):
    from conformance.cases import validate_schema

    with pytest.raises(CaseFileError, match=r"cases\[0\]\.inputs\[1\]\.dtype"):
        validate_schema(_with(("inputs", 1, "dtype"), "float64"))
    validate_schema(GOOD)


def test_repeated_ids_and_bad_json_are_named(tmp_path):
    data = {"cases": GOOD["cases"] * 2}
    with pytest.raises(CaseFileError, match=r"cases\[1\]\.id"):
        parse_cases(data)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(CaseFileError, match="bad.json: not valid JSON"):
        load_case_file(bad)
    with pytest.raises(CaseFileError, match="no such case file"):
        load_case_file(tmp_path / "missing.json")


def test_values_are_drawn_from_the_case_id_and_respect_dtype_and_domain():
    a = draw("case/1", 0, (4, 3), "float32")
    assert a.dtype == np.float32 and np.array_equal(a, draw("case/1", 0, (4, 3), "float32"))
    assert not np.array_equal(a, draw("case/2", 0, (4, 3), "float32"))
    assert (draw("c", 0, (50,), "float32", "positive") > 0).all()
    ids = draw("c", 1, (50,), "int32", "index:7")
    assert ids.dtype == np.int32 and ids.min() >= 0 and ids.max() < 7
    assert draw("c", 2, (5,), "bool", "bool").dtype == np.bool_


@pytest.mark.parametrize("array", [np.arange(6, dtype=np.float32).reshape(2, 3),
                                   np.array(3, dtype=np.int32), np.array([True, False]),
                                   np.zeros((0, 4), np.float32)])
def test_value_encoding_is_exact(array):
    text = encode(array)
    back = decode(text)
    assert back.dtype == array.dtype and back.shape == array.shape
    assert np.array_equal(back, array)
    with pytest.raises(ValueError, match="malformed"):
        decode("nope")


def test_mesh_axis_types_are_optional_and_round_trip(tmp_path):
    (plain,) = parse_cases(GOOD)
    assert plain.axis_types is None and "axis_types" not in plain.to_json()["mesh"]
    (typed,) = parse_cases(_with(["mesh", "axis_types"], ["explicit", "auto"]))
    assert typed.axis_types == ("explicit", "auto")
    assert typed.to_json()["mesh"]["axis_types"] == ["explicit", "auto"]
    path = tmp_path / "typed.json"
    path.write_text(json.dumps({"cases": [typed.to_json()]}))
    assert load_case_file(path, check_shapes=False) == [typed]


@pytest.mark.parametrize("value", [["explicit"], ["explicit", "sideways"], "explicit"])
def test_bad_mesh_axis_types_name_the_field(value):
    with pytest.raises(CaseFileError, match=r"cases\[0\]\.mesh\.axis_types"):
        parse_cases(_with(["mesh", "axis_types"], value))
