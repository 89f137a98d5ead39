"""Models that react: `FunctionModel` answers each request with what a function returns, and
`TestModel` calls every tool it is offered once, with arguments valid for the tool's schema,
then answers with what they returned (as pydantic-ai's `TestModel` does), or with a structured
answer valid for the schema asked for. Neither needs a network; both stream their answers the
way a provider does (chunks, then a `StreamEnd`)."""

from __future__ import annotations

import inspect
import json
import math
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
    UserMessage,
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
    """What a `FunctionModel`'s function answers: text, tool calls, the usage it reports, or
    a structured answer (`output`, a JSON object): given the way the request asks for it (a
    call of its answer tool, or in native mode, or when it asks for none, as JSON text)."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = attrs.field(factory=lambda: Usage(input_tokens=1, output_tokens=1))
    output: Any = None


def reply_events(reply: ModelReply, request: ModelRequest | None = None) -> list[ModelEvent]:
    """The stream of events a provider would send for `reply` (to `request`, which says how a
    structured answer is given)."""
    if reply.output is not None:
        wanted = request.output if request is not None else None
        if wanted is not None and not wanted.native:
            call = ToolCall(wanted.name, reply.output)
            reply = attrs.evolve(reply, output=None, tool_calls=(*reply.tool_calls, call))
        else:
            text = reply.text + json.dumps(reply.output, ensure_ascii=False)
            reply = attrs.evolve(reply, output=None, text=text)
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
    The latest `max_kept_requests` requests are kept in `requests` (oldest first), so a
    long-running `looping model serve` does not grow without end."""

    max_kept_requests = 1000

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
        if len(self.requests) > self.max_kept_requests:
            del self.requests[: len(self.requests) - self.max_kept_requests]
        answer = self._function(request)
        if inspect.isawaitable(answer):
            answer = await answer
        if isinstance(answer, ModelError):
            raise answer
        if isinstance(answer, str):
            answer = ModelReply(text=answer)
        for event in reply_events(answer, request) if isinstance(answer, ModelReply) else answer:
            yield event


class TestModel(FunctionModel):
    """Calls every offered tool once, with arguments made from its JSON Schema (the first enum
    value, 0, "a", false, one item per required list, every required property), the first
    required string parameter taking the user's last text instead (so a word counter asked
    "How many words are in this sentence?" counts 7), then answers with a JSON object of what
    each returned, as data (`{"count_words": 7}`; a result that is not JSON stays its text);
    with no tools, it answers `text`. Asked for a structured answer, it answers one made from
    the answer's schema the same way (after the other tools, if any, ran). Deterministic:
    made for testing that an agent's tools are wired, and for the local model endpoint's
    default."""

    __test__ = False  # not a pytest test class, whatever its name

    def __init__(self, text: str = "success (no tool calls)", label: str = "test") -> None:
        super().__init__(self._answer, label=label)
        self._text = text

    def _answer(self, request: ModelRequest) -> ModelReply:
        last = request.messages[-1] if request.messages else None
        wanted = request.output
        answer_tool = wanted.name if wanted is not None and not wanted.native else None
        tools = [t for t in request.tools if t.name != answer_tool]
        asked = _last_user_text(request)
        if wanted is not None and (isinstance(last, ToolResultMessage) or not tools):
            return ModelReply(output=arguments_for(wanted.schema, text=asked))
        if isinstance(last, ToolResultMessage):
            return ModelReply(text=json.dumps(_results(request), ensure_ascii=False))
        if not tools:
            return ModelReply(text=self._text)
        calls = tuple(ToolCall(t.name, arguments_for(t.input_schema, text=asked)) for t in tools)
        return ModelReply(tool_calls=calls)


def _last_user_text(request: ModelRequest) -> str | None:
    for message in reversed(request.messages):
        if isinstance(message, UserMessage):
            text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
            return text or None
    return None


