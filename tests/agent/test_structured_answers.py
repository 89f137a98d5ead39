"""Structured answers: an agent that declares its answer's type ends its turn only with a JSON
object that fits the schema (a data part), asked for with a final-answer tool or the provider's
native output; a wrong answer goes back to the model as its problems, and one that never fits
fails the turn with `OUTPUT_INVALID`."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

import attrs
import pluggy
import pytest

from looping_core.agent import (
    AgentContext,
    AgentLoadError,
    AnswerSchema,
    AnswerTypeError,
    Budget,
    LoopingAgent,
    LoopingConfig,
    ModelRequest,
    StructuredAnswer,
    TurnInput,
    TurnOutcome,
    run_tool_loop,
)
from looping_core.config import LoopSettings
from looping_core.content import (
    AssistantMessage,
    DataBlock,
    TextBlock,
    ToolResultBlock,
    ToolResultMessage,
    ToolUseBlock,
    UserMessage,
)
from looping_core.contract import Identity, Tool, ToolCall
from looping_core.plugins import PluginHost, PluginRegistry
from looping_core.testing import (
    FunctionModel,
    MemorySession,
    ModelReply,
    ScriptedModel,
    TestModel,
)
from looping_core.testing import ToolCall as ScriptedCall

CALLER = Identity("t", "https://gw.example", "alice")


@attrs.frozen
class Triage:
    """How urgent a ticket is, and who takes it."""

    summary: str
    priority: int
    team: str = "support"


@dataclasses.dataclass
class Verdict:
    approved: bool


class Weather(TypedDict):
    city: str
    celsius: float


WEATHER_SCHEMA = {
    "type": "object",
    "title": "weather report",
    "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}},
    "required": ["city", "celsius"],
    "additionalProperties": False,
}

GOOD = {"summary": "printer on fire", "priority": 1}
WRONG = {"summary": "printer on fire", "priority": "high"}


def _answer(mode: str = "tool", retries: int = 2) -> StructuredAnswer:
    return StructuredAnswer(AnswerSchema.of(Triage), mode, retries=retries)


def _request() -> ModelRequest:
    return ModelRequest(messages=(UserMessage((TextBlock("the printer is on fire"),)),))


# -- the schema of an answer type -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer_type", "name", "required"),
    [
        (Triage, "Triage", ["summary", "priority"]),
        (Verdict, "Verdict", ["approved"]),
        (Weather, "Weather", ["city", "celsius"]),
        (WEATHER_SCHEMA, "weather_report", ["city", "celsius"]),
    ],
)
def test_an_answer_type_has_an_object_schema_and_a_name(
    answer_type: Any, name: str, required: list[str]
) -> None:
    schema = AnswerSchema.of(answer_type)
    assert schema.name == name
    assert schema.schema["type"] == "object"
    assert schema.schema["required"] == required
    assert schema.schema["additionalProperties"] is False


def test_an_answer_is_checked_then_structured_into_its_type() -> None:
    schema = AnswerSchema.of(Triage)
    assert schema.problem(GOOD) is None
    assert schema.structure(GOOD) == Triage("printer on fire", 1)
    assert schema.problem(WRONG) == ("invalid answer at priority: 'high' is not of type 'integer'")
    assert schema.problem(["a list"]) == "invalid answer: it is not a JSON object"
    weather = AnswerSchema.of(WEATHER_SCHEMA)
    assert weather.structure({"city": "Oslo", "celsius": 3}) == {"city": "Oslo", "celsius": 3}


@pytest.mark.parametrize(
    ("answer_type", "message"),
    [
        (
            list[int],
            "an answer must be a JSON object: give an attrs class, a dataclass, a TypedDict or "
            'a JSON Schema whose type is "object"',
        ),
        (
            {"type": "object", "properties": {"a": {"$ref": "https://evil.example/s.json"}}},
            "the answer's JSON Schema cannot be used: its $ref 'https://evil.example/s.json' "
            "refers outside the schema (only references inside it, starting with '#', are "
            "followed; nothing is fetched)",
        ),
        (
            bytes,
            "the answer's type has no schema: bytes has no JSON Schema here; use str, int, "
            "float, bool, a Literal, an Enum, a list, a dict with str keys, an attrs class, a "
            "dataclass or a TypedDict (or Any)",
        ),
    ],
)
def test_an_answer_type_that_cannot_be_used_is_refused_with_the_fix(
    answer_type: Any, message: str
) -> None:
    with pytest.raises(AnswerTypeError) as refused:
        AnswerSchema.of(answer_type)
    assert str(refused.value) == message


# -- the loop, tool mode --------------------------------------------------------------------------


async def test_tool_mode_offers_the_answer_tool_and_ends_with_a_fitting_call() -> None:
    model = ScriptedModel([ScriptedModel.answers_with(GOOD)])
    outcome = await run_tool_loop([model], _request(), answer=_answer())
    assert outcome.answer == GOOD
    assert outcome.answer_problem is None
    [sent] = model.requests
    [spec] = sent.tools
    assert spec.name == "final_answer"
    assert spec.description == "How urgent a ticket is, and who takes it."
    assert spec.input_schema == AnswerSchema.of(Triage).schema
    assert sent.output is not None
    assert not sent.output.native
    # The call and its (empty) result are in the conversation: a resumed turn sees it answered.
    call, result = outcome.messages
    assert isinstance(call, AssistantMessage)
    assert isinstance(result, ToolResultMessage)
    assert result.content == (ToolResultBlock(call.content[0].id, ()),)  # type: ignore[union-attr]


async def test_a_wrong_answer_goes_back_as_its_problems_and_the_corrected_one_ends_the_turn() -> (
    None
):
    model = ScriptedModel([ScriptedModel.answers_with(WRONG), ScriptedModel.answers_with(GOOD)])
    outcome = await run_tool_loop([model], _request(), answer=_answer())
    assert outcome.answer == GOOD
    second = model.requests[1].messages[-1]
    assert isinstance(second, ToolResultMessage)
    [result] = second.content
    assert result.is_error
    assert result.text == "invalid answer at priority: 'high' is not of type 'integer'"


async def test_an_answer_that_never_fits_ends_the_loop_with_its_problem_after_the_retries() -> None:
    model = ScriptedModel([ScriptedModel.answers_with(WRONG)] * 3)
    outcome = await run_tool_loop([model], _request(), answer=_answer(retries=2))
    assert outcome.answer is None
    assert outcome.answer_problem == "invalid answer at priority: 'high' is not of type 'integer'"
    assert len(model.requests) == 3
    assert isinstance(outcome.messages[-1], ToolResultMessage)  # every call has its result


async def test_tools_called_beside_the_answer_are_not_run() -> None:
    ran: list[Any] = []

    async def act(arguments: Mapping[str, Any], call: ToolCall) -> str:
        ran.append(arguments)
        return "done"

    acting = Tool("act", "Acts.", {"type": "object"}, act)
    model = ScriptedModel(
        [ModelReply(tool_calls=(ScriptedCall("act", {}),), output=GOOD)],
    )
    outcome = await run_tool_loop([model], _request(), [acting], answer=_answer())
    assert outcome.answer == GOOD
    assert ran == []
    results = outcome.messages[-1]
    assert isinstance(results, ToolResultMessage)
    assert [(r.is_error, r.text) for r in results.content] == [
        (True, "not run: the turn ended with its answer"),
        (False, ""),
    ]


async def test_tools_called_beside_a_wrong_answer_run_as_usual() -> None:
    ran: list[Any] = []

    async def act(arguments: Mapping[str, Any], call: ToolCall) -> str:
        ran.append(arguments)
        return "done"

    acting = Tool("act", "Acts.", {"type": "object"}, act)
    model = ScriptedModel(
        [
            ModelReply(tool_calls=(ScriptedCall("act", {}),), output=WRONG),
            ScriptedModel.answers_with(GOOD),
        ]
    )
    outcome = await run_tool_loop([model], _request(), [acting], answer=_answer())
    assert outcome.answer == GOOD
    assert ran == [{}]
    results = model.requests[1].messages[-1]
    assert isinstance(results, ToolResultMessage)
    assert [r.is_error for r in results.content] == [False, True]


async def test_tool_mode_takes_fitting_json_text_and_corrects_other_text() -> None:
    model = ScriptedModel.says("I think it is urgent.", "```json\n" + json.dumps(GOOD) + "\n```")
    outcome = await run_tool_loop([model], _request(), answer=_answer())
    assert outcome.answer == GOOD
    feedback = model.requests[1].messages[-1]
    assert feedback == UserMessage((TextBlock("no answer: expected a call of tool final_answer"),))


async def test_a_spent_budget_leaves_the_answer_tool_for_the_last_call() -> None:
    async def look(arguments: Mapping[str, Any], call: ToolCall) -> str:
        return "seen"

    looking = Tool("look", "Looks.", {"type": "object"}, look)
    model = ScriptedModel(
        [ScriptedModel.calls("look"), ScriptedModel.answers_with(GOOD)],
    )
    outcome = await run_tool_loop(
        [model], _request(), [looking], budget=Budget(max_rounds=2), answer=_answer()
    )
    assert outcome.answer == GOOD
    assert outcome.exhausted == "max_rounds"
    assert [t.name for t in model.requests[1].tools] == ["final_answer"]


async def test_a_resumed_turn_whose_pending_calls_hold_a_fitting_answer_ends_with_it() -> None:
    call = ToolUseBlock("a1", "final_answer", GOOD)
    request = ModelRequest(messages=(*_request().messages, AssistantMessage((call,))))
    outcome = await run_tool_loop([ScriptedModel([])], request, pending=(call,), answer=_answer())
    assert outcome.answer == GOOD
    assert outcome.messages == (ToolResultMessage((ToolResultBlock("a1", ()),)),)


# -- the loop, native mode ------------------------------------------------------------------------


async def test_native_mode_asks_for_the_schema_and_reads_the_text() -> None:
    model = ScriptedModel([ScriptedModel.answers_with(GOOD)])
    outcome = await run_tool_loop([model], _request(), answer=_answer("native"))
    assert outcome.answer == GOOD
    [sent] = model.requests
    assert sent.tools == ()
    assert sent.output is not None
    assert sent.output.native
    assert sent.output.name == "Triage"
    assert sent.output.schema == AnswerSchema.of(Triage).schema


async def test_native_mode_gives_a_wrong_text_its_problems_as_the_next_user_message() -> None:
    model = ScriptedModel.says("not json at all", json.dumps(WRONG), json.dumps(GOOD))
    outcome = await run_tool_loop([model], _request(), answer=_answer("native", retries=2))
    assert outcome.answer == GOOD
    first, second = (r.messages[-1] for r in model.requests[1:])
    assert isinstance(first, UserMessage)
    assert isinstance(second, UserMessage)
    assert first.content[0].text.startswith("invalid answer: not JSON (")  # type: ignore[union-attr]
    assert second.content == (
        TextBlock("invalid answer at priority: 'high' is not of type 'integer'"),
    )


# -- LoopingAgent ---------------------------------------------------------------------------------


class Triager(LoopingAgent):
    output_type = Triage

    def agent_soul(self, capabilities: Sequence[str]) -> str:
        return "Triage the ticket."


def _host() -> PluginHost:
    return PluginHost(PluginRegistry(), pluggy.PluginManager("looping"))


def _agent(model: FunctionModel, cls: type[LoopingAgent] = Triager, **loop: Any) -> LoopingAgent:
    return cls(
        AgentContext(tenant="t", plugins=_host(), models=(model,), loop=LoopSettings(**loop))
    )


def _turn(log: MemorySession | None = None) -> TurnInput:
    return TurnInput(
        task_id="task-1",
        context_id="ctx",
        caller=CALLER,
        message=UserMessage((TextBlock("the printer is on fire"),)),
        session=log,
    )


async def test_the_answer_is_a_data_part_and_the_apps_type() -> None:
    agent = _agent(ScriptedModel([ScriptedModel.answers_with(GOOD)]))
    result = await agent.run(_turn())
    assert result.outcome is TurnOutcome.COMPLETED
    assert result.reply == (DataBlock(GOOD),)
    [artifact] = result.artifacts
    assert artifact.name == "answer"
    assert artifact.blocks == (DataBlock(GOOD),)
    assert result.output == Triage("printer on fire", 1)
    assert agent.output_modes() == ("application/json",)


async def test_an_answer_that_never_fits_fails_the_turn_with_output_invalid() -> None:
    model = ScriptedModel([ScriptedModel.answers_with(WRONG)] * 2)
    result = await _agent(model, output_retries=1).run(_turn())
    assert result.outcome is TurnOutcome.FAILED
    assert result.reason == "OUTPUT_INVALID"
    assert result.metadata is not None
    assert result.metadata["looping.outputProblem"] == (
        "invalid answer at priority: 'high' is not of type 'integer'"
    )
    assert len(model.requests) == 2


async def test_the_deployment_chooses_native_mode_per_tenant() -> None:
    model = ScriptedModel([ScriptedModel.answers_with(GOOD)])
    result = await _agent(model, output_mode="native").run(_turn())
    assert result.output == Triage("printer on fire", 1)
    assert model.requests[0].output is not None
    assert model.requests[0].output.native


async def test_test_model_answers_in_the_schema_after_the_tools_ran() -> None:
    result = await _agent(TestModel()).run(_turn())
    assert result.outcome is TurnOutcome.COMPLETED
    assert result.output == Triage("the printer is on fire", 0)


async def test_a_turn_resumed_after_its_answer_was_stored_asks_no_model() -> None:
    log = MemorySession("task-1")
    await log.append(
        [
            UserMessage((TextBlock("the printer is on fire"),)),
            AssistantMessage((ToolUseBlock("a1", "final_answer", GOOD),)),
            ToolResultMessage((ToolResultBlock("a1", ()),)),
        ]
    )
    result = await _agent(ScriptedModel([])).run(_turn(log))
    assert result.output == Triage("printer on fire", 1)
    assert result.reply == (DataBlock(GOOD),)


async def test_a_resumed_native_turn_takes_its_stored_text_answer() -> None:
    log = MemorySession("task-1")
    await log.append(
        [
            UserMessage((TextBlock("the printer is on fire"),)),
            AssistantMessage((TextBlock(json.dumps(GOOD)),)),
        ]
    )
    result = await _agent(ScriptedModel([]), output_mode="native").run(_turn(log))
    assert result.output == Triage("printer on fire", 1)


def test_an_unusable_output_type_stops_the_agent_naming_the_tenant_and_the_fix() -> None:
    class Listing(LoopingAgent):
        output_type = list[str]

        def agent_soul(self, capabilities: Sequence[str]) -> str:
            return "List."

    with pytest.raises(AgentLoadError) as refused:
        _agent(TestModel(), Listing)
    assert str(refused.value) == (
        "tenants.t: Listing.output_type: an answer must be a JSON object: give an attrs class, "
        'a dataclass, a TypedDict or a JSON Schema whose type is "object"'
    )


def test_a_tool_with_the_answer_tools_name_stops_the_agent() -> None:
    class Clashing(Triager):
        def agent_tools(self, context: Any) -> Sequence[Tool]:
            async def handler(arguments: Mapping[str, Any], call: ToolCall) -> str:
                return ""

            return [Tool("final_answer", "Mine.", {"type": "object"}, handler)]

    with pytest.raises(AgentLoadError) as refused:
        _agent(TestModel(), Clashing)
    assert str(refused.value) == (
        "tenants.t: Clashing.agent_tools(): tool 'final_answer' has the name of the answer "
        "tool; rename it, or set LoopingConfig.answer_tool"
    )


def test_the_answer_tools_name_is_the_apps() -> None:
    class Renamed(Triager):
        def agent_config(self) -> LoopingConfig:
            return LoopingConfig(answer_tool="submit_triage")

    agent = _agent(TestModel(), Renamed)
    assert agent._answer is not None
    assert agent._answer.tool_name == "submit_triage"


def test_an_agent_without_an_output_type_declares_no_output_modes() -> None:
    class Plain(LoopingAgent):
        def agent_soul(self, capabilities: Sequence[str]) -> str:
            return "Talk."

    assert _agent(TestModel(), Plain).output_modes() is None
