"""Models you can script: `FunctionModel` reacts to each request, `TestModel` calls every
offered tool once with arguments valid for its schema and answers with their results, and
`ScriptedModel.calls` scripts a tool call; each driven through the real tool loop."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import jsonschema
import pytest

from looping_core.agent import ModelRequest, ModelUnavailable, run_tool_loop
from looping_core.content import TextBlock, ToolResultMessage, UserMessage
from looping_core.contract import Tool
from looping_core.contract import ToolCall as Call
from looping_core.modelserver import arguments_for
from looping_core.testing import FunctionModel, ModelReply, ScriptedModel, TestModel, ToolCall

REQUEST = ModelRequest((UserMessage([TextBlock("remember milk")]),), system="App words.")


class Notes:
    def __init__(self) -> None:
        self.saved: list[Mapping[str, Any]] = []

    async def add(self, arguments: Mapping[str, Any], call: Call) -> str:
        self.saved.append(dict(arguments))
        return f"saved {len(self.saved)}"

    def tools(self, schema: Mapping[str, Any] | None = None) -> list[Tool]:
        schema = schema or {
            "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
        }  # fmt: skip
        return [Tool("notes.add", "Adds a note.", schema, self.add)]


async def test_a_function_model_reacts_to_what_the_agent_sent() -> None:
    def reply(request: ModelRequest) -> ModelReply | str:
        last = request.messages[-1]
        if isinstance(last, ToolResultMessage):  # the tool answered: say what it said
            return "Done: " + last.content[0].text
        assert [tool.name for tool in request.tools] == ["notes.add"]
        first = request.messages[0]
        assert isinstance(first, UserMessage)
        text = first.content[0].text  # type: ignore[union-attr]
        return ModelReply(tool_calls=(ToolCall("notes.add", {"text": text.split()[-1]}),))

    notes, model = Notes(), FunctionModel(reply)
    outcome = await run_tool_loop([model], REQUEST, notes.tools())
    assert notes.saved == [{"text": "milk"}]
    assert outcome.final.message.content == (TextBlock("Done: saved 1"),)
    assert len(model.requests) == 2
    assert model.requests[0].system == "App words."


async def test_a_function_model_may_be_async_and_fail_as_a_provider_does() -> None:
    async def down(request: ModelRequest) -> ModelUnavailable:
        return ModelUnavailable("function", "not today")

    backup = FunctionModel(lambda request: "from the fallback", label="backup")
    outcome = await run_tool_loop([FunctionModel(down), backup], REQUEST, [])
    assert outcome.final.message.content == (TextBlock("from the fallback"),)


async def test_the_test_model_calls_every_tool_once_then_answers_with_their_results() -> None:
    notes = Notes()
    other: list[Mapping[str, Any]] = []

    async def count(arguments: Mapping[str, Any], call: Call) -> str:
        other.append(dict(arguments))
        return "3 notes"

    counter = Tool("notes.count", "Counts.", {"type": "object", "properties": {}}, count)
    outcome = await run_tool_loop([TestModel()], REQUEST, [*notes.tools(), counter])
    assert notes.saved == [{"text": "remember milk"}]  # the user's text, to the first text
    assert other == [{}]
    text = outcome.final.message.content[0].text  # type: ignore[union-attr]
    assert json.loads(text) == {"notes.add": "saved 1", "notes.count": "3 notes"}


async def test_the_test_model_without_tools_answers_its_text() -> None:
    outcome = await run_tool_loop([TestModel(text="fine")], REQUEST, [])
    assert outcome.final.message.content == (TextBlock("fine"),)


SCHEMAS = [
    {"type": "object", "properties": {"q": {"type": "string", "minLength": 3}}, "required": ["q"]},
    {"type": "object", "properties": {"n": {"type": "integer", "minimum": 2},
                                      "x": {"type": "number"}, "ok": {"type": "boolean"}},
     "required": ["n", "x", "ok"], "additionalProperties": False},
    {"type": "object", "properties": {"mode": {"enum": ["fast", "slow"]},
                                      "tags": {"type": "array", "items": {"type": "string"},
                                               "minItems": 2}},
     "required": ["mode", "tags"]},
    {"type": "object", "properties": {"when": {"anyOf": [{"type": "null"}, {"type": "string"}]},
                                      "inner": {"type": "object", "properties": {
                                          "k": {"const": 7}}, "required": ["k"]}},
     "required": ["when", "inner"]},
    {"type": "object", "properties": {"optional": {"type": "string"}}},
]  # fmt: skip


@pytest.mark.parametrize("schema", SCHEMAS)
def test_the_test_models_arguments_are_valid_for_the_schema(schema: Mapping[str, Any]) -> None:
    jsonschema.validate(arguments_for(schema), schema)


async def test_scripted_tool_calls_in_one_line() -> None:
    notes = Notes()
    model = ScriptedModel(
        [ScriptedModel.calls("notes.add", {"text": "milk"}), ScriptedModel.answer("Noted.")]
    )
    outcome = await run_tool_loop([model], REQUEST, notes.tools())
    assert notes.saved == [{"text": "milk"}]
    assert outcome.final.message.content == (TextBlock("Noted."),)


async def test_the_test_models_answer_holds_results_as_data_and_text_only_where_it_fits() -> None:
    """A result that is JSON is its data in the answer; the user's text goes to the first
    required plain string parameter, never to one it would not be valid for."""
    seen: list[Mapping[str, Any]] = []

    async def record(arguments: Mapping[str, Any], call: Call) -> str:
        seen.append(dict(arguments))
        return json.dumps({"count": len(seen)})

    schema = {
        "type": "object",
        "properties": {
            "code": {"type": "string", "pattern": "^[a-z ]+$"},
            "kind": {"type": "string", "enum": ["x", "y"]},
            "short": {"type": "string", "maxLength": 4},
            "query": {"type": "string"},
            "also": {"type": "string"},
        },
        "required": ["code", "kind", "short", "query", "also"],
    }
    outcome = await run_tool_loop([TestModel()], REQUEST, [Tool("find", "Finds.", schema, record)])
    assert seen == [{"code": "a", "kind": "x", "short": "a", "query": "remember milk", "also": "a"}]
    text = outcome.final.message.content[0].text  # type: ignore[union-attr]
    assert json.loads(text) == {"find": {"count": 1}}
