"""`looping plugin new NAME`: a new plugin distribution, written from the templates beside this
module (an entry point, the contract's hooks, a tool family, a validator test, a CI workflow that
runs `looping check`). Its tests pass as generated."""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from pathlib import Path

from looping_core.errors import LoopingError
from looping_core.plugin_template._source import (
    CI_PLACEHOLDER,
    CoreSource,
    core_link,
    core_source,
)

__all__ = [
    "CI_PLACEHOLDER",
    "CoreSource",
    "PluginTemplateError",
    "check_name",
    "ci_fill_in",
    "core_source",
    "install_words",
    "render",
    "write_plugin",
]

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
    check_name(name, "plugin", "my-tools", PluginTemplateError)
    source = core_source()
    words = {
        "name": name,
        "package": name.replace("-", "_"),
        "family": name,
        **install_words(source, ""),
    }
    target = render(_HERE, _FILES, words, into / name, PluginTemplateError)
    (target / "src" / words["package"] / "__init__.py").write_text(
        f'"""The {name} plugin for looping-core."""\n'
    )
    return target


def install_words(source: CoreSource, extras: str) -> dict[str, str]:
    """The templates' words for installing looping-core: `$core` here, `$ci_core` on a CI
    runner, and `$ci_note`, the comment that marks a CI line the user must fill in."""
    core, ci_core = source.pip_argument(extras), source.ci_argument(extras)
    note = ""
    if not source.reachable:
        note = "".join(f"      # {line}\n" for line in ci_fill_in(source))
    return {
        "core_link": core_link(),
        "core": f" {core}" if core else "",
        "ci_core": f" {ci_core}" if ci_core else "",
        "ci_note": note,
    }


def ci_fill_in(source: CoreSource) -> list[str]:
    """What the user must do to the generated CI's install line (and `looping new` says)."""
    return [
        f"FILL IN: looping-core was installed from a folder ({source.path}),",
        f"which no CI runner can reach. In the install line, replace {CI_PLACEHOLDER}",
        "with where a runner can get it (such as git+https://github.com/OWNER/looping-core@COMMIT),",
        "or drop that requirement once looping-core is on your package index.",
    ]


def check_name(name: str, kind: str, example: str, error: type[LoopingError]) -> None:
    """Refuse a distribution name that is not lowercase letters, digits and single hyphens."""
    if not _NAME.match(name) or name.endswith("-") or "--" in name:
        raise error(
            f"{name!r} is not a {kind} name: use lowercase letters, digits and single hyphens, "
            f"starting with a letter (such as {example})"
        )


def render(
    source: Path,
    files: Mapping[str, str],
    words: Mapping[str, str],
    target: Path,
    error: type[LoopingError],
) -> Path:
    """Write each template of `source` (`$word`s filled in from `words`) where `files` says,
    under `target`, which must not exist yet; returns `target`."""
    if target.exists():
        raise error(f"{target} exists already; choose another name or folder")
    for template, destination in files.items():
        text = string.Template((source / template).read_text()).substitute(words)
        path = target / string.Template(destination).substitute(words)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return target
