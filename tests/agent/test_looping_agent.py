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
    StreamEnd,
    TurnInput,
    TurnOutcome,
)
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

    async def bump(self, arguments: Mapping[str, Any]) -> str:
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


def agent(model: ScriptedModel, counter: Counter) -> Counting:
    plugin = LoadedPlugin(
        source=SOURCE, obj=object(), info=PluginInfo(capability="It counts."), config=None, hooks=()
    )
    registry = PluginRegistry(
        plugins=(plugin,),
        tool_families={"counter": Contribution(counter.family(), SOURCE)},
    )
    host = PluginHost(registry, pluggy.PluginManager("looping"))
    return Counting(AgentContext(tenant="t", plugins=host, models=(model,)))


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
