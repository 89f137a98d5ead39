"""`LoopingAgent`: a model-driven agent whose author writes the soul (the system prompt) and picks
tool families; core runs the rest (session, models with fallback, the tool loop, budgets).

Three seams, resolved once when the agent is made (at server startup, so a mistake stops the
server before it listens), never at import time:

- `agent_soul(capabilities)`: the system prompt, required; `capabilities` are the capability
  sentences of the tenant's plugins, for the app to weave in as it likes;
- `agent_config()`: the loop's settings (`LoopingConfig`: budget, the note for a spent budget,
  tool timeout and parallelism);
- `agent_plugins()`: which of the tenant's plugins' tool families it uses (`None`: all).

Each turn: the new message joins the caller's durable session, the loop runs with every step
written there, and the final answer's text, images and audio are the reply and an artifact; the
turn's usage, the models that served it and its rounds become the task's metadata
(`looping.usage`, `looping.models`, `looping.rounds`, and `looping.budgetSpent` when one was). A
turn resumed after a crash (`[runner] on_restart = "resume"`) continues from its last durable
step: tool calls whose results are stored are not run again, ones without results are, and an
answer already stored is returned without asking the model again.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import attrs

from looping_core.agent._loop import Budget, ControlAction, run_tool_loop
from looping_core.agent._model import ModelRequest
from looping_core.agent._seam import (
    Agent,
    AgentContext,
    AgentLoadError,
    ArtifactOut,
    TurnInput,
    TurnOutcome,
    TurnResult,
)
from looping_core.content import (
    AssistantMessage,
    AudioBlock,
    ImageBlock,
    Message,
    RefusalBlock,
    TextBlock,
    ToolUseBlock,
)
from looping_core.contract import Tool, ToolContext, ToolFamily

__all__ = ["LoopingAgent", "LoopingConfig"]


@attrs.frozen
class LoopingConfig:
    """How a `LoopingAgent`'s loop runs. `budget_note` is the app's words for a spent budget."""

    budget: Budget = attrs.field(factory=Budget)
    budget_note: str = ""
    tool_timeout: float = 60.0
    max_parallel_tools: int = 4
    answer_name: str = "answer"
    """The name of the artifact that carries the final answer."""
    actions: tuple[ControlAction, ...] = ()
    """Ways out of the loop the model may take: ask the caller for input, or decline."""


class LoopingAgent(Agent):
    """Subclass it, write `agent_soul`; name it in `[tenants.<id>] agent` with a
    `[tenants.<id>.model]`."""

    def __init__(self, context: AgentContext) -> None:
        super().__init__(context)
        where = f"tenants.{context.tenant}"
        if not context.models:
            raise AgentLoadError(
                f"{where}: {type(self).__name__} is a LoopingAgent and needs a model; add a "
                f"[{where}.model] table"
            )
        registry = context.plugins.registry
        capabilities = [plugin.info.capability for plugin in registry.plugins]
        soul = self.agent_soul(capabilities)
        if not isinstance(soul, str) or not soul.strip():
            raise AgentLoadError(f"{where}: {type(self).__name__}.agent_soul() returned no text")
        self._soul = soul
        self._config = self.agent_config()
        wanted = self.agent_plugins()
        available = {name: c.item for name, c in registry.tool_families.items()}
        unknown = sorted(set(wanted or ()) - set(available))
        if unknown:
            raise AgentLoadError(
                f"{where}: {type(self).__name__}.agent_plugins() names tool families that the "
                f"tenant's plugins do not provide: {', '.join(unknown)} (available: "
                f"{', '.join(sorted(available)) or 'none'})"
            )
        self._families: tuple[ToolFamily, ...] = tuple(
            available[name] for name in (wanted if wanted is not None else sorted(available))
        )

    @abc.abstractmethod
    def agent_soul(self, capabilities: Sequence[str]) -> str:
        """The system prompt. `capabilities`: the tenant's plugins' capability sentences."""

    def agent_config(self) -> LoopingConfig:
        """The loop's settings; the defaults unless overridden."""
        return LoopingConfig()

    def agent_plugins(self) -> Sequence[str] | None:
        """The tool families this agent uses, by name; `None` for all the tenant's plugins give."""
        return None

    async def run(self, turn: TurnInput) -> TurnResult:
        conversation, pending, answered = await self._conversation(turn)
        if answered is not None:
            return self._result(answered)  # the loop had finished before a crash: not again
        config = self._config
        outcome = await run_tool_loop(
            self.context.models,
            ModelRequest(messages=conversation, system=self._soul),
            self._tools(turn.tool_context),
            budget=config.budget,
            budget_note=config.budget_note,
            log=turn.session,
            tool_timeout=config.tool_timeout,
            max_parallel_tools=config.max_parallel_tools,
            pending=pending,
            actions=config.actions,
        )
        report = {
            "looping.usage": attrs.asdict(outcome.usage),
            "looping.models": list(outcome.served_by),
            "looping.rounds": outcome.rounds,
        }
        if outcome.exhausted is not None:
            report["looping.budgetSpent"] = outcome.exhausted
        if outcome.control is not None:
            action, call = outcome.control
            words = (TextBlock(str(call.input["message"])),)
            if action.outcome == "input_required":
                return TurnResult(TurnOutcome.INPUT_REQUIRED, reply=words, metadata=report)
            return TurnResult(TurnOutcome.REJECTED, reply=words, metadata=report)
        return attrs.evolve(self._result(outcome.final.message), metadata=report)

    @staticmethod
    async def _conversation(
        turn: TurnInput,
    ) -> tuple[tuple[Message, ...], tuple[ToolUseBlock, ...], AssistantMessage | None]:
        """What the loop starts from: the conversation, tool calls still without results, and
        the final answer if this turn (resumed after a crash) already has one."""
        if turn.session is None:
            return (*turn.history, turn.message), (), None
        if not await turn.session.this_turn():
            past = await turn.session.history()
            await turn.session.append([turn.message])
            return (*past, turn.message), (), None
        conversation = tuple(await turn.session.history())
        last = conversation[-1]
        if isinstance(last, AssistantMessage):
            calls = tuple(b for b in last.content if isinstance(b, ToolUseBlock))
            if not calls:
                return conversation, (), last
            return conversation, calls, None  # their results were never stored: run them
        return conversation, (), None

    def _result(self, message: AssistantMessage) -> TurnResult:
        content = message.content
        refusal = tuple(block for block in content if isinstance(block, RefusalBlock))
        if refusal:
            return TurnResult(TurnOutcome.REJECTED, reply=refusal)
        answer = tuple(b for b in content if isinstance(b, TextBlock | ImageBlock | AudioBlock))
        if not answer:
            return TurnResult(TurnOutcome.FAILED)  # the model gave nothing a caller could use
        name = self._config.answer_name
        return TurnResult(reply=answer, artifacts=(ArtifactOut(name=name, blocks=answer),))

    def _tools(self, context: ToolContext | None) -> list[Tool]:
        if context is None:
            context = ToolContext(tenant=self.context.tenant, instance_id=self.context.tenant)
        return [tool for family in self._families for tool in family.factory(context)]