def _as_data(text: str) -> Any:
    """A tool's result text as the data it is (`"7"` is 7), or the text when it is no JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _results(request: ModelRequest) -> dict[str, Any]:
    """The latest tool results, as data, by the name of the tool each answered."""
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
        results[names.get(result.tool_use_id, result.tool_use_id)] = _as_data(result.text)
    return results


MAX_FILLED_VALUES = 1000
"""How many values `arguments_for` makes for one call at most (a schema asking for more, say
arrays of `minItems: 100` nested five deep, gets shorter arrays, never an answer of megabytes)."""
MAX_FILLED_STRING = 1000
"""The longest string it makes, whatever `minLength` asks."""
_MAX_FILL_DEPTH = 32


def arguments_for(schema: Mapping[str, Any], *, text: str | None = None) -> dict[str, Any]:
    """Arguments valid for an object `schema`: each required property, made from its schema,
    within `MAX_FILLED_VALUES` values, `MAX_FILLED_STRING` characters a string and a depth of
    32 (past those, what is left is short or empty). A schema of an odd shape gets `{}`.
    `text`: the value of the first required string property of the object itself (one of no
    enum, pattern or format, whose lengths it fits)."""
    value = _Filler(text).value(schema if isinstance(schema, Mapping) else {}, 0)
    return value if isinstance(value, dict) else {}


class _Filler:
    def __init__(self, text: str | None = None) -> None:
        self._left = MAX_FILLED_VALUES
        self._text = text

    def value(self, schema: Mapping[str, Any], depth: int) -> Any:
        self._left -= 1
        if "const" in schema:
            return schema["const"]
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return enum[0]
        if "default" in schema:
            return schema["default"]
        if depth > _MAX_FILL_DEPTH:
            return None
        for choice in ("anyOf", "oneOf"):
            options = _list(schema.get(choice))
            typed = [o for o in options if isinstance(o, Mapping) and o.get("type") != "null"]
            if typed:
                return self.value(typed[0], depth + 1)
        kind = schema.get("type", "object")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind == "object":
            properties = schema.get("properties")
            properties = properties if isinstance(properties, Mapping) else {}
            made = {}
            for name in _list(schema.get("required")):
                if not isinstance(name, str) or self._left <= 0:
                    continue
                inner = properties.get(name)
                inner = inner if isinstance(inner, Mapping) else {}
                if depth == 0 and self._text is not None and _takes_text(inner, self._text):
                    made[name], self._text = self._text, None
                    continue
                made[name] = self.value(inner, depth + 1)
            return made
        if kind == "array":
            if "prefixItems" in schema:  # a tuple of fixed length
                items = [i for i in _list(schema["prefixItems"]) if isinstance(i, Mapping)]
                return [self.value(item, depth + 1) for item in items if self._left > 0]
            inner = schema.get("items")
            inner = inner if isinstance(inner, Mapping) else {}
            made_items = []
            for _ in range(_number(schema.get("minItems"), 0, MAX_FILLED_VALUES)):
                if self._left <= 0:
                    break
                made_items.append(self.value(inner, depth + 1))
            return made_items
        if kind == "string":
            return "a" * max(1, _number(schema.get("minLength"), 1, MAX_FILLED_STRING))
        if kind == "integer":
            return _number(schema.get("minimum"), 0, 2**53)
        if kind == "number":
            return float(_number(schema.get("minimum"), 0, 2**53))
        if kind == "boolean":
            return False
        return None


def _takes_text(schema: Mapping[str, Any], text: str) -> bool:
    """Whether `text` is a valid value of a plain string `schema` (no enum, const, pattern or
    format; within its lengths)."""
    if schema.get("type") != "string" or any(
        key in schema for key in ("enum", "const", "pattern", "format")
    ):
        return False
    shortest = _number(schema.get("minLength"), 0, MAX_FILLED_STRING)
    longest = _number(schema.get("maxLength"), MAX_FILLED_STRING, MAX_FILLED_STRING)
    return shortest <= len(text) <= longest


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _number(value: Any, default: int, cap: int) -> int:
    """A schema's number as an integer within ±`cap` (`default` when it is not one)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return default
    return int(max(-cap, min(cap, value)))
