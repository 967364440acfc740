"""The HTML report: one self-contained file; in headless Chromium it loads and
shows the summary counts and a case's device grids."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from conformance.reports.compare import compare_reports
from conformance.reports.html import write_html

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


needs_chromium = pytest.mark.skipif(_chromium() is None,
                                    reason="chromium is not installed (apt-get install chromium)")


def _dom(path, fragment: str = "") -> str:
    url = f"file://{path}" + (f"#{fragment}" if fragment else "")
    proc = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--disable-background-networking", "--virtual-time-budget=3000", "--dump-dom", url],
        capture_output=True, text=True, timeout=120)
    assert 'data-ready="1"' in proc.stdout, proc.stderr[-2000:]
    return proc.stdout


@needs_chromium
def test_page_loads_in_headless_chromium_with_counts_and_a_device_grid(tmp_path):
    dom = _dom(write_html({"parity": comparison()}, tmp_path / "r.html"))
    # Summary counts: one placement-differs, one both-reject.
    assert re.search(r'data-verdict="placement-differs"[^>]*><b>1</b>', dom)
    assert re.search(r'data-verdict="both-reject"[^>]*><b>1</b>', dom)
    # The failing case opens with its input and both placements drawn: 8
    # devices each; device 1 outlined red on both output sides.
    assert dom.count('class="dev"') + dom.count('class="dev diff"') == 24
    assert dom.count('class="dev diff"') == 2
    assert "device 1" in dom and "inputs (as the case lays them out)" in dom


@needs_chromium
def test_the_sides_are_named_by_role(tmp_path):
    comp = comparison()
    comp["candidate"]["semantics"] = "jax_semantics"
    dom = _dom(write_html({"parity": comp}, tmp_path / "r.html"))
    assert "reference: jax" in dom and "candidate: torch+parity" in dom
    assert "candidate (candidate)" not in dom


@needs_chromium
def test_a_link_opens_its_tab_on_its_case(tmp_path):
    path = write_html({"parity": comparison(), "raw DTensor": comparison()}, tmp_path / "r.html")
    dom = _dom(path, "raw%20DTensor|exp%2F2x4%2Findiv%2Fmodel%2C_")
    assert re.search(r'<button data-col="raw DTensor" class="active">', dom)
    assert re.search(r'<h2>exp/2x4/indiv/model,_', dom)
    assert 'href="#raw%20DTensor|exp%2F2x4%2Findiv%2Fmodel%2C_"' in dom


@needs_chromium
def test_the_page_opens_on_the_first_tab_the_parity_column(tmp_path):
    dom = _dom(write_html({"parity": comparison(), "raw DTensor": comparison()},
                          tmp_path / "r.html"))
    assert re.search(r'<button data-col="parity" class="active">', dom)


@needs_chromium
def test_a_chosen_placement_note_is_dashed_amber_not_red(tmp_path):
    moved = {**SHARDS, "1": [[4, 8], [0, 6]]}
    ref = report(entry("add/2x4/div/data,_", outputs=[output(rule="chosen")]))
    cand = report(entry("add/2x4/div/data,_", outputs=[output(shards=moved, rule=None)]),
                  backend="torch")
    ref["cases"][0]["mesh"] = {"shape": [2, 4], "axis_names": ["data", "model"]}
    ref["cases"][0]["inputs"] = [{"shape": [8, 6], "dtype": "float32", "layout": ["data", None]}]
    comp = compare_reports(ref, cand)
    assert comp["cases"][0]["verdict"] == "match" and comp["chosen_placement_notes"] == 1
    dom = _dom(write_html({"parity": comp}, tmp_path / "r.html"))
    assert dom.count('class="dev noted"') == 2 and 'class="dev diff"' not in dom
    assert "is a <i>note</i>, not a failure" in dom


@needs_chromium
def test_an_empty_detail_panel_says_what_to_do(tmp_path):
    comp = compare_reports(report(), report(backend="torch"))
    dom = _dom(write_html({"parity": comp}, tmp_path / "r.html"))
    assert "No case selected: click a case in the list below" in dom
