"""Generates ``docs/cli.md``: every ``parity`` command, flag and exit code,
read from the argparse definitions (``conformance.cli.build_parser``) so the
page cannot drift from the program.

    python -m conformance.docs.cli_md          # rewrite docs/cli.md
    python -m conformance.docs.cli_md --check  # exit 1 when docs/cli.md is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from conformance.cli import EXIT_CODES, build_parser

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "cli.md"

HEAD = """# The `parity` command line

Generated from the argparse definitions (`conformance/cli.py`) by
`python -m conformance.docs.cli_md`; a test checks that this file is current.
`parity --help` and `parity COMMAND --help` print the same text.

Misuse (a bad flag value, a malformed case file, an `--out` that is a
directory or lies under a file, a selection that matches nothing) prints one
line naming the value and the fix, and exits 2 before any case runs.
"""


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    names = ", ".join(f"`{o}`" for o in action.option_strings)
    if action.nargs == 0:
        return names
    metavar = action.metavar or (
        "{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper())
    suffix = " ..." if action.nargs in ("+", "*") else ""
    return f"{names} `{metavar}{suffix}`"


def _default(action: argparse.Action) -> str:
    if action.required:
        return "required"
    if action.nargs == 0 or action.default in (None, [], argparse.SUPPRESS):
        return ""
    return f"`{action.default}`"


def _command(name: str, parser: argparse.ArgumentParser) -> list[str]:
    usage = " ".join(parser.format_usage().split()).removeprefix("usage: ")
    lines = [f"## `parity {name}`", "", _cell(parser.description or ""), "",
             "```text", usage, "```", "", "| flag | default | what |", "|---|---|---|"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        lines.append(f"| {_flags(action)} | {_default(action)} | {_cell(action.help or '')} |")
    return lines + [""]


def render_doc() -> str:
    """The text of ``docs/cli.md``."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    lines = [HEAD]
    for name, command in sub.choices.items():
        lines += _command(name, command)
    lines += ["## Exit codes", "", "```text", EXIT_CODES.removeprefix("exit status:\n"), "```",
              ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Write ``docs/cli.md``; with ``--check``, exit 1 (naming the file)
    when the committed page differs from the generated one."""
    parser = argparse.ArgumentParser(prog="python -m conformance.docs.cli_md")
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/cli.md is stale")
    args = parser.parse_args(argv)
    text = render_doc()
    if not args.check:
        DOC.write_text(text)
        return 0
    if not DOC.exists() or DOC.read_text() != text:
        print(f"stale: {DOC.relative_to(ROOT)}; run python -m conformance.docs.cli_md",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
