"""docs/torch-versions.md, what moved between two torch releases, from its
results file.

Both torch columns of the catalogue -- parity on DTensor and plain DTensor
(``parity run --backend torch [--raw]``) -- run on the older and the newer
torch; each pair is compared against one JAX reference report
(``parity compare OLD.json NEW.json --reference JAX.json --json D.json``).
The plain-DTensor diff is what DTensor itself changed; the parity diff is
what a parity user sees of it::

    python scripts/torch_versions.py record --parity D.json --raw D-raw.json \\
        --date YYYY-MM-DD --commit HASH --machine TEXT --command TEXT... [--note TEXT]...
        # write docs/results/versions-torch215.json from the two diffs
    python scripts/torch_versions.py            # write docs/torch-versions.md
    python scripts/torch_versions.py --check    # exit 1 if the page is not the generated one

The results file is a ``parity.measurement/1`` file (``scripts/measurements.py``
puts its counts in docs/measurements.md) with every case that is not
``same`` under ``changes``. ``tests/test_torch_versions_page.py`` runs the
check.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results" / "versions-torch215.json"
PAGE = ROOT / "docs" / "torch-versions.md"
CHANGES = ("regressed", "fixed", "changed", "placement moved", "same", "added", "removed")
COLUMNS = (("parity", "parity on DTensor"), ("raw", "plain DTensor (`--raw`)"))
DIFF_SCHEMA = "parity.semantics-diff/1"
# what each column's report header says it ran (conformance/running/run_torch.py)
SEMANTICS = {"parity": "jax_semantics", "raw": "raw-dtensor"}


class VersionsFileError(ValueError):
    """A diff or results file that cannot be used; ``path`` names it and
    ``problem`` says what is wrong and how to fix it."""

    def __init__(self, *, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


def _versions(diff: dict[str, Any], side: str) -> dict[str, str]:
    return ((diff[side].get("candidate") or {}).get("versions") or {})


def load_diff(path: Path) -> dict[str, Any]:
    """A ``parity compare ... --reference ... --json`` file.

    Raises ``VersionsFileError`` for another schema or a diff whose two
    sides ran the same torch."""
    data = json.loads(path.read_text())
    if data.get("schema") != DIFF_SCHEMA:
        raise VersionsFileError(path=str(path), problem=f"schema {data.get('schema')!r} is not "
                                f"{DIFF_SCHEMA!r}: write it with parity compare OLD NEW --reference "
                                "JAX --json")
    old, new = _versions(data, "old").get("torch"), _versions(data, "new").get("torch")
    if not old or old == new:
        raise VersionsFileError(path=str(path), problem=f"both sides ran torch {old!r}: compare two "
                                "torch releases")
    return data


def record(parity: dict[str, Any], raw: dict[str, Any], *, date: str, commit: str, machine: str,
           command: list[str], notes: list[str]) -> dict[str, Any]:
    """The results file for two diffs of the same torch pair.

    Raises ``VersionsFileError`` when the two diffs compare other torch
    releases, or one's candidates did not run that column's semantics."""
    pair = {name: (_versions(d, "old").get("torch"), _versions(d, "new").get("torch"))
            for name, d in (("parity", parity), ("raw", raw))}
    if pair["parity"] != pair["raw"]:
        raise VersionsFileError(path="--raw", problem=f"compares torch {pair['raw']}, --parity "
                                f"{pair['parity']}: diff the same two releases")
    for name, d in (("parity", parity), ("raw", raw)):
        want = SEMANTICS[name]
        for side in ("old", "new"):
            got = (d[side].get("candidate") or {}).get("semantics")
            if got != want:
                raise VersionsFileError(path=f"--{name}", problem=f"its {side} candidate ran "
                                        f"semantics {got!r}, not {want!r}: give the {name} column's diff")
    old, new = (v.split("+")[0] for v in pair["parity"])
    reference = (parity["new"].get("reference") or {}).get("versions") or {}
    rows = [[label, *(d["summary"].get(c, 0) for c in CHANGES)]
            for (_, label), d in zip(COLUMNS, (parity, raw))]
    return {
        "schema": "parity.measurement/1", "page": "docs/measurements.md", "order": 51,
        "title": f"Both torch columns across torch versions: {old} against {new}",
        "date": date, "commit": commit, "machine": machine, "command": command,
        "source": "the two semantics diffs of the command; every case that moved: "
                  "[docs/torch-versions.md](torch-versions.md)",
        "text": (f"Each column on torch {pair['parity'][0]} and on {pair['parity'][1]}, both compared "
                 f"with one JAX reference report (jax {reference.get('jax', '?')}); the plain-DTensor "
                 "row is what DTensor itself changed."),
        "columns": ["column", *CHANGES], "rows": rows, "notes": notes,
        "changes": {name: [c for c in d["cases"] if c["change"] != "same"]
                    for (name, _), d in zip(COLUMNS, (parity, raw))},
    }


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(data: dict[str, Any], results_file: str) -> str:
    """docs/torch-versions.md from the results file's data."""
    lines = [f"# {data['title']}", "",
             f"*Measured {data['date']} at {data['commit']}; {data['machine']}. "
             f"Results file: `{results_file}` (`python scripts/torch_versions.py` writes this page "
             "from it: do not edit).*", "", "```bash", *(data["command"] if isinstance(data["command"], list) else [data["command"]]),
             "```", "",
             data["text"], "", "| " + " | ".join(data["columns"]) + " |",
             "|---|" + "---:|" * (len(data["columns"]) - 1)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in data["rows"]]
    lines += [""] + [f"* {n}" for n in data.get("notes", ())]
    for name, label in COLUMNS:
        moved = data["changes"][name]
        lines += ["", f"## {label[0].upper()}{label[1:]}", ""]
        if not moved:
            lines.append("Every case is the same.")
            continue
        for change in CHANGES:
            cases = [c for c in moved if c["change"] == change]
            if not cases:
                continue
            lines += [f"### {change} ({len(cases)})", "", "| case | old | new | reason |",
                      "|---|---|---|---|"]
            lines += [f"| `{c['id']}` | {c['old']} | {c['new']} | {_cell(c['reason'])} |"
                      for c in cases]
            lines.append("")
        if lines[-1] == "":
            lines.pop()
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/torch_versions.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if docs/torch-versions.md is not the generated page")
    sub = parser.add_subparsers(dest="action")
    rec = sub.add_parser("record", help="write the results file from the two diffs")
    rec.add_argument("--parity", type=Path, required=True, help="the parity column's diff (JSON)")
    rec.add_argument("--raw", type=Path, required=True, help="the plain-DTensor column's diff (JSON)")
    for name in ("date", "commit", "machine"):
        rec.add_argument(f"--{name}", required=True)
    rec.add_argument("--command", action="append", required=True, help="each command of the run, in order")
    rec.add_argument("--note", action="append", default=[])
    args = parser.parse_args(argv)
    try:
        if args.action == "record":
            data = record(load_diff(args.parity), load_diff(args.raw), date=args.date,
                          commit=args.commit, machine=args.machine, command=args.command,
                          notes=args.note)
            RESULTS.write_text(json.dumps(data, indent=1) + "\n")
            print(f"wrote {RESULTS.relative_to(ROOT)}")
        if not RESULTS.exists():
            raise VersionsFileError(path=str(RESULTS.relative_to(ROOT)), problem="missing: write it "
                                    "with python scripts/torch_versions.py record ...")
        text = render(json.loads(RESULTS.read_text()), str(RESULTS.relative_to(ROOT)))
    except VersionsFileError as err:
        print(f"torch_versions: {err}", file=sys.stderr)
        return 2
    if args.check:
        if not PAGE.exists() or PAGE.read_text() != text:
            print(f"{PAGE.relative_to(ROOT)} is not generated from {RESULTS.relative_to(ROOT)}: run "
                  "python scripts/torch_versions.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
