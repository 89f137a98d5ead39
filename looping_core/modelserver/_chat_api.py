"""The Chat Completions wire format, both ways, for the local model endpoint: a request's JSON
into a `ModelRequest` (the content vocabulary), and a model's events back out as a streamed
`chat.completion.chunk` sequence or one `chat.completion` object.

Only what an agent's model client sends is read: system and developer text, user text and
images, assistant text and tool calls, tool results, the tools offered, and the output limit.
Anything else in a request is refused with a `BadRequest` naming where it is, the way a hosted
endpoint answers 400.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from looping_core.agent import (
    ModelEvent,
    ModelRequest,
    ModelResponse,
    OutputRequest,
    StreamEnd,
    ToolSpec,
)
from looping_core.content import (
    AssistantMessage,
    ImageBlock,
    Message,
    RefusalBlock,
    RefusalChunk,
    SystemMessage,
    TextBlock,
    TextChunk,
    ThinkingChunk,
    ToolResultBlock,
    ToolResultMessage,
    ToolUseBlock,
    ToolUseChunk,
    Usage,
    UserMessage,
)

__all__ = [
    "BadRequest",
    "ChunkWriter",
    "completion",
    "model_request",
]

FINISH_REASONS = {
    "end": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "content_filter": "content_filter",
    "refusal": "stop",
}


class BadRequest(Exception):
    """A request this endpoint cannot read: `message` says what and where (`messages[2].role`)."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


def model_request(body: Any) -> tuple[ModelRequest, bool, bool]:
    """The request `body` asks for, whether it wants a stream, and whether the stream should end
    with a usage chunk (`stream_options.include_usage`)."""
    if not isinstance(body, Mapping):
        raise BadRequest("the body must be a JSON object")
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise BadRequest("messages: a non-empty list is required")
    system: list[str] = []
    messages: list[Message] = []
    for index, entry in enumerate(raw):
        where = f"messages[{index}]"
        if not isinstance(entry, Mapping):
            raise BadRequest(f"{where}: must be an object")
        role = entry.get("role")
        if role in ("system", "developer"):
            text = _text(entry.get("content"), where)
            if messages:
                messages.append(SystemMessage((TextBlock(text),)))
            else:  # the leading instructions are the request's system text
                system.append(text)
        elif role == "user":
            messages.append(UserMessage(_user_blocks(entry.get("content"), where)))
        elif role == "assistant":
            messages.append(_assistant(entry, where))
        elif role == "tool":
            _add_result(messages, entry, where)
        else:
            raise BadRequest(f"{where}.role: {role!r} is not system, user, assistant or tool")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("stream: must be true or false")
    options = body.get("stream_options") or {}
    include_usage = bool(isinstance(options, Mapping) and options.get("include_usage"))
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise BadRequest("max_completion_tokens: must be a positive integer")
    request = ModelRequest(
        messages=tuple(messages),
        system="\n\n".join(system),
        tools=_tools(body.get("tools")),
        max_output_tokens=limit,
        output=_output(body.get("response_format")),
    )
    return request, stream, include_usage


def _output(raw: Any) -> OutputRequest | None:
    """The structured output `response_format` asks for (`json_schema`); `None` for none, or
    for `text` and `json_object` (JSON of no schema)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or not isinstance(raw.get("type"), str):
        raise BadRequest("response_format: an object with a type is required")
    if raw["type"] != "json_schema":
        return None
    spec = raw.get("json_schema")
    if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
        raise BadRequest("response_format.json_schema: an object with a name is required")
    schema = spec.get("schema") or {}
    if not isinstance(schema, Mapping):
        raise BadRequest("response_format.json_schema.schema: must be a JSON Schema object")
    return OutputRequest(spec["name"], schema, str(spec.get("description") or ""), native=True)


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_text_part(part, f"{where}.content[{i}]") for i, part in enumerate(content))
    raise BadRequest(f"{where}.content: must be text or a list of text parts")


def _text_part(part: Any, where: str) -> str:
    if (
        isinstance(part, Mapping)
        and part.get("type") == "text"
        and isinstance(part.get("text"), str)
    ):
        return str(part["text"])
    raise BadRequest(f"{where}: only text parts are read here")


def _user_blocks(content: Any, where: str) -> tuple[TextBlock | ImageBlock, ...]:
    if isinstance(content, str):
        return (TextBlock(content),)
    if not isinstance(content, list):
        raise BadRequest(f"{where}.content: must be text or a list of parts")
    blocks: list[TextBlock | ImageBlock] = []
    for index, part in enumerate(content):
        at = f"{where}.content[{index}]"
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text":
            blocks.append(TextBlock(_text_part(part, at)))
        elif kind == "image_url":
            url = (part.get("image_url") or {}).get("url")
            if not isinstance(url, str) or not url:
                raise BadRequest(f"{at}.image_url.url: a URL is required")
            blocks.append(ImageBlock(media_type=_media_type(url), url=url))
        else:
            raise BadRequest(f"{at}.type: {kind!r} parts are not read here (text, image_url)")
    return tuple(blocks)


def _media_type(url: str) -> str:
    """An image's media type as a data URL says it (`image/png` when it does not)."""
    if url.startswith("data:") and ";" in url:
        return url[5 : url.index(";")] or "image/png"
    return "image/png"


