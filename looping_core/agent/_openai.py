"""The built-in `openai` provider: any OpenAI-compatible Chat Completions endpoint (OpenAI, vLLM,
Ollama, llama.cpp, LM Studio, OpenRouter, Azure...) through the official `openai` package.

It maps the content vocabulary to Chat Completions messages and back: text, images, audio and
documents in; streamed text, refusals, tool calls (by index) and reasoning text (where a server
sends it, as `reasoning_content` or `reasoning`) out, then usage (cached and reasoning tokens
where reported). Failures become `ModelError`s: connection, timeout, 429 and 5xx, after the
client's own retries, are `ModelUnavailable` (a fallback model may answer); a request over the
context window is `ContextTooLong`.

`openai` is an extra (`pip install 'looping-core[openai]'`): it is imported when a model is made.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from looping_core.agent._model import (
    ContextTooLong,
    ModelError,
    ModelEvent,
    ModelRequest,
    ModelUnavailable,
    OutputRequest,
    StreamEnd,
)
from looping_core.content import (
    AssistantMessage,
    AudioBlock,
    DataBlock,
    DocumentBlock,
    ImageBlock,
    Message,
    RefusalBlock,
    RefusalChunk,
    SystemMessage,
    TextBlock,
    TextChunk,
    ThinkingChunk,
    ToolResultMessage,
    ToolUseBlock,
    ToolUseChunk,
    Usage,
    UserMessage,
)
from looping_core.contract import ModelProvider
from looping_core.errors import LoopingError

__all__ = ["MissingExtra", "OpenAIChatModel", "chat_messages", "openai_provider"]

_STOP_REASONS = {
    "stop": "end",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "content_filter",
}


class MissingExtra(LoopingError):
    """A provider needs a package that is not installed."""


def _openai() -> Any:
    try:
        import openai  # noqa: PLC0415 - an optional extra, imported when a model is made
    except ImportError:
        raise MissingExtra(
            "the openai model provider needs the openai package: pip install 'looping-core[openai]'"
        ) from None
    return openai


class OpenAIChatModel:
    """A `ChatModel` on an OpenAI-compatible Chat Completions endpoint.

    `api_key` may be empty for a local server that takes none. `max_retries` and `timeout` are
    the client's own (retries with backoff on connection errors, 429 and 5xx). The client sends
    over aiohttp (its `DefaultAioHttpClient`), the HTTP stack the rest of looping-core runs on:
    httpx's own pool asks every idle connection whether the server closed it before each
    request, which at 16 concurrent turns was a fifth of a turn's CPU. `client` replaces it all.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str = "",
        timeout: float = 60.0,
        max_retries: int = 2,
        options: Mapping[str, Any] | None = None,
        client: Any = None,
    ) -> None:
        self.model = model
        self._options = dict(options or {})
        self._openai = _openai()
        self._client = client or self._openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or "no-key",  # the client insists on one; local servers ignore it
            timeout=timeout,
            max_retries=max_retries,
            http_client=self._openai.DefaultAioHttpClient(),
        )

    @property
    def label(self) -> str:
        return f"openai:{self.model}"

    async def aclose(self) -> None:
        """Close the client's connections (when the agent that owns this model stops)."""
        await self._client.close()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        try:
            messages = chat_messages(request)
        except ValueError as exc:  # content this API has no form for (audio by URL, ...)
            raise ModelError(self.label, f"the request cannot be sent: {exc}") from None
        arguments: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
            **self._options,
            **request.options,
        }
        if request.tools:
            arguments["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": dict(tool.input_schema),
                    },
                }
                for tool in request.tools
            ]
        if request.output is not None and request.output.native:
            arguments["response_format"] = _response_format(request.output)
        if request.max_output_tokens is not None:
            arguments["max_completion_tokens"] = request.max_output_tokens
        finish: str | None = None
        usage = Usage()
        served = self.model
        try:
            chunks = await self._client.chat.completions.create(**_prepared(arguments))
            async for chunk in chunks:
                served = chunk.model or served
                if chunk.usage is not None:
                    usage = _usage(chunk.usage)
                for choice in chunk.choices[:1]:
                    for event in _events(choice.delta):
                        yield event
                    finish = choice.finish_reason or finish
        except self._openai.APIError as exc:
            raise self._error(exc) from None
        except ValueError as exc:  # a chunk that is not JSON
            raise ModelError(self.label, f"malformed stream: {type(exc).__name__}") from None
        if finish is None:
            raise ModelUnavailable(self.label, "the stream ended without a finish reason")
        stop = _STOP_REASONS.get(finish)
        if stop is None:
            raise ModelError(self.label, f"unknown finish reason {finish!r}")
        yield StreamEnd(usage=usage, stop_reason=stop, model=served)

    def _error(self, exc: Exception) -> ModelError:
        openai = self._openai
        if isinstance(exc, openai.APITimeoutError) and not _refused(exc):
            return ModelUnavailable(self.label, "the request timed out")
        if isinstance(exc, openai.APIConnectionError):
            return ModelUnavailable(self.label, "the connection failed")
        status = getattr(exc, "status_code", None)
        if isinstance(exc, openai.RateLimitError) or (status is not None and status >= 500):
            return ModelUnavailable(self.label, f"the endpoint answered HTTP {status}")
        code = getattr(exc, "code", None)
        text = str(getattr(exc, "message", "") or exc).lower()
        if code == "context_length_exceeded" or "context length" in text:
            return ContextTooLong(self.label, "the request is longer than the context window")
        if status is not None:
            return ModelError(self.label, f"the endpoint refused the request (HTTP {status})")
        return ModelError(self.label, f"the response could not be read ({type(exc).__name__})")


