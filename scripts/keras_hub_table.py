"""docs/keras-hub.md's per-family table, from docs/keras-hub-results.json.

    PYTHONPATH=.keras-hub:. KERAS_BACKEND=jax python scripts/keras_hub_table.py --derive
        # recompute each family's derived-map numbers on (2, 4) (abstract models, seconds)
    python scripts/keras_hub_table.py
        # rewrite the table in docs/keras-hub.md from the results file

The results file holds, per family, ``derived`` (sharded fraction of the
parameters' bytes and the largest device's bytes on the (2, 4) mesh, from
``layout_map_for`` + ``report``) and, per ``family:mesh`` config trained by
``tests/test_keras_hub_matrix.py`` with ``PARITY_HUB_RESULTS``, ``runs``
(equal to JAX or the error). A family no run covered says "not run".
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "keras-hub-results.json"
DOC = ROOT / "docs" / "keras-hub.md"
BEGIN, END = "<!-- keras-hub-table:begin -->", "<!-- keras-hub-table:end -->"


def derive_all() -> dict:
    sys.path.insert(0, str(ROOT / "tests" / "keras_support"))
    import keras
    import numpy as np
    from hub_families import DERIVE_ONLY, FAMILIES, backbone_builder

    from parity import keras_layout

    mesh = keras.distribution.DeviceMesh(
        (2, 4), ("batch", "model"), np.array([f"cpu:{i}" for i in range(8)]).reshape(2, 4))
    backbones = {f: (b, kw, None) for f, (_, b, kw) in FAMILIES.items()} | DERIVE_ONLY
    out = {}
    for family, (backbone, kwargs, untrained) in backbones.items():
        model = keras_layout.abstract_model(backbone_builder(backbone), **kwargs)
        layout_map = keras_layout.layout_map_for(model, mesh)
        rep = keras_layout.report(model, layout_map)
        out[family] = {"sharded_fraction": round(rep.sharded_fraction, 4),
                       "device_bytes": rep.device_bytes, "total_bytes": rep.total_bytes,
                       "fallback_notes": len(rep.notes)}
        if untrained:
            out[family]["untrained"] = untrained
    return out


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
            cells.append(f"{mesh}: runs, not compared")
            reason = entry["not_compared"]
        else:
            cells.append(f"{mesh}: {'yes' if entry['equal_to_jax'] else 'NO'}")
            if entry.get("weights_not_compared"):
                cells[-1] += " (2 weights not compared)"
                reason = entry["weights_not_compared"]
        if reason and reason not in reasons:
            reasons.append(reason)
    return "; ".join(cells) + "".join(f" ({r})" for r in reasons)


def render(results: dict) -> str:
    lines = ["| family | sharded fraction of parameter bytes | largest device's bytes on (2, 4) "
             "(of the model's) | GQA/MoE fallback layouts | equal to JAX after 2 steps |",
             "|---|---|---|---|---|"]
    runs = results.get("runs", {})
    for family, d in sorted(results["derived"].items()):
        lines.append(f"| {family} | {d['sharded_fraction']:.1%} | {d['device_bytes']:,} "
                     f"({d['total_bytes']:,}) | {d['fallback_notes']} | "
                     f"{equal_cell(runs, family, d.get('untrained'))} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--derive", action="store_true")
    args = p.parse_args()
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if args.derive:
        results["derived"] = derive_all()
        RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    text = DOC.read_text()
    table = f"{BEGIN}\n{render(results)}\n{END}"
    DOC.write_text(re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda m: table, text,
                          flags=re.S))


if __name__ == "__main__":
    main()
