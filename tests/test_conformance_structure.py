"""conformance/ has no import circle, and a function imports a module only
when that module is an optional framework (torch, JAX, Keras, parity's
backends) or pulls one in at its top: everything else is imported at the top
of the module that uses it (issue 22, item 3). Read from the source (ast),
not from a hand-kept list."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "conformance"
FRAMEWORKS = ("torch", "jax", "jaxlib", "keras", "keras_hub", "ml_dtypes", "parity.torch_impl",
              "parity.jax_ref")


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        out[name] = ast.parse(path.read_text(), str(path))
    return out


MODULES = _modules()


def _targets(node: ast.AST) -> list[str]:
    """The modules an import statement loads: ``import a.b``: ``a.b``;
    ``from a import b``: ``a.b`` where that is a module (of conformance or a
    framework: ``from parity import torch_impl``), else ``a``."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
        out = []
        for alias in node.names:
            full = f"{node.module}.{alias.name}"
            out.append(full if full in MODULES or _is_framework(full) else node.module)
        return out
    return []


def _imports(tree: ast.Module, top_only: bool) -> list[tuple[int, str]]:
    nodes = tree.body if top_only else ast.walk(tree)
    return [(node.lineno, t) for node in nodes for t in _targets(node)]


def _is_framework(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FRAMEWORKS)


def _heavy() -> set[str]:
    """conformance modules that import a framework at their top, directly or
    through another conformance module (a fixed point)."""
    heavy: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, tree in MODULES.items():
            if name not in heavy and any(_is_framework(t) or t in heavy
                                         for _, t in _imports(tree, top_only=True)):
                heavy.add(name)
                changed = True
    return heavy


def _cycles() -> list[list[str]]:
    edges = {m: sorted({t for _, t in _imports(tree, top_only=False) if t in MODULES and t != m})
             for m, tree in MODULES.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in edges:
        if module not in index:
            visit(module)
    return found


def test_conformance_has_no_import_circle():
    assert _cycles() == []


def test_the_cycle_finder_sees_a_circle():
    MODULES["conformance.values"].body.append(ast.parse("import conformance.cli").body[0])
    try:
        assert any("conformance.values" in c for c in _cycles())
    finally:
        MODULES["conformance.values"].body.pop()


def test_functions_import_only_optional_frameworks():
    heavy = _heavy()
    assert {"conformance.run_torch", "conformance.opinfo_check"} <= heavy
    assert "conformance.cli" not in heavy and "conformance.catalogue" not in heavy
    inside = []
    for name, tree in MODULES.items():
        top = {(line, t) for line, t in _imports(tree, top_only=True)}
        for line, target in _imports(tree, top_only=False):
            if (line, target) not in top and not (_is_framework(target) or target in heavy):
                inside.append(f"{name}:{line} imports {target} inside a function")
    assert inside == []


def test_the_cli_and_the_catalogue_load_no_framework():
    code = ("import sys, conformance.cli, conformance.catalogue, conformance.suite; "
            "print(sorted(m for m in ('torch', 'jax', 'keras') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
