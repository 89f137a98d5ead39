"""A gRPC call is observed as an HTTP one is: a server span under the gateway's `traceparent`
(from the metadata) with the A2A and RPC attributes, failed with the reason of a refusal; and an
access line with the peer, the method, the status and the latency."""

from __future__ import annotations

import logging
import uuid

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from looping_core.testing import FakeGateway

from support.bindings import Grpc
from support.serving import RunningAgent

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


async def test_a_grpc_call_is_a_span_of_the_gateways_trace_and_an_access_line(
    grpc_agent: RunningAgent,
    gateway: FakeGateway,
    spans: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "looping_core.grpc.access")
    binding = Grpc(grpc_agent, gateway)
    headers = {**binding.headers("alice", "caller", None), "traceparent": TRACEPARENT}
    missing = str(uuid.uuid4())
    answer = await binding.exchange("GetTask", {"id": missing}, "alice", headers)
    assert answer.reason == "TASK_NOT_FOUND"
    [span] = [s for s in spans.get_finished_spans() if s.name == "a2a GetTask"]
    assert span.kind == SpanKind.SERVER
    assert span.context is not None
    assert format(span.context.trace_id, "032x") == TRACE_ID
    assert span.attributes is not None
    attributes = dict(span.attributes)
    expected = {"a2a.binding": "grpc", "a2a.method": "GetTask", "a2a.tenant": "alice",
                "rpc.system": "grpc"}  # fmt: skip
    assert {key: attributes[key] for key in expected} == expected
    assert span.status.status_code == StatusCode.ERROR
    assert span.status.description == "task_not_found"
    [line] = [r for r in caplog.records if r.name == "looping_core.grpc.access"]
    assert '"gRPC GetTask" NOT_FOUND' in line.getMessage()
    assert line.getMessage().startswith("ipv4:127.0.0.1:")
