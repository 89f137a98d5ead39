"""An eval dataset: cases a person writes by hand in TOML, read into frozen records.

TOML, not YAML: it is the config's format (one syntax to learn), Python reads it without a
dependency, and it has no implicit types (`no` stays a string, `1.10` a string when quoted).
Unknown keys are errors, and every problem of a file is reported at once, each as `problem @
$.path`, naming the file.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import cattrs

from looping_core._strict import describe, error_leaves, register_strict_primitives
from looping_core.config import TenantModelConfig
from looping_core.errors import ProblemsError, problem_list
from looping_core.tools import schema_problem

__all__ = [
    "STATES",
    "Case",
    "Dataset",
    "DatasetError",
    "Expect",
    "Judge",
    "TurnSpec",
    "load_dataset",
]

STATES = (
    "completed", "failed", "canceled", "rejected", "input_required", "auth_required", "working",
    "submitted",
)  # fmt: skip
"""A turn's outcome as `expect.state` names it (the A2A state without its prefix)."""


class DatasetError(ProblemsError):
    """A dataset that cannot be run: every problem, each naming its place in the file."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = tuple(problems)
        super().__init__(f"{source}: {problem_list('dataset', self.problems)}")


@attrs.frozen
class ToolCallSpec:
    """A tool call the turn must make: its name, and the arguments it must have (a subset)."""

    name: str
    arguments: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class Expect:
    """What a turn's outcome must be; a check left out is not made."""

    state: str | None = None
    text_contains: tuple[str, ...] = ()
    text_matches: str | None = None
    """A regular expression the answer's text must contain a match of."""
    answer: Any = None
    """The structured answer (the data part) it must equal."""
    answer_schema: Mapping[str, Any] | None = None
    """A JSON Schema the structured answer must fit (references never fetched)."""
    tools: tuple[str, ...] | None = None
    """The tools called, exactly these, in this order (`[]`: none)."""
    tool_calls: tuple[ToolCallSpec, ...] = ()
    """Calls that must be among the turn's, in this order, each with at least these arguments."""
    tools_not_called: tuple[str, ...] = ()
    max_tokens: int | None = None
    """Input and output tokens of the turn, at most."""
    max_cost: float | None = None
    """What the turn's model calls cost, at most (by the served config's `[prices]`)."""
    max_seconds: float | None = None
    """From the send to the turn's end, at most."""
    rubric: str | None = None
    """What the judge is asked to grade the answer by (the dataset's `[judge]`)."""


@attrs.frozen
class TurnSpec:
    """One message of a case's conversation, and what its turn must do. A turn after one that
    asked for input (or approval) answers that task; otherwise it starts a new task in the same
    conversation."""

    text: str = ""
    data: Mapping[str, Any] | None = None
    """A data part sent beside the text."""
    approve: tuple[str, ...] = ()
    """Tool calls the task waits for that this message approves: their tool names, their call
    ids, or `"all"`."""
    deny: tuple[str, ...] = ()
    expect: Expect = attrs.field(factory=Expect)


@attrs.frozen
class Case:
    name: str
    turns: tuple[TurnSpec, ...]
    tenant: str | None = None
    """The tenant it is sent to (the dataset's `tenant` when left out)."""
    subject: str | None = None
    """The caller it is sent as (the dataset's, else `eval`)."""


@attrs.frozen
class Judge:
    """The model that grades answers by a case's `rubric`. Every word it reads is the
    dataset's: `system`, and `prompt` with `{rubric}`, `{input}` and `{answer}` filled in; the
    answer passes when the judge's reply matches `passes` (a regular expression)."""

    prompt: str
    passes: str
    system: str = ""
    tenant: str | None = None
    """Use this tenant's `[tenants.<id>.model]` of the served config."""
    model: TenantModelConfig | None = None
    """Or this model (the keys of `[tenants.<id>.model]`, fallbacks too)."""


