"""`LoopingAgent`: a model-driven agent whose author writes the soul (the system prompt) and picks
tool families; core runs the rest (session, models with fallback, the tool loop, budgets).

Three seams, resolved once when the agent is made (at server startup, so a mistake stops the
server before it listens), never at import time:

- `agent_soul(capabilities)`: the system prompt, required; `capabilities` are the capability
  sentences of the tenant's plugins, for the app to weave in as it likes;
- `agent_config()`: the loop's settings (`LoopingConfig`: budget, the note for a spent budget,
  tool timeout and parallelism);
- `agent_tool_families()`: which of the tenant's plugins' tool families it uses (`None`: all;
  `agent_plugins()`, its old name, still works and warns);
- `agent_tools(context)`: the agent's own tools (typed functions made with
  `looping_core.tools.tool`, or `Tool`s), built for the caller `context` describes, beside the
  families' tools. It is called once when the agent is made, to find clashes (two tools of one
  name) before the server listens, then for every turn.

An agent that answers a program sets `output_type` (an attrs class, a dataclass, a `TypedDict` or
a JSON Schema of an object): its answer is then a JSON object checked against that schema, the
data part of the reply and of the answer artifact, and `TurnResult.output` structured into the
type (see `_output.py` for how the model is asked, and what a wrong answer gets).

Each turn: the new message joins the caller's durable session, the loop runs with every step
written there, and the final answer's text, images and audio are the reply and an artifact; the
turn's usage, the models that served it and its rounds become the task's metadata
(`looping.usage`, `looping.models`, `looping.rounds`, `looping.toolCalls`, `looping.cost` when
`[prices]` priced a call, and `looping.budgetSpent` when a budget was spent). A
turn resumed after a crash (`[runner] on_restart = "resume"`) continues from its last durable
step: tool calls whose results are stored are not run again, ones without results are, and an
answer already stored is returned without asking the model again.
"""

from __future__ import annotations

import abc
import logging
import warnings
from collections.abc import Sequence
from typing import Any

import attrs

from looping_core import _tracing
from looping_core._random import uuid4
from looping_core.agent._approvals import gives_decisions, settle_approvals
from looping_core.agent._compaction import Compactor
from looping_core.agent._loop import run_tool_loop
from looping_core.agent._model import (
    ChatModel,
    ContextTooLong,
    ModelError,
    ModelRequest,
    ModelUnavailable,
    TextSink,
)
from looping_core.agent._output import (
    AnswerSchema,
    AnswerTypeError,
    StructuredAnswer,
    given_answer,
)
from looping_core.agent._prices import Prices
from looping_core.agent._providers import ModelSetupError, chat_models
from looping_core.agent._report import turn_report
from looping_core.agent._resume import resume_conversation
from looping_core.agent._seam import (
    Agent,
    AgentContext,
    AgentLoadError,
    ArtifactOut,
    TurnInput,
    TurnOutcome,
    TurnResult,
)
from looping_core.agent._settings import LoopingConfig
from looping_core.config import check_model
from looping_core.content import (
    AssistantMessage,
    AudioBlock,
    DataBlock,
    ImageBlock,
    Message,
    RefusalBlock,
    TextBlock,
    ToolApproval,
    ToolUseBlock,
    approval_request,
)
from looping_core.contract import SessionRef, Tool, ToolContext, ToolFamily

__all__ = ["LoopingAgent"]

_log = logging.getLogger("looping_core.agent")


