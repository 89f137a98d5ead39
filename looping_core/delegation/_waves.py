"""Running a plan: waves of isolated subagents, every step durable, resumable by fingerprint.

Each wave runs every pending subtask whose dependencies are done, at most `max_parallel` at once.
A subtask that fails fails its dependants (with the reason), never its siblings; the results of a
wave are the inputs of the next. Each subagent has its own session (never the parent's history),
the recipe's instructions as its system text, only the recipe's tool families, its own budget and
its own workspace; it gets no `delegate` tool.

A subtask's fingerprint covers what its steps depend on: its type, params, the recipe's
instructions, tool families and rounds, and the models. Its session is named by it, so after a
crash a subtask whose fingerprint is unchanged resumes from its last durable step, and one whose
fingerprint changed starts afresh. A finished subtask is never run again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from looping_core import _tracing
from looping_core.agent import (
    Budget,
    ChatModel,
    ModelError,
    ModelRequest,
    Prices,
    SessionLog,
    StructuredAnswer,
    given_answer,
    resume_conversation,
    run_tool_loop,
)
from looping_core.content import AssistantMessage, TextBlock, Usage, UserMessage
from looping_core.contract import (
    SubtaskLog,
    SubtaskRecipe,
    SubtaskRecord,
    Tool,
    ToolContext,
    ToolFamily,
    Workspace,
)
from looping_core.delegation._workspace import GuardedWorkspace, WorkspaceLimits

__all__ = ["SubagentSetup", "WaveReport", "fingerprint_of", "run_waves", "waves_as_run"]

_log = logging.getLogger("looping_core.delegation")


def _now_us() -> int:
    return time.time_ns() // 1000


@attrs.frozen
class SubagentSetup:
    """What every subagent of a turn is built from."""

    models: tuple[ChatModel, ...]
    families: Mapping[str, ToolFamily]
    tool_context: ToolContext
    open_workspace: Callable[[str], Workspace]
    """A subtask's workspace by its instance id."""
    session: SessionLog | None
    """The parent's session, whose `subagent(scope)` gives each subagent its own."""
    max_parallel: int = 4
    max_rounds: int = 8
    """A recipe's rounds when it names none."""
    max_tokens: int | None = None
    max_seconds: float | None = None
    tool_timeout: float = 60.0
    workspace_limits: WorkspaceLimits = attrs.field(factory=WorkspaceLimits)
    depth: int = 1
    """How deep the subagents it runs are (the parent's are 1)."""
    delegate: Callable[[SessionLog | None, str, int], Tool | None] | None = None
    """Makes a `delegate` tool for a subagent whose recipe may delegate: from its session, its
    subtask id and its depth (`None` when the depth limit is reached)."""
    answers: Mapping[str, StructuredAnswer] = attrs.field(factory=dict)
    """How the subagents of each subtask type that hands back data are asked for it."""
    prices: Prices | None = None
    """What each subagent's model calls cost (`SubtaskRecord.cost`)."""


@attrs.frozen
class WaveReport:
    """One wave of one plan as it ran: the plan (the id of the call that made it), the wave's
    number, its subtasks, when the first began and how long until the last ended."""

    plan: str
    wave: int
    subtasks: tuple[str, ...]
    started_us: int
    seconds: float


def waves_as_run(records: Sequence[SubtaskRecord]) -> list[WaveReport]:
    """The waves the subtasks ran in, read from their records (their `wave` and times): one
    notion of a wave, the same after a crash as before it, in the order the records come."""
    grouped: dict[tuple[str, int], list[SubtaskRecord]] = {}
    for record in records:
        if record.wave is not None and record.started_us is not None:
            # A delegated subtask's id is `<the call that planned it>/<its id>`.
            plan = record.subtask_id.split("/", 1)[0] if "/" in record.subtask_id else ""
            grouped.setdefault((plan, record.wave), []).append(record)
    reports = []
    for (plan, wave), members in grouped.items():
        began = min(r.started_us or 0 for r in members)
        ended = max(r.ended_us or began for r in members)
        subtasks = tuple(r.subtask_id for r in members)
        reports.append(WaveReport(plan, wave, subtasks, began, (ended - began) / 1_000_000))
    return reports


