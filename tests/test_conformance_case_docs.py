"""docs/case-format.md and docs/case-file.schema.json are generated from the
catalogue and up to date; the schema is what parity run validates with."""

from __future__ import annotations

import json

from conformance.cases.signatures import SIGNATURES, json_schema
from conformance.docs import case_format as case_docs


def test_the_case_format_doc_and_schema_are_generated_and_up_to_date():
    assert case_docs.main(["--check"]) == 0, "run: python -m conformance.docs.case_format"


def test_the_doc_lists_every_op_with_its_kwargs():
    text = case_docs.DOC.read_text()
    for name, sig in SIGNATURES.items():
        assert f"| `{name}` |" in text
        for kw in sig.kwargs.values():
            assert f"`{kw.describe()}`" in text


def test_the_checked_in_schema_is_the_one_parity_run_uses():
    assert json.loads(case_docs.SCHEMA.read_text()) == json_schema()


def test_the_readme_links_the_case_format():
    assert "docs/case-format.md" in (case_docs.ROOT / "README.md").read_text()
