"""`LoopingAgent` on its own: a turn resumed after a crash continues from its last durable step,
never repeating a stored step (an in-memory session log stands in for the store)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pluggy
import pytest

from looping_core.agent import (
    AgentContext,
    LoopingAgent,
    ModelError,
    ModelUnavailable,
    StreamEnd,
    TurnInput,
    TurnOutcome,
)
from looping_core.config import LoopSettings
from looping_core.content import (
    AssistantMessage,
    Message,
    RefusalBlock,
    RefusalChunk,
    TextBlock,
    TextChunk,
    ToolResultBlock,
    ToolResultMessage,
    ToolUseBlock,
    ToolUseChunk,
    Usage,
    UserMessage,
)
from looping_core.contract import (
    Identity,
    PluginInfo,
    Tool,
    ToolCall,
    ToolContext,
    ToolFamily,
)
from looping_core.plugins import PluginHost
from looping_core.plugins._registry import (
    Contribution,
    LoadedPlugin,
    PluginRegistry,
    Provenance,
)
from looping_core.testing import ScriptedModel

CALLER = Identity("t", "https://gw.example", "alice")
SOURCE = Provenance("lpt-counter", "lpt-counter", "1.0")


class Counter:
    def __init__(self) -> None:
        self.calls = 0

    async def bump(self, arguments: Mapping[str, Any], call: ToolCall) -> str:
        self.calls += 1
        return f"count {self.calls}"

    def family(self) -> ToolFamily:
        tool = Tool("bump", "Counts.", {"type": "object"}, self.bump)
        return ToolFamily("counter", "Counts.", lambda context: [tool])


class MemoryLog:
    """A session log in memory: entries of (message, task id)."""

    def __init__(self, task_id: str, entries: Sequence[tuple[Message, str]] = ()) -> None:
        self.task_id = task_id
        self.entries = list(entries)
        self.inbox: list[Message] = []

    async def history(self) -> list[Message]:
        return [message for message, _ in self.entries]

    async def this_turn(self) -> list[Message]:
        return [message for message, task in self.entries if task == self.task_id]

    async def append(self, messages: Sequence[Message]) -> None:
        self.entries += [(message, self.task_id) for message in messages]

    async def arrivals(self) -> list[Message]:
        """Follow-ups queued in `inbox`, taken once each (like the runner's session)."""
        taken, self.inbox = self.inbox, []
        self.entries += [(message, "follow-up") for message in taken]
        return taken

    async def displace(self, displaced: Sequence[Message], replacement: Sequence[Message]) -> bool:
        if [m for m, _ in self.entries[: len(displaced)]] != list(displaced):
            return False
        self.entries[: len(displaced)] = [(m, "summary") for m in replacement]
        return True


class Counting(LoopingAgent):
    def agent_soul(self, capabilities: Sequence[str]) -> str:
        return "Count when asked. " + " ".join(capabilities)


def agent(model: ScriptedModel, counter: Counter, **context: Any) -> Counting:
    plugin = LoadedPlugin(
        source=SOURCE, obj=object(), info=PluginInfo(capability="It counts."), config=None, hooks=()
    )
    registry = PluginRegistry(
        plugins=(plugin,),
        tool_families={"counter": Contribution(counter.family(), SOURCE)},
    )
    host = PluginHost(registry, pluggy.PluginManager("looping"))
    return Counting(AgentContext(tenant="t", plugins=host, models=(model,), **context))


ASK = UserMessage([TextBlock("count once")])
CALL = AssistantMessage([ToolUseBlock("c1", "bump", {})])
RESULT = ToolResultMessage([ToolResultBlock("c1", (TextBlock("count 1"),))])
DONE = AssistantMessage([TextBlock("Counted to 1.")])


def turn(log: MemoryLog) -> TurnInput:
    return TurnInput(
        task_id=log.task_id,
        context_id="ctx",
        caller=CALLER,
        message=ASK,
        session=log,
        tool_context=ToolContext(tenant="t", instance_id="alice"),
    )


def contents(messages: Sequence[Message]) -> list[tuple[str, Any]]:
    """What the messages say, their usage aside."""
    return [(message.ROLE, message.content) for message in messages]


def answers(text: str) -> list[Any]:
    return [TextChunk(text), StreamEnd(Usage(input_tokens=3, output_tokens=1), "end")]


async def test_a_fresh_turn_writes_every_step_to_the_session() -> None:
    counter, log = Counter(), MemoryLog("task-2", [(UserMessage([TextBlock("hi")]), "task-1")])
    calls = [ToolUseChunk(0, "{}", id="c1", name="bump"), StreamEnd(Usage(), "tool_use")]
    model = ScriptedModel([calls, answers("Counted to 1.")])
    result = await agent(model, counter).run(turn(log))
    assert result.outcome is TurnOutcome.COMPLETED
    assert result.reply == (TextBlock("Counted to 1."),)
    assert contents(await log.this_turn()) == contents([ASK, CALL, RESULT, DONE])
    assert model.requests[0].messages == (UserMessage([TextBlock("hi")]), ASK)
    assert model.requests[0].system == "Count when asked. It counts."


async def test_a_resumed_turn_runs_a_call_without_a_result_then_asks_the_model() -> None:
    counter, log = Counter(), MemoryLog("task-1", [(ASK, "task-1"), (CALL, "task-1")])
    model = ScriptedModel([answers("Counted to 1.")])
    result = await agent(model, counter).run(turn(log))
    assert counter.calls == 1
    # the question is not repeated
    assert contents(await log.this_turn()) == contents([ASK, CALL, RESULT, DONE])
    assert result.reply == (TextBlock("Counted to 1."),)


async def test_a_stored_result_is_not_run_again() -> None:
    counter, log = (
        Counter(),
        MemoryLog("task-1", [(ASK, "task-1"), (CALL, "task-1"), (RESULT, "task-1")]),
    )
    model = ScriptedModel([answers("Counted to 1.")])
    await agent(model, counter).run(turn(log))
    assert counter.calls == 0
    assert model.requests[0].messages == (ASK, CALL, RESULT)


async def test_a_stored_answer_is_returned_without_asking_again() -> None:
    counter = Counter()
    log = MemoryLog(
        "task-1", [(ASK, "task-1"), (CALL, "task-1"), (RESULT, "task-1"), (DONE, "task-1")]
    )
    model = ScriptedModel([])
    result = await agent(model, counter).run(turn(log))
    assert result.reply == (TextBlock("Counted to 1."),)
    assert (counter.calls, model.requests) == (0, [])


@pytest.mark.parametrize(
    ("events", "outcome"),
    [
        ([RefusalChunk("I won't."), StreamEnd(Usage(), "refusal")], TurnOutcome.REJECTED),
        ([StreamEnd(Usage(), "end")], TurnOutcome.FAILED),
    ],
)
async def test_a_refusal_rejects_and_an_empty_answer_fails(
    events: list[Any], outcome: TurnOutcome
) -> None:
    result = await agent(ScriptedModel([events]), Counter()).run(turn(MemoryLog("task-1")))
    assert result.outcome is outcome
    if outcome is TurnOutcome.REJECTED:
        assert result.reply == (RefusalBlock("I won't."),)
    else:
        assert result.reason == "MODEL_EMPTY_ANSWER"


class Keyed(Counter):
    """Records the call id each run was given (the idempotency key)."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[str | None] = []

    async def bump(self, arguments: Mapping[str, Any], call: ToolCall) -> str:
        self.keys.append(call.id)  # given to the handler (contract 3)
        return await super().bump(arguments, call)


async def test_a_call_run_again_after_a_crash_gets_the_same_id_as_its_key() -> None:
    keyed = Keyed()
    calls = [ToolUseChunk(0, "{}", id="c1", name="bump"), StreamEnd(Usage(), "tool_use")]
    await agent(ScriptedModel([calls, answers("ok")]), keyed).run(turn(MemoryLog("task-1")))
    resumed = MemoryLog("task-1", [(ASK, "task-1"), (CALL, "task-1")])  # crashed before RESULT
    await agent(ScriptedModel([answers("ok")]), keyed).run(turn(resumed))
    assert keyed.keys == ["c1", "c1"]


async def test_a_call_with_arguments_that_are_not_json_is_answered_with_the_call() -> None:
    counter, log = Counter(), MemoryLog("task-1")
    calls = [
        ToolUseChunk(0, "{oops", id="bad", name="bump"),
        ToolUseChunk(1, "{}", id="good", name="bump"),
        StreamEnd(Usage(), "tool_use"),
    ]
    model = ScriptedModel([calls, answers("ok")])
    await agent(model, counter).run(turn(log))
    assert counter.calls == 1  # only the good call ran
    _, asked, refused, ran, _ = [message for message, _ in log.entries]
    assert isinstance(asked, AssistantMessage)
    assert refused == ToolResultMessage(
        [ToolResultBlock("bad", (TextBlock("the arguments are not JSON"),), is_error=True)]
    )
    assert ran == ToolResultMessage([ToolResultBlock("good", (TextBlock("count 1"),))])
    # After a crash between the two results, only the call without one runs again.
    again = Counter()
    resumed = MemoryLog("task-1", log.entries[:3])
    await agent(ScriptedModel([answers("ok")]), again).run(turn(resumed))
    assert again.calls == 1


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (ModelUnavailable("scripted", "down"), "MODEL_UNAVAILABLE"),
        (ModelError("scripted", "HTTP 401"), "MODEL_ERROR"),
    ],
)
async def test_models_that_fail_fail_the_turn_with_a_reason(error: ModelError, reason: str) -> None:
    result = await agent(ScriptedModel([error]), Counter()).run(turn(MemoryLog("task-1")))
    assert (result.outcome, result.reason) == (TurnOutcome.FAILED, reason)


async def test_follow_ups_join_the_conversation_before_the_next_call() -> None:
    log = MemoryLog("task-1")
    log.inbox = [UserMessage([TextBlock("and twice")])]
    model = ScriptedModel([answers("Counted twice.")])
    await agent(model, Counter()).run(turn(log))
    assert model.requests[0].messages == (ASK, UserMessage([TextBlock("and twice")]))


async def test_a_stored_answer_with_a_follow_up_waiting_asks_the_model_again() -> None:
    log = MemoryLog("task-1", [(ASK, "task-1"), (DONE, "task-1")])
    log.inbox = [UserMessage([TextBlock("once more")])]
    model = ScriptedModel([answers("Counted again.")])
    result = await agent(model, Counter()).run(turn(log))
    assert model.requests[0].messages == (ASK, DONE, UserMessage([TextBlock("once more")]))
    assert result.reply == (TextBlock("Counted again."),)


def test_the_deployment_overrides_the_agents_own_settings() -> None:
    settings = LoopSettings(max_rounds=3, max_seconds=9.5, compact_at=0.6, keep_last=4)
    built = agent(ScriptedModel([]), Counter(), loop=settings, context_window=8000)
    config = built._config
    assert (config.budget.max_rounds, config.budget.max_seconds) == (3, 9.5)
    assert config.budget.max_tokens is None  # not set: the agent's own value
    assert (config.compaction.compact_at, config.compaction.keep_last) == (0.6, 4)
    assert built._context_window == 8000
