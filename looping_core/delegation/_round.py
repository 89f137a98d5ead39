"""The round loop: `RoundAgent`, a `LoopingAgent` whose model may delegate.

Each round the model plans (calls `delegate` with subtasks and their dependencies) or answers.
Core checks the plan as a whole (every problem named in the tool result, so the model can correct
it; nothing of a refused plan is stored), stores it, runs it in waves of isolated subagents, and
gives the model every subtask's state and result as the tool's result. The rounds are the loop's
model calls (`max_rounds`); when they are spent the model answers without tools, with the
policy's `budget_note`.

Every word is the app's, from its `RoundPolicy`: the round contract the model is held to (added
to the soul), the note for a spent budget, and what the caller is told when a plan failed or the
budget ran out with no answer.
"""

from __future__ import annotations

import abc
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from looping_core.agent import (
    AgentContext,
    AgentLoadError,
    AnswerSchema,
    AnswerTypeError,
    LoopingAgent,
    StructuredAnswer,
    TurnInput,
    TurnOutcome,
    TurnResult,
)
from looping_core.content import DataBlock, TextBlock
from looping_core.contract import (
    SubtaskRecipe,
    SubtaskRecord,
    SubtaskType,
    Tool,
    ToolCall,
    ToolContext,
    ToolError,
)
from looping_core.delegation._plan import parse_plan, plan_schema
from looping_core.delegation._schema import params_schema
from looping_core.delegation._waves import SubagentSetup, run_waves, waves_as_run
from looping_core.delegation._workspace import MemoryBacking, WorkspaceLimits
from looping_core.plugins import Contribution

__all__ = ["DELEGATE_TOOL", "RoundAgent", "RoundPolicy"]

_log = logging.getLogger("looping_core.delegation")

DELEGATE_TOOL = "delegate"


def _words(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"RoundPolicy.{attribute.name} needs the app's words (a non-empty text)")


@attrs.frozen
class RoundPolicy:
    """The app's words for the round loop; every field is required (no defaults).

    - `round_contract`: how the model is to plan and delegate (added to the soul);
    - `delegate_description`: the `delegate` tool's description the model reads;
    - `budget_note`: added to the system text of the last call when the rounds are spent;
    - `plan_failed`: the reply when the turn ends with failed subtasks and no answer;
    - `budget_spent`: the reply when the rounds ran out with no answer;
    - `canceled`: the status message of a task the caller cancels (its subagents stop).

    The numbers: `max_parallel` subagents at once, `max_subtasks` per plan, `surface` (the
    subtask types whose results become artifacts of the task), and each subagent's budget
    (`subtask_max_rounds` when its recipe names none, `subtask_max_tokens`,
    `subtask_max_seconds`).
    """

    round_contract: str = attrs.field(validator=_words)
    delegate_description: str = attrs.field(validator=_words)
    budget_note: str = attrs.field(validator=_words)
    plan_failed: str = attrs.field(validator=_words)
    budget_spent: str = attrs.field(validator=_words)
    canceled: str = attrs.field(validator=_words)
    max_parallel: int = attrs.field(default=4, validator=attrs.validators.ge(1))
    max_subtasks: int = attrs.field(default=20, validator=attrs.validators.ge(1))
    surface: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    subtask_max_rounds: int = attrs.field(default=8, validator=attrs.validators.ge(1))
    """A subagent's model calls when its recipe names none."""
    subtask_max_tokens: int | None = None
    subtask_max_seconds: float | None = None
    max_depth: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    """How deep plans may nest: 1, the agent's subagents never delegate; 2, a subagent whose
    recipe `may_delegate` may plan once more; and so on."""


