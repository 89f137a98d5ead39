"""The `LoopingError` family.

Every error this package raises on purpose derives from `LoopingError`, so a caller (the CLI, a
test, an embedding app) can tell "the user must fix something" from "the program has a bug".
Messages are part of the interface: they say what is wrong, where, what was expected and how to
fix it, and they never contain a secret's value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import attrs

__all__ = [
    "CheckFailed",
    "ConfigError",
    "LoopingError",
    "PluginProblem",
    "PluginProblems",
    "ProblemsError",
]


class LoopingError(Exception):
    """Base class for every error looping-core raises deliberately."""


def problem_list(kind: str, problems: Sequence[object]) -> str:
    """`N <kind> problem(s):` and one `  - problem` line each: how every list of problems reads."""
    count = len(problems)
    lines = [f"{count} {kind} {'problem' if count == 1 else 'problems'}:"]
    lines.extend(f"  - {problem}" for problem in problems)
    return "\n".join(lines)


class ProblemsError(LoopingError):
    """An error that lists every problem it found, all at once: `problems`, each a sentence or
    a record whose `str` is one (`PluginProblem`). The config, the plugins, the models and the
    agents report this way, so a caller lists them without knowing which it was."""

    problems: tuple[Any, ...] = ()

    def problem_lines(self) -> list[str]:
        """Each problem as its sentence; the error itself when it lists none."""
        return [str(problem) for problem in self.problems] or [str(self)]


class CheckFailed(LoopingError):
    """A named check refused something: `check` is a stable name for programs, logs and answers
    (`jku-not-allowed`), `reason` a sentence for people. `subject` says what was checked."""

    subject: ClassVar[str] = "input"

    def __init__(self, check: str, reason: str) -> None:
        self.check = check
        self.reason = reason
        super().__init__(f"{self.subject} rejected ({check}): {reason}")


class ConfigError(ProblemsError):
    """The config file cannot be used; `problems` lists every reason, each `problem @ $.path`.

    `partial` is the config as far as it could be read (a wrong value replaced by its default,
    a tenant that cannot be read left out), for checks that report what else is wrong in the
    same run (`looping check`); `None` when the file could not be read at all. Never serve it.
    """

    def __init__(self, source: str, problems: Sequence[str], partial: Any = None) -> None:
        self.source = source
        self.problems = tuple(problems)
        self.partial = partial
        super().__init__(f"{source}: {problem_list('config', self.problems)}")


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


class PluginProblems(ProblemsError):
    """Startup validation found problems; all of them are listed, none is raised alone."""

    def __init__(self, problems: Sequence[PluginProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__(problem_list("plugin", [problem.message for problem in self.problems]))

    @property
    def codes(self) -> list[str]:
        """The problem codes in report order (convenient in tests)."""
        return [problem.code for problem in self.problems]
