"""The HTML report: one self-contained file; in headless Chromium it loads and
shows the summary counts and a case's device grids."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from conformance.compare import compare_reports
from conformance.html import write_html

from test_conformance_compare import SHARDS, entry, err, output, report


def comparison():
    moved = {**SHARDS, "1": [[4, 8], [0, 6]]}
    ref = report(entry("add/2x4/div/data,_"), entry("exp/2x4/indiv/model,_", error=err("indivisible")))
    ref["cases"][0]["mesh"] = ref["cases"][1]["mesh"] = {"shape": [2, 4], "axis_names": ["data", "model"]}
    for c in ref["cases"]:
        c["inputs"] = [{"shape": [8, 6], "dtype": "float32", "layout": ["data", None]}]
    cand = report(entry("add/2x4/div/data,_", outputs=[output(shards=moved, rule=None)]),
                  entry("exp/2x4/indiv/model,_", error=err("indivisible")), backend="torch")
    return compare_reports(ref, cand)


def test_page_is_self_contained(tmp_path):
    page = write_html({"parity": comparison()}, tmp_path / "r.html").read_text()
    assert "<script src" not in page and "<link" not in page and "http" not in page.split("<script")[0]
    assert "placement-differs" in page and "add/2x4/div/data,_" in page


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed (apt-get install chromium)")
def test_page_loads_in_headless_chromium_with_counts_and_a_device_grid(tmp_path):
    path = write_html({"parity": comparison()}, tmp_path / "r.html")
    proc = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--disable-background-networking", "--virtual-time-budget=3000", "--dump-dom",
         f"file://{path}"], capture_output=True, text=True, timeout=120)
    dom = proc.stdout
    assert 'data-ready="1"' in dom, proc.stderr[-2000:]
    # Summary counts: one placement-differs, one both-reject.
    assert re.search(r'data-verdict="placement-differs"[^>]*><b>1</b>', dom)
    assert re.search(r'data-verdict="both-reject"[^>]*><b>1</b>', dom)
    # The failing case opens with both placements drawn: 8 devices per side,
    # device 1 outlined as different on both sides.
    assert dom.count('class="dev"') + dom.count('class="dev diff"') == 16
    assert dom.count('class="dev diff"') == 2
    assert "device 1" in dom