class RoundAgent(LoopingAgent):
    """A `LoopingAgent` that may delegate to the subtask types of the tenant's plugins."""

    def __init__(self, context: AgentContext) -> None:
        super().__init__(context)
        where = f"tenants.{context.tenant}: {type(self).__name__}.round_policy()"
        try:
            policy = self.round_policy()
        except (TypeError, ValueError) as exc:
            raise AgentLoadError(f"{where}: {exc}") from exc
        if not isinstance(policy, RoundPolicy):
            raise AgentLoadError(f"{where} returned {type(policy).__name__}, not a RoundPolicy")
        self._policy = policy
        registry = context.plugins.registry
        self._types: dict[str, SubtaskType] = {
            key: c.item for key, c in registry.subtask_types.items()
        }
        if not self._types:
            raise AgentLoadError(
                f"tenants.{context.tenant}: {type(self).__name__} delegates, but the tenant's "
                "plugins provide no subtask types; enable a plugin that does"
            )
        self._results = self._result_answers(registry.subtask_types)
        schemas = {key: params_schema(t.params_type) for key, t in self._types.items()}
        self._plan_schema = plan_schema(self._types, schemas)
        self._all_families = {name: c.item for name, c in registry.tool_families.items()}
        backing = registry.workspace_backing
        self._open_workspace = (
            (lambda instance: backing.item.open(context.tenant, instance))
            if backing is not None
            else _memory_opener(context.tenant)
        )
        self._soul = f"{self._soul}\n\n{policy.round_contract}"
        self._config = attrs.evolve(self._config, budget_note=policy.budget_note)

    def _result_answers(
        self, types: Mapping[str, Contribution[SubtaskType]]
    ) -> dict[str, StructuredAnswer]:
        """How each subtask type that hands back data asks its subagent for it (the loop's
        output mode and retries, as for the agent's own answer)."""
        answers, problems = {}, []
        for key, contribution in types.items():
            result_type = contribution.item.result_type
            if result_type is None:
                continue
            try:
                answers[key] = self._config.structured_answer(AnswerSchema.of(result_type))
            except AnswerTypeError as exc:
                problems.append(
                    f"tenants.{self.context.tenant}: subtask type {key!r} of "
                    f"{contribution.source}: result_type: {exc}"
                )
        if problems:
            raise AgentLoadError("; ".join(problems), problems=problems)
        return answers

    @abc.abstractmethod
    def round_policy(self) -> RoundPolicy:
        """The app's words and numbers for the round loop (required)."""

    def turn_tools(self, turn: TurnInput) -> list[Tool]:
        tools = super().turn_tools(turn)
        if turn.subtasks is None:
            return tools  # a runner that keeps no subtasks: no delegation
        return [*tools, self._delegate_tool(turn)]

    def _delegate_tool(self, turn: TurnInput) -> Tool:
        tool = self._make_delegate(turn, turn.session, owner="", depth=1)
        assert tool is not None  # depth 1 is always allowed
        return tool

    def _make_delegate(self, turn: TurnInput, session: Any, owner: str, depth: int) -> Tool | None:
        """A `delegate` tool whose plans run subagents at `depth` (none beyond `max_depth`);
        `owner` is the subtask that plans (empty for the agent itself)."""
        if depth > self._policy.max_depth:
            return None
        log = turn.subtasks
        assert log is not None
        config = self._config
        setup = SubagentSetup(
            answers=self._results,
            models=self._models,
            families=self._all_families,
            tool_context=turn.tool_context
            or ToolContext(tenant=self.context.tenant, instance_id=self.context.tenant),
            open_workspace=self._open_workspace,
            session=session,
            max_parallel=self._policy.max_parallel,
            max_rounds=self._policy.subtask_max_rounds,
            max_tokens=self._policy.subtask_max_tokens,
            max_seconds=self._policy.subtask_max_seconds,
            prices=self._prices,
            tool_timeout=config.tool_timeout,
            workspace_limits=WorkspaceLimits(),
            depth=depth,
            delegate=lambda sub, subtask_id, at: self._make_delegate(turn, sub, subtask_id, at + 1),
        )

        async def delegate(arguments: Mapping[str, Any], call: ToolCall) -> Any:
            prefix = f"{owner}/" if owner else ""
            prefix += f"{call.id}/"
            stored = [r for r in await log.subtasks() if r.subtask_id.startswith(prefix)]
            stored = [r for r in stored if "/" not in r.subtask_id.removeprefix(prefix)]
            if stored:  # this call ran before a crash: resume its plan, never plan it twice
                records, recipes = stored, self._recipes(stored)
            else:
                records, recipes = await self._plan(turn, arguments, prefix, log)
            finished = await run_waves(records, recipes, log, setup)
            waves = {record.wave for record in finished if record.wave is not None}
            _log.info(
                "task %s: plan %s ran in %d wave(s)", turn.task_id, prefix.rstrip("/"), len(waves)
            )
            return {r.subtask_id.removeprefix(prefix): _report(r) for r in finished}

        return Tool(DELEGATE_TOOL, self._policy.delegate_description, self._plan_schema, delegate)

    async def _plan(
        self, turn: TurnInput, arguments: Mapping[str, Any], prefix: str, log: Any
    ) -> tuple[list[SubtaskRecord], dict[str, SubtaskRecipe]]:
        planned, problems = parse_plan(arguments, self._types)
        if len(planned) > self._policy.max_subtasks:
            problems = [f"subtasks: at most {self._policy.max_subtasks} in one plan"]
        if problems:
            raise ToolError("the plan was refused: " + "; ".join(problems))
        depends = {p.id: tuple(prefix + d for d in p.depends_on) for p in planned}
        records = [
            SubtaskRecord(
                task_id=turn.task_id,
                subtask_id=prefix + p.id,
                type_key=p.type.key,
                params=p.raw_params,
                depends_on=depends[p.id],
                created_us=time.time_ns() // 1000,
            )
            for p in planned
        ]
        await log.add(records)
        return records, {prefix + p.id: p.recipe for p in planned}

    def _recipes(self, records: Sequence[SubtaskRecord]) -> dict[str, SubtaskRecipe]:
        """The recipes of stored subtasks, made again from their params (a recipe changed since
        gives a new fingerprint, so its subtask starts afresh)."""
        recipes = {}
        for record in records:
            planned, problems = parse_plan(
                {"subtasks": [{"id": "x", "type": record.type_key, "params": record.params}]},
                self._types,
            )
            if problems:
                raise ToolError("a stored subtask no longer fits its type: " + "; ".join(problems))
            recipes[record.subtask_id] = planned[0].recipe
        return recipes

    def canceled_reply(self) -> tuple[TextBlock, ...]:
        return (TextBlock(self._policy.canceled),)

    async def canceled_metadata(self, turn: TurnInput) -> Mapping[str, Any] | None:
        """A canceled task keeps its plan as it stood (each subtask's state, wave and usage)
        and the usage its subagents spent."""
        if turn.subtasks is None:
            return None
        records = await turn.subtasks.subtasks()
        return _plan_metadata({}, records) if records else None

    async def turn_result(self, turn: TurnInput, result: TurnResult) -> TurnResult:
        """Surfaced subtasks' results become artifacts; the plan and per-subtask state and
        usage join the metadata; a turn that ends without an answer gets the policy's words."""
        if turn.subtasks is None:
            return result
        records = await turn.subtasks.subtasks()
        if not records:
            return result
        metadata = _plan_metadata(dict(result.metadata or {}), records)
        artifacts = list(result.artifacts) + [
            _artifact(r) for r in records if r.type_key in self._policy.surface and r.result
        ]
        result = attrs.evolve(result, metadata=metadata, artifacts=tuple(artifacts))
        if result.outcome is TurnOutcome.FAILED and result.reason == "MODEL_EMPTY_ANSWER":
            words = (
                self._policy.budget_spent
                if metadata.get("looping.budgetSpent")
                else self._policy.plan_failed
            )
            return attrs.evolve(result, reply=(TextBlock(words),))
        return result


