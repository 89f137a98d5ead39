"""The model runtime's seam: what an agent asks a chat model, what streams back, and what can go
wrong, independent of any provider.

A `ChatModel` takes a `ModelRequest` (system text, messages and tool specs in the content
vocabulary) and streams `content` chunks, then one `StreamEnd` with the usage and why it stopped.
`respond` folds that stream with the content `Accumulator` into one `ModelResponse`.
`respond_with_fallback` tries an ordered list of models: a retryable failure (the endpoint is
down, slow, rate-limited or failing: `ModelUnavailable`) moves to the next one; anything else is
the model's answer or a mistake in the request, and no other model would do better.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from looping_core import _logs, _metrics, _tracing
from looping_core.agent._prices import Prices
from looping_core.agent._telemetry import (
    FINISH_REASONS,
    input_messages,
    output_messages,
    record_call,
    system_instructions,
)
from looping_core.content import (
    Accumulator,
    AccumulatorError,
    AssistantMessage,
    Chunk,
    Message,
    TextChunk,
    ToolUseBlock,
    Usage,
)
from looping_core.errors import LoopingError

__all__ = [
    "STOP_REASONS",
    "ChatModel",
    "ContextTooLong",
    "ModelError",
    "ModelEvent",
    "ModelRequest",
    "ModelResponse",
    "ModelUnavailable",
    "OutputRequest",
    "StreamEnd",
    "TextSink",
    "ToolSpec",
    "respond",
    "respond_with_fallback",
]

_log = logging.getLogger("looping_core.agent")

STOP_REASONS = frozenset({"end", "tool_use", "max_tokens", "refusal", "content_filter"})
"""Why a response stopped: it was done, it calls tools, it hit its output limit, it declined, or a
provider's filter cut it."""


@attrs.frozen
class ToolSpec:
    """A tool as a model sees it: its name, what it does, and its arguments' JSON Schema."""

    name: str
    description: str
    input_schema: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object", "properties": {}}
    )


@attrs.frozen
class OutputRequest:
    """The form the answer must take: a JSON object fitting `schema`. `native`: ask the
    provider's own structured output (`response_format` on the `openai` provider), the answer
    being the response's text; otherwise the answer is a call of the tool named `name` (one of
    the request's `tools`)."""

    name: str
    schema: Mapping[str, Any]
    description: str = ""
    native: bool = False


@attrs.frozen
class ModelRequest:
    """One call to a chat model. `system` is the app's text (core writes none)."""

    messages: tuple[Message, ...]
    system: str = ""
    tools: tuple[ToolSpec, ...] = ()
    max_output_tokens: int | None = None
    options: Mapping[str, Any] = attrs.field(factory=dict)
    """Provider options passed through as they are (temperature, seed, ...)."""
    output: OutputRequest | None = None
    """The structured answer the agent wants, when it declares one."""


@attrs.frozen
class StreamEnd:
    """The last event of a stream: what the response used and why it stopped."""

    usage: Usage
    stop_reason: str
    model: str = ""
    """The model that answered, as the provider names it."""


ModelEvent = Chunk | StreamEnd


@attrs.frozen
class ModelResponse:
    """A whole response: the assistant message (its usage included), why it stopped, and which
    of the models tried served it (`served_by`, a `ChatModel.label`)."""

    message: AssistantMessage
    stop_reason: str
    served_by: str
    model: str = ""
    bad_arguments: Mapping[str, str] = attrs.field(factory=dict)
    """Tool calls whose arguments were not a JSON object (call id -> what was wrong): their
    blocks carry empty arguments, and the tool loop answers them with an error result."""

    @property
    def tool_calls(self) -> tuple[ToolUseBlock, ...]:
        return tuple(block for block in self.message.content if isinstance(block, ToolUseBlock))


class ChatModel(Protocol):
    """A chat model. Implementations map the content vocabulary to their API and back."""

    @property
    def label(self) -> str:
        """Which model this is, for records and logs (`openai:gpt-4o-mini`); never a secret."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Chunks as they arrive, then exactly one `StreamEnd`. Raises `ModelError`."""

    async def aclose(self) -> None:
        """Release the model's connections; it is not used again."""


class ModelError(LoopingError):
    """A model call failed. `retryable`: another model (or a later try) may succeed."""

    retryable = False

    def __init__(self, label: str, reason: str) -> None:
        self.label = label
        self.reason = reason
        super().__init__(f"model {label}: {reason}")


class ModelUnavailable(ModelError):
    """The endpoint failed to answer: connection, timeout, rate limit (429) or a 5xx, after the
    client's own retries."""

    retryable = True


class ContextTooLong(ModelError):
    """The request does not fit the model's context window (the caller compacts and retries)."""