def fingerprint_of(record: SubtaskRecord, recipe: SubtaskRecipe, models: Sequence[str]) -> str:
    """What a subagent's steps depend on, hashed: a change means its steps no longer apply."""
    document = {
        "type": record.type_key,
        "params": record.params,
        "instructions": recipe.instructions,
        "tool_families": list(recipe.tool_families),
        "max_rounds": recipe.max_rounds,
        "may_delegate": recipe.may_delegate,
        "models": list(models),
    }
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


async def run_waves(
    records: Sequence[SubtaskRecord],
    recipes: Mapping[str, SubtaskRecipe],
    log: SubtaskLog,
    setup: SubagentSetup,
) -> list[SubtaskRecord]:
    """Run the plan's unfinished subtasks wave by wave; their final records (`waves_as_run`
    reads the waves from them)."""
    current = {record.subtask_id: record for record in records}
    slots = asyncio.Semaphore(setup.max_parallel)
    # Waves are numbered as they ran: a subtask a crash interrupted (running) runs again in the
    # next wave after the last one that finished anything, not one past its own number.
    wave = max((r.wave or 0 for r in records if r.state not in ("pending", "running")), default=0)
    while True:
        await _fail_blocked(current, log)
        ready = [
            r
            for r in current.values()
            if r.state in ("pending", "running")
            and all(current[d].state == "done" for d in r.depends_on)
        ]
        if not ready:
            break
        wave += 1
        finished = await asyncio.gather(
            *(
                _run_one(
                    r,
                    recipes[r.subtask_id],
                    log,
                    setup,
                    wave=wave,
                    slots=slots,
                    inputs=_inputs(r, current),
                )
                for r in ready
            )
        )
        for record in finished:
            current[record.subtask_id] = record
    return list(current.values())


async def _fail_blocked(current: dict[str, SubtaskRecord], log: SubtaskLog) -> None:
    """Fail every pending subtask with a failed dependency, and theirs in turn."""
    changed = True
    while changed:
        changed = False
        for record in list(current.values()):
            if record.state not in ("pending", "running"):
                continue
            failed = [d for d in record.depends_on if current[d].state in ("failed", "canceled")]
            if failed:
                blocked = attrs.evolve(
                    record,
                    state="failed",
                    reason=f"dependency {failed[0]} did not finish",
                    ended_us=_now_us(),
                )
                await log.update(blocked)
                current[record.subtask_id] = blocked
                changed = True


async def _run_one(
    record: SubtaskRecord,
    recipe: SubtaskRecipe,
    log: SubtaskLog,
    setup: SubagentSetup,
    *,
    wave: int,
    slots: asyncio.Semaphore,
    inputs: Mapping[str, Any],
) -> SubtaskRecord:
    async with slots:
        fingerprint = fingerprint_of(record, recipe, [m.label for m in setup.models])
        if record.fingerprint not in (None, fingerprint):
            _log.info("subtask %s changed since it ran; it starts afresh", record.subtask_id)
        record = attrs.evolve(
            record,
            state="running",
            attempts=record.attempts + 1,
            fingerprint=fingerprint,
            wave=wave,
            started_us=_now_us(),
        )
        await log.update(record)
        try:
            with _tracing.gen_ai_span(
                "invoke_agent",
                record.type_key,
                gen_ai__agent__name=record.type_key,
                gen_ai__agent__id=record.subtask_id,
                a2a__task_id=record.task_id,
            ):
                result, usage, cost, reason = await _subagent(record, recipe, setup, inputs)
        except asyncio.CancelledError:
            # The task was canceled: its subagents stop, and the record says so.
            canceled = attrs.evolve(record, state="canceled", ended_us=_now_us())
            await asyncio.shield(log.update(canceled))
            raise
        except ModelError as exc:
            _log.warning("subtask %s: %s", record.subtask_id, exc)
            ended = attrs.evolve(record, state="failed", reason=_reason(exc), ended_us=_now_us())
        else:
            ended = attrs.evolve(
                record,
                state="failed" if reason else "done",
                result=None if reason else result,
                reason=reason,
                usage=attrs.asdict(usage),
                cost=cost,
                ended_us=_now_us(),
            )
        await log.update(ended)
        return ended