def _report(record: SubtaskRecord) -> dict[str, Any]:
    report: dict[str, Any] = {"state": record.state}
    if record.result is not None:
        report["result"] = record.result
    if record.reason:
        report["reason"] = record.reason
    return report


def _artifact(record: SubtaskRecord) -> Any:
    from looping_core.agent import ArtifactOut  # noqa: PLC0415 - with its only use

    if isinstance(record.result, dict):  # a subtask type's structured result
        return ArtifactOut(name=record.subtask_id, blocks=(DataBlock(record.result),))
    return ArtifactOut(name=record.subtask_id, blocks=(TextBlock(str(record.result)),))


def _waves(records: Sequence[SubtaskRecord]) -> list[dict[str, Any]]:
    """Each plan's waves as they ran: the subtasks, when the first began, how long it took."""
    return [
        {
            "plan": report.plan,
            "wave": report.wave,
            "subtasks": list(report.subtasks),
            "seconds": round(report.seconds, 6),
        }
        for report in waves_as_run(records)
    ]


def _plan_metadata(metadata: dict[str, Any], records: Sequence[SubtaskRecord]) -> dict[str, Any]:
    """`metadata` with the plan: each subtask's state, wave, attempts and usage, the waves as
    they ran, and the usage of the turn and its subagents together."""
    metadata["looping.subtasks"] = [
        {
            "id": r.subtask_id,
            "type": r.type_key,
            "dependsOn": list(r.depends_on),
            "state": r.state,
            "wave": r.wave,
            "attempts": r.attempts,
            **({"reason": r.reason} if r.reason else {}),
            **({"usage": dict(r.usage)} if r.usage else {}),
            **({"cost": r.cost} if r.cost is not None else {}),
        }
        for r in records
    ]
    metadata["looping.waves"] = _waves(records)
    metadata["looping.usage"] = _total_usage(metadata.get("looping.usage"), records)
    costs = [c for c in (metadata.get("looping.cost"), *(r.cost for r in records)) if c is not None]
    if costs:
        metadata["looping.cost"] = sum(costs)
    return metadata


def _total_usage(parent: Any, records: Sequence[SubtaskRecord]) -> dict[str, int]:
    total: dict[str, int] = dict(parent or {})
    for record in records:
        for key, value in (record.usage or {}).items():
            total[key] = total.get(key, 0) + int(value)
    return total


def _memory_opener(tenant: str) -> Any:
    backing = MemoryBacking()
    return lambda instance: backing.open(tenant, instance)
