"""Agents' telemetry in OpenTelemetry's GenAI conventions: a served turn with a tool call and a
delegation exports, over OTLP, `invoke_agent {agent}` with its `chat {model}` and `execute_tool
{tool}` spans inside, and each subagent's `invoke_agent` under the `delegate` call that ran it;
every name and key is one contracts/telemetry.json pins, and no caller's words are in a span
unless `[observability] capture_message_content` allows them."""

from __future__ import annotations

import asyncio
import json
import re
import signal
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from looping_core import _tracing
from looping_core.testing import FakeGateway, FakeModelServer, Reply, ed25519_private_jwk

from support import served
from support.otlp import otlp_receiver
from support.ports import unused_port
from support.served import write_config
from support.serving import keeper, serving

CONTRACT = json.loads((Path(__file__).parents[2] / "contracts" / "telemetry.json").read_text())
KEY = ed25519_private_jwk("agent-key-1")
KINDS = {1: "internal", 2: "server", 3: "client"}  # OTLP's span kinds
WORDS = ("remember milk", "Milk summary", "All done", '"text": "milk"', "p1/a")
"""What the caller, the model and the tools said: never in a span with content off (the last
is a subtask's id, which is no content: it is checked to be there, below)."""


@attrs.frozen
class Exported:
    name: str
    kind: str
    span_id: bytes
    parent_id: bytes
    attributes: Mapping[str, Any]


@pytest.fixture
async def model_server() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer() as server:
        yield server


def script(model_server: FakeModelServer) -> None:
    """A note, a plan of one subtask, the subagent's answer, the agent's answer."""
    subtask = {"id": "a", "type": "summarize-notes", "params": {"topic": "milk"}}
    model_server.replies += [
        Reply.tool_calls(("c1", "add_note", {"text": "milk"})),
        Reply.tool_calls(("p1", "delegate", {"subtasks": [subtask]})),
        Reply.text("Milk summary."),
        Reply.text("All done."),
    ]