def _reason(error: ModelError) -> str:
    return "MODEL_UNAVAILABLE" if error.retryable else "MODEL_ERROR"


async def _subagent(
    record: SubtaskRecord, recipe: SubtaskRecipe, setup: SubagentSetup, inputs: Mapping[str, Any]
) -> tuple[Any, Usage, float | None, str | None]:
    """Run one subagent to its answer: its text (or, for a subtask type that hands back data,
    the JSON object that fits its schema), the usage of its model calls and their cost (by
    `setup.prices`), and why it failed."""
    scope = f"{record.subtask_id}@{(record.fingerprint or '')[:16]}"
    session = setup.session.subagent(scope) if setup.session is not None else None
    message = UserMessage((TextBlock(_brief(record, inputs)),))
    # A first attempt's session (named by its fingerprint) was never written: no read back.
    first = record.attempts == 1
    conversation, pending, answered = await resume_conversation(session, message, new_session=first)
    answer = setup.answers.get(record.type_key)
    given = given_answer(answer, conversation, answered)
    if given is not None:
        usage = (answered.usage if answered else None) or Usage()
        return given, usage, answered.cost if answered else None, None
    if answered is not None and answer is None:
        return _text_result(answered, answered.usage or Usage(), answered.cost)
    context = _tool_context(record, setup)
    outcome = await run_tool_loop(
        setup.models,
        ModelRequest(messages=conversation, system=recipe.instructions),
        _tools(record, recipe, setup, session, context),
        budget=Budget(
            max_rounds=recipe.max_rounds or setup.max_rounds,
            max_tokens=setup.max_tokens,
            max_seconds=setup.max_seconds,
        ),
        log=session,
        tool_timeout=setup.tool_timeout,
        pending=pending,
        tool_context=context,
        answer=answer,
        prices=setup.prices,
    )
    if answer is None:
        return _text_result(outcome.final.message, outcome.usage, outcome.cost)
    if outcome.answer is None:
        _log.warning(
            "subtask %s: no answer fits its schema: %s", record.subtask_id, outcome.answer_problem
        )
        return None, outcome.usage, outcome.cost, "OUTPUT_INVALID"
    return outcome.answer, outcome.usage, outcome.cost, None


def _text_result(
    message: AssistantMessage, usage: Usage, cost: float | None
) -> tuple[Any, Usage, float | None, str | None]:
    text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
    return (text, usage, cost, None) if text else (None, usage, cost, "MODEL_EMPTY_ANSWER")


def _brief(record: SubtaskRecord, inputs: Mapping[str, Any]) -> str:
    """The subagent's first message: its params and its dependencies' results, as canonical
    JSON (data, not words)."""
    brief = {"params": record.params, "inputs": dict(inputs)}
    return json.dumps(brief, sort_keys=True, separators=(",", ":"))


def _tool_context(record: SubtaskRecord, setup: SubagentSetup) -> ToolContext:
    """The caller's tool context (their data is the caller's) with the subtask's own
    workspace."""
    instance = f"{setup.tool_context.instance_id}/{record.task_id}/{record.subtask_id}"
    workspace = GuardedWorkspace(setup.open_workspace(instance), setup.workspace_limits)
    return attrs.evolve(setup.tool_context, workspace=workspace)


def _tools(
    record: SubtaskRecord,
    recipe: SubtaskRecipe,
    setup: SubagentSetup,
    session: SessionLog | None,
    context: ToolContext,
) -> list[Tool]:
    """Only the recipe's tool families, built with `context`; `delegate` only when the recipe
    asks for it and the depth limit allows."""
    tools: list[Tool] = []
    for name in recipe.tool_families:
        family = setup.families.get(name)
        if family is None:
            _log.warning("subtask %s: no tool family %r; left out", record.subtask_id, name)
            continue
        tools += family.factory(context)
    if recipe.may_delegate and setup.delegate is not None:
        delegate = setup.delegate(session, record.subtask_id, setup.depth)
        if delegate is not None:
            tools.append(delegate)
    return tools


def _inputs(record: SubtaskRecord, current: Mapping[str, SubtaskRecord]) -> dict[str, Any]:
    """The results of a subtask's dependencies (for its brief)."""
    return {d: current[d].result for d in record.depends_on}