def _response_format(output: OutputRequest) -> dict[str, Any]:
    """Structured output as Chat Completions asks for it. Not `strict`: that mode takes only a
    subset of JSON Schema (every property required, no defaults); the loop checks the answer
    against the whole schema itself."""
    schema: dict[str, Any] = {"name": output.name, "schema": dict(output.schema), "strict": False}
    if output.description:
        schema["description"] = output.description
    return {"type": "json_schema", "json_schema": schema}


def _refused(exc: BaseException) -> bool:
    """Whether a connection error, however the transport classed it, was an OS error other
    than a timeout (refused, reset, no route). The aiohttp transport reports a refused
    connection as a connect timeout; the OS error it wraps says what happened."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, OSError) and not isinstance(cause, TimeoutError):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def openai_provider() -> ModelProvider:
    """The provider as the `model_providers` hook contributes it: `factory(model, options)`
    with the options of `OpenAIChatModel` (`base_url`, `api_key`, `timeout`, ...)."""
    return ModelProvider(
        name="openai",
        description="Any OpenAI-compatible Chat Completions endpoint.",
        factory=lambda model, options: OpenAIChatModel(model, **options),
    )


# -- requests -------------------------------------------------------------------------------------

_REQUEST_OPTIONS = frozenset({"extra_headers", "extra_query", "extra_body", "timeout"})
"""`create`'s keyword arguments that shape the HTTP request rather than its JSON body."""


