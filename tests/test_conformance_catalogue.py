"""The op catalogue and the default cases (no backend needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.cases import MESHES, default_cases
from conformance.catalogue import OPS, TOLERANCES, get_op, tolerance
from conformance.records.values import encode

REQUIRED_OPS = """neg abs exp log sqrt square tanh sigmoid relu gelu add subtract multiply divide
maximum minimum power where sum mean max min prod argmax logsumexp var matmul batched_matmul
einsum reshape flatten transpose permute squeeze expand_dims concatenate stack split slice pad
softmax log_softmax layer_norm rms_norm take one_hot cross_entropy cumsum distribute_tensor
distribute_data_input all_reduce all_gather reduce_scatter all_gather_variable""".split()


@pytest.fixture(scope="module")
def cases():
    return default_cases()


def test_catalogue_names_every_required_op_once():
    assert set(REQUIRED_OPS) <= set(OPS)
    assert len(OPS) == len({op.name for op in OPS.values()})


@pytest.mark.parametrize("name", [n for n, op in OPS.items()
                                  if op.group not in ("api", "explicit")])  # these need a mesh
def test_each_op_s_jax_and_torch_expressions_agree_on_unsharded_inputs(name):
    """Both expressions of every op and kwargs variant, evaluated on the same
    host values without any mesh: a typo or a wrong argument mapping in the
    catalogue shows here, before any sharding is involved."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch
    import torch.nn.functional as F

    from conformance.reports.compare import compare_values
    from conformance.records.values import draw

    op = OPS[name]
    shapes = op.shape_sets[0].shapes
    jax_ns = {"jnp": jnp, "jax": jax, "lax": jax.lax, "nn": jax.nn, "np": np}
    torch_ns = {"torch": torch, "F": F, "np": np}
    for variant in op.variants:
        hosts = [draw(f"{name}/catalogue", i, shape, arg.dtype, arg.domain)
                 for i, (shape, arg) in enumerate(zip(shapes, op.args))]
        want = op.compile("jax", jax_ns, list(variant))(*hosts, **variant)
        got = op.compile("torch", torch_ns, list(variant))(
            *[torch.from_numpy(h) for h in hosts], **variant)
        want = want if isinstance(want, (tuple, list)) else [want]
        got = got if isinstance(got, (tuple, list)) else [got]
        assert len(got) == len(want), (name, variant)
        tol = tolerance(op.tol)
        for k, (w, g) in enumerate(zip(want, got)):
            w, g = np.asarray(w), g.numpy()
            if g.dtype.kind in "iu" and w.dtype.kind in "iu":
                g = g.astype(w.dtype)  # torch's int64 indices vs JAX's int32 (x64 off)
            ref = {"shape": list(w.shape), "values": encode(w)}
            cand = {"shape": list(g.shape), "values": encode(g)}
            reason = compare_values(ref, cand, f"{name} {variant} output {k}", tol["rtol"],
                                    tol["atol"], [])
            assert reason is None, reason


def test_api_functions_call_the_same_backend_function_on_both_sides():
    for op in OPS.values():
        if op.group == "api":
            assert op.jax == op.torch and op.jax.startswith(f"B.{op.name}("), op.name


def test_default_catalogue_has_at_least_1500_cases_with_unique_ids(cases):
    assert len(cases) >= 1500
    assert len({c.id for c in cases}) == len(cases)


def test_default_cases_cover_every_op_on_every_mesh(cases):
    seen = {(c.op, c.mesh_tag) for c in cases}
    for op in OPS:
        for mesh in MESHES if OPS[op].group != "explicit" else ("2x4",):
            assert (op, mesh) in seen, (op, mesh)


def test_default_cases_mix_divisible_indivisible_mixed_operands_and_grads(cases):
    tags = {c.id.split("/")[2] for c in cases}
    assert {"div", "indiv", "mixed-host", "mixed-scalar", "bcast"} <= tags
    assert any(c.grad for c in cases)
    assert any(i.kind == "scalar" for c in cases for i in c.inputs)
    assert any(i.kind == "host" for c in cases for i in c.inputs)


