"""The README's code blocks do what they say.

* Every Python block runs as written and checks its own claims:
  ``tests/test_docs_blocks.py`` runs it, with every Python block of docs/.
* Every bash block holds commands that exist: ``bash scripts/X.sh`` names a
  script of this repository (the two setup commands are not run here: they
  build a venv), and ``parity SUB --opt ...`` names a subcommand and options
  that ``parity SUB --help`` lists.
* Every relative link points at a file of the repository.
"""

from __future__ import annotations

import functools
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import blocks

from conformance.cli import EXIT_DIVERGES, EXIT_NO_DEVICE

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


PYTHON = blocks(README, "python")
BASH = blocks(README, "bash")


def test_the_extractor_finds_blocks_by_language():
    text = "a\n```python\nx = 1\n```\n```bash\nls\n```\n"
    assert blocks(text, "python") == [(2, "x = 1\n")]
    assert blocks(text, "bash") == [(5, "ls\n")]
    assert len(PYTHON) >= 3 and len(BASH) >= 2


def _commands(code: str) -> list[list[str]]:
    out = []
    for raw in code.replace("\\\n", " ").splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            out.append(shlex.split(line))
    return out


@functools.lru_cache(maxsize=None)
def _help(sub: str) -> str:
    out = subprocess.run([sys.executable, "-c", "import sys; from parity.cli import main; "
                          "sys.exit(main(sys.argv[1:]))", *([sub] if sub else []), "--help"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("line, code", BASH, ids=[f"README.md:{n}" for n, _ in BASH])
def test_each_bash_block_names_commands_and_options_that_exist(line, code):
    top = None
    for argv in _commands(code):
        if argv[0] == "bash":
            assert (ROOT / argv[1]).is_file(), f"README.md line {line}: no {argv[1]}"
        elif argv[0] == "parity":
            top = top or _help("")
            sub = argv[1]
            assert re.search(rf"\b{sub}\b", top), f"README.md line {line}: no `parity {sub}`"
            listed = _help(sub)
            for opt in (a.split("=")[0] for a in argv[2:] if a.startswith("--")):
                assert opt in listed, f"README.md line {line}: `parity {sub}` has no {opt}"
        else:
            pytest.fail(f"README.md line {line}: {argv[0]!r} is neither `bash scripts/...` nor `parity`: "
                        "add a check for it here")


def test_the_two_commands_are_there():
    first = BASH[0][1]
    assert "bash scripts/conformance.sh" in first and "bash scripts/test.sh" in first


def test_every_relative_link_points_at_a_file():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    relative = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert relative
    missing = [link for link in relative if not (ROOT / link).exists()]
    assert not missing, missing


def test_the_readme_states_no_measured_figures():
    # Figures live in generated, dated tables (docs/measurements.md,
    # benchmarks/README.md); a figure here could contradict them.
    prose = re.sub(r"^```.*?^```", "", README, flags=re.S | re.M)
    figures = re.findall(r"\b\d[\d,.]*\s?(?:us|µs|ms|s|min|x|%|cases|MB|GB)\b", prose)
    assert not figures, figures


def test_the_readme_states_the_exit_codes_the_cli_returns():
    # The README names the codes the CLI returns (conformance/cli.py) for
    # the two cases a script relies on.
    prose = " ".join(README.split())
    assert (f"`parity conformance` (so `scripts/conformance.sh`) exits {EXIT_DIVERGES} when a "
            "parity case is neither `match` nor `both-reject`") in prose
    assert f"with no GPU visible it exits {EXIT_NO_DEVICE}, writing nothing" in prose
    assert "`--skip-without-gpu`" in prose
