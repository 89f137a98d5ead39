"""Running a dataset: each case's turns sent in order as real turns (a follow-up answers a task
that asked for input or approval, else starts a new task in the same conversation), cases run
`concurrency` at a time, each `repeat` times, every turn checked as its case expects."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from looping_core.content import APPROVALS_KEY
from looping_core.errors import LoopingError
from looping_core.evals._checks import CheckResult, TurnOutcome, check_turn, state_of, text_of
from looping_core.evals._dataset import Case, Dataset, TurnSpec
from looping_core.evals._judge import Grader
from looping_core.gateway.internal import pending_calls

__all__ = ["CaseResult", "Send", "TurnResult", "run_case", "run_dataset"]

_WAITING = ("input_required", "auth_required")
"""States whose task the next turn answers."""


class Send(Protocol):
    """Sends one message as the gateway would and returns the task once its turn has ended or
    asks for input (A2A JSON)."""

    def __call__(
        self,
        tenant: str,
        text: str,
        *,
        subject: str,
        task_id: str | None,
        context_id: str | None,
        parts: Sequence[Mapping[str, Any]],
    ) -> Awaitable[Mapping[str, Any]]: ...


@attrs.frozen
class TurnResult:
    outcome: TurnOutcome
    checks: tuple[CheckResult, ...]


@attrs.frozen
class CaseResult:
    """One run of a case: its turns and their checks, or the error that stopped it."""

    name: str
    run: int
    """Which of the `repeat` runs (from 1)."""
    turns: tuple[TurnResult, ...] = ()
    error: str | None = None

    @property
    def checks(self) -> list[CheckResult]:
        return [check for turn in self.turns for check in turn.checks]

    @property
    def passed(self) -> bool:
        return self.error is None and all(check.passed for check in self.checks)

    @property
    def failures(self) -> list[CheckResult]:
        return [check for check in self.checks if not check.passed]

    @property
    def tokens(self) -> int:
        return sum(turn.outcome.tokens for turn in self.turns)

    @property
    def cost(self) -> float | None:
        costs = [turn.outcome.cost for turn in self.turns if turn.outcome.cost is not None]
        return sum(costs) if costs else None

    @property
    def seconds(self) -> float:
        return sum(turn.outcome.seconds for turn in self.turns)


async def run_case(
    dataset: Dataset, case: Case, send: Send, *, run: int = 1, grader: Grader | None = None
) -> CaseResult:
    """Send `case`'s turns in order and check each; a turn that cannot be sent (refused, no
    answer in time) ends the run with its error."""
    turns: list[TurnResult] = []
    previous: Mapping[str, Any] | None = None
    subject = case.subject or dataset.subject
    for number, spec in enumerate(case.turns):
        answering = previous is not None and state_of(previous) in _WAITING
        try:
            parts = _parts(spec, previous)
            started = time.monotonic()
            task = await send(
                dataset.tenant_of(case),
                spec.text,
                subject=subject,
                task_id=str(previous["id"]) if answering and previous else None,
                context_id=str(previous["contextId"]) if previous else None,
                parts=parts,
            )
        except (LoopingError, OSError, ValueError, TimeoutError) as exc:
            error = f"turn {number + 1}: {type(exc).__name__}: {exc}"
            return CaseResult(case.name, run, tuple(turns), error)
        outcome = TurnOutcome(task, time.monotonic() - started)
        checks = check_turn(spec.expect, outcome)
        if spec.expect.rubric is not None and grader is not None:
            checks.append(await grader.grade(spec.expect.rubric, spec.text, text_of(task)))
        turns.append(TurnResult(outcome, tuple(checks)))
        previous = task
    return CaseResult(case.name, run, tuple(turns))


def _parts(spec: TurnSpec, previous: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The turn's data part, and its decisions on the calls the previous task waits for."""
    parts: list[dict[str, Any]] = []
    if spec.data is not None:
        parts.append({"data": dict(spec.data)})
    if spec.approve or spec.deny:
        parts.append({"data": {APPROVALS_KEY: {"decisions": _decisions(spec, previous)}}})
    return parts


def _decisions(spec: TurnSpec, previous: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    waiting = pending_calls(previous) if previous is not None else []
    if not waiting:
        raise ValueError("approve or deny: the task waits for no tool call to be approved")

    def named(call: Mapping[str, Any], names: Sequence[str]) -> bool:
        return "all" in names or call.get("callId") in names or call.get("tool") in names

    decisions = []
    for call in waiting:
        approve, deny = named(call, spec.approve), named(call, spec.deny)
        if approve == deny:
            what = "both approved and denied" if approve else "neither approved nor denied"
            raise ValueError(f"call {call.get('callId')} ({call.get('tool')}) is {what}")
        decisions.append({"callId": call.get("callId"), "approve": approve})
    return decisions


async def run_dataset(
    dataset: Dataset,
    send: Send,
    *,
    concurrency: int = 4,
    repeat: int = 1,
    grader: Grader | None = None,
    progress: Callable[[CaseResult], None] | None = None,
) -> list[CaseResult]:
    """Every case `repeat` times, `concurrency` runs at once; results in the dataset's order."""
    slots = asyncio.Semaphore(max(1, concurrency))

    async def one(case: Case, run: int) -> CaseResult:
        async with slots:
            result = await run_case(dataset, case, send, run=run, grader=grader)
        if progress is not None:
            progress(result)
        return result

    runs = [one(case, run) for case in dataset.cases for run in range(1, repeat + 1)]
    return list(await asyncio.gather(*runs))
