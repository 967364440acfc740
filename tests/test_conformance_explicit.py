"""Issue 26's Explicit-axes family of the catalogue (``catalogue.explicit``)
through both runners in process, compared as ``parity compare`` does."""

from __future__ import annotations

from parity import jax_ref

jax_ref.simulate(8)  # before JAX starts (collection time)

from conformance.cases import default_cases
from conformance.reports.compare import compare_placement, compare_reports
from conformance.reports.html import write_html


def test_explicit_cases_agree_on_both_backends_with_jax_s_types(sim8, tmp_path):
    """A few catalogue cases through both runners in process, compared as
    ``parity compare`` does: typeof strings, values, gradients' types, and
    both sides' errors (a contraction over a sharded dim; a shard_map
    operand whose type is not its in_specs)."""
    from conformance.reports.compare import verdict_of
    from conformance.running.run_jax import JaxRunner
    from conformance.running.run_torch import TorchRunner

    wanted = {"explicit_matmul/2x4/explicit/data,_|_,_": "match",
              "explicit_matmul/2x4/explicit/data,model|model,_": "both-reject",
              "explicit_reshard/2x4/explicit/data,model/target=[null,\"model\"]": "match",
              # out_sharding= makes the contraction refused above well typed
              "explicit_matmul_out_sharding/2x4/explicit/data,model|model,_/target=[\"data\",null]":
                  "match",
              # a pending contraction (P(unreduced=)), completed by reshard
              "explicit_unreduced_matmul/2x4/explicit/data,model|model,_/target=[\"data\",null]":
                  "match",
              "shard_map_psum_scatter/2x4/explicit/data,model": "match",
              "shard_map_psum/2x4/explicit/_,_": "both-reject"}
    chosen = [c for c in default_cases([c.split("/")[0] for c in wanted]) if c.id in wanted]
    assert len(chosen) == len(wanted)
    jr, tr = JaxRunner(8), TorchRunner(8)
    categories = set()
    reports = {"reference": {"cases": []}, "candidate": {"cases": []}}
    for case in chosen:
        ref, cand = jr.run(case.to_json()), tr.run(case.to_json())
        reports["reference"]["cases"].append({**case.to_json(), **ref})
        reports["candidate"]["cases"].append({**case.to_json(), **cand})
        verdict = verdict_of(ref, cand)
        assert verdict["verdict"] == wanted[case.id], (case.id, verdict)
        if ref["status"] == "ok":
            types = [o["type"] for o in ref["outputs"] + ref["grads"]]
            assert types == [o["type"] for o in cand["outputs"] + cand["grads"]]
            assert all(types)
        else:
            categories |= {ref["error"]["category"], cand["error"]["category"]}
    assert categories == {"ambiguous-sharding"}
    # The HTML report carries each output's typeof string and the mesh's axis types.
    comparison = compare_reports(reports["reference"], reports["candidate"])
    html = write_html({"parity": comparison}, tmp_path / "c.html").read_text()
    assert '"type":"float32[8@data,8]"' in html.replace(" ", "")
    assert "typeof ${out.type}" in html and '"axis_types":["explicit","explicit"]' in html.replace(" ", "")


def test_a_different_typeof_is_a_placement_difference():
    ref = {"spec": [["data"], []], "shards": None, "pending": [], "type": "float32[8@data,8]"}
    cand = {**ref, "type": "float32[8@data,8@model]"}
    assert "typeof float32[8@data,8@model] != reference float32[8@data,8]" in \
        compare_placement(ref, cand, "output 0")
    assert compare_placement(ref, dict(ref), "output 0") is None
