"""Traces: OpenTelemetry spans when its API is installed (the `otel` extra), nothing otherwise.

Core uses only the API. Spans go where the application's tracer provider sends them (or the one
`looping serve` installs for `[observability] traces_endpoint`, or one given to
`use_tracer_provider`). Until a provider is set, and without the package, `span()` hands out one
shared do-nothing span: no span objects, no context switches, no header parsing. A trace crosses
processes through the W3C `traceparent` header: taken from the gateway's request, and put on
pushes.

Attribute values are ids, names and counts, never a token or a key, and message content only
when the deployment allows it (`capture_content`, off by default: it is the caller's data).

Agents' spans follow OpenTelemetry's GenAI semantic conventions (`gen_ai_span`: `invoke_agent
{agent}`, `chat {model}`, `execute_tool {tool}`); their names and keys are pinned in
contracts/telemetry.json.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import AbstractContextManager
from types import SimpleNamespace
from typing import Any

__all__ = [
    "Span",
    "available",
    "capture_content",
    "capturing_content",
    "conversation",
    "current",
    "gen_ai_span",
    "inject",
    "recording",
    "span",
    "traceparent",
    "use_tracer_provider",
]

Attribute = str | int | float | bool | tuple[str, ...] | None


class Span:
    """The span of a `with span(...)` block (or a stand-in that does nothing)."""

    __slots__ = ("_span",)

    def __init__(self, real: Any = None) -> None:
        self._span = real

    @property
    def recording(self) -> bool:
        """Whether anything is recorded (attributes worth computing)."""
        return self._span is not None

    def set(self, **attributes: Attribute) -> None:
        """Add attributes (dots in names are spelled `__`: `a2a__method`)."""
        if self._span is not None:
            self._span.set_attributes(_attributes(attributes))

    def rename(self, name: str) -> None:
        if self._span is not None:
            self._span.update_name(name)

    def fail(self, description: str) -> None:
        """Mark the span as an error (for failures that are answered, not raised)."""
        if self._span is not None:
            otel = _otel()
            self._span.set_status(otel.trace.Status(otel.trace.StatusCode.ERROR, description))


_NO_SPAN = Span()


@functools.cache
def _otel() -> Any:
    try:
        from opentelemetry import propagate, trace  # noqa: PLC0415 - optional: the `otel` extra
    except ImportError:
        return None
    kinds = {
        "internal": trace.SpanKind.INTERNAL,
        "server": trace.SpanKind.SERVER,
        "client": trace.SpanKind.CLIENT,
    }
    return SimpleNamespace(
        trace=trace,
        propagate=propagate,
        tracer=trace.get_tracer("looping_core"),
        chosen=None,
        kinds=kinds,
    )


def available() -> bool:
    """Whether the OpenTelemetry API is installed."""
    return _otel() is not None


def recording() -> bool:
    """Whether spans are recorded now (a provider is set): what a hot path asks before it
    computes attributes."""
    otel = _otel()
    return otel is not None and _tracer(otel) is not None


def use_tracer_provider(provider: Any) -> None:
    """Send core's spans to `provider` instead of the global one (`None`: the global one
    again), for a program or a test that must not set the process-wide provider."""
    otel = _otel()
    if otel is None:
        raise RuntimeError("OpenTelemetry is not installed: pip install 'looping-core[otel]'")
    otel.chosen = provider.get_tracer("looping_core") if provider is not None else None


def _tracer(otel: Any) -> Any:
    """The tracer to use, or `None` while no provider is set (the API's default is a proxy)."""
    if otel.chosen is not None:
        return otel.chosen
    # The API's global, read directly: `get_tracer_provider()` also looks in the environment,
    # which costs more than the rest of a span that records nothing.
    provider = getattr(otel.trace, "_TRACER_PROVIDER", _UNKNOWN)
    if provider is _UNKNOWN:  # another API version: ask it
        provider = otel.trace.get_tracer_provider()
    if provider is None or isinstance(provider, otel.trace.ProxyTracerProvider):
        return None
    return otel.tracer


_UNKNOWN = object()


class _Inactive:
    """The context manager of every span while nothing records: one object, no generator."""

    def __enter__(self) -> Span:
        return _NO_SPAN

    def __exit__(self, *exc_info: object) -> None:
        return None


_INACTIVE = _Inactive()


def span(
    name: str,
    *,
    kind: str = "internal",
    carrier: Mapping[str, str] | None = None,
    **attributes: Attribute,
) -> AbstractContextManager[Span]:
    """A span around the block, a child of the current one, or of the context in `carrier`
    (headers holding a `traceparent`) when given. An exception leaving the block marks it."""
    return _start(name, kind, carrier, attributes)


def _start(
    name: str, kind: str, carrier: Mapping[str, str] | None, attributes: Mapping[str, Attribute]
) -> AbstractContextManager[Span]:
    otel = _otel()
    tracer = _tracer(otel) if otel is not None else None
    if tracer is None:
        return _INACTIVE
    context = otel.propagate.extract(carrier) if carrier is not None else None
    return _recording(
        tracer.start_as_current_span(
            name, context=context, kind=otel.kinds[kind], attributes=_attributes(attributes)
        )
    )


@contextlib.contextmanager
def _recording(started: AbstractContextManager[Any]) -> Iterator[Span]:
    with started as real:
        yield Span(real)


_CONVERSATION: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "looping_gen_ai_conversation", default=None
)
_CAPTURE = [False]


def conversation(conversation_id: str | None) -> None:
    """Say, for the rest of this context (a turn), which conversation its GenAI spans are of
    (`gen_ai.conversation.id`: the A2A context id)."""
    _CONVERSATION.set(conversation_id)


def capture_content(enabled: bool) -> None:
    """Whether GenAI spans carry message content (`[observability] capture_message_content`)."""
    _CAPTURE[0] = enabled


def capturing_content() -> bool:
    return _CAPTURE[0] and recording()


def gen_ai_span(
    operation: str, target: str, *, kind: str = "internal", **attributes: Attribute
) -> AbstractContextManager[Span]:
    """A GenAI span (`{operation} {target}`: `chat gpt-4o`), with `gen_ai.operation.name` and
    this context's `gen_ai.conversation.id`."""
    name = f"{operation} {target}" if target else operation
    own = {"gen_ai__operation__name": operation, "gen_ai__conversation__id": _CONVERSATION.get()}
    return _start(name, kind, None, {**own, **attributes})


def current() -> Span:
    """The span of the block this runs in (a stand-in when nothing records)."""
    otel = _otel()
    if otel is None or _tracer(otel) is None:
        return _NO_SPAN
    real = otel.trace.get_current_span()
    return Span(real) if real.is_recording() else _NO_SPAN


def traceparent() -> str | None:
    """The current span's W3C `traceparent`, to continue the trace elsewhere (or `None`)."""
    carrier: dict[str, str] = {}
    inject(carrier)
    return carrier.get("traceparent")


def inject(headers: MutableMapping[str, str]) -> None:
    """Put the current trace context in outgoing `headers`."""
    if recording():
        _otel().propagate.inject(headers)


def _attributes(
    attributes: Mapping[str, Attribute],
) -> dict[str, str | int | float | bool | tuple[str, ...]]:
    return {
        name.replace("__", "."): value for name, value in attributes.items() if value is not None
    }
