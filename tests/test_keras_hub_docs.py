"""docs/keras-hub.md's per-family table is the rendering of
docs/keras-hub-results.json (``scripts/keras_hub_table.py``): no number in
it is typed by hand. Pure Python, no framework."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_table_script():
    spec = importlib.util.spec_from_file_location("keras_hub_table",
                                                  ROOT / "scripts" / "keras_hub_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_table_is_rendered_from_the_results_file():
    table = load_table_script()
    results = json.loads(table.RESULTS.read_text())
    doc = table.DOC.read_text()
    inside = doc.split(table.BEGIN, 1)[1].split(table.END, 1)[0].strip()
    assert inside == table.render(results)
    # Every family of the matrix has a row.
    assert inside.count("\n| ") + 1 >= len(results["derived"]) + 1
    assert len(results["derived"]) >= 20
