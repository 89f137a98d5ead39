"""What a model or a tool's third-party schema sends cannot fail a turn or reach the network: a
schema's `$ref` outside it is never fetched (or read from a file), a `$ref` cycle is the call's
error, and arguments nested past the limit or holding NaN/Infinity are "not JSON". Each case is
an error result the model sees, and every step stays encodable for the session."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from looping_core.agent import ModelRequest, StreamEnd, run_tool_loop
from looping_core.content import (
    Message,
    TextBlock,
    TextChunk,
    ToolResultBlock,
    ToolResultMessage,
    ToolUseChunk,
    Usage,
    UserMessage,
    encode,
)
from looping_core.contract import Tool, ToolCall
from looping_core.testing import ScriptedModel
from looping_core.tools import argument_problems, schema_problem

REQUEST = ModelRequest((UserMessage([TextBlock("go")]),), system="App soul.")


class Fetched:
    """A real HTTP server on 127.0.0.1 that counts every request made to it."""

    def __init__(self) -> None:
        self.hits = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.hits += 1
        return web.json_response({"type": "object", "properties": {"x": {"const": "SECRET"}}})


@pytest.fixture
async def fetched() -> AsyncIterator[tuple[Fetched, str]]:
    counter = Fetched()
    app = web.Application()
    app.router.add_get("/{name}", counter.handle)
    async with TestServer(app, host="127.0.0.1") as server:
        yield counter, str(server.make_url("/schema.json"))


class Log:
    """Encodes every step as the durable session does, so a step it cannot store fails here."""

    def __init__(self) -> None:
        self.steps: list[bytes] = []

    async def append(self, messages: Sequence[Message]) -> None:
        self.steps.append(encode(list(messages)))


def calling(name: str, arguments: str) -> list[Any]:
    return [
        ToolUseChunk(0, arguments, id="c1", name=name),
        StreamEnd(Usage(input_tokens=1, output_tokens=1), "tool_use"),
    ]


def answer() -> list[Any]:
    return [TextChunk("done"), StreamEnd(Usage(input_tokens=1, output_tokens=1), "end")]


async def run_one_call(tool: Tool, arguments: str) -> tuple[ToolResultBlock, Log]:
    log = Log()
    model = ScriptedModel([calling(tool.name, arguments), answer()])
    outcome = await run_tool_loop([model], REQUEST, [tool], log=log)
    assert outcome.final.message.content == (TextBlock("done"),)  # the turn went on
    message = outcome.messages[1]
    assert isinstance(message, ToolResultMessage)
    [result] = message.content
    return result, log


class Handler:
    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, arguments: Mapping[str, Any], call: ToolCall) -> str:
        self.calls += 1
        return "ran"


async def test_a_schema_ref_to_a_url_is_never_fetched(fetched: tuple[Fetched, str]) -> None:
    counter, url = fetched
    handler = Handler()
    tool = Tool("t", "A tool.", {"type": "object", "$ref": url}, handler)
    result, _ = await run_one_call(tool, '{"x": "y"}')
    assert result.is_error
    assert result.content == (TextBlock("tool t cannot be called (its input schema is unusable)"),)
    assert counter.hits == 0
    assert handler.calls == 0
    problem = schema_problem({"type": "object", "$ref": url})
    assert problem is not None
    assert "refers outside the schema" in problem
    assert counter.hits == 0


async def test_a_schema_ref_to_a_file_is_never_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"const": "THE-SECRET-VALUE"}')
    schema = {"type": "object", "properties": {"x": {"$ref": secret.as_uri()}}}
    result, log = await run_one_call(Tool("t", "A tool.", schema, Handler()), '{"x": 1}')
    assert result.is_error
    assert b"THE-SECRET-VALUE" not in b"".join(log.steps)


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#"},
        {"type": "object", "allOf": [{"$ref": "#/$defs/a"}], "$defs": {"a": {"$ref": "#"}}},
        {
            "type": "object",
            "properties": {"x": {"$ref": "#/$defs/a"}},
            "$defs": {"a": {"anyOf": [{"$ref": "#/$defs/b"}]}, "b": {"not": {"$ref": "#/$defs/a"}}},
        },
    ],
)
async def test_a_ref_cycle_is_the_calls_error_not_a_failed_turn(schema: dict[str, Any]) -> None:
    handler = Handler()
    result, _ = await run_one_call(Tool("t", "A tool.", schema, handler), '{"x": {"y": 1}}')
    assert result.is_error
    assert handler.calls == 0
    assert schema_problem(schema) == "its references loop back to themselves ($ref cycle)"


def test_recursion_through_the_value_itself_is_allowed() -> None:
    tree = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "children": {"items": {"$ref": "#"}}},
    }
    assert schema_problem(tree) is None
    assert argument_problems(tree, {"children": [{"children": [{"name": "leaf"}]}]}) is None
    problem = argument_problems(tree, {"children": [{"children": [{"name": 3}]}]})
    assert problem is not None
    assert problem.startswith("invalid arguments at children/0/children/0/name")


@pytest.mark.parametrize(
    ("schema", "said"),
    [
        ({"type": "object", "properties": {"x": {"$ref": "#/$defs/nothing"}}}, "points at nothing"),
        ({"$schema": "http://127.0.0.1:9/meta", "type": "object"}, "not a JSON Schema dialect"),
        ({"type": "object", "properties": {"x": {"type": "strange"}}}, "not a valid JSON Schema"),
    ],
)
def test_other_unusable_schemas_are_named(schema: dict[str, Any], said: str) -> None:
    problem = schema_problem(schema)
    assert problem is not None
    assert said in problem


def test_a_schema_nested_too_deep_is_refused() -> None:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(100):
        schema = {"type": "object", "properties": {"x": schema}}
    assert schema_problem(schema) == "it nests deeper than 64 levels"


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ('{"x": ' * 1000 + "1" + "}" * 1000, "are not JSON (nested deeper than 64 levels)"),
        ('{"x": ' * 100 + "1" + "}" * 100, "are not JSON (nested deeper than 64 levels)"),
        ('{"x": NaN}', "are not JSON (NaN is not a JSON number)"),
        ('{"x": -Infinity}', "are not JSON (-Infinity is not a JSON number)"),
    ],
)
async def test_deep_or_non_finite_arguments_are_not_json(arguments: str, said: str) -> None:
    handler = Handler()
    tool = Tool("t", "A tool.", {"type": "object"}, handler)
    result, log = await run_one_call(tool, arguments)
    assert result == ToolResultBlock("c1", (TextBlock(f"the arguments {said}"),), is_error=True)
    assert handler.calls == 0
    assert b"the arguments are not JSON" in b"".join(log.steps)  # every step stored


async def test_arguments_as_deep_as_allowed_still_run() -> None:
    handler = Handler()
    tool = Tool("t", "A tool.", {"type": "object"}, handler)
    arguments = '{"x": ' * 63 + "1" + "}" * 63
    result, _ = await run_one_call(tool, arguments)
    assert result == ToolResultBlock("c1", (TextBlock("ran"),))
    assert handler.calls == 1
