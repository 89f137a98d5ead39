"""The tool loop with a scripted model: tools run and answer, bad calls become error results the
model sees, every step is logged before the next, budgets end with one last call without tools."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from looping_core.agent import (
    Budget,
    ControlAction,
    ModelRequest,
    StreamEnd,
    run_tool_loop,
)
from looping_core.content import (
    AssistantMessage,
    DataBlock,
    ImageBlock,
    Message,
    TextBlock,
    TextChunk,
    ToolResultBlock,
    ToolResultMessage,
    ToolUseChunk,
    Usage,
    UserMessage,
)
from looping_core.contract import Tool, ToolCall, ToolError
from looping_core.testing import ScriptedModel

REQUEST = ModelRequest((UserMessage([TextBlock("remember milk")]),), system="App soul.")
NOTE_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
    "additionalProperties": False,
}


def calls(*tool_calls: tuple[str, str, str]) -> list[Any]:
    """A scripted response calling tools `(id, name, arguments JSON)`."""
    chunks: list[Any] = [
        ToolUseChunk(index, arguments, id=call_id, name=name)
        for index, (call_id, name, arguments) in enumerate(tool_calls)
    ]
    return [*chunks, StreamEnd(Usage(input_tokens=10, output_tokens=5), "tool_use")]


def answer(text: str) -> list[Any]:
    return [TextChunk(text), StreamEnd(Usage(input_tokens=10, output_tokens=2), "end")]


class Notes:
    def __init__(self) -> None:
        self.saved: list[str] = []

    async def add(self, arguments: Mapping[str, Any], call: ToolCall) -> str:
        self.saved.append(arguments["text"])
        return f"saved {len(self.saved)}"

    def tools(self) -> list[Tool]:
        return [Tool("notes.add", "Adds a note.", NOTE_SCHEMA, self.add)]


class Log:
    def __init__(self) -> None:
        self.steps: list[list[Message]] = []

    async def append(self, messages: Sequence[Message]) -> None:
        self.steps.append(list(messages))


def results_of(message: Message) -> list[ToolResultBlock]:
    assert isinstance(message, ToolResultMessage)
    return list(message.content)


async def test_tools_run_their_results_go_back_and_the_answer_ends_the_loop() -> None:
    notes, log = Notes(), Log()
    model = ScriptedModel([calls(("c1", "notes.add", '{"text": "milk"}')), answer("Noted.")])
    outcome = await run_tool_loop([model], REQUEST, notes.tools(), log=log)
    assert notes.saved == ["milk"]
    assert outcome.final.message.content == (TextBlock("Noted."),)
    assert outcome.rounds == 2
    assert outcome.exhausted is None
    assert outcome.usage == Usage(input_tokens=20, output_tokens=7)
    assert [step[0] for step in log.steps] == list(outcome.messages)
    assert results_of(outcome.messages[1]) == [ToolResultBlock("c1", (TextBlock("saved 1"),))]
    second = model.requests[1]
    assert second.messages[-1] == outcome.messages[1]  # the model saw the result
    assert [tool.name for tool in second.tools] == ["notes.add"]
    assert second.system == "App soul."


@pytest.mark.parametrize(
    ("call", "text"),
    [
        (("c1", "notes.remove", "{}"), "unknown tool: notes.remove"),
        (("c1", "notes.add", '{"txt": "milk"}'), "invalid arguments at (the arguments): "),
        (("c1", "notes.add", '{"text": 42}'), "invalid arguments at text: 42 is not of type"),
    ],
)
async def test_a_bad_call_is_an_error_result_the_model_sees(
    call: tuple[str, str, str], text: str
) -> None:
    notes = Notes()
    model = ScriptedModel([calls(call), answer("Sorry.")])
    outcome = await run_tool_loop([model], REQUEST, notes.tools())
    [result] = results_of(outcome.messages[1])
    assert result.is_error
    assert result.content[0].text.startswith(text)  # type: ignore[union-attr]
    assert notes.saved == []
    assert outcome.final.message.content == (TextBlock("Sorry."),)


async def test_a_tool_that_raises_or_hangs_is_an_error_result(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def explode(arguments: Mapping[str, Any], call: ToolCall) -> str:
        raise RuntimeError("secret detail")

    async def hang(arguments: Mapping[str, Any], call: ToolCall) -> str:
        await asyncio.sleep(30)
        return "never"

    tools = [
        Tool("boom", "Explodes.", {"type": "object"}, explode),
        Tool("slow", "Hangs.", {"type": "object"}, hang),
    ]
    model = ScriptedModel([calls(("a", "boom", "{}"), ("b", "slow", "{}")), answer("ok")])
    outcome = await run_tool_loop([model], REQUEST, tools, tool_timeout=0.1)
    boom, slow = results_of(outcome.messages[1])
    assert (boom.is_error, boom.content) == (True, (TextBlock("failed: RuntimeError"),))
    assert (slow.is_error, slow.content) == (True, (TextBlock("timed out after 0.1 s"),))
    assert "secret detail" not in str(outcome.messages)
    assert "tool boom (call a) failed" in caplog.text


async def test_calls_of_one_response_run_at_once_within_the_bound() -> None:
    running, peak = 0, 0

    async def work(arguments: Mapping[str, Any], call: ToolCall) -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1
        return str(arguments["n"])

    tool = Tool("work", "Works.", {"type": "object"}, work)
    many = calls(*((f"c{n}", "work", f'{{"n": {n}}}') for n in range(6)))
    model = ScriptedModel([many, answer("done")])
    outcome = await run_tool_loop([model], REQUEST, [tool], max_parallel_tools=3)
    assert peak == 3
    results = results_of(outcome.messages[1])
    assert [r.tool_use_id for r in results] == [f"c{n}" for n in range(6)]  # the model's order
    assert [r.content for r in results] == [(TextBlock(str(n)),) for n in range(6)]


async def test_return_values_become_content() -> None:
    picture = ImageBlock("image/png", url="https://example.org/p.png")

    data = DataBlock({"sum": 5})

    async def give(arguments: Mapping[str, Any], call: ToolCall) -> Any:
        return {
            "none": None, "text": "t", "image": picture, "json": {"b": 1, "a": [1.5]},
            "blocks": (TextBlock("t"), data),
        }[arguments["kind"]]  # fmt: skip

    tool = Tool("give", "Gives.", {"type": "object"}, give)
    kinds = ["none", "text", "image", "json", "blocks"]
    model = ScriptedModel(
        [calls(*((k, "give", f'{{"kind": "{k}"}}') for k in kinds)), answer("ok")]
    )
    outcome = await run_tool_loop([model], REQUEST, [tool])
    assert [r.content for r in results_of(outcome.messages[1])] == [
        (),
        (TextBlock("t"),),
        (picture,),
        (TextBlock('{"a":[1.5],"b":1}'),),
        (TextBlock("t"), data),  # structured data stays data
    ]


@pytest.mark.parametrize(
    ("budget", "exhausted", "rounds"),
    [
        (Budget(max_rounds=2), "max_rounds", 2),
        (Budget(max_rounds=10, max_tokens=30), "max_tokens", 3),
    ],
)
async def test_a_spent_budget_ends_with_one_last_call_without_tools(
    budget: Budget, exhausted: str, rounds: int
) -> None:
    notes = Notes()
    script = [calls((f"c{n}", "notes.add", '{"text": "x"}')) for n in range(rounds - 1)]
    model = ScriptedModel([*script, answer("Here is where I got to.")])
    outcome = await run_tool_loop(
        [model], REQUEST, notes.tools(), budget=budget, budget_note="Budget spent: answer now."
    )
    assert outcome.exhausted == exhausted
    assert outcome.rounds == rounds
    last = model.requests[-1]
    assert last.tools == ()
    assert last.system == "App soul.\n\nBudget spent: answer now."
    assert all(request.system == "App soul." for request in model.requests[:-1])
    assert outcome.final.message.content == (TextBlock("Here is where I got to."),)


async def test_a_time_budget_is_read_from_the_clock() -> None:
    now = [0.0]
    notes = Notes()

    async def add_slowly(arguments: Mapping[str, Any], call: ToolCall) -> str:
        now[0] += 10
        return await notes.add(arguments)

    tool = Tool("notes.add", "Adds.", NOTE_SCHEMA, add_slowly)
    model = ScriptedModel([calls(("c1", "notes.add", '{"text": "x"}')), answer("late")])
    outcome = await run_tool_loop(
        [model], REQUEST, [tool], budget=Budget(max_seconds=5), clock=lambda: now[0]
    )
    assert (outcome.exhausted, outcome.rounds) == ("max_seconds", 2)
    assert model.requests[-1].tools == ()


async def test_the_log_sees_each_step_before_the_next_begins() -> None:
    seen_by_tool: list[int] = []
    log = Log()

    async def look(arguments: Mapping[str, Any], call: ToolCall) -> str:
        seen_by_tool.append(len(log.steps))  # the model's message that called it is logged
        return "ok"

    tool = Tool("look", "Looks.", {"type": "object"}, look)
    model = ScriptedModel([calls(("c1", "look", "{}")), answer("done")])
    await run_tool_loop([model], REQUEST, [tool], log=log)
    assert seen_by_tool == [1]
    assert [type(step[0]) for step in log.steps] == [
        AssistantMessage,
        ToolResultMessage,
        AssistantMessage,
    ]


def test_a_budget_needs_one_round() -> None:
    with pytest.raises(ValueError, match="max_rounds"):
        Budget(max_rounds=0)


ASK = ControlAction("ask_caller", "Ask the caller a question.", "input_required")


async def test_a_control_action_ends_the_loop_with_its_call() -> None:
    notes = Notes()
    model = ScriptedModel(
        [calls(("c1", "notes.add", '{"text": "x"}'), ("c2", "ask_caller", '{"message": "Which?"}'))]
    )
    outcome = await run_tool_loop([model], REQUEST, notes.tools(), actions=[ASK])
    assert outcome.control is not None
    action, call = outcome.control
    assert (action.name, call.input) == ("ask_caller", {"message": "Which?"})
    assert notes.saved == ["x"]  # the other calls of the response still ran
    _, acknowledged = results_of(outcome.messages[1])
    assert acknowledged == ToolResultBlock("c2", ())
    assert [t.name for t in model.requests[0].tools] == ["notes.add", "ask_caller"]


async def test_a_control_action_with_bad_arguments_is_an_error_and_the_loop_goes_on() -> None:
    model = ScriptedModel([calls(("c1", "ask_caller", '{"msg": "?"}')), answer("Fine.")])
    outcome = await run_tool_loop([model], REQUEST, [], actions=[ASK])
    assert outcome.control is None
    [result] = results_of(outcome.messages[1])
    assert result.is_error
    assert result.content[0].text.startswith("invalid arguments")  # type: ignore[union-attr]


def test_a_control_action_has_one_of_two_outcomes() -> None:
    with pytest.raises(ValueError, match="outcome"):
        ControlAction("x", "d", "completed")


async def test_a_tool_error_is_shown_to_the_model_as_it_is_worded() -> None:
    async def refuse(arguments: Mapping[str, Any], call: ToolCall) -> str:
        raise ToolError("the plan was refused: cycle: a -> b -> a")

    tools = [Tool("plan", "Plans.", {"type": "object"}, refuse)]
    model = ScriptedModel([calls(("c1", "plan", "{}")), answer("ok")])
    outcome = await run_tool_loop([model], REQUEST, tools)
    [result] = results_of(outcome.messages[1])
    assert result.is_error
    assert result.content == (TextBlock("the plan was refused: cycle: a -> b -> a"),)


async def test_every_problem_with_the_arguments_is_named() -> None:
    notes = Notes()
    model = ScriptedModel([calls(("c1", "notes.add", '{"txt": 1, "text": 2}')), answer("ok")])
    outcome = await run_tool_loop([model], REQUEST, notes.tools())
    [result] = results_of(outcome.messages[1])
    text = result.content[0].text  # type: ignore[union-attr]
    assert "Additional properties are not allowed ('txt' was unexpected)" in text
    assert "invalid arguments at text: 2 is not of type 'string'" in text
