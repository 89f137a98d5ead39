"""Bounds on the shape of the code: no module of the library past `MAX_LINES` lines, and no
circle among the modules of a package (type-only imports count: a circle there still means
two modules that cannot be read apart)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (ROOT / "looping_core", ROOT / "looping_plugins_example")
MAX_LINES = 500


def _modules() -> list[Path]:
    return sorted(
        path
        for package in PACKAGES
        for path in package.rglob("*.py")
        if "_template" not in path.relative_to(ROOT).parts[1]  # what `looping new` writes
    )


def test_the_walk_finds_the_modules() -> None:
    names = {path.relative_to(ROOT).as_posix() for path in _modules()}
    assert "looping_core/runner/_engine.py" in names
    assert "looping_core/server/_call_path.py" in names


def test_no_module_passes_the_line_bound() -> None:
    long = {
        path.relative_to(ROOT).as_posix(): lines
        for path in _modules()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"split these by concern (at most {MAX_LINES} lines each): {long}"


def _imports_within(path: Path) -> set[str]:
    """The sibling modules `path` imports (its package's, by their dotted names)."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            parent, _, name = node.module.rpartition(".")
            if parent == package:
                found.add(name)
    return found


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_the_circle_finder_finds_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize(
    "package",
    sorted(
        {path.parent for path in _modules() if path.name == "__init__.py"},
    ),
    ids=lambda path: path.relative_to(ROOT).as_posix(),
)
def test_no_import_circle_within_a_package(package: Path) -> None:
    graph = {path.stem: _imports_within(path) for path in package.glob("*.py")}
    assert not _circles(graph), f"modules of {package.name} import each other in a circle"
