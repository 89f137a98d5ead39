"""Models that react: `FunctionModel` answers each request with what a function returns, and
`TestModel` calls every tool it is offered once, with arguments valid for the tool's schema,
then answers with what they returned (as pydantic-ai's `TestModel` does). Neither needs a
network; both stream their answers the way a provider does (chunks, then a `StreamEnd`)."""

from __future__ import annotations

import inspect
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import attrs

from looping_core.agent import ModelError, ModelEvent, ModelRequest, StreamEnd
from looping_core.content import (
    AssistantMessage,
    TextBlock,
    TextChunk,
    ToolResultMessage,
    ToolUseChunk,
    Usage,
)

__all__ = ["FunctionModel", "ModelReply", "TestModel", "ToolCall", "reply_events"]


@attrs.frozen
class ToolCall:
    """A tool call a scripted model makes: the tool's name, its arguments, and an id (a fresh
    one unless given)."""

    name: str
    arguments: Mapping[str, Any] = attrs.field(factory=dict)
    id: str = attrs.field(factory=lambda: f"call_{uuid.uuid4().hex[:12]}")


@attrs.frozen
class ModelReply:
    """What a `FunctionModel`'s function answers: text, tool calls, the usage it reports."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = attrs.field(factory=lambda: Usage(input_tokens=1, output_tokens=1))


def reply_events(reply: ModelReply) -> list[ModelEvent]:
    """The stream of events a provider would send for `reply`."""
    events: list[ModelEvent] = []
    if reply.text:
        events.append(TextChunk(reply.text))
    for index, call in enumerate(reply.tool_calls):
        arguments = json.dumps(dict(call.arguments))
        events.append(ToolUseChunk(index, arguments, id=call.id, name=call.name))
    events.append(StreamEnd(reply.usage, "tool_use" if reply.tool_calls else "end"))
    return events


Answer = ModelReply | str | ModelError | Sequence[ModelEvent]
ModelFunction = Callable[[ModelRequest], Answer | Awaitable[Answer]]


class FunctionModel:
    """A `ChatModel` whose every answer is what `function(request)` returns (sync or async): a
    `ModelReply`, plain text, the stream's events themselves, or a `ModelError` (returned or
    raised) the loop handles as a provider's. The function sees the whole request: its
    messages, its system text and the tools offered, so it can react to what the agent sent.
    Every request is kept in `requests`."""

    def __init__(self, function: ModelFunction, label: str = "function") -> None:
        self._function = function
        self._label = label
        self.requests: list[ModelRequest] = []

    @property
    def label(self) -> str:
        return self._label

    async def aclose(self) -> None:
        """Nothing to release."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.requests.append(request)
        answer = self._function(request)
        if inspect.isawaitable(answer):
            answer = await answer
        if isinstance(answer, ModelError):
            raise answer
        if isinstance(answer, str):
            answer = ModelReply(text=answer)
        for event in reply_events(answer) if isinstance(answer, ModelReply) else answer:
            yield event


class TestModel(FunctionModel):
    """Calls every offered tool once, with arguments made from its JSON Schema (the first enum
    value, 0, "a", false, one item per required list, every required property), then answers
    with a JSON object of what each returned (`{"tool name": "its text"}`); with no tools, it
    answers `text`. Deterministic: made for testing that an agent's tools are wired, and for
    the local model endpoint's default."""

    __test__ = False  # not a pytest test class, whatever its name

    def __init__(self, text: str = "success (no tool calls)", label: str = "test") -> None:
        super().__init__(self._answer, label=label)
        self._text = text

    def _answer(self, request: ModelRequest) -> ModelReply:
        last = request.messages[-1] if request.messages else None
        if isinstance(last, ToolResultMessage):
            return ModelReply(text=json.dumps(_results(request), ensure_ascii=False))
        if not request.tools:
            return ModelReply(text=self._text)
        calls = tuple(ToolCall(t.name, arguments_for(t.input_schema)) for t in request.tools)
        return ModelReply(tool_calls=calls)


def _results(request: ModelRequest) -> dict[str, str]:
    """The latest tool results by the name of the tool each answered."""
    names: dict[str, str] = {}
    for message in request.messages:
        if isinstance(message, AssistantMessage):
            for block in message.content:
                if getattr(block, "name", None) and getattr(block, "id", None):
                    names[block.id] = block.name  # type: ignore[union-attr]
    last = request.messages[-1]
    assert isinstance(last, ToolResultMessage)
    results = {}
    for result in last.content:
        text = "".join(b.text for b in result.content if isinstance(b, TextBlock))
        results[names.get(result.tool_use_id, result.tool_use_id)] = text
    return results


def arguments_for(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments valid for an object `schema`: each required property, made from its schema."""
    value = _value_for(schema)
    return value if isinstance(value, dict) else {}


def _value_for(schema: Mapping[str, Any]) -> Any:
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for choice in ("anyOf", "oneOf"):
        options: Sequence[Mapping[str, Any]] = schema.get(choice, ())
        typed = [o for o in options if o.get("type") != "null"]
        if typed:
            return _value_for(typed[0])
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        properties: Mapping[str, Any] = schema.get("properties", {})
        return {name: _value_for(properties.get(name, {})) for name in schema.get("required", ())}
    if kind == "array":
        if "prefixItems" in schema:  # a tuple of fixed length
            return [_value_for(item) for item in schema["prefixItems"]]
        minimum = int(schema.get("minItems", 0))
        return [_value_for(schema.get("items", {})) for _ in range(minimum)]
    if kind == "string":
        return "a" * max(1, int(schema.get("minLength", 1)))
    if kind == "integer":
        return int(schema.get("minimum", 0))
    if kind == "number":
        return float(schema.get("minimum", 0))
    if kind == "boolean":
        return False
    return None