def _assistant(entry: Mapping[str, Any], where: str) -> AssistantMessage:
    content = entry.get("content")
    blocks: list[TextBlock | ToolUseBlock] = []
    if content is not None:
        text = _text(content, where)
        if text:
            blocks.append(TextBlock(text))
    calls = entry.get("tool_calls") or []
    if not isinstance(calls, list):
        raise BadRequest(f"{where}.tool_calls: must be a list")
    for index, call in enumerate(calls):
        at = f"{where}.tool_calls[{index}]"
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            raise BadRequest(f"{at}.function: an object with name and arguments is required")
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except (TypeError, ValueError):
            raise BadRequest(f"{at}.function.arguments: not JSON") from None
        if not isinstance(arguments, dict):
            arguments = {}  # what the model sent was no object; its result said so
        try:
            blocks.append(ToolUseBlock(str(call.get("id")), str(function.get("name")), arguments))
        except ValueError as exc:
            raise BadRequest(f"{at}: {exc}") from None
    return AssistantMessage(tuple(blocks))


def _add_result(messages: list[Message], entry: Mapping[str, Any], where: str) -> None:
    """A tool message joins the tool results right before it (one message per round)."""
    call_id = entry.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise BadRequest(f"{where}.tool_call_id: the id of the call it answers is required")
    text = _text(entry.get("content") or "", where)
    result = ToolResultBlock(call_id, (TextBlock(text),) if text else ())
    if messages and isinstance(messages[-1], ToolResultMessage):
        messages[-1] = ToolResultMessage((*messages[-1].content, result))
    else:
        messages.append(ToolResultMessage((result,)))


def _tools(raw: Any) -> tuple[ToolSpec, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise BadRequest("tools: must be a list")
    specs = []
    for index, entry in enumerate(raw):
        function = entry.get("function") if isinstance(entry, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise BadRequest(f"tools[{index}].function: an object with a name is required")
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(parameters, Mapping):
            raise BadRequest(f"tools[{index}].function.parameters: must be a JSON Schema object")
        specs.append(ToolSpec(function["name"], str(function.get("description") or ""), parameters))
    return tuple(specs)


# -- responses ------------------------------------------------------------------------------------


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def usage_json(usage: Usage) -> dict[str, int]:
    prompt = usage.input_tokens + usage.cache_read_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": usage.output_tokens,
        "total_tokens": prompt + usage.output_tokens,
    }


def completion(response: ModelResponse, model: str) -> dict[str, Any]:
    """One `chat.completion` object for a whole response."""
    content = response.message.content
    text = "".join(b.text for b in content if isinstance(b, TextBlock))
    refusal = "".join(b.text for b in content if isinstance(b, RefusalBlock))
    calls = [
        {
            "id": b.id,
            "type": "function",
            "function": {"name": b.name, "arguments": json.dumps(dict(b.input))},
        }
        for b in content
        if isinstance(b, ToolUseBlock)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if refusal:
        message["refusal"] = refusal
    if calls:
        message["tool_calls"] = calls
    return {
        "id": completion_id(),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": response.model or model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": FINISH_REASONS.get(response.stop_reason, "stop"),
            }
        ],
        "usage": usage_json(response.message.usage or Usage()),
    }


@attrs.define
class ChunkWriter:
    """Turns a model's events into `chat.completion.chunk` objects, in order: a first chunk with
    the role, one per event, the finish reason, then the usage when asked for."""

    model: str
    include_usage: bool = False
    id: str = attrs.field(factory=completion_id)
    created: int = attrs.field(factory=lambda: int(time.time()))
    _started: bool = False

    def chunks(self, event: ModelEvent) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if not self._started:
            self._started = True
            out.append(self._chunk({"role": "assistant", "content": ""}))
        if isinstance(event, StreamEnd):
            finish = FINISH_REASONS.get(event.stop_reason, "stop")
            out.append(self._chunk({}, finish, model=event.model))
            if self.include_usage:
                usage = {**self._chunk({}), "choices": [], "usage": usage_json(event.usage)}
                out.append(usage)
            return out
        delta = _delta(event)
        if delta is not None:
            out.append(self._chunk(delta))
        return out

    def _chunk(
        self, delta: Mapping[str, Any], finish: str | None = None, model: str = ""
    ) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": model or self.model,
            "choices": [{"index": 0, "delta": dict(delta), "finish_reason": finish}],
        }


def _delta(event: ModelEvent) -> dict[str, Any] | None:
    if isinstance(event, TextChunk):
        return {"content": event.text}
    if isinstance(event, RefusalChunk):
        return {"refusal": event.text}
    if isinstance(event, ThinkingChunk):
        return {"reasoning_content": event.text} if event.text else None
    if isinstance(event, ToolUseChunk):
        call: dict[str, Any] = {"index": event.index, "function": {"arguments": event.arguments}}
        if event.id is not None:
            call["id"] = event.id
            call["type"] = "function"
        if event.name is not None:
            call["function"]["name"] = event.name
        return {"tool_calls": [call]}
    return None  # an image chunk has no Chat Completions form


def error_json(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": code}}


def sse(chunks: Sequence[Mapping[str, Any]]) -> bytes:
    return b"".join(f"data: {json.dumps(c, separators=(',', ':'))}\n\n".encode() for c in chunks)
