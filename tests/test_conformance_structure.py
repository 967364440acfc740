"""conformance/ has no import circle, its folders stand in one order (a
module imports only its own folder and the folders below it), and a function
imports a module only when that module is an optional framework (torch, JAX,
Keras, parity's backends) or pulls one in at its top: everything else is
imported at the top of the module that uses it (issue 22, item 3). Read from
the source (ast), not from a hand-kept list of imports."""

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

# conformance/'s folders (and its one top-level module, cli), top to bottom,
# as conformance/__init__.py's table lists them.
LAYERS = ("docs", "cli", "commands", "opinfo", "running", "reports", "cases", "catalogue", "records")


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


def _layer(module: str) -> int:
    """The index in ``LAYERS`` of ``module``'s folder; ``KeyError`` naming the
    module when it lies in none (a new folder must be placed in the order)."""
    parts = module.split(".")
    if len(parts) < 2 or parts[1] not in LAYERS:
        raise KeyError(f"{module} is in no folder of LAYERS {LAYERS}: place its folder in the order")
    return LAYERS.index(parts[1])


def _upward_imports() -> list[str]:
    """Imports (at the top or inside a function) from a module into a folder
    above its own."""
    return [f"{name}:{line} imports {target} ({LAYERS[_layer(target)]}/ is above "
            f"{LAYERS[_layer(name)]}/)"
            for name, tree in MODULES.items() if name != "conformance"
            for line, target in _imports(tree, top_only=False)
            if target in MODULES and target != "conformance" and _layer(target) < _layer(name)]


def test_every_module_lies_in_a_folder_of_the_order():
    assert {m.split(".")[1] for m in MODULES if m != "conformance"} == set(LAYERS)
    package_doc = ast.get_docstring(MODULES["conformance"])
    listed = [line.split("``")[1].rstrip("/").removesuffix(".py")
              for line in package_doc.splitlines() if line.startswith("| ``")]
    assert tuple(listed) == LAYERS, "conformance/__init__.py's table lists the folders in order"


def test_no_module_imports_a_folder_above_its_own():
    assert _upward_imports() == []


def test_the_order_check_sees_an_upward_import():
    MODULES["conformance.cases.signatures"].body.append(ast.parse(
        "from conformance.reports import compare").body[0])
    try:
        assert _upward_imports() == [f"conformance.cases.signatures:1 imports "
                                     "conformance.reports.compare (reports/ is above cases/)"]
    finally:
        MODULES["conformance.cases.signatures"].body.pop()


def test_conformance_has_no_import_circle():
    assert _cycles() == []


def test_the_cycle_finder_sees_a_circle():
    MODULES["conformance.records.values"].body.append(ast.parse("import conformance.cli").body[0])
    try:
        assert any("conformance.records.values" in c for c in _cycles())
    finally:
        MODULES["conformance.records.values"].body.pop()


def test_functions_import_only_optional_frameworks():
    heavy = _heavy()
    assert {"conformance.running.run_torch", "conformance.opinfo.check"} <= heavy
    assert "conformance.cli" not in heavy and "conformance.catalogue" not in heavy
    inside = []
    for name, tree in MODULES.items():
        top = {(line, t) for line, t in _imports(tree, top_only=True)}
        for line, target in _imports(tree, top_only=False):
            if (line, target) not in top and not (_is_framework(target) or target in heavy):
                inside.append(f"{name}:{line} imports {target} inside a function")
    assert inside == []


def test_the_cli_and_the_catalogue_load_no_framework():
    code = ("import sys, conformance.cli, conformance.catalogue, conformance.commands.suite; "
            "print(sorted(m for m in ('torch', 'jax', 'keras') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
