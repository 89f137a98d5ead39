"""Traces: one SendMessage is one trace, from the gateway's `traceparent` through the token check,
the store, the turn, each model and tool call, to the push (which carries the trace on).

Spans are collected in memory by the OpenTelemetry SDK; core is given that provider for the test
only (`use_tracer_provider`), so no global provider is set for the rest of the suite.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from looping_core import _tracing
from looping_core.testing import FakeGateway, FakeModelServer, Reply, ed25519_private_jwk

from support import served
from support.otlp import otlp_receiver
from support.ports import unused_port
from support.served import write_config
from support.serving import keeper, serving

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
GATEWAY_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{GATEWAY_SPAN}-01"
KEY = ed25519_private_jwk("agent-key-1")


@pytest.fixture
async def model_server() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer() as server:
        yield server


def tenant_with_fallback(base_url: str) -> str:
    return keeper(base_url) + (
        f'[[tenants.keeper.model.fallback]]\nmodel = "backup"\nbase_url = "{base_url}"\n'
        "max_retries = 0\n"
    )


async def finished(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    """The spans once one named `name` has ended (the push's ends after the receiver answered)."""
    async with asyncio.timeout(10):
        while not any(span.name == name for span in exporter.get_finished_spans()):
            await asyncio.sleep(0.02)
    return list(exporter.get_finished_spans())


async def test_one_send_message_is_one_trace_from_the_gateway_to_the_push(
    gateway: FakeGateway, model_server: FakeModelServer, spans: InMemorySpanExporter
) -> None:
    model_server.replies += [
        Reply.failure(503),  # the primary model: the turn falls back
        Reply.tool_calls(("c1", "add_note", {"text": "milk"})),
        Reply.text("Noted."),
    ]
    async with serving(gateway, extra=tenant_with_fallback(model_server.base_url)) as agent:
        status, body = await gateway.send_turn(
            agent.endpoint, tenant="keeper", text="remember milk",
            headers={"traceparent": TRACEPARENT, "X-Request-Id": "req-42"},
        )  # fmt: skip
        assert status == 200
        task_id = body["result"]["task"]["id"]
        [push] = await gateway.wait_for_pushes(1)
        collected = await finished(spans, "push")

    assert push.json["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    # The push carries the trace on to the gateway.
    assert push.headers["traceparent"].split("-")[1] == TRACE_ID

    trace = [span for span in collected if f"{span.context.trace_id:032x}" == TRACE_ID]
    by_id = {span.context.span_id: span for span in trace}

    def parent_of(span: ReadableSpan) -> ReadableSpan | None:
        return by_id.get(span.parent.span_id) if span.parent is not None else None

    def under(span: ReadableSpan, ancestor: ReadableSpan) -> bool:
        found: ReadableSpan | None = span
        while found is not None:
            found = parent_of(found)
            if found is ancestor:
                return True
        return False

    [request] = [span for span in trace if span.name == "a2a SendMessage"]
    assert request.kind is SpanKind.SERVER
    assert request.parent is not None
    assert request.parent.is_remote
    assert f"{request.parent.span_id:016x}" == GATEWAY_SPAN
    assert (
        dict(request.attributes or {}).items()
        >= {
            "a2a.method": "SendMessage",
            "a2a.binding": "jsonrpc",
            "a2a.tenant": "keeper",
            "a2a.task_id": task_id,
            "looping.request_id": "req-42",
            "http.response.status_code": 200,
        }.items()
    )
    [verify] = [span for span in trace if span.name == "verify gateway token"]
    assert parent_of(verify) is request
    stores = [span for span in trace if span.name == "store"]
    assert any(parent_of(span) is request for span in stores)
    assert any(under(span, request) and span is not request for span in stores)

    [turn] = [span for span in trace if span.name == "invoke_agent keeper"]
    assert parent_of(turn) is request  # accepted by that request, it outlives it
    assert turn.attributes is not None
    assert turn.attributes["a2a.task_id"] == task_id
    models = [span for span in trace if span.name.startswith("chat ")]
    assert [(m.attributes or {}).get("gen_ai.request.model") for m in models] == [
        "m",
        "backup",
        "m",
    ]
    assert [m.status.status_code for m in models] == [
        StatusCode.ERROR,
        StatusCode.UNSET,
        StatusCode.UNSET,
    ]
    assert all(under(span, turn) for span in models)
    assert (models[1].attributes or {})["gen_ai.usage.input_tokens"] > 0
    [tool] = [span for span in trace if span.name == "execute_tool add_note"]
    assert (tool.attributes or {})["gen_ai.tool.name"] == "add_note"
    assert under(tool, turn)

    [delivery] = [span for span in trace if span.name == "push"]
    assert delivery.kind is SpanKind.CLIENT
    assert under(delivery, turn)  # queued by the turn's terminal write, sent later
    assert (delivery.attributes or {})["looping.push.outcome"] == "delivered"
    assert f"{delivery.context.span_id:016x}" == push.headers["traceparent"].split("-")[2]

    # Never a token in a span: the gateway's is a JWT (it starts with "eyJ").
    for span in collected:
        for value in (span.attributes or {}).values():
            assert "eyJ" not in str(value), (span.name, value)


async def test_a_refused_token_ends_its_spans_as_errors_with_the_check(
    gateway: FakeGateway, spans: InMemorySpanExporter
) -> None:
    async with serving(gateway) as agent:
        token = gateway.token(tenant="bob", aud="https://elsewhere.example/a2a")
        async with agent.session.post(
            agent.endpoint,
            json={"jsonrpc": "2.0", "id": 1, "method": "GetTask",
                  "params": {"tenant": "bob", "id": "t"}},
            headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0",
                     "traceparent": TRACEPARENT},
        ) as response:  # fmt: skip
            assert response.status == 401
    collected = spans.get_finished_spans()
    [request] = [span for span in collected if span.name == "a2a GetTask"]
    [verify] = [span for span in collected if span.name == "verify gateway token"]
    assert request.status.status_code is StatusCode.ERROR
    assert (request.attributes or {})["a2a.method"] == "GetTask"
    assert verify.status.status_code is StatusCode.ERROR
    [event] = verify.events
    assert "audience" in str((event.attributes or {}).get("exception.message"))
    in_trace = [span.name for span in collected if f"{span.context.trace_id:032x}" == TRACE_ID]
    # The key set was fetched to check the signature; nothing was looked up in the store.
    assert sorted(in_trace) == ["a2a GetTask", "jwks fetch", "verify gateway token"]


def test_without_opentelemetry_a_span_is_a_shared_stand_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as if it were not installed
    _tracing._otel.cache_clear()
    try:
        assert not _tracing.available()
        with _tracing.span("anything", kind="server", carrier={"traceparent": TRACEPARENT}) as a:
            a.set(x=1)
            a.rename("other")
            a.fail("no")
            with _tracing.span("nested") as b:
                assert b is a
        headers: dict[str, str] = {}
        _tracing.inject(headers)
        assert headers == {}
        assert _tracing.traceparent() is None
    finally:
        monkeypatch.undo()
        _tracing._otel.cache_clear()
    assert _tracing.available()


async def test_a_served_process_sends_its_spans_to_the_otlp_endpoint(
    tmp_path: Path, gateway: FakeGateway
) -> None:
    """`[observability] traces_endpoint`: `looping serve` exports over OTLP/HTTP and flushes what
    is batched when it stops; the receiver here is a plain HTTP server decoding the protobuf."""
    async with otlp_receiver() as (endpoint, received):
        port = unused_port()
        more = f'[observability]\ntraces_endpoint = "{endpoint}"\nservice_name = "traced-agents"\n'
        config = write_config(tmp_path / "looping.toml", port, gateway, more=more)
        gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
        released = tmp_path / "released"
        released.touch()
        server = await served.serve(config, port, KEY)
        try:
            status, _ = await gateway.send_turn(
                f"http://127.0.0.1:{port}/a2a", tenant="bob", text=f"file:{released}",
                headers={"traceparent": TRACEPARENT},
            )  # fmt: skip
            assert status == 200
            [push] = await gateway.wait_for_pushes(1)
        finally:
            server.send_signal(signal.SIGTERM)
            # Waited for without blocking this loop: the collector answers the final export.
            await asyncio.to_thread(server.wait, 30)
    assert push.headers["traceparent"].split("-")[1] == TRACE_ID
    names = set()
    for message in received:
        for resource_spans in message.resource_spans:
            attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            assert attributes["service.name"] == "traced-agents"
            for scope in resource_spans.scope_spans:
                names |= {s.name for s in scope.spans if s.trace_id.hex() == TRACE_ID}
    assert {"a2a SendMessage", "verify gateway token", "store", "invoke_agent bob", "push"} <= names


async def test_a_task_id_that_is_no_id_never_reaches_a_span_or_a_log_line(
    gateway: FakeGateway, spans: InMemorySpanExporter
) -> None:
    """A request's task id is said where its lines and spans are about it, once it is a valid
    id: one with a line break (log injection) or over the length limit is not repeated."""
    async with serving(gateway) as agent:
        for task_id in ("no-such-task", "evil\nlevel=error forged", "x" * 5000):
            status, _ = await gateway.call(
                agent.endpoint, "GetTask", {"tenant": "bob", "id": task_id}, tenant="bob"
            )
            assert status == 200
    requests = [span for span in spans.get_finished_spans() if span.name == "a2a GetTask"]
    assert [(span.attributes or {}).get("a2a.task_id") for span in requests] == [
        "no-such-task",
        None,
        None,
    ]
