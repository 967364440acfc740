"""What a ``parity run`` / ``parity conformance`` command line asks for, checked
before any case runs: the case selection (a frozen ``Selection``), the cases
it selects, and whether a report can be written where it points.

Every refusal is a ``UsageError`` whose message names the value and the fix;
``conformance.cli`` prints it as one line and exits 2.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from conformance.cases import (DEFAULT_AXIS_NAMES, Case, CaseFileError, default_cases,
                               load_case_file, select)
from conformance.catalogue import OPS, unknown_op


class UsageError(Exception):
    """A bad argument: ``main`` prints ``parity <command>: <message>``, exit 2."""


def parse_mesh(text: str) -> tuple[int, ...]:
    """``"2x4"`` -> ``(2, 4)``. Raises ``UsageError`` naming the text."""
    parts = text.lower().split("x")
    if not all(p.isdigit() and int(p) > 0 for p in parts):
        raise UsageError(f"--mesh {text!r} is not a mesh shape: positive sizes joined by x, "
                         "e.g. 8, 2x4 or 2x2x2")
    return tuple(int(p) for p in parts)


@dataclasses.dataclass(frozen=True)
class Selection:
    """Which cases a run takes: ``--cases`` files (else the default
    catalogue), ``--mesh``, ``--op`` (repeatable), ``-k``, ``--limit``, and
    the per-case ``--timeout``."""

    case_files: tuple[str, ...] = ()
    mesh: str | None = None
    ops: tuple[str, ...] = ()
    pattern: str | None = None
    limit: int | None = None
    timeout: float = 60.0

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Selection:
        """The selection flags of a parsed ``run`` or ``conformance`` command."""
        return cls(case_files=tuple(args.cases or ()), mesh=args.mesh, ops=tuple(args.op),
                   pattern=args.pattern, limit=args.limit, timeout=args.timeout)

    def to_argv(self) -> list[str]:
        """The same selection as ``parity run`` flags (the suite's child runs)."""
        out: list[str] = []
        if self.case_files:
            out += ["--cases", *self.case_files]
        if self.mesh:
            out += ["--mesh", self.mesh]
        for op in self.ops:
            out += ["--op", op]
        if self.pattern:
            out += ["-k", self.pattern]
        if self.limit:
            out += ["--limit", str(self.limit)]
        return out + ["--timeout", str(self.timeout)]


def load_selected_cases(selection: Selection) -> list[Case]:
    """The cases ``selection`` selects. Raises ``UsageError`` for a bad
    ``--mesh``, an unknown ``--op`` (naming the closest ops), a malformed
    case file, ids repeated across files, or a selection that matches no case."""
    default_mesh = None
    if selection.mesh is not None:  # "" too: an empty --mesh is refused, never ignored
        shape = parse_mesh(selection.mesh)
        default_mesh = (shape, DEFAULT_AXIS_NAMES.get(len(shape),
                                                      tuple(f"axis{i}" for i in range(len(shape)))))
    unknown = [op for op in selection.ops if op not in OPS]
    if unknown:
        raise UsageError(f"--op {unknown_op(unknown[0])}")
    if selection.case_files:
        try:
            cases = [c for f in selection.case_files for c in load_case_file(f, default_mesh)]
        except CaseFileError as err:
            raise UsageError(str(err)) from None
        ids = [c.id for c in cases]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise UsageError(f"case ids repeat across the --cases files: {dup[:5]}")
    else:
        cases = default_cases(selection.ops)
    mesh_tag = "x".join(str(s) for s in default_mesh[0]) if default_mesh else None
    selected = select(cases, selection.ops, selection.pattern, mesh_tag, selection.limit)
    if not selected:
        given = [f"--mesh {selection.mesh}" if selection.mesh else "",
                 *(f"--op {o}" for o in selection.ops),
                 f"-k {selection.pattern!r}" if selection.pattern else ""]
        raise UsageError(f"the selection ({' '.join(g for g in given if g)}) matches none of "
                         f"the {len(cases)} cases; nothing to run")
    return selected


def check_writable(path: str | Path, flag: str) -> None:
    """Raise ``UsageError`` naming ``path`` (as given) unless a file can be
    written there: ``path`` is empty or an existing directory, a folder on
    its way is a regular file, or the folder cannot be created or written.
    Called before any case runs."""
    given = str(path)
    if not given:
        raise UsageError(f"{flag} {given!r} is empty; name a file, e.g. {flag} 'report.json'")
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{flag} {given!r} is a directory; name a file in it, e.g. "
                         f"{flag} {str(path / 'report.json')!r}")
    _check_parents(path, given, flag)
    _probe_write(path.parent, given, flag, f".{path.name}.probe")


def check_writable_dir(path: str | Path, flag: str) -> None:
    """Raise ``UsageError`` naming ``path`` (as given, never a file under it)
    unless reports can be written in it: ``path`` is empty or a regular
    file, a folder on its way is a regular file, or it cannot be created or
    written. Called before any case runs."""
    given = str(path)
    if not given:
        raise UsageError(f"{flag} {given!r} is empty; name a directory, e.g. {flag} reports")
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {given!r} is a file, not a directory; name a directory, "
                         f"e.g. {flag} {str(path.parent / 'reports')!r}")
    _check_parents(path, given, flag)
    _probe_write(path, given, flag, ".parity.probe")


def _check_parents(path: Path, given: str, flag: str) -> None:
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise UsageError(f"{flag} {given!r} lies under {str(parent)!r}, which is a "
                             "file, not a directory; choose a path under a directory")


def _probe_write(folder: Path, given: str, flag: str, probe_name: str) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / probe_name
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise UsageError(f"{flag} {given!r} cannot be written: "
                         f"{err.strerror or err}") from None
