"""Layers hold: every package imports only the layers below it (and its own), never one above,
and another package only through its public names: never one of its private (`_`) modules.

The order is `../shared/design.md`'s package map. Every import in every module counts, also one
inside a function or under `TYPE_CHECKING`: each is a dependency someone must keep working. A
package's door for the layers above is its `__init__` (what apps use) and, where the server needs
more, its `internal` module (left out of the API snapshot).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import looping_core

from test_import_graph import modules_after_importing

LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "looping_core",
        "looping_core.errors",
        "looping_core._origins",
        "looping_core._strict",
        "looping_core._random",
        "looping_core._logs",
        "looping_core._metrics",
        "looping_core._tracing",
    ),
    ("looping_core.contract", "looping_core.hookspecs"),
    ("looping_core.content",),
    ("looping_core.tools",),
    # A plugin shipped with core: the contract and the vocabulary below it, nothing above.
    ("looping_core.mcp",),
    ("looping_core.config",),
    ("looping_core.plugins",),
    ("looping_core.a2a",),
    ("looping_core.store",),
    ("looping_core.agent",),
    ("looping_core.delegation",),
    ("looping_core.runner",),
    ("looping_core.server",),
    (
        "looping_core.gateway",
        "looping_core.modelserver",
        "looping_core.plugin_template",
        "looping_core.project_template",
    ),
    ("looping_core.evals",),
    ("looping_core.cli",),
    ("looping_core.testing",),
)
"""Bottom up; a module belongs to the layer of its longest matching prefix."""

ROOT = Path(looping_core.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# Read from the files, never imported: an upward import can make an import cycle, and a walk that
# imports packages would then skip them silently.
MODULES = sorted(
    _module_name(path) for path in ROOT.rglob("*.py") if path.parent.name != "__pycache__"
)


def layer_of(module: str) -> int:
    best, rank = -1, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            matches = module == prefix or module.startswith(prefix + ".")
            if matches and len(prefix) > best:
                best, rank = len(prefix), index
    if rank < 0:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS")
    return rank


def imported_modules(source: str, module: str, is_package: bool) -> set[str]:
    """Every looping_core module `source` imports, wherever the import statement stands."""
    found: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    known = set(MODULES)
    return {name for name in found if name in known}


def upward_imports(source: str, module: str, is_package: bool) -> list[str]:
    own = layer_of(module)
    return sorted(
        f"{module} imports {target}"
        for target in imported_modules(source, module, is_package)
        if layer_of(target) > own
    )


def _package_of(module: str) -> str:
    """The top package a module belongs to (`looping_core.a2a` for `looping_core.a2a._card`);
    the root's own modules (`looping_core._metrics`) are shared by every package."""
    parts = module.split(".")
    return (
        ".".join(parts[:2]) if len(parts) > 1 and not parts[1].startswith("_") else "looping_core"
    )


def private_imports(source: str, module: str, is_package: bool) -> list[str]:
    """Imports of another package's private module: `looping_core.a2a._card` from the server."""
    own = _package_of(module)
    return sorted(
        f"{module} imports {target}"
        for target in imported_modules(source, module, is_package)
        if _package_of(target) not in (own, "looping_core")
        and any(part.startswith("_") for part in target.split(".")[2:])
    )


def _source(module: str) -> tuple[str, bool]:
    relative = Path(*module.split(".")[1:])
    package = ROOT / relative / "__init__.py"
    if package.exists():
        return package.read_text(), True
    return (ROOT / relative.with_suffix(".py")).read_text(), False


def test_every_module_is_in_a_layer() -> None:
    assert "looping_core.store._turns" in MODULES
    assert "looping_core" in MODULES
    for module in MODULES:
        layer_of(module)


def test_no_module_imports_a_layer_above_its_own() -> None:
    violations = []
    for module in MODULES:
        source, is_package = _source(module)
        violations += upward_imports(source, module, is_package)
    assert violations == []


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("looping_core.a2a._models", "from looping_core.store.internal import TaskStore\n"),
        ("looping_core.store._turns", "import looping_core.server\n"),
        ("looping_core.content._blocks", "from looping_core.a2a import parts\n"),
        (
            "looping_core.agent",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from looping_core.runner.internal import LocalRunner\n",
        ),
        ("looping_core.a2a._models", "def f():\n    from ..server import create_app\n"),
    ],
)
def test_the_check_catches_an_upward_import(module: str, source: str) -> None:
    assert upward_imports(source, module, is_package=module == "looping_core.agent") != []


def test_no_module_imports_another_package_s_private_module() -> None:
    violations = []
    for module in MODULES:
        source, is_package = _source(module)
        violations += private_imports(source, module, is_package)
    assert violations == []


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("looping_core.server._edge", "from looping_core.a2a._card import sign_card\n"),
        ("looping_core.server._app", "import looping_core.store._db\n"),
        ("looping_core.cli", "def f():\n    from looping_core.server._services import SERVICES\n"),
        ("looping_core.runner._local", "from ..store._turns import Turns\n"),
    ],
)
def test_the_check_catches_a_private_import(module: str, source: str) -> None:
    assert private_imports(source, module, is_package=False) != []


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("looping_core.server._edge", "from looping_core.a2a.internal import sign_card\n"),
        ("looping_core.server._edge", "from looping_core.server._services import SERVICES\n"),
        ("looping_core.server._edge", "from looping_core import _metrics\n"),
        ("looping_core.a2a._parts", "from looping_core.content import TextBlock\n"),
    ],
)
def test_the_check_allows_doors_and_a_package_s_own_modules(module: str, source: str) -> None:
    assert private_imports(source, module, is_package=False) == []


@pytest.mark.parametrize(
    "module", ["looping_core.agent", "looping_core.content", "looping_core.contract"]
)
def test_the_agent_seam_and_the_vocabulary_need_no_web_jose_or_database(module: str) -> None:
    loaded = {name.split(".")[0] for name in modules_after_importing(module)}
    assert not loaded & {"aiohttp", "joserfc", "peewee", "cryptography"}


MAX_MODULE_LINES = 500
"""Past this, a module holds more than one concern: split it by concern (design.md)."""


def test_every_module_is_at_most_500_lines() -> None:
    longer = {
        str(path.relative_to(ROOT.parent)): length
        for path in ROOT.rglob("*.py")
        if (length := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert longer == {}, f"split these by concern: {longer}"
