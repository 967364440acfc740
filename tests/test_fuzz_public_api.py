"""Every bad argument to parity's public API is refused by name.

hypothesis feeds wrong types and values, one argument at a time, to the
neutral types, both backends' functions (the Keras shim's ``_to_backend_*``
among them), the explicit API and ``parity.keras_layout``
(``install_keras`` takes no argument). Each call either succeeds (the
value happened to be valid; a result is never a silent object or string
array) or raises a ``parity.ParityError`` subclass, or a ``TypeError`` whose
message names the value: never ``AttributeError``, ``IndexError``,
``KeyError``, a torch ``RuntimeError`` or a hang (pytest-timeout). The
command line gets bad flags in-process: exit status 2 and one line naming
the value, never a traceback.

``tests/test_fuzz_inputs.py`` fuzzes layout entries, mesh shapes and case
files; this module fuzzes which argument is wrong across the whole surface.
torch runs inside one ``torch_impl.simulate(8)`` for the module, JAX on
``jax_ref.simulate(8)``. Calls that code outside this module's change still
gets wrong are marked xfail with the file and the failing call.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

import parity
from parity import jax_ref

jax_ref.simulate(8)  # before JAX starts: 8 CPU devices

import torch  # noqa: E402  (after simulate, as tests/test_backend_parity.py)

from parity import torch_impl  # noqa: E402

pytestmark = pytest.mark.timeout(240)

# No shrinking: the values are small already, and the known failures (xfail
# below) would spend the time budget shrinking.
SETTINGS = settings(max_examples=15, deadline=None, database=None,
                    phases=(Phase.explicit, Phase.reuse, Phase.generate),
                    suppress_health_check=[HealthCheck.too_slow])
DEV8 = [f"cpu:{i}" for i in range(8)]
MESH = parity.DeviceMesh((2, 4), ("data", "model"), DEV8)


class _Opaque:
    """An object parity knows nothing about (no shape, no axes, no devices)."""

    def __repr__(self) -> str:
        return "<_Opaque>"


def _junk() -> list:
    """Wrong values of every kind: none is a valid array, mesh, layout,
    axis name, op or device (a few are valid for some arguments: a call
    that accepts one must then succeed)."""
    return [None, 0, -1, 3, 2.5, float("nan"), True, 10**30, "", "nope", "data", "sum",
            b"data", _Opaque(), {}, {"a": 1}, set(), frozenset({"data"}), [], [[]], (),
            ("data", None), ("data", 3), ["x", "x"], np.int64(1), np.ones(3), np.array("model"),
            np.ones((2, 2), dtype=object), torch.ones(2), torch.device("meta"), len,
            lambda: 0, range(3), Ellipsis, slice(1), MESH, parity.TensorLayout(("data",)),
            parity.P("model")]


# Generated wrong values besides: small ints and floats, text, bytes, ragged
# lists, dicts.
BAD = st.one_of(
    st.integers(-10, 10), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6), st.binary(max_size=3),
    st.lists(st.one_of(st.none(), st.integers(-2, 9), st.text(max_size=3)), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


def every_junk_value(test):
    """Run ``test`` on each of ``_junk()`` (hypothesis explicit examples,
    always run) before the generated values."""
    for value in _junk():
        test = example(bad=value)(test)
    return test


def _names_value(message: str, value: object) -> bool:
    """Whether ``message`` names ``value`` (its repr or str; for arrays,
    tensors and functions, whose text is long or varies, their type)."""
    texts = {repr(value)}
    if not isinstance(value, str):
        texts.add(str(value))
    if isinstance(value, (np.ndarray, torch.Tensor)) or callable(value):
        texts.add(type(value).__name__)
    return any(t and t in message for t in texts)


def refused_by_name(call: str, fn, bad: object):
    """``fn(bad)``, where ``bad`` is the argument under test: its result if
    it succeeds (never an object or string array), ``None`` when it refuses
    with a parity error or a ``TypeError`` naming ``bad``; any other
    exception propagates and fails the test."""
    try:
        result = fn(bad)
    except parity.ParityError:
        return None
    except TypeError as err:
        assert _names_value(str(err), bad), f"{call}: TypeError does not name {bad!r}: {err}"
        return None
    if isinstance(result, np.ndarray):
        assert result.dtype.kind not in "OUS", (
            f"{call} accepted {bad!r} and returned a {result.dtype} array instead of refusing")
    return result


def _known(reason: str):
    """A call a file outside this change still gets wrong: ``reason`` names
    the file, the failing call and what it raises (xfail, not strict: it
    passes once that file refuses the value by name)."""
    return pytest.mark.xfail(reason=reason, strict=False)


def _params(names, known: dict) -> list:
    return [pytest.param(n, marks=_known(known[n])) if n in known else n for n in names]


class Setup:
    """One backend's fixtures: ``x`` on ``mesh`` (Auto) with ``layout``;
    ``xe`` on ``explicit`` (an Explicit mesh, the explicit API's ambient)."""

    def __init__(self, be, mesh, layout, x, explicit, xe):
        self.be, self.mesh, self.layout, self.x = be, mesh, layout, x
        self.explicit, self.xe = explicit, xe


@pytest.fixture(scope="module")
def backends():
    """Both backends, each with a distributed (8, 8) array on an Auto mesh,
    and one on an Explicit mesh; torch on 8 simulated ranks for the module."""
    with torch_impl.simulate(8):
        out = {}
        host = np.arange(64, dtype=np.float32).reshape(8, 8)
        for name, be in (("jax", jax_ref), ("torch", torch_impl)):
            mesh = parity.DeviceMesh((2, 4), ("data", "model"), be.list_devices())
            layout = parity.TensorLayout(("data", "model"), mesh)
            explicit = parity.make_mesh((2, 4), ("data", "model"), devices=be.list_devices())
            with be.set_mesh(explicit):
                xe = be.device_put(host, parity.P("data", "model"))
            out[name] = Setup(be, mesh, layout, be.distribute_tensor(host, layout), explicit, xe)
        yield out


# -- neutral types -------------------------------------------------------------

# name -> (call with the value under test, a valid value)
NEUTRAL = {
    "DeviceMesh(shape)": (lambda v: parity.DeviceMesh(v, ("data",), DEV8), (8,)),
    "DeviceMesh(axis_names)": (lambda v: parity.DeviceMesh((8,), v, DEV8), ("data",)),
    "DeviceMesh(devices)": (lambda v: parity.DeviceMesh((8,), ("data",), v), DEV8),
    "DeviceMesh(axis_types)": (lambda v: parity.DeviceMesh((8,), ("data",), DEV8, v),
                               parity.AxisType.Explicit),
    "make_mesh(axis_shapes)": (lambda v: parity.make_mesh(v, ("data",), devices=DEV8), (8,)),
    "make_mesh(axis_names)": (lambda v: parity.make_mesh((8,), v, devices=DEV8), ("data",)),
    "make_mesh(axis_types)": (lambda v: parity.make_mesh((8,), ("data",), devices=DEV8,
                                                         axis_types=v), parity.AxisType.Auto),
    "TensorLayout(axes)": (lambda v: parity.TensorLayout(v, MESH).shards((8, 8)), ("data", None)),
    "TensorLayout(device_mesh)": (lambda v: parity.TensorLayout(("data", "model"), v), MESH),
    "TensorLayout.shards(shape)": (lambda v: parity.TensorLayout(("data", None), MESH).shards(v),
                                   (8, 8)),
    "LayoutMap(device_mesh)": (lambda v: parity.LayoutMap(v)["dense/kernel"], MESH),
    "LayoutMap[key] = layout": (
        lambda v: parity.LayoutMap(MESH).__setitem__("dense/kernel", v), ("data", None)),
    "LayoutMap[key] = layout (bad key)": (
        lambda v: parity.LayoutMap(MESH).__setitem__(v, ("data",)), "dense/kernel"),
    "LayoutMap[key]": (lambda v: parity.LayoutMap(MESH)[v], "dense/kernel"),
    "P(entry)": (lambda v: parity.TensorLayout(parity.P(v, None), MESH), "model"),
    "P(unreduced=)": (lambda v: parity.P("data", unreduced=v), ("model",)),
}
NEUTRAL_KNOWN: dict = {}


@SETTINGS
@pytest.mark.parametrize("call", _params(sorted(NEUTRAL), NEUTRAL_KNOWN))
@given(bad=BAD)
@every_junk_value
def test_neutral_types_refuse_bad_arguments_by_name(call, bad):
    refused_by_name(call, NEUTRAL[call][0], bad)


# -- backend functions ----------------------------------------------------------


def _backend_calls(s: Setup | None) -> dict:
    """name -> (call with the value under test, a valid value)."""
    if s is None:
        s = Setup(*(None,) * 6)
    be, layout, x = s.be, s.layout, s.x
    host = np.ones((8, 8), np.float32)
    own_mesh = (lambda: None) if be is None else (
        lambda: jax_ref.to_jax_mesh(s.mesh) if be is jax_ref else torch_impl.to_torch_mesh(s.mesh))
    return {
        "distribute_tensor(x)": (lambda v: be.distribute_tensor(v, layout), host),
        "distribute_tensor(layout)": (lambda v: be.distribute_tensor(host, v), layout),
        "distribute_variable(value)": (lambda v: be.distribute_variable(v, layout), host),
        "distribute_variable(layout)": (lambda v: be.distribute_variable(host, v), layout),
        "distribute_data_input(batch)": (lambda v: be.distribute_data_input(v, layout), host),
        "distribute_data_input(layout)": (lambda v: be.distribute_data_input(host, v), layout),
        "distribute_data_input(batch_dim_name)": (
            lambda v: be.distribute_data_input(host, layout, v), "data"),
        "all_reduce(x)": (lambda v: be.all_reduce(v, "sum", axis_name="data"), x),
        "all_reduce(op)": (lambda v: be.all_reduce(x, v, axis_name="data"), "max"),
        "all_reduce(axis_name)": (lambda v: be.all_reduce(x, "sum", axis_name=v), "model"),
        "all_gather(x)": (lambda v: be.all_gather(v, 0, "data"), x),
        "all_gather(axis)": (lambda v: be.all_gather(x, v, "data"), 1),
        "all_gather(axis_name)": (lambda v: be.all_gather(x, 0, v), "model"),
        "reduce_scatter(x)": (lambda v: be.reduce_scatter(v, 0, "data"), x),
        "reduce_scatter(axis)": (lambda v: be.reduce_scatter(x, v, "data"), -1),
        "reduce_scatter(axis_name)": (lambda v: be.reduce_scatter(x, 0, v), "model"),
        "reduce_scatter(op)": (lambda v: be.reduce_scatter(x, 0, "data", v), "mean"),
        "all_gather_variable(x)": (lambda v: be.all_gather_variable(v), x),
        "to_numpy(x)": (lambda v: be.to_numpy(v), x),
        "describe(x)": (lambda v: be.describe(v), x),
        "list_devices(device_type)": (lambda v: be.list_devices(v), "cpu"),
        "get_device_count(device_type)": (lambda v: be.get_device_count(v), "cpu"),
        "local_block(x)": (lambda v: be.local_block(v, 0), x),
        "local_block(device_index)": (lambda v: be.local_block(x, v), 7),
        "to_parity_mesh(mesh)": (lambda v: be.to_parity_mesh(v() if v is own_mesh else v),
                                 own_mesh),
        "_to_backend_mesh(device_mesh)": (lambda v: be._to_backend_mesh(v), s.mesh),
        "_to_backend_layout(tensor_layout)": (lambda v: be._to_backend_layout(v), layout),
        "_to_backend_device(device_name)": (lambda v: be._to_backend_device(v), "cpu:3"),
    }


BACKEND_CALLS = sorted(_backend_calls(None))
BACKEND_KNOWN: dict = {}


def _backend_params(names, known):
    return [pytest.param(b, n, marks=_known(known[b, n])) if (b, n) in known else (b, n)
            for b in ("jax", "torch") for n in names]


@SETTINGS
@pytest.mark.parametrize("backend, call", _backend_params(BACKEND_CALLS, BACKEND_KNOWN))
@given(bad=BAD)
@every_junk_value
def test_backend_functions_refuse_bad_arguments_by_name(backends, backend, call, bad):
    with torch.no_grad():
        refused_by_name(f"{backend}.{call}", _backend_calls(backends[backend])[call][0], bad)


# -- the explicit API -----------------------------------------------------------


def _ident(a):
    return a


def _explicit_calls(s: Setup | None) -> dict:
    """name -> (call with the value under test, a valid value); every call
    runs with ``s.explicit`` as the ambient mesh, on ``s.xe``."""
    if s is None:
        s = Setup(*(None,) * 6)
    be, mesh, x = s.be, s.explicit, s.xe
    host = np.ones((8, 8), np.float32)
    spec = parity.P("data", "model")

    def in_mesh(v):
        with be.set_mesh(v):
            pass

    return {
        "device_put(x)": (lambda v: be.device_put(v, spec), host),
        "device_put(spec_or_layout)": (lambda v: be.device_put(host, v), parity.P(None, "model")),
        "reshard(x)": (lambda v: be.reshard(v, parity.P("model", None)), x),
        "reshard(spec_or_layout)": (lambda v: be.reshard(x, v), parity.P(None, "data")),
        "with_sharding_constraint(x)": (lambda v: be.with_sharding_constraint(v, spec), x),
        "with_sharding_constraint(spec_or_layout)": (
            lambda v: be.with_sharding_constraint(x, v), spec),
        "typeof(x)": (lambda v: be.typeof(v), x),
        "set_mesh(mesh)": (in_mesh, mesh),
        "shard_map(f)": (lambda v: be.shard_map(v, mesh=mesh, in_specs=spec, out_specs=spec)(x),
                         _ident),
        "shard_map(mesh)": (lambda v: be.shard_map(_ident, mesh=v, in_specs=spec,
                                                   out_specs=spec)(x), mesh),
        "shard_map(in_specs)": (lambda v: be.shard_map(_ident, mesh=mesh, in_specs=v,
                                                       out_specs=spec)(x), spec),
        "shard_map(out_specs)": (lambda v: be.shard_map(_ident, mesh=mesh, in_specs=spec,
                                                        out_specs=v)(x), spec),
        "shard_map(axis_names)": (lambda v: be.shard_map(_ident, mesh=mesh, in_specs=spec,
                                                         out_specs=spec, axis_names=v)(x),
                                  {"data", "model"}),
        "auto_axes(axes)": (lambda v: be.auto_axes(_ident, axes=v, out_sharding=spec)(x), "data"),
        "auto_axes(out_sharding)": (lambda v: be.auto_axes(_ident, axes="data",
                                                           out_sharding=v)(x), spec),
        "explicit_axes(axes)": (lambda v: be.explicit_axes(_ident, axes=v, in_sharding=spec)(x),
                                "data"),
        "explicit_axes(in_sharding)": (lambda v: be.explicit_axes(_ident, axes="data",
                                                                  in_sharding=v)(x), spec),
    }


EXPLICIT_CALLS = sorted(_explicit_calls(None))
EXPLICIT_KNOWN: dict = {}


@SETTINGS
@pytest.mark.parametrize("backend, call", _backend_params(EXPLICIT_CALLS, EXPLICIT_KNOWN))
@given(bad=BAD)
@every_junk_value
def test_explicit_api_refuses_bad_arguments_by_name(backends, backend, call, bad):
    s = backends[backend]
    with s.be.set_mesh(s.explicit):
        refused_by_name(f"{backend}.{call}", _explicit_calls(s)[call][0], bad)


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_each_fuzzed_call_accepts_a_valid_value(backends, backend):
    # the fuzzed calls reach the argument under test: with a valid value in
    # its place each one succeeds (so a refusal names that argument)
    s = backends[backend]
    with torch.no_grad():
        for name, (fn, valid) in _backend_calls(s).items():
            assert fn(valid) is not None or name.startswith("set_mesh"), name
        with s.be.set_mesh(s.explicit):
            for name, (fn, valid) in _explicit_calls(s).items():
                fn(valid)
    for name, (fn, valid) in NEUTRAL.items():
        fn(valid)


# -- parity.keras_layout (the Keras shim's _to_backend_* are backend calls above) ------


class _Weightless:
    weights = ()

    def _flatten_layers(self, **kwargs):
        return []


def _keras_calls() -> dict:
    """``layout_map_for`` checks its arguments in ``derive`` (then builds a
    Keras ``LayoutMap``, which needs Keras imported): ``derive`` is fuzzed."""
    from parity import keras_layout

    model = _Weightless()
    return {
        "derive(model)": (lambda v: keras_layout.derive(v, MESH, batch_axis="data"),
                                  model),
        "derive(mesh)": (lambda v: keras_layout.derive(model, v, batch_axis="data"),
                                 MESH),
        "derive(batch_axis)": (lambda v: keras_layout.derive(model, MESH, batch_axis=v),
                                       "data"),
        "derive(model_axis)": (lambda v: keras_layout.derive(
            model, MESH, batch_axis=None, model_axis=v), "model"),
        "derive(convention)": (lambda v: keras_layout.derive(
            model, MESH, batch_axis="data", convention=v), "keras_hub"),
        "report(model)": (lambda v: keras_layout.report(v, parity.LayoutMap(MESH)), model),
        "report(layout_map)": (lambda v: keras_layout.report(model, v), parity.LayoutMap(MESH)),
        "report(large_bytes)": (lambda v: keras_layout.report(model, parity.LayoutMap(MESH),
                                                              large_bytes=v), 1 << 20),
    }


KERAS_CALLS = sorted(_keras_calls())


@SETTINGS
@pytest.mark.parametrize("call", KERAS_CALLS)
@given(bad=BAD)
@every_junk_value
def test_keras_layout_refuses_bad_arguments_by_name(call, bad):
    refused_by_name(call, _keras_calls()[call][0], bad)


def test_keras_layout_calls_accept_a_valid_value():
    for name, (fn, valid) in _keras_calls().items():
        fn(valid)


# -- the command line --------------------------------------------------------------

# Values no flag accepts: none of them selects a case or names a usable path.
BAD_MESH = ["", "x", "2by4", "0x4", "-8", "2x", "8.0", "2x4x", " "]
BAD_OP = ["", "nope", "matmull", "x y", "0"]
BAD_NUMBER = ["0", "-1", "abc", "", "nan", "1e"]


def _cli_argvs(tmp: str) -> st.SearchStrategy:
    """``(argv, value)``: a command line whose one bad value is ``value``."""
    out = ["--out", f"{tmp}/r.json"]
    run = ["run", "--backend", "jax", *out, "--op", "neg"]
    conf = ["conformance", "--out-dir", f"{tmp}/reports", "--op", "neg"]
    missing, bad_json = f"{tmp}/missing.json", f"{tmp}/bad.json"

    def flag(bases, flags, values):
        return st.tuples(st.sampled_from(bases), st.sampled_from(flags),
                         st.sampled_from(values)).map(lambda t: ([*t[0], t[1], t[2]], t[2]))

    def placed(make, values):
        return st.sampled_from(values).map(lambda v: (make(v), v))

    return st.one_of(
        flag([run, conf], ["--mesh"], BAD_MESH),
        flag([run, conf], ["--op"], BAD_OP),
        flag([run, conf], ["--limit", "--timeout"], BAD_NUMBER),
        flag([run, conf], ["--cases"], [missing, tmp, bad_json]),
        flag([["run", *out]], ["--backend"], ["tf", "", "JAX", "torch2"]),
        flag([["run", "--backend", "torch", *out, "--op", "neg"]],
             ["--device", "--source", "--compile-backend"], ["tpu", "", "nope"]),
        flag([["run", "--backend", "jax", "--op", "neg"]], ["--out"],
             ["", tmp, f"{bad_json}/r.json"]),
        flag([["conformance", "--op", "neg"]], ["--out-dir"],
             ["", bad_json, f"{bad_json}/reports"]),
        placed(lambda v: ["compare", v, bad_json], [missing, tmp, bad_json, f"{bad_json}/x"]),
        flag([["compare", bad_json, bad_json]], ["--json", "--md", "--html"],
             ["", tmp, f"{bad_json}/c.json"]),
        placed(lambda v: [v], ["nope", "RUN", "--bogus", "-k"]),
        placed(lambda v: ["ops", v], ["extra", "--bogus"]),
    )


@pytest.fixture(scope="module")
def cli_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    (tmp / "bad.json").write_text("not json")
    return str(tmp)


@SETTINGS
@given(data=st.data())
def test_cli_refuses_bad_arguments_in_one_line_naming_the_value(cli_dir, data):
    from conformance.cli import main

    argv, value = data.draw(_cli_argvs(cli_dir))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    assert status == 2, (argv, status, out.getvalue()[-500:], lines)
    assert len(lines) == 1, (argv, lines)
    assert repr(value) in lines[0] or (value.strip() and value in lines[0]), (argv, lines[0])
    assert "Traceback" not in err.getvalue() + out.getvalue()


# -- the surface: every public function is fuzzed -------------------------------------


def test_every_public_backend_function_is_fuzzed():
    from parity.backends import BACKEND_FUNCTIONS, EXPLICIT_FUNCTIONS

    fuzzed = {c.split("(")[0] for c in BACKEND_CALLS + EXPLICIT_CALLS}
    no_value_argument = {"initialize", "num_processes", "process_id", "simulate",
                         "lax", "dot", "einsum", "matmul"}  # jax.lax / jnp names, and set-up
    missing = (set(BACKEND_FUNCTIONS) | set(EXPLICIT_FUNCTIONS)) - fuzzed - no_value_argument
    assert not missing, f"public functions the fuzz tests do not call: {sorted(missing)}"
