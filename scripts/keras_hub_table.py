"""docs/keras-hub.md's per-family table, from docs/keras-hub-results.json.

    PYTHONPATH=.keras-hub:. KERAS_BACKEND=jax python scripts/keras_hub_table.py --derive
        # recompute each family's derived-map numbers on (2, 4) (abstract models, seconds)
    python scripts/keras_hub_table.py
        # rewrite the table in docs/keras-hub.md from the results file

The results file holds, per family, ``derived`` (sharded fraction of the
parameters' bytes and the largest device's bytes on the (2, 4) mesh, from
``layout_map_for`` + ``report``); per ``family:mesh`` config trained by
``tests/test_keras_hub_matrix.py`` with ``PARITY_HUB_RESULTS``, ``runs``
(equal to JAX or the error, and each run's ``provenance``: date, commit,
machine, command, written by ``record_runs``); and ``left_out`` /
``tasks_left_out``, the keras-hub model directories and language-model
tasks no family covers, with why (``hub_families.LEFT_OUT`` and
``TASKS_LEFT_OUT``, copied by ``--derive``). A family no run covered says
"not run".

Runs recorded before provenance was (``PROVENANCE_SINCE``) carry what git
knows: ``recorded_in``, the oldest commit since which the entry has been
unchanged, and that commit's date; the machine was not recorded.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "keras-hub-results.json"
DOC = ROOT / "docs" / "keras-hub.md"
BEGIN, END = "<!-- keras-hub-table:begin -->", "<!-- keras-hub-table:end -->"
# Runs recorded from this date on carry their full provenance.
PROVENANCE_SINCE = "2026-11-27"
FULL = ("date", "commit", "dirty", "machine", "command")
LEGACY = ("recorded_in", "date", "note")


def derive_all() -> dict:
    sys.path.insert(0, str(ROOT / "tests" / "keras_support"))
    import keras
    import numpy as np
    from hub_families import DERIVE_ONLY, FAMILIES, derivation_model

    from parity import keras_layout

    mesh = keras.distribution.DeviceMesh(
        (2, 4), ("batch", "model"), np.array([f"cpu:{i}" for i in range(8)]).reshape(2, 4))
    out = {}
    for family in list(FAMILIES) + list(DERIVE_ONLY):
        model = derivation_model(family)
        layout_map = keras_layout.layout_map_for(model, mesh)
        rep = keras_layout.report(model, layout_map)
        out[family] = {"sharded_fraction": round(rep.sharded_fraction, 4),
                       "device_bytes": rep.device_bytes, "total_bytes": rep.total_bytes,
                       "fallback_notes": len(rep.notes)}
        if family in DERIVE_ONLY:
            out[family]["untrained"] = DERIVE_ONLY[family][2]
    return out


def run_provenance(command: str) -> dict[str, Any]:
    """Where and on which code a matrix run was made: the UTC date, the
    checkout's commit and whether its tree had uncommitted changes, the
    load average, the command, and the machine (CPU, Python, torch, jax,
    keras, keras-hub versions)."""
    from importlib.metadata import PackageNotFoundError, version

    sys.path.insert(0, str(ROOT))
    from benchmarks.common import machine, provenance

    info = provenance(command)
    try:
        info["dirty"] = bool(subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
            text=True, cwd=ROOT, timeout=10, check=True).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        info["dirty"] = None
    info["machine"] = machine()
    try:
        info["machine"]["keras_hub"] = version("keras-hub")
    except PackageNotFoundError:
        info["machine"]["keras_hub"] = None
    return info


def record_runs(path: Path, entries: dict[str, dict], provenance: dict[str, Any]) -> None:
    """Merge ``entries`` (``family:mesh`` -> result) into the results file's
    ``runs``, each with the run's ``provenance`` (``run_provenance``, taken
    when the run started)."""
    results = json.loads(path.read_text()) if path.exists() else {}
    runs = results.setdefault("runs", {})
    for config, entry in entries.items():
        runs[config] = dict(entry, provenance=provenance)
    results["runs"] = dict(sorted(runs.items()))
    path.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")


def provenance_problems(runs: dict) -> list[str]:
    """Each run whose provenance is missing or incomplete: a run recorded
    since ``PROVENANCE_SINCE`` carries ``FULL``; an older one ``LEGACY``."""
    problems = []
    for config, entry in runs.items():
        p = entry.get("provenance")
        if not isinstance(p, dict) or not re.fullmatch(r"\d{4}-\d\d-\d\d", str(p.get("date"))):
            problems.append(f"{config}: no provenance with a YYYY-MM-DD date")
            continue
        keys = FULL if p["date"] >= PROVENANCE_SINCE else LEGACY
        missing = [k for k in keys if p.get(k) in (None, "", {})]
        commit = p.get("commit") or p.get("recorded_in")
        if missing or not re.fullmatch(r"[0-9a-f]{7,40}", str(commit)):
            problems.append(f"{config}: provenance of {p['date']} lacks {missing or 'a commit'}")
    return problems


def machine_text(machine: dict) -> str:
    return (f"{machine.get('cpu_count')} x {machine.get('cpu')}, Python {machine.get('python')}, "
            f"torch {machine.get('torch')}, jax {machine.get('jax')}, keras {machine.get('keras')}, "
            f"keras-hub {machine.get('keras_hub')}")


def run_cell(runs: dict, family: str) -> str:
    cells = []
    for mesh in ("2x4", "1x8"):
        p = runs.get(f"{family}:{mesh}", {}).get("provenance")
        if p is None:
            continue
        if "recorded_in" in p:
            cells.append(f"{mesh}: recorded in {p['recorded_in']} ({p['date']})")
        else:
            cells.append(f"{mesh}: {p['date']} at {p['commit']}"
                         + (" + uncommitted changes" if p.get("dirty") else ""))
    return "; ".join(cells) or "-"


def equal_cell(runs: dict, family: str, untrained: str | None = None) -> str:
    if untrained:
        return f"not trained: {untrained}"
    cells, reasons = [], []
    for mesh in ("2x4", "1x8"):
        entry = runs.get(f"{family}:{mesh}")
        reason = None
        if entry is None:
            cells.append(f"{mesh}: not run")
        elif entry.get("error"):
            cells.append(f"{mesh}: cannot run")
            reason = entry["error"]
        elif entry.get("not_compared"):
            plain = entry.get("equal_to_plain_torch")
            cells.append(f"{mesh}: runs, not compared"
                         + ("" if plain is None else
                            f"; equal to plain Keras on torch: {'yes' if plain else 'NO'}"))
            reason = entry["not_compared"]
        else:
            what = " (one call_with_cache step)" if entry.get("forward_only") else ""
            cells.append(f"{mesh}: {'yes' if entry['equal_to_jax'] else 'NO'}{what}")
            if entry.get("weights_not_compared"):
                cells[-1] += " (2 weights not compared)"
                reason = entry["weights_not_compared"]
        if reason and reason not in reasons:
            reasons.append(reason)
    return "; ".join(cells) + "".join(f" ({r})" for r in reasons)


def render(results: dict) -> str:
    lines = ["| family | sharded fraction of parameter bytes | largest device's bytes on (2, 4) "
             "(of the model's) | GQA/MoE fallback layouts | equal to JAX after 2 steps | run |",
             "|---|---|---|---|---|---|"]
    runs = results.get("runs", {})
    for family, d in sorted(results["derived"].items()):
        lines.append(f"| {family} | {d['sharded_fraction']:.1%} | {d['device_bytes']:,} "
                     f"({d['total_bytes']:,}) | {d['fallback_notes']} | "
                     f"{equal_cell(runs, family, d.get('untrained'))} | {run_cell(runs, family)} |")
    machines = sorted({machine_text(e["provenance"]["machine"]) for e in runs.values()
                       if "machine" in e.get("provenance", {})})
    lines.append("")
    lines.append("Run: the date and commit of each configuration's run (\"+ uncommitted "
                 "changes\": run on that commit's tree with the changes committed next); "
                 "\"recorded in\": a run from before the file recorded provenance, dated by "
                 "the oldest commit since which its entry is unchanged (its machine was not "
                 "recorded). Machines of the dated runs: "
                 + ("; ".join(machines) if machines else "none") + ".")
    for title, key in (("Model directories of keras-hub not in the table", "left_out"),
                       ("Language-model tasks no family trains", "tasks_left_out")):
        lines.append("")
        lines.append(f"{title}:")
        lines.append("")
        lines.extend(f"* `{name}`: {why}" for name, why in sorted(results.get(key, {}).items()))
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--derive", action="store_true")
    args = p.parse_args()
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if args.derive:
        sys.path.insert(0, str(ROOT / "tests" / "keras_support"))
        from hub_families import LEFT_OUT, TASKS_LEFT_OUT

        results["derived"] = derive_all()
        results["left_out"], results["tasks_left_out"] = LEFT_OUT, TASKS_LEFT_OUT
        RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    text = DOC.read_text()
    table = f"{BEGIN}\n{render(results)}\n{END}"
    DOC.write_text(re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda m: table, text,
                          flags=re.S))


if __name__ == "__main__":
    main()
