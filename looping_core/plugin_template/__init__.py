"""`looping plugin new NAME`: a new plugin distribution, written from the templates beside this
module (an entry point, the contract's hooks, a tool family, a validator test, a CI workflow that
runs `looping check`). Its tests pass as generated."""

from __future__ import annotations

import re
import string
from pathlib import Path

from looping_core.errors import LoopingError

__all__ = ["PluginTemplateError", "write_plugin"]

_NAME = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
_HERE = Path(__file__).parent

# template file -> where it goes in the new distribution ($package is the import name)
_FILES = {
    "pyproject.toml.tmpl": "pyproject.toml",
    "README.md.tmpl": "README.md",
    "looping.toml.tmpl": "looping.toml",
    "plugin.py.tmpl": "src/$package/plugin.py",
    "test_plugin.py.tmpl": "tests/test_plugin.py",
    "ci.yml.tmpl": ".github/workflows/ci.yml",
}


class PluginTemplateError(LoopingError):
    """The plugin cannot be written (a bad name, a folder that exists)."""


def write_plugin(name: str, into: Path) -> Path:
    """Write plugin distribution `name` into `into/name`; returns that folder."""
    if not _NAME.match(name) or name.endswith("-") or "--" in name:
        raise PluginTemplateError(
            f"{name!r} is not a plugin name: use lowercase letters, digits and single hyphens, "
            "starting with a letter (such as my-tools)"
        )
    target = into / name
    if target.exists():
        raise PluginTemplateError(f"{target} exists already; choose another name or folder")
    words = {"name": name, "package": name.replace("-", "_"), "family": name}
    for template, destination in _FILES.items():
        text = string.Template((_HERE / template).read_text()).substitute(words)
        path = target / string.Template(destination).substitute(words)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (target / "src" / words["package"] / "__init__.py").write_text(
        f'"""The {name} plugin for looping-core."""\n'
    )
    return target