def _prepared(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """`create`'s arguments with the body in `extra_body`: the same request on the wire.

    `create` runs every argument through the client's transform (TypedDict-driven aliases and
    formats), which walks the whole conversation at every call: a third of a turn's CPU. Ours is
    plain JSON already, so only `model` and `stream` go through it; `messages` is an empty
    placeholder that `extra_body` replaces, since the client merges `extra_body` over the body it
    built, its keys winning (`_merge_mappings` in `_base_client`: so from the floor, 1.89, to
    today). Transport, retries, authentication and errors stay the client's own.
    """
    body = {key: value for key, value in arguments.items() if key not in _REQUEST_OPTIONS}
    request = {key: value for key, value in arguments.items() if key in _REQUEST_OPTIONS}
    body.update(request.pop("extra_body", None) or {})
    model, stream = body.pop("model"), body.pop("stream")
    return {"model": model, "messages": [], "stream": stream, "extra_body": body, **request}


def chat_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """The request's system text and messages as Chat Completions messages."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    for message in request.messages:
        messages.extend(_message(message))
    return messages


def _message(message: Message) -> list[dict[str, Any]]:
    if isinstance(message, SystemMessage):
        return [{"role": "system", "content": "".join(block.text for block in message.content)}]
    if isinstance(message, UserMessage):
        return [{"role": "user", "content": [_user_part(block) for block in message.content]}]
    if isinstance(message, AssistantMessage):
        return [_assistant(message)]
    if isinstance(message, ToolResultMessage):
        return _tool_results(message)
    raise TypeError(f"not a message: {type(message).__name__}")  # pragma: no cover


def _user_part(block: Any) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ImageBlock):
        url = block.url or _data_url(block.media_type, block.data or b"")
        return {"type": "image_url", "image_url": {"url": url}}
    if isinstance(block, AudioBlock):
        if block.data is None:
            raise ValueError("Chat Completions takes audio as bytes, not by URL")
        audio_format = block.media_type.rpartition("/")[2].removeprefix("x-")
        encoded = base64.b64encode(block.data).decode()
        return {"type": "input_audio", "input_audio": {"data": encoded, "format": audio_format}}
    if isinstance(block, DocumentBlock):
        if block.text is not None:
            return {"type": "text", "text": block.text}
        if block.data is None:
            raise ValueError(
                "Chat Completions takes documents as bytes or text, not by URL; fetch it (a tool "
                "can) or give its extracted text"
            )
        data_url = _data_url(block.media_type, block.data)
        return {"type": "file", "file": {"filename": block.name, "file_data": data_url}}
    if isinstance(block, DataBlock):
        return {"type": "text", "text": _json_text(block.value)}
    raise TypeError(f"a user message cannot hold a {type(block).__name__}")  # pragma: no cover


def _assistant(message: AssistantMessage) -> dict[str, Any]:
    text = "".join(
        block.text for block in message.content if isinstance(block, TextBlock | RefusalBlock)
    )
    calls = [
        {
            "id": block.id,
            "type": "function",
            "function": {"name": block.name, "arguments": json.dumps(dict(block.input))},
        }
        for block in message.content
        if isinstance(block, ToolUseBlock)
    ]
    entry: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        entry["tool_calls"] = calls
    return entry  # reasoning is not sent back: Chat Completions has no field for it


def _tool_results(message: ToolResultMessage) -> list[dict[str, Any]]:
    """One `tool` message per result, with its text. Chat Completions takes nothing but text
    in a tool message, so the results' images, audio and documents by bytes follow them as one
    user message of those parts alone, in the results' order (no words added)."""
    entries: list[dict[str, Any]] = []
    media: list[dict[str, Any]] = []
    for result in message.content:
        texts: list[str] = []
        for block in result.content:
            if _is_text(block):
                texts.append(_tool_text(block))
            else:
                media.append(_user_part(block))
        entries.append(
            {"role": "tool", "tool_call_id": result.tool_use_id, "content": "".join(texts)}
        )
    if media:
        entries.append({"role": "user", "content": media})
    return entries


def _is_text(block: Any) -> bool:
    return isinstance(block, TextBlock | DataBlock) or (
        isinstance(block, DocumentBlock) and block.text is not None
    )


def _tool_text(block: Any) -> str:
    if isinstance(block, TextBlock):
        return block.text
    if isinstance(block, DocumentBlock) and block.text is not None:
        return block.text
    return _json_text(block.value)


def _json_text(value: Any) -> str:
    """Structured data as the model reads it: compact JSON, as it came (no words added)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


# -- responses ------------------------------------------------------------------------------------


def _events(delta: Any) -> list[ModelEvent]:
    events: list[ModelEvent] = []
    extra = getattr(delta, "model_extra", None) or {}
    reasoning = extra.get("reasoning_content") or extra.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        events.append(ThinkingChunk(text=reasoning))
    if delta.content:
        events.append(TextChunk(delta.content))
    if getattr(delta, "refusal", None):
        events.append(RefusalChunk(delta.refusal))
    for call in delta.tool_calls or ():
        function = call.function
        events.append(
            ToolUseChunk(
                index=call.index,
                id=call.id or None,
                name=(function.name or None) if function else None,
                arguments=(function.arguments or "") if function else "",
            )
        )
    return events


def _usage(usage: Any) -> Usage:
    prompt = usage.prompt_tokens or 0
    output = usage.completion_tokens or 0
    prompt_details = getattr(usage, "prompt_tokens_details", None)
    output_details = getattr(usage, "completion_tokens_details", None)
    cached = min(prompt, getattr(prompt_details, "cached_tokens", None) or 0)
    reasoning = min(output, getattr(output_details, "reasoning_tokens", None) or 0)
    return Usage(
        input_tokens=prompt - cached,
        cache_read_tokens=cached,
        output_tokens=output,
        reasoning_tokens=reasoning,
        context_tokens=prompt,
    )