@attrs.frozen
class Dataset:
    cases: tuple[Case, ...]
    tenant: str | None = None
    subject: str = "eval"
    judge: Judge | None = None
    source: str = "<dataset>"

    def tenant_of(self, case: Case) -> str:
        tenant = case.tenant or self.tenant
        assert tenant is not None  # the loader refuses a case without one
        return tenant


def _converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True)
    register_strict_primitives(converter)
    converter.register_structure_hook(Any, lambda value, _: value)
    return converter


_CONVERTER = _converter()


def load_dataset(path: str | Path) -> Dataset:
    """Read and check a dataset file; `DatasetError` lists every problem in it."""
    source = str(path)
    try:
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DatasetError(source, ["file not found @ $"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(source, [f"cannot read the file: {exc} @ $"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise DatasetError(source, [f"invalid TOML: {exc} @ $"]) from None
    try:
        dataset: Dataset = _CONVERTER.structure({**raw, "source": source}, Dataset)
    except Exception as exc:  # cattrs groups the leaf errors: each becomes a line
        problems = [f"{describe(leaf)} @ {where}" for leaf, where in error_leaves(exc, "$")]
        raise DatasetError(source, problems) from None
    problems = _problems(dataset)
    if problems:
        raise DatasetError(source, problems)
    return dataset


def _problems(dataset: Dataset) -> list[str]:
    problems: list[str] = []
    if not dataset.cases:
        problems.append("a dataset needs at least one [[cases]] @ $.cases")
    seen: set[str] = set()
    for index, case in enumerate(dataset.cases):
        where = f"$.cases[{index}]"
        if not case.name.strip():
            problems.append(f"a case needs a name @ {where}.name")
        elif case.name in seen:
            problems.append(f"another case has the name {case.name!r} @ {where}.name")
        seen.add(case.name)
        if not (case.tenant or dataset.tenant):
            problems.append(f"no tenant: set the dataset's tenant or the case's @ {where}.tenant")
        if not case.turns:
            problems.append(f"a case needs at least one [[cases.turns]] @ {where}.turns")
        for number, turn in enumerate(case.turns):
            problems += _turn_problems(turn, f"{where}.turns[{number}]", dataset.judge)
    if dataset.judge is not None:
        problems += _judge_problems(dataset.judge)
    return problems


def _turn_problems(turn: TurnSpec, where: str, judge: Judge | None) -> list[str]:
    problems = []
    if not (turn.text.strip() or turn.data or turn.approve or turn.deny):
        problems.append(f"a turn sends text, data, or decisions (approve, deny) @ {where}")
    expect = turn.expect
    if expect.state is not None and expect.state not in STATES:
        problems.append(f"state must be one of {', '.join(STATES)} @ {where}.expect.state")
    if expect.text_matches is not None:
        try:
            re.compile(expect.text_matches)
        except re.error as exc:
            problems.append(f"not a regular expression: {exc} @ {where}.expect.text_matches")
    if expect.answer_schema is not None:
        problem = schema_problem(expect.answer_schema)
        if problem is not None:
            problems.append(f"not a usable JSON Schema: {problem} @ {where}.expect.answer_schema")
    for key in ("max_tokens", "max_cost", "max_seconds"):
        value = getattr(expect, key)
        if value is not None and value < 0:
            problems.append(f"must not be negative @ {where}.expect.{key}")
    if expect.rubric is not None and judge is None:
        problems.append(f"a rubric needs the dataset's [judge] @ {where}.expect.rubric")
    return problems


def _judge_problems(judge: Judge) -> list[str]:
    problems = []
    if (judge.tenant is None) == (judge.model is None):
        problems.append("the judge names one model: tenant or model @ $.judge")
    try:
        re.compile(judge.passes)
    except re.error as exc:
        problems.append(f"not a regular expression: {exc} @ $.judge.passes")
    if "{answer}" not in judge.prompt:
        problems.append("the prompt must show the judge the {answer} @ $.judge.prompt")
    return problems
