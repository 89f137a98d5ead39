"""The `LoopingError` family.

Every error this package raises on purpose derives from `LoopingError`, so a caller (the CLI, a
test, an embedding app) can tell "the user must fix something" from "the program has a bug".
Messages are part of the interface: they say what is wrong, where, what was expected and how to
fix it, and they never contain a secret's value.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

__all__ = [
    "ConfigError",
    "LoopingError",
    "PluginProblem",
    "PluginProblems",
]


class LoopingError(Exception):
    """Base class for every error looping-core raises deliberately."""


class ConfigError(LoopingError):
    """The config file cannot be used; `problems` lists every reason, each `problem @ $.path`."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.source = source
        self.problems = tuple(problems)
        super().__init__(self._render())

    def _render(self) -> str:
        count = len(self.problems)
        noun = "problem" if count == 1 else "problems"
        lines = [f"{self.source}: {count} config {noun}:"]
        lines.extend(f"  - {problem}" for problem in self.problems)
        return "\n".join(lines)


@attrs.frozen
class PluginProblem:
    """One reason the selected plugins cannot start, as a readable sentence.

    `code` is a stable identifier for programs and tests (for example `contract-version`);
    `message` is the sentence for humans. `plugin`, `distribution` and `version` say whose problem
    it is when that is known (a plugin that is not installed has no distribution).
    """

    code: str
    message: str
    plugin: str | None = None
    distribution: str | None = None
    version: str | None = None
    cause: BaseException | None = attrs.field(default=None, eq=False, repr=False)
    """The exception behind the problem (an import error, a hook that raised), if any."""

    def __str__(self) -> str:
        return self.message


class PluginProblems(LoopingError):
    """Startup validation found problems; all of them are listed, none is raised alone."""

    def __init__(self, problems: Sequence[PluginProblem]) -> None:
        self.problems = tuple(problems)
        count = len(self.problems)
        noun = "problem" if count == 1 else "problems"
        lines = [f"{count} plugin {noun}:"]
        lines.extend(f"  - {problem.message}" for problem in self.problems)
        super().__init__("\n".join(lines))

    @property
    def codes(self) -> list[str]:
        """The problem codes in report order (convenient in tests)."""
        return [problem.code for problem in self.problems]
