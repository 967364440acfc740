"""Every ```python block of README.md and docs/*.md runs as written.

Each block runs in a fresh interpreter from the repository root (so a block
cannot lean on another's imports or on the caller's ``KERAS_BACKEND``) and
must exit 0; what a ``print(...)  # VALUE`` comment says a print shows is
what it shows (marker ``slow``: the blocks start torch, JAX and Keras). A
documented error is written as the raise it is, under a ``try``/``except``
that checks its type, so the block still runs. The default suite checks
that each block asserts or prints, so that running it proves something.
"""

from __future__ import annotations

import re

import pytest

from doc_blocks import (PAGES, ROOT, blocks, checks_its_claims, keras_hub_installed, needs_keras_hub,
                        print_claims, python_blocks, run_block)

BLOCKS = python_blocks()
IDS = [f"{page}:{line}" for page, line, _ in BLOCKS]


def test_every_page_is_read_and_blocks_are_found_by_language():
    assert PAGES[0] == "README.md" and "docs/keras-hub.md" in PAGES and "docs/from-jax.md" in PAGES
    text = "a\n```python\nx = 1\n```\n```bash\nls\n```\n"
    assert blocks(text, "python") == [(2, "x = 1\n")]
    assert blocks(text, "bash") == [(5, "ls\n")]
    pages = {page for page, _, _ in BLOCKS}
    assert {"README.md", "docs/keras-hub.md", "docs/from-jax.md"} <= pages


@pytest.mark.parametrize("page, line, code", BLOCKS, ids=IDS)
def test_each_python_block_asserts_or_prints(page, line, code):
    assert checks_its_claims(code), f"{page} line {line}: a block that neither asserts nor prints proves nothing"


def test_the_claim_check_and_the_print_claims_read_the_code():
    assert checks_its_claims("x = 1\nassert x == 1\n")
    assert checks_its_claims("    print(x)\n")
    assert not checks_its_claims("x = 1\nreport.print()\n# assert x\n")
    code = "print(a.spec)   # (('data',), ('model',))\nprint(b)  # ((), ('model',)): why\nprint(c)\n"
    assert print_claims(code) == [("print(a.spec)", "(('data',), ('model',))"),
                                  ("print(b)", "((), ('model',))")]


def test_a_block_that_imports_keras_hub_is_recognised():
    assert needs_keras_hub("import keras, keras_hub, numpy as np\n")
    assert needs_keras_hub("from keras_hub import models\n")
    assert not needs_keras_hub("import keras  # not keras_hub\n")


@pytest.mark.slow
@pytest.mark.timeout(660)
@pytest.mark.parametrize("page, line, code", BLOCKS, ids=IDS)
def test_python_block_runs_as_written(page, line, code):
    if needs_keras_hub(code) and not keras_hub_installed():
        pytest.skip("keras-hub is not installed: bash scripts/keras_hub.sh installs it into .keras-hub")
    out = run_block(code, timeout=600)
    assert out.returncode == 0, f"{page} line {line}:\n{out.stderr[-3000:]}"
    for printed, claim in print_claims(code):
        assert claim in out.stdout, f"{page} line {line}: {printed} did not print {claim!r}:\n{out.stdout}"


def _measurements():
    import importlib.util
    import sys

    from doc_blocks import ROOT
    spec = importlib.util.spec_from_file_location("measurements", ROOT / "scripts" / "measurements.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["measurements"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_catalogue_op_count_on_the_page_is_generated_from_the_code():
    # A count written by hand goes stale when an op is added; the page says
    # how many ops the run had (its results file) and how many the code has.
    from conformance.catalogue import OPS
    from doc_blocks import ROOT
    measurements = _measurements()
    assert measurements.catalogue_size() == len(OPS)
    page = (ROOT / "docs" / "measurements.md").read_text()
    assert f"`parity ops` lists {len(OPS)} at the code this page was generated from" in page
    runs = [t for t in measurements.load_all() if t.catalogue_ops]
    assert runs and all(f"had {t.catalogue_ops} ops" in page for t in runs)


@pytest.mark.parametrize("bad", [0, -3, "257", 2.5, True])
def test_a_results_file_op_count_must_be_a_positive_integer(tmp_path, bad):
    import json
    measurements = _measurements()
    data = {"schema": "parity.measurement/1", "page": "docs/measurements.md", "order": 1, "title": "t",
            "date": "2026-11-23", "machine": "m", "commit": "034bd89", "command": "c", "source": "s",
            "columns": ["a"], "rows": [[1]], "catalogue_ops": bad}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    with pytest.raises(measurements.ResultsFileError, match="catalogue_ops"):
        measurements.load_measurement(path)


HISTORY = re.compile(r"\b(issue|stop|session) [0-9]+", re.I)
USER_FILES = ["README.md", "benchmarks/README.md", "pyproject.toml",
              *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*")
                      if p.is_file() and p.suffix in (".md", ".json", ".j2")),
              *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "parity").rglob("*.py"))]


@pytest.mark.parametrize("path", USER_FILES)
def test_user_docs_and_the_package_carry_no_history(path):
    # users cannot know what "issue 27" or "stop 31" was: history lives in
    # CHANGELOG.md and git log
    text = (ROOT / path).read_text()
    found = [(text.count("\n", 0, m.start()) + 1, m.group(0)) for m in HISTORY.finditer(text)]
    assert not found, f"{path}: history words at (line, text) {found}"