def decoded(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(decoded(item) for item in value.array_value.values)
    return getattr(value, kind) if kind else None


async def collected_over_otlp(
    tmp_path: Path, gateway: FakeGateway, model_server: FakeModelServer
) -> list[Exported]:
    """The spans `looping serve` exported over OTLP/HTTP for one turn, to a receiver here."""
    async with otlp_receiver() as (endpoint, received):
        port = unused_port()
        more = f'[observability]\ntraces_endpoint = "{endpoint}"\n'
        more += keeper(model_server.base_url, agent="support.agents:PlanningAgent")
        config = write_config(tmp_path / "looping.toml", port, gateway, more=more)
        gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
        server = await served.serve(config, port, KEY)
        try:
            status, _ = await gateway.send_turn(
                f"http://127.0.0.1:{port}/a2a", tenant="keeper", text="remember milk"
            )
            assert status == 200
            [push] = await gateway.wait_for_pushes(1, timeout=30)
            assert push.json["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        finally:
            server.send_signal(signal.SIGTERM)
            await asyncio.to_thread(server.wait, 30)  # it flushes its spans as it stops
    return [
        Exported(
            span.name,
            KINDS[span.kind],
            span.span_id,
            span.parent_span_id,
            {a.key: decoded(a.value) for a in span.attributes},
        )
        for message in received
        for resource_spans in message.resource_spans
        for scope in resource_spans.scope_spans
        for span in scope.spans
    ]


def check_against_the_contract(span: Exported, *, content: bool) -> None:
    """A GenAI span's name, kind and keys are those contracts/telemetry.json pins."""
    operation = span.attributes["gen_ai.operation.name"]
    pinned = CONTRACT["spans"][operation]
    name = re.sub(r"\{([a-z_.]+)\}", lambda m: str(span.attributes[m.group(1)]), pinned["name"])
    assert span.name == name
    assert span.kind == pinned["kind"], span
    keys = set(span.attributes)
    assert set(pinned["required"]) <= keys, (span.name, set(pinned["required"]) - keys)
    allowed = {
        *pinned["required"],
        *pinned["optional"],
        *(pinned.get("content", ()) if content else ()),
    }
    assert {k for k in keys if k.startswith(("gen_ai.", "error."))} <= allowed, (span.name, keys)


async def test_a_served_turn_exports_its_genai_spans_as_the_contract_pins_them(
    tmp_path: Path, gateway: FakeGateway, model_server: FakeModelServer
) -> None:
    script(model_server)
    spans = await collected_over_otlp(tmp_path, gateway, model_server)
    by_id = {span.span_id: span for span in spans}

    def ancestors(span: Exported) -> list[str]:
        names = []
        while span.parent_id in by_id:
            span = by_id[span.parent_id]
            names.append(span.name)
        return names

    genai = [span for span in spans if "gen_ai.operation.name" in span.attributes]
    for span in genai:
        check_against_the_contract(span, content=False)
    names = sorted(span.name for span in genai)
    assert names == [
        "chat m",
        "chat m",
        "chat m",
        "chat m",
        "execute_tool add_note",
        "execute_tool delegate",
        "invoke_agent keeper",
        "invoke_agent summarize-notes",
    ]
    [turn] = [s for s in genai if s.name == "invoke_agent keeper"]
    assert turn.attributes["gen_ai.agent.name"] == "keeper"
    assert turn.attributes["gen_ai.provider.name"] == "openai"
    assert ancestors(turn)[-1] == "a2a SendMessage"  # under the A2A request's span
    context_id = turn.attributes["gen_ai.conversation.id"]
    assert all(s.attributes["gen_ai.conversation.id"] == context_id for s in genai)
    [delegate] = [s for s in genai if s.name == "execute_tool delegate"]
    [subagent] = [s for s in genai if s.name == "invoke_agent summarize-notes"]
    assert subagent.attributes["gen_ai.agent.id"] == "p1/a"
    assert by_id[subagent.parent_id] is delegate
    chats = [s for s in genai if s.name == "chat m"]
    under_subagent = [s for s in chats if subagent.name in ancestors(s)]
    assert len(under_subagent) == 1
    assert all("invoke_agent keeper" in ancestors(s) for s in [*chats, delegate, subagent])
    [note] = [s for s in genai if s.name == "execute_tool add_note"]
    assert note.attributes["gen_ai.tool.call.id"] == "c1"
    assert note.attributes["gen_ai.tool.type"] == "function"
    first = min(chats, key=lambda s: ancestors(s).__len__())
    assert first.attributes["gen_ai.usage.input_tokens"] > 0
    assert set(first.attributes["gen_ai.response.finish_reasons"]) <= {"stop", "tool_calls"}
    # Content off (the default): none of the caller's, the model's or the tools' words.
    for span in spans:
        for value in span.attributes.values():
            for words in WORDS[:-1]:
                assert words not in str(value), (span.name, value)


async def test_content_goes_into_spans_only_when_the_config_allows_it(
    gateway: FakeGateway, model_server: FakeModelServer, spans: InMemorySpanExporter
) -> None:
    model_server.replies += [
        Reply.tool_calls(("c1", "add_note", {"text": "milk"})),
        Reply.text("Noted."),
    ]
    extra = keeper(model_server.base_url) + "[observability]\ncapture_message_content = true\n"
    try:
        async with serving(gateway, extra=extra) as agent:
            await gateway.send_turn(agent.endpoint, tenant="keeper", text="remember milk")
            await gateway.wait_for_pushes(1)
    finally:
        _tracing.capture_content(False)  # process-wide: the next server's config says again
    finished = {span.name: span for span in spans.get_finished_spans()}
    first_chat = next(s for s in spans.get_finished_spans() if s.name == "chat m")
    attributes = dict(first_chat.attributes or {})
    sent = json.loads(str(attributes["gen_ai.input.messages"]))
    assert sent == [{"role": "user", "parts": [{"type": "text", "content": "remember milk"}]}]
    assert json.loads(str(attributes["gen_ai.system_instructions"]))[0]["type"] == "text"
    answered = json.loads(str(attributes["gen_ai.output.messages"]))
    assert answered[0]["finish_reason"] == "tool_calls"
    assert answered[0]["parts"][0]["name"] == "add_note"
    tool = dict(finished["execute_tool add_note"].attributes or {})
    assert json.loads(str(tool["gen_ai.tool.call.arguments"])) == {"text": "milk"}
    assert tool["gen_ai.tool.call.result"] == '{"id":1}'
