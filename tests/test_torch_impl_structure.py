"""``parity.torch_impl``'s shape, read from its source (nothing imported):
the concept folders stand in one order, each importing only itself and the
folders below it, and every private torch name comes in through
``runtime/torch_compat.py`` (docs/architecture.md draws both)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "parity" / "torch_impl"
# Bottom first: a folder may import the ones before it, never one after it.
FOLDERS = ("runtime", "layouts", "collectives", "arrays", "semantics", "explicit", "keras")
MODULES = sorted(p for p in ROOT.rglob("*.py") if p.parent != ROOT)


def _imports(path: Path) -> list[tuple[int, str, tuple[str, ...]]]:
    """``(line, module, names)`` of every import in ``path``, those inside
    functions included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name, ()) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module, tuple(a.name for a in node.names)))
    return found


def _folder(path: Path) -> str:
    return path.relative_to(ROOT).parts[0]


def test_every_module_lives_in_a_concept_folder():
    assert {_folder(p) for p in MODULES} == set(FOLDERS)
    assert sorted(p.name for p in ROOT.glob("*.py")) == ["__init__.py"]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_folder_imports_only_itself_and_the_folders_below_it(path):
    mine = FOLDERS.index(_folder(path))
    upward = []
    for line, module, names in _imports(path):
        if module == "parity.torch_impl":
            targets = names  # from parity.torch_impl import <folder>
        elif module.startswith("parity.torch_impl."):
            targets = (module.split(".")[2],)
        else:
            continue
        for target in targets:
            if target in FOLDERS and FOLDERS.index(target) > mine:
                upward.append((line, module, target))
    assert not upward, f"{path.relative_to(ROOT)} imports a higher folder: {upward}"


def _private(module: str, names: tuple[str, ...]) -> bool:
    return any(part.startswith("_") for part in module.split(".")) or any(
        n.startswith("_") for n in names)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_private_torch_names_come_only_through_torch_compat(path):
    if path == ROOT / "runtime" / "torch_compat.py":
        return
    private = [(line, module, names) for line, module, names in _imports(path)
               if module.split(".")[0] == "torch" and _private(module, names)]
    assert not private, f"{path.relative_to(ROOT)} imports private torch names: {private}"


def test_torch_compat_does_import_the_private_names_it_stands_for():
    # The check above must have something to hold: torch_compat is where they are.
    imports = _imports(ROOT / "runtime" / "torch_compat.py")
    assert any(m.split(".")[0] == "torch" and _private(m, n) for _, m, n in imports)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_dtensors_dispatcher_is_reached_only_through_torch_compat(path):
    # DTensor._op_dispatcher (its handler table, its dispatch steps) is
    # private: torch_compat hands it out, semantics/dtensor_handlers uses it.
    if path == ROOT / "runtime" / "torch_compat.py":
        return
    reads = [node.lineno for node in ast.walk(ast.parse(path.read_text(), str(path)))
             if isinstance(node, ast.Attribute)
             and node.attr in ("_op_dispatcher", "_custom_op_handlers")]
    assert not reads, f"{path.relative_to(ROOT)} reads DTensor's dispatcher at lines {reads}"
