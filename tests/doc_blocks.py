"""The fenced code blocks of the documentation, for the tests that run them
(``tests/test_docs_blocks.py``) and check them (``tests/test_readme.py``).

* :func:`blocks` finds each fenced block of one language in a Markdown text;
* :func:`python_blocks` is every ```python block of README.md and docs/*.md;
* :func:`checks_its_claims` says whether a block asserts or prints;
* :func:`print_claims` reads ``print(...)  # VALUE`` comments;
* :func:`run_block` runs one block as written, in a fresh interpreter from
  the repository root.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The pages whose ```python blocks run as written: README.md, then docs/*.md.
PAGES = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))
# Where scripts/keras_hub.sh installs keras-hub (it is not in .venv).
KERAS_HUB_OVERLAY = ROOT / ".keras-hub"


def blocks(text: str, lang: str) -> list[tuple[int, str]]:
    """``(line number, code)`` of each fenced block in ``lang`` (the line
    of its opening fence, counted from 1)."""
    found = []
    for match in re.finditer(rf"^```{lang}\n(.*?)^```", text, re.S | re.M):
        found.append((text.count("\n", 0, match.start()) + 1, match.group(1)))
    return found


def python_blocks(pages: tuple[str, ...] = PAGES) -> list[tuple[str, int, str]]:
    """``(page, line, code)`` of every ```python block of ``pages``
    (paths relative to the repository root)."""
    return [(page, line, code) for page in pages
            for line, code in blocks((ROOT / page).read_text(), "python")]


def checks_its_claims(code: str) -> bool:
    """Whether ``code`` asserts or prints at least once: a block that does
    neither proves nothing when it runs."""
    return re.search(r"^\s*(assert |print\(|np\.testing\.assert_)", code, re.M) is not None


def print_claims(code: str) -> list[tuple[str, str]]:
    """``(print call, the value its comment says)`` for lines
    ``print(...)  # VALUE[: explanation]`` whose VALUE is a Python literal."""
    claims = []
    for m in re.finditer(r"^\s*(print\(.*\))\s*#\s*(\(.*?\))(?::|$)", code, re.M):
        claims.append((m.group(1), m.group(2)))
    return claims


def needs_keras_hub(code: str) -> bool:
    """Whether ``code`` imports keras_hub."""
    return re.search(r"^\s*(import|from)\s+[^#\n]*\bkeras_hub\b", code, re.M) is not None


def keras_hub_installed() -> bool:
    """Whether keras_hub imports in a block's interpreter (``.venv``, or the
    ``.keras-hub`` overlay that ``scripts/keras_hub.sh`` installs)."""
    if importlib.util.find_spec("keras_hub") is not None:
        return True
    return (KERAS_HUB_OVERLAY / "keras_hub" / "__init__.py").is_file()


def block_env() -> dict[str, str]:
    """The environment a block runs in: the caller's, with this checkout
    (and the keras-hub overlay, when installed) first on ``PYTHONPATH`` and
    no ``KERAS_BACKEND``, so a block that needs one must set it itself."""
    env = dict(os.environ)
    env.pop("KERAS_BACKEND", None)
    front = [str(ROOT)] + ([str(KERAS_HUB_OVERLAY)] if KERAS_HUB_OVERLAY.is_dir() else [])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*front, env.get("PYTHONPATH")]))
    return env


def run_block(code: str, timeout: float) -> subprocess.CompletedProcess:
    """Run ``code`` as written with ``python -c`` from the repository root;
    raises ``subprocess.TimeoutExpired`` past ``timeout`` seconds."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=block_env())