class LoopingAgent(Agent):
    """Subclass it, write `agent_soul`; name it in `[tenants.<id>] agent` with a
    `[tenants.<id>.model]`."""

    output_type: Any = None
    """The answer's type, for an agent that answers in a schema: an attrs class, a dataclass, a
    `TypedDict`, or a JSON Schema (a mapping) of an object. `None`: the answer is text."""

    def __init__(self, context: AgentContext) -> None:
        super().__init__(context)
        where = f"tenants.{context.tenant}"
        registry = context.plugins.registry
        capabilities = [plugin.info.capability for plugin in registry.plugins]
        soul = self.agent_soul(capabilities)
        if not isinstance(soul, str) or not soul.strip():
            raise AgentLoadError(f"{where}: {type(self).__name__}.agent_soul() returned no text")
        self._soul = soul
        self._config = self.agent_config().overridden(context.loop)
        self._models = context.models or self._own_models()
        self._prices = Prices(context.prices)
        own = None if context.models else self._config.model
        self._context_window = (
            context.context_window
            or (own.smallest_context_window if own else None)
            or self._config.context_window
        )
        seam, wanted = self._wanted_families()
        available = {name: c.item for name, c in registry.tool_families.items()}
        unknown = sorted(set(wanted or ()) - set(available))
        if unknown:
            raise AgentLoadError(
                f"{where}: {type(self).__name__}.{seam}() names tool families that the "
                f"tenant's plugins do not provide: {', '.join(unknown)} (available: "
                f"{', '.join(sorted(available)) or 'none'})"
            )
        self._families: tuple[ToolFamily, ...] = tuple(
            available[name] for name in (wanted if wanted is not None else sorted(available))
        )
        self._answer = self._structured_answer()
        self._check_tools(ToolContext(tenant=context.tenant, instance_id=context.tenant))

    def _structured_answer(self) -> StructuredAnswer | None:
        """How the answer is asked for, when `output_type` declares one."""
        if self.output_type is None:
            return None
        where = f"tenants.{self.context.tenant}: {type(self).__name__}.output_type"
        try:
            return self._config.structured_answer(AnswerSchema.of(self.output_type))
        except AnswerTypeError as exc:
            raise AgentLoadError(f"{where}: {exc}") from None

    def output_modes(self) -> tuple[str, ...] | None:
        return ("application/json",) if self._answer is not None else None

    def _wanted_families(self) -> tuple[str, Sequence[str] | None]:
        """The seam that names the tool families, and what it names (`agent_plugins`, the old
        name, only when a subclass overrides it and not the new one)."""
        cls = type(self)
        if (
            cls.agent_plugins is not LoopingAgent.agent_plugins
            and cls.agent_tool_families is LoopingAgent.agent_tool_families
        ):
            warnings.warn(
                f"{cls.__name__}.agent_plugins() is deprecated: it names tool families, not "
                "plugins; rename it agent_tool_families()",
                DeprecationWarning,
                stacklevel=4,
            )
            return "agent_plugins", self.agent_plugins()
        return "agent_tool_families", self.agent_tool_families()

    def _check_tools(self, startup: ToolContext) -> None:
        """Find at startup what `agent_tools` gives wrong (not tools, two of one name, a name a
        family's tool has). A family whose factory needs what only a turn has (the store's
        database) cannot be built now: its names are checked at each turn instead."""
        where = f"tenants.{self.context.tenant}: {type(self).__name__}.agent_tools()"
        try:
            own = list(self.agent_tools(startup))
        except AgentLoadError:
            raise
        except Exception as exc:
            raise AgentLoadError(f"{where} failed: {type(exc).__name__}: {exc}") from exc
        strays = [repr(item) for item in own if not isinstance(item, Tool)]
        if strays:
            raise AgentLoadError(
                f"{where} must return Tools (apply @tool from looping_core.tools to a typed "
                f"function); got {', '.join(strays)}"
            )
        family_tools: list[tuple[str, Tool]] = []
        for family in self._families:
            try:
                family_tools += [(family.name, t) for t in family.factory(startup)]
            except Exception:
                _log.debug("tool family %s cannot be built at startup", family.name)
        problems = _clashes(own, family_tools) + self._answer_clash(own, family_tools)
        if problems:
            raise AgentLoadError(
                f"{where}: " + "; ".join(problems), problems=[f"{where}: {p}" for p in problems]
            )

    def _answer_clash(
        self, own: Sequence[Tool], family_tools: Sequence[tuple[str, Tool]]
    ) -> list[str]:
        """The answer tool's name, when a tool has it too."""
        if self._answer is None or not self._answer.as_tool:
            return []
        name = self._answer.tool_name
        if any(t.name == name for t in (*own, *(t for _, t in family_tools))):
            return [
                f"tool {name!r} has the name of the answer tool; rename it, or set "
                "LoopingConfig.answer_tool"
            ]
        return []

    def _own_models(self) -> tuple[ChatModel, ...]:
        """The models `agent_config().model` names, made with the tenant's providers."""
        where = f"tenants.{self.context.tenant}"
        choice = self._config.model
        if choice is None:
            raise AgentLoadError(
                f"{where}: {type(self).__name__} is a LoopingAgent and needs a model; add a "
                f"[{where}.model] table (or return one from agent_config())"
            )
        path = f"{type(self).__name__}.agent_config().model"
        problems = [p.replace("$.", "", 1) for p in check_model(choice, f"$.{path}")]
        if not problems:
            made = chat_models(
                self.context.tenant,
                choice,
                self.context.model_providers,
                self.context.environ,
                problems,
                path=f"{where}: {path}",
            )
        if problems:
            raise ModelSetupError(problems)
        return made

    async def aclose(self) -> None:
        for model in self._models:
            await model.aclose()

    @abc.abstractmethod
    def agent_soul(self, capabilities: Sequence[str]) -> str:
        """The system prompt. `capabilities`: the tenant's plugins' capability sentences."""

    def agent_config(self) -> LoopingConfig:
        """The loop's settings; the defaults unless overridden."""
        return LoopingConfig()

    def agent_tool_families(self) -> Sequence[str] | None:
        """The tool families this agent uses, by name; `None` for all the tenant's plugins give."""
        return None

    def agent_plugins(self) -> Sequence[str] | None:
        """Deprecated: the old name of `agent_tool_families` (it names families, not plugins)."""
        return None

    def agent_tools(self, context: ToolContext) -> Sequence[Tool]:
        """The agent's own tools, built for the caller `context` describes (its tenant and
        instance; a turn's also has the store's database and the workspace): typed functions
        made with `looping_core.tools.tool`, or `Tool`s. None by default. Called once when the
        agent is made (with the tenant's context, to check them), then for every turn."""
        return ()

    async def run(self, turn: TurnInput) -> TurnResult:
        tools = self.turn_tools(turn)
        settled = await self._settle_approvals(turn, tools)
        conversation: tuple[Message, ...]
        pending: tuple[ToolUseBlock, ...] = ()
        answered: AssistantMessage | None = None
        if settled is not None:  # the caller decided on calls: they have their results now
            conversation = settled
        else:
            conversation, pending, answered = await resume_conversation(
                turn.session, turn.message, turn.history
            )
        inbox = turn.session.arrivals if turn.session is not None else None
        given = given_answer(self._answer, conversation, answered)
        if given is not None or (answered is not None and self._answer is None):
            # The loop had finished before a crash: not again, unless the caller said more.
            arrived = await inbox() if inbox is not None else []
            if not arrived:
                if given is not None:
                    return await self.turn_result(turn, self._answer_result(given))
                assert answered is not None
                return self._result(answered)
            conversation = (*conversation, *arrived)
        config = self._config
        answer_id = str(uuid4())
        # The turn's `invoke_agent` span (the runner's) learns who answers it.
        provider = self._models[0].label.partition(":")[0] if self._models else None
        _tracing.current().set(gen_ai__provider__name=provider)
        try:
            outcome = await run_tool_loop(
                self._models,
                ModelRequest(messages=conversation, system=self._soul),
                tools,
                budget=config.budget,
                budget_note=config.budget_note,
                log=turn.session,
                tool_timeout=config.tool_timeout,
                max_parallel_tools=config.max_parallel_tools,
                pending=pending,
                actions=config.actions,
                compactor=self._compactor(turn),
                inbox=inbox,
                on_text=self._answer_stream(turn, answer_id),
                tool_context=self._tool_context(turn.tool_context),
                answer=self._answer,
                approvals=turn.approvals is not None and turn.session is not None,
                prices=self._prices,
            )
        except ModelError as exc:
            _log.warning("tenant %s, task %s: %s", self.context.tenant, turn.task_id, exc)
            return TurnResult(TurnOutcome.FAILED, reason=_failure(exc))
        report = turn_report(outcome)
        if outcome.awaiting and turn.approvals is not None:
            asked = [ToolApproval(c.id, c.name, dict(c.input)) for c in outcome.awaiting]
            await turn.approvals.ask(asked)
            request = (approval_request(asked),)
            return TurnResult(TurnOutcome.INPUT_REQUIRED, reply=request, metadata=report)
        if outcome.control is not None:
            action, call = outcome.control
            words = (TextBlock(str(call.input["message"])),)
            if action.outcome == "input_required":
                return TurnResult(TurnOutcome.INPUT_REQUIRED, reply=words, metadata=report)
            return TurnResult(TurnOutcome.REJECTED, reply=words, metadata=report)
        if outcome.answer is not None:
            result = self._answer_result(outcome.answer, answer_id)
        else:
            result = self._result(outcome.final.message, answer_id)
            if self._answer is not None and result.outcome is not TurnOutcome.REJECTED:
                problem = outcome.answer_problem or "no answer was given"
                _log.warning(
                    "tenant %s, task %s: no answer fits the schema: %s",
                    self.context.tenant, turn.task_id, problem,
                )  # fmt: skip
                report["looping.outputProblem"] = problem
                result = TurnResult(TurnOutcome.FAILED, reason="OUTPUT_INVALID")
        return await self.turn_result(turn, attrs.evolve(result, metadata=report))

    async def _settle_approvals(
        self, turn: TurnInput, tools: Sequence[Tool]
    ) -> tuple[Message, ...] | None:
        """The conversation once the calls the caller decided on have their results (`None`:
        none to settle; see `_approvals.py`)."""
        if turn.approvals is None or turn.session is None or not gives_decisions(turn.message):
            return None
        return await settle_approvals(
            turn.approvals,
            turn.session,
            turn.message,
            tools,
            context=self._tool_context(turn.tool_context),
            timeout=self._config.tool_timeout,
            max_parallel=self._config.max_parallel_tools,
        )

    def turn_tools(self, turn: TurnInput) -> list[Tool]:
        """The tools of this turn: the agent's own and those of the chosen tool families, built
        for its caller. A subclass may add more (the delegation runtime adds `delegate`)."""
        context = self._tool_context(turn.tool_context)
        own = list(self.agent_tools(context))
        family_tools = [
            (family.name, t) for family in self._families for t in family.factory(context)
        ]
        problems = _clashes(own, family_tools)
        if problems:  # names that only a turn's tools show (a family built per caller)
            where = f"tenants.{self.context.tenant}: {type(self).__name__}.agent_tools()"
            raise AgentLoadError(f"{where}: " + "; ".join(problems))
        return [*own, *(t for _, t in family_tools)]

    async def turn_result(self, turn: TurnInput, result: TurnResult) -> TurnResult:
        """The turn's result as the loop made it; a subclass may add to it."""
        return result

    def _compactor(self, turn: TurnInput) -> Compactor:
        ref = SessionRef(turn.caller, turn.context_id)
        compaction = self._config.compaction
        plugins = self.context.plugins

        async def tell(messages: Sequence[Message]) -> None:
            await plugins.messages_displaced(messages, ref, timeout=compaction.listener_timeout)

        return Compactor(
            compaction,
            self._context_window,
            self._models,
            session=turn.session,
            on_displaced=tell,
            prices=self._prices,
        )

    def _answer_stream(self, turn: TurnInput, answer_id: str) -> TextSink | None:
        """The turn's text as chunks of the answer artifact (the runner coalesces them)."""
        events = turn.events
        if events is None or not self._config.stream_answer or self._answer is not None:
            return None  # a structured answer is whole or nothing
        name = self._config.answer_name

        async def chunk(text: str, starts: bool) -> None:
            artifact = ArtifactOut(name=name, blocks=(TextBlock(text),), artifact_id=answer_id)
            await events.artifact(artifact, append=not starts)

        return chunk

    def _result(self, message: AssistantMessage, answer_id: str | None = None) -> TurnResult:
        content = message.content
        refusal = tuple(block for block in content if isinstance(block, RefusalBlock))
        if refusal:
            return TurnResult(TurnOutcome.REJECTED, reply=refusal)
        answer = tuple(b for b in content if isinstance(b, TextBlock | ImageBlock | AudioBlock))
        if not answer:
            # The model gave nothing a caller could use.
            return TurnResult(TurnOutcome.FAILED, reason="MODEL_EMPTY_ANSWER")
        artifact = ArtifactOut(name=self._config.answer_name, blocks=answer)
        if answer_id is not None:
            artifact = attrs.evolve(artifact, artifact_id=answer_id)
        return TurnResult(reply=answer, artifacts=(artifact,))

    def _answer_result(self, value: Any, answer_id: str | None = None) -> TurnResult:
        """A turn that ends with the structured answer `value` (it fits the schema): its JSON
        as the reply's and the answer artifact's data part, and `output` in the app's type."""
        assert self._answer is not None
        data = (DataBlock(value),)
        artifact = ArtifactOut(name=self._config.answer_name, blocks=data)
        if answer_id is not None:
            artifact = attrs.evolve(artifact, artifact_id=answer_id)
        output = self._answer.schema.structure(value)
        return TurnResult(reply=data, artifacts=(artifact,), output=output)

    def _tool_context(self, context: ToolContext | None) -> ToolContext:
        """The turn's tool context (a turn run outside a server has none: the tenant's)."""
        if context is None:
            return ToolContext(tenant=self.context.tenant, instance_id=self.context.tenant)
        return context


def _clashes(own: Sequence[Tool], family_tools: Sequence[tuple[str, Tool]]) -> list[str]:
    """Each name that two tools share, with who gives them and the fix."""
    givers: dict[str, list[str]] = {}
    for item in own:
        givers.setdefault(item.name, []).append("the agent's own tools")
    for family, item in family_tools:
        givers.setdefault(item.name, []).append(f"tool family {family!r}")
    return [
        f"tool {name!r} is given by {' and by '.join(who)}; rename one "
        "(@tool(name=...)) or leave the family out (agent_tool_families())"
        for name, who in givers.items()
        if len(who) > 1 and any(w == "the agent's own tools" for w in who)
    ]


def _failure(error: ModelError) -> str:
    """The reason code of a turn the models failed."""
    if isinstance(error, ModelUnavailable):
        return "MODEL_UNAVAILABLE"
    if isinstance(error, ContextTooLong):
        return "CONTEXT_TOO_LONG"
    return "MODEL_ERROR"