TextSink = Callable[[str, bool], Awaitable[None]]
"""Where a response's text goes while it streams: `(text, starts)`, `starts` true for the first
text of a response (a fallback model's answer starts again: what came before is void)."""


async def respond(
    model: ChatModel,
    request: ModelRequest,
    on_text: TextSink | None = None,
    prices: Prices | None = None,
) -> ModelResponse:
    """The whole response of one model: its stream folded into an assistant message (with its
    cost, when `prices` has the model). `on_text` is given its text as it arrives."""
    provider, _, name = model.label.partition(":")
    started = time.monotonic()
    with _tracing.gen_ai_span(
        "chat", name, kind="client", gen_ai__provider__name=provider, gen_ai__request__model=name
    ) as span:
        if _tracing.capturing_content():
            span.set(
                gen_ai__input__messages=input_messages(request.messages),
                gen_ai__system_instructions=system_instructions(request.system),
            )
        try:
            response = await _respond(model, request, on_text)
        except ModelError as exc:
            error = type(exc).__name__
            span.set(error__type=error)
            _metrics.MODEL_CALLS.inc(provider=provider, model=name, outcome="error")
            record_call(provider, name, None, time.monotonic() - started, error)
            raise
        usage = response.message.usage
        _metrics.MODEL_CALLS.inc(provider=provider, model=name, outcome="ok")
        record_call(provider, name, usage, time.monotonic() - started)
        if usage is not None:
            _metrics.MODEL_TOKENS.inc(
                usage.input_tokens, provider=provider, model=name, kind="input"
            )
            _metrics.MODEL_TOKENS.inc(
                usage.output_tokens, provider=provider, model=name, kind="output"
            )
            span.set(
                gen_ai__usage__input_tokens=usage.total_input_tokens,
                gen_ai__usage__output_tokens=usage.output_tokens,
                gen_ai__usage__cache_read__input_tokens=usage.cache_read_tokens or None,
                gen_ai__usage__cache_creation__input_tokens=usage.cache_creation_tokens or None,
            )
        span.set(
            gen_ai__response__model=response.model or None,
            gen_ai__response__finish_reasons=(
                FINISH_REASONS.get(response.stop_reason, response.stop_reason),
            ),
        )
        if _tracing.capturing_content():
            span.set(
                gen_ai__output__messages=output_messages(response.message, response.stop_reason)
            )
        cost = prices.cost(model.label, usage) if prices else None
        if cost is None:
            return response
        tenant = _logs.current().get("tenant", "")
        _metrics.MODEL_COST.inc(cost, tenant=tenant, provider=provider, model=name)
        return attrs.evolve(response, message=attrs.evolve(response.message, cost=cost))


async def _respond(
    model: ChatModel, request: ModelRequest, on_text: TextSink | None
) -> ModelResponse:
    accumulator = Accumulator(keep_bad_arguments=True)
    end: StreamEnd | None = None
    starts = True
    try:
        async for event in model.stream(request):
            if end is not None:
                raise ModelError(model.label, "the stream went on after its end")
            if isinstance(event, StreamEnd):
                end = event
            else:
                accumulator.feed(event)
                if on_text is not None and isinstance(event, TextChunk) and event.text:
                    await on_text(event.text, starts)
                    starts = False
        blocks = accumulator.blocks()
    except AccumulatorError as exc:
        raise ModelError(model.label, f"malformed stream: {exc}") from None
    if end is None:
        raise ModelUnavailable(model.label, "the stream ended before the response did")
    if end.stop_reason not in STOP_REASONS:
        raise ModelError(model.label, f"unknown stop reason {end.stop_reason!r}")
    return ModelResponse(
        message=AssistantMessage(tuple(blocks), usage=end.usage),
        stop_reason=end.stop_reason,
        served_by=model.label,
        model=end.model,
        bad_arguments=dict(accumulator.bad_arguments),
    )


async def respond_with_fallback(
    models: Sequence[ChatModel],
    request: ModelRequest,
    on_text: TextSink | None = None,
    prices: Prices | None = None,
) -> ModelResponse:
    """The first model's response, or, when it is unavailable, the next one's, in order (each
    priced by `prices`, when it has the model).

    Raises the last `ModelUnavailable` when none could answer, and any other `ModelError` at
    once (a request another model would refuse too, or a model's malformed answer).
    """
    if not models:
        raise ValueError("respond_with_fallback needs at least one model")
    last: ModelUnavailable | None = None
    for model in models:
        try:
            return await respond(model, request, on_text, prices)
        except ModelUnavailable as exc:
            _log.warning("%s; trying the next model", exc)
            if model is not models[-1]:
                provider, _, name = model.label.partition(":")
                _metrics.MODEL_FALLBACKS.inc(provider=provider, model=name)
            last = exc
    assert last is not None
    raise last