def test_matmul_covers_every_class_of_sharded_free_and_contracting_dims(cases):
    classes = {}
    for c in cases:
        if c.op == "matmul" and c.id.split("/")[2] == "div":
            key = tuple(bool(n) for i in c.inputs for n in i.spec)
            classes.setdefault(c.mesh_tag, set()).add(key)
    assert len(classes["2x4"]) == 16 and len(classes["2x2x2"]) == 16  # every class


def test_default_cases_are_deterministic(cases):
    again = default_cases()
    assert [c.to_json() for c in again] == [c.to_json() for c in cases]


def test_integer_outputs_are_exact_and_tf32_is_stated_for_cuda():
    assert tolerance("reduction", "cpu", "int32")["rtol"] == 0
    assert TOLERANCES["cuda"]["matmul"][0] >= 1e-3
    with pytest.raises(KeyError, match="parity ops"):
        get_op("no_such_op")


def test_parity_ops_lists_the_catalogue(capsys):
    from parity.cli import main

    assert main(["ops", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [o["name"] for o in listed] == list(OPS)
    assert all(o["jax"] and o["torch"] for o in listed)


def test_every_default_case_fits_its_op(cases):
    """The default catalogue passes the check a case file gets: JAX's
    ``eval_shape`` of the op on the case's global shapes and kwargs (one case
    per distinct signature)."""
    from conformance.cases.shape_check import check_fit

    seen = set()
    for case in cases:
        data = case.to_json()
        key = (case.op, json.dumps(data["kwargs"], sort_keys=True),
               tuple("scalar" if "scalar" in i else tuple(i["shape"]) for i in data["inputs"]))
        if key not in seen:
            seen.add(key)
            check_fit(data)
    assert len(seen) > len(OPS)


def test_parity_ops_prints_expressions_with_brackets_intact(capsys):
    from parity.cli import main

    assert main(["ops"]) == 0
    out = capsys.readouterr().out
    assert "jnp.concatenate([a, b], axis=axis)" in out


# ------------------------------------------------- Explicit axes (issue 26)

LAX = ("psum", "pmean", "pmax", "pmin", "all_gather", "psum_scatter", "ppermute",
       "all_to_all", "axis_index")
VARIANTS = ("where", "mul_broadcast", "sum", "softmax", "layer_norm", "reshape", "transpose",
            "expand_dims", "concatenate", "stack", "slice", "narrow", "index",
            "take_along_axis", "cumsum", "sort", "pad", "roll", "flip", "tile", "split",
            "batch_matmul")


def test_the_explicit_family_is_small_and_covers_each_lax_collective(cases):
    explicit = [c for c in cases if OPS[c.op].group == "explicit"]
    # 48, 12 on unreduced values (P(unreduced=)), and 39 Explicit variants of
    # other ops (a layout JAX types and, for most, one it refuses)
    assert len(explicit) == 99
    reports = (Path(__file__).resolve().parents[1] / "docs" / "reports.md").read_text()
    assert f"`conformance/catalogue/explicit.py`, {len(explicit)} cases" in reports
    assert all(c.mesh_tag == "2x4" and c.axis_types == ("explicit", "explicit")
               for c in explicit)
    assert all(c.axis_types is None for c in cases if OPS[c.op].group != "explicit")
    ops = {c.op for c in explicit}
    assert {f"shard_map_{name}" for name in LAX} | {
        "explicit_matmul", "explicit_einsum", "explicit_add", "explicit_reshard",
        "explicit_with_sharding_constraint", "explicit_matmul_out_sharding",
        "explicit_einsum_out_sharding", "explicit_dot_out_sharding", "explicit_unreduced_matmul",
        "explicit_unreduced_add", "explicit_unreduced_sum", "explicit_unreduced_refused",
        "explicit_unreduced_meets_reduced"} | {f"explicit_{name}" for name in VARIANTS} == ops
    graded = {c.op for c in explicit if c.grad}
    # JAX defines no gradient for pmax / pmin; an index input has none; JAX
    # 0.10.2's sort JVP refuses a sharded operand.
    assert graded == ops - {"shard_map_pmax", "shard_map_pmin", "explicit_index",
                            "explicit_take_along_axis", "explicit_sort"}
    # each variant with a refused layout: both sides' ShardingTypeError
    assert sum(len(OPS[f"explicit_{name}"].fixed) > 1 for name in VARIANTS) == 16
    assert "B.lax.psum(x, 'model')" in OPS["shard_map_psum"].jax

