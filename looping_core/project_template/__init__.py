"""`looping new NAME`: a new agent project, written from the templates beside this module.

What it writes installs with its own README's commands (looping-core from the folder it was
installed from here when that was no index), passes its tests as generated (a turn through the
agent harness with a `FunctionModel` and a `TestModel`), passes `looping check`, and answers
`looping send` through `looping model serve`:

- `src/<package>/agent.py`: a `LoopingAgent` with its soul and one typed tool;
- `tests/test_agent.py`: the tool alone, and turns through `AgentHarness`;
- `evals/<name>.toml`: an eval dataset of one case (`looping eval`), and
  `tests/test_evals.py`, which runs its cases as tests;
- `looping.toml`: the tenant, its model (the local endpoint) and its card;
- `pyproject.toml`, `README.md`, a CI workflow and a `.gitignore`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from looping_core.errors import LoopingError
from looping_core.plugin_template import check_name, core_source, install_words, render

__all__ = ["ProjectTemplateError", "write_project"]

_HERE = Path(__file__).parent

# template file -> where it goes in the new project ($package is the import name)
_FILES = {
    "pyproject.toml.tmpl": "pyproject.toml",
    "README.md.tmpl": "README.md",
    "looping.toml.tmpl": "looping.toml",
    "agent.py.tmpl": "src/$package/agent.py",
    "test_agent.py.tmpl": "tests/test_agent.py",
    "evals.toml.tmpl": "evals/$name.toml",
    "test_evals.py.tmpl": "tests/test_evals.py",
    "ci.yml.tmpl": ".github/workflows/ci.yml",
    "gitignore.tmpl": ".gitignore",
}


class ProjectTemplateError(LoopingError):
    """The project cannot be written (a bad name, a folder that exists)."""


def write_project(name: str, into: Path) -> Path:
    """Write agent project `name` into `into/name`; returns that folder."""
    check_name(name, "project", "word-counter", ProjectTemplateError)
    package = name.replace("-", "_")
    if importlib.util.find_spec(package) is not None:
        raise ProjectTemplateError(
            f"{name!r} would be the package {package!r}, which is already importable here "
            "(another module's name); choose another name"
        )
    words = {
        "name": name,
        "package": package,
        "cls": _class_name(name),
        **install_words(core_source(), "openai"),
    }
    target = render(_HERE, _FILES, words, into / name, ProjectTemplateError)
    (target / "src" / package / "__init__.py").write_text(f'"""The {name} agent."""\n')
    return target


def _class_name(name: str) -> str:
    """`word-counter` -> `WordCounterAgent`; `my-agent` -> `MyAgent`."""
    camel = "".join(part.capitalize() for part in name.split("-"))
    return camel if camel.endswith("Agent") else f"{camel}Agent"
