"""The op catalogue and the default cases (no backend needed)."""

from __future__ import annotations

import json

import pytest

from conformance.catalogue import OPS, TOLERANCES, get_op, tolerance
from conformance.cases import MESHES, default_cases

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


def test_every_op_has_a_jax_and_a_torch_callable_side_by_side():
    for op in OPS.values():
        assert op.jax and op.torch, op.name
        fn = op.compile("jax", {}, ["axis"])
        assert callable(fn)


def test_default_catalogue_has_at_least_1500_cases_with_unique_ids(cases):
    assert len(cases) >= 1500
    assert len({c.id for c in cases}) == len(cases)


def test_default_cases_cover_every_op_on_every_mesh(cases):
    seen = {(c.op, c.mesh_tag) for c in cases}
    for op in OPS:
        for mesh in MESHES:
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
