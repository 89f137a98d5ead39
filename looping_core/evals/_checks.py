"""The checks of one turn: what its task (as the agent left it, in A2A's JSON) and its time say,
against what the case expects. Each check says what it expected and what it got."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from looping_core.evals._dataset import Expect, ToolCallSpec
from looping_core.tools import SchemaUnusable, argument_problems

__all__ = [
    "MAX_SHOWN",
    "CheckResult",
    "TurnOutcome",
    "answer_of",
    "check_turn",
    "shown",
    "state_of",
    "text_of",
    "tool_calls_of",
]

MAX_SHOWN = 300
"""Characters of a value a failed check shows at most."""


@attrs.frozen
class CheckResult:
    """One check: its name (`text_contains`), whether it passed, what was expected, and what
    the turn gave."""

    name: str
    passed: bool
    expected: str = ""
    got: str = ""

    @property
    def said(self) -> str:
        """The check as a failure reads: `tools: expected [...], got [...]`."""
        return f"{self.name}: expected {self.expected}, got {self.got}"


@attrs.frozen
class TurnOutcome:
    """A turn as the caller saw it: the task after it (A2A JSON) and how long it took."""

    task: Mapping[str, Any]
    seconds: float

    @property
    def metadata(self) -> Mapping[str, Any]:
        return self.task.get("metadata") or {}

    @property
    def tokens(self) -> int:
        usage = self.metadata.get("looping.usage") or {}
        keys = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens")
        return sum(int(usage.get(key, 0)) for key in keys)

    @property
    def cost(self) -> float | None:
        cost = self.metadata.get("looping.cost")
        return float(cost) if isinstance(cost, int | float) else None


def state_of(task: Mapping[str, Any]) -> str:
    """`completed` for `TASK_STATE_COMPLETED`."""
    return str(task.get("status", {}).get("state", "")).removeprefix("TASK_STATE_").lower()


def _parts(task: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    parts = [p for artifact in task.get("artifacts") or () for p in artifact.get("parts") or ()]
    status = (task.get("status") or {}).get("message") or {}
    return parts or list(status.get("parts") or ())


def text_of(task: Mapping[str, Any]) -> str:
    """The answer's text: its artifacts' text parts, else its status message's."""
    return "".join(str(part["text"]) for part in _parts(task) if "text" in part)


def answer_of(task: Mapping[str, Any]) -> Any:
    """The structured answer: the first data part (`None`: none)."""
    return next((part["data"] for part in _parts(task) if "data" in part), None)


def tool_calls_of(task: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The turn's tool calls as its agent reports them (`looping.toolCalls`)."""
    calls = (task.get("metadata") or {}).get("looping.toolCalls") or []
    return [call for call in calls if isinstance(call, Mapping)]


def shown(value: Any) -> str:
    """`value` as a failure shows it: text, or JSON, cut at `MAX_SHOWN` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


def check_turn(expect: Expect, outcome: TurnOutcome) -> list[CheckResult]:
    """Every check `expect` asks for, in a fixed order (no rubric: the judge grades that)."""
    task = outcome.task
    results: list[CheckResult] = []
    if expect.state is not None:
        got = state_of(task)
        results.append(CheckResult("state", got == expect.state, expect.state, got))
    text = text_of(task)
    for words in expect.text_contains:
        results.append(CheckResult("text_contains", words in text, words, shown(text)))
    if expect.text_matches is not None:
        found = re.search(expect.text_matches, text) is not None
        results.append(CheckResult("text_matches", found, expect.text_matches, shown(text)))
    answer = answer_of(task)
    if expect.answer is not None:
        equal = answer == expect.answer
        results.append(CheckResult("answer", equal, shown(expect.answer), shown(answer)))
    if expect.answer_schema is not None:
        results.append(_fits(expect.answer_schema, answer))
    results += _tool_checks(expect, tool_calls_of(task))
    if expect.max_tokens is not None:
        within = outcome.tokens <= expect.max_tokens
        results.append(
            CheckResult("max_tokens", within, f"<= {expect.max_tokens}", str(outcome.tokens))
        )
    if expect.max_cost is not None:
        cost = outcome.cost
        got = (
            "no cost (is the model in the served config's [prices]?)"
            if cost is None
            else f"{cost:g}"
        )
        within = cost is not None and cost <= expect.max_cost
        results.append(CheckResult("max_cost", within, f"<= {expect.max_cost:g}", got))
    if expect.max_seconds is not None:
        within = outcome.seconds <= expect.max_seconds
        got = f"{outcome.seconds:.2f}"
        results.append(CheckResult("max_seconds", within, f"<= {expect.max_seconds:g}", got))
    return results


def _fits(schema: Mapping[str, Any], answer: Any) -> CheckResult:
    if answer is None:
        return CheckResult("answer_schema", False, "an answer that fits the schema", "no answer")
    try:
        problem = argument_problems(schema, answer, what="answer")
    except SchemaUnusable as exc:
        return CheckResult("answer_schema", False, "a usable schema", str(exc))
    return CheckResult(
        "answer_schema", problem is None, "fits the schema", problem or shown(answer)
    )


def _tool_checks(expect: Expect, calls: Sequence[Mapping[str, Any]]) -> list[CheckResult]:
    names = [str(call.get("name")) for call in calls]
    results = []
    if expect.tools is not None:
        results.append(
            CheckResult(
                "tools", names == list(expect.tools), shown(list(expect.tools)), shown(names)
            )
        )
    if expect.tool_calls:
        results.append(_calls_in_order(expect.tool_calls, calls))
    for name in expect.tools_not_called:
        results.append(
            CheckResult("tools_not_called", name not in names, f"no {name}", shown(names))
        )
    return results


def _calls_in_order(
    wanted: Sequence[ToolCallSpec], calls: Sequence[Mapping[str, Any]]
) -> CheckResult:
    """Each wanted call among the turn's, in order, its arguments a subset of the call's."""
    at = 0
    for spec in wanted:
        while at < len(calls) and not _matches(spec, calls[at]):
            at += 1
        if at == len(calls):
            made = [{"name": c.get("name"), "arguments": c.get("arguments")} for c in calls]
            expected = {"name": spec.name, "arguments": dict(spec.arguments)}
            return CheckResult("tool_calls", False, shown(expected), shown(made))
        at += 1
    return CheckResult("tool_calls", True, shown([s.name for s in wanted]), "")


def _matches(spec: ToolCallSpec, call: Mapping[str, Any]) -> bool:
    if call.get("name") != spec.name:
        return False
    arguments = call.get("arguments") or {}
    return all(arguments.get(key) == value for key, value in spec.arguments.items())
