"""Structured answers served: over both bindings and a stream, an agent that answers in a schema
ends its task with one data part (a wrong first answer corrected on the way), fails with
`OUTPUT_INVALID` when no answer fits, asks a native model with the schema, refuses a caller
that accepts no JSON before writing anything, and the official SDK reads the data part."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import Message, Part, Role, SendMessageRequest, Task, TaskState
from google.protobuf.json_format import MessageToDict, ParseDict

from looping_core.agent import ModelRequest
from looping_core.content import TextBlock, ToolResultMessage, UserMessage
from looping_core.errors import ProblemsError
from looping_core.modelserver import ModelServer
from looping_core.testing import (
    AgentHarness,
    FakeGateway,
    FakeModelServer,
    FunctionModel,
    ModelReply,
    Reply,
)
from looping_core.testing import ToolCall as ScriptedCall

from support import agents as test_agents
from support.bindings import BINDINGS, Binding, message
from support.serving import RunningAgent, serving

GOOD = {"summary": "printer on fire", "priority": 1}
WRONG = {"summary": "printer on fire", "priority": "high"}
DATA_PART = {"data": GOOD, "mediaType": "application/json"}


def _triage(request: ModelRequest) -> ModelReply:
    """Answers GOOD, but WRONG first when asked "wrong first" and always when asked "never"
    (by the answer tool over HTTP, where tool mode is not said; natively when asked so)."""
    asked = next(
        "".join(b.text for b in m.content if isinstance(b, TextBlock))
        for m in reversed(request.messages)
        if isinstance(m, UserMessage) and not m.content[0].text.startswith("invalid")  # type: ignore[union-attr]
    )
    corrected = isinstance(request.messages[-1], ToolResultMessage | UserMessage) and (
        request.messages[-1] != request.messages[0]
    )
    value = WRONG if "never" in asked or ("wrong first" in asked and not corrected) else GOOD
    if request.output is not None:  # native: the schema came as response_format
        return ModelReply(output=value)
    return ModelReply(tool_calls=(ScriptedCall("final_answer", value),))


def _tenants(base_url: str) -> str:
    tenant = """
[tenants.{id}]
agent = "support.agents:TriageAgent"
plugins = ["example-notes"]
allow_configless = true
max_wait_seconds = 10
[tenants.{id}.card]
name = "Triage"
description = "Triages tickets."
skills = [{{ id = "t", name = "T", description = "Triages.", tags = ["t"] }}]
[tenants.{id}.model]
model = "m"
base_url = "{url}"
max_retries = 0
[tenants.{id}.loop]
output_retries = 1
output_mode = "{mode}"
"""
    return '[plugins]\nenabled = ["example-notes"]\n' + "".join(
        tenant.format(id=name, url=base_url, mode=mode)
        for name, mode in (("triage", "tool"), ("native", "native"))
    )


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as opened:
        yield opened


@pytest.fixture
async def triage(gateway: FakeGateway) -> AsyncIterator[tuple[RunningAgent, FunctionModel]]:
    model = FunctionModel(_triage)
    server = ModelServer(model)
    await server.start()
    try:
        async with serving(gateway, extra=_tenants(server.base_url), grpc=True) as running:
            yield running, model
    finally:
        await server.stop()


@pytest.fixture(params=sorted(BINDINGS))
def binding(
    request: pytest.FixtureRequest,
    triage: tuple[RunningAgent, FunctionModel],
    gateway: FakeGateway,
) -> Binding:
    return BINDINGS[request.param](triage[0], gateway)


async def _send(binding: Binding, text: str, tenant: str = "triage", **configuration: Any) -> Any:
    params = {
        "message": message(text),
        "configuration": {
            "returnImmediately": True,
            "taskPushNotificationConfig": binding.gateway.push_config(),
            **configuration,
        },
    }
    return await binding.call("SendMessage", params, tenant=tenant)


async def _ended(binding: Binding, text: str, state: str, tenant: str = "triage") -> Any:
    answer = await _send(binding, text, tenant)
    assert answer.ok, answer.body
    task_id = answer.result["task"]["id"]
    for _ in range(500):
        task = (await binding.call("GetTask", {"id": task_id}, tenant=tenant)).result
        if task["status"]["state"] == state:
            ParseDict(task, Task())  # strictly, as the official SDK reads it
            return task
        await asyncio.sleep(0.01)
    raise AssertionError(f"never {state}")


async def test_a_wrong_answer_is_corrected_and_the_task_ends_with_one_data_part(
    binding: Binding, triage: tuple[RunningAgent, FunctionModel]
) -> None:
    test_agents.OUTPUTS.clear()
    done = await _ended(binding, "wrong first, please", "TASK_STATE_COMPLETED")
    [artifact] = done["artifacts"]
    assert artifact["name"] == "answer"
    assert artifact["parts"] == [DATA_PART]
    assert done["history"][-1]["parts"] == [DATA_PART]
    assert [test_agents.Triage("printer on fire", 1)] == test_agents.OUTPUTS
    _, model = triage
    corrected = model.requests[-1].messages[-1]
    assert isinstance(corrected, ToolResultMessage)
    assert corrected.content[0].text == (
        "invalid answer at priority: 'high' is not of type 'integer'"
    )


async def test_an_answer_that_never_fits_fails_the_task_with_output_invalid(
    binding: Binding,
) -> None:
    done = await _ended(binding, "never fits", "TASK_STATE_FAILED")
    assert done["status"]["message"]["metadata"] == {"reason": "OUTPUT_INVALID"}
    assert done["metadata"]["looping.outputProblem"] == (
        "invalid answer at priority: 'high' is not of type 'integer'"
    )
    assert "artifacts" not in done


async def test_a_native_tenant_asks_with_the_schema_and_reads_the_text(
    binding: Binding, triage: tuple[RunningAgent, FunctionModel]
) -> None:
    done = await _ended(binding, "wrong first", "TASK_STATE_COMPLETED", tenant="native")
    assert done["artifacts"][0]["parts"] == [DATA_PART]
    _, model = triage
    [first, second] = model.requests[-2:]
    assert first.output is not None
    assert first.output.native
    assert first.output.name == "Triage"
    assert first.output.schema["required"] == ["summary", "priority"]
    assert second.messages[-1] == UserMessage(
        (TextBlock("invalid answer at priority: 'high' is not of type 'integer'"),)
    )


async def test_a_caller_that_accepts_no_json_is_refused_and_nothing_is_written(
    binding: Binding,
) -> None:
    refused = await _send(binding, "hi", acceptedOutputModes=["text/plain", "image/*"])
    assert refused.reason == "CONTENT_TYPE_NOT_SUPPORTED", refused.body
    # JSON-RPC errors travel with HTTP 200; HTTP+JSON 400; gRPC INVALID_ARGUMENT (3).
    assert refused.status == {"jsonrpc": 200, "http+json": 400, "grpc": 3}[binding.name]
    listed = await binding.call("ListTasks", {}, tenant="triage")
    assert listed.result.get("tasks", []) == []
    accepted = await _send(binding, "hi", acceptedOutputModes=["text/plain", "application/*"])
    assert accepted.ok, accepted.body


async def test_a_stream_carries_the_data_part(
    binding: Binding, gateway: FakeGateway, session: aiohttp.ClientSession
) -> None:
    params = {"message": message("stream it")}
    events = await binding.stream("SendStreamingMessage", params, tenant="triage")
    artifacts = [e["artifactUpdate"]["artifact"] for e in events if "artifactUpdate" in e]
    assert [a["parts"] for a in artifacts] == [[DATA_PART]]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_the_official_sdk_client_reads_the_data_part(
    triage: tuple[RunningAgent, FunctionModel], gateway: FakeGateway
) -> None:
    running, _ = triage
    sent = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text="hi")])
    token = gateway.token(tenant="triage", aud=running.endpoint)
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
        client = await create_client(running.base_url, ClientConfig(httpx_client=http))
        events = [
            event
            async for event in client.send_message(
                SendMessageRequest(tenant="triage", message=sent)
            )
        ]
        await client.close()
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    [artifact] = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    [part] = artifact.parts
    assert part.media_type == "application/json"
    assert MessageToDict(part.data) == GOOD


async def test_the_openai_provider_sends_the_schema_as_response_format() -> None:
    server = FakeModelServer([Reply.text(json.dumps(GOOD))])
    await server.start()
    harness = AgentHarness(
        "support.agents:TriageAgent",
        plugins=["example-notes"],
        config=f"""
[tenants.agent.model]
model = "m"
base_url = "{server.base_url}"
max_retries = 0
[tenants.agent.loop]
output_mode = "native"
""",
    )
    try:
        await harness.start()
        task = await harness.result(await harness.send("the printer is on fire"))
        assert task["artifacts"][0]["parts"] == [DATA_PART]
    finally:
        await harness.stop()
        await server.stop()
    [body] = server.requests
    format_ = body["response_format"]
    assert format_["type"] == "json_schema"
    assert format_["json_schema"]["name"] == "Triage"
    assert format_["json_schema"]["description"] == "A ticket's triage."
    assert format_["json_schema"]["strict"] is False
    assert format_["json_schema"]["schema"] == {
        "description": "A ticket's triage.",
        "type": "object",
        "properties": {"summary": {"type": "string"}, "priority": {"type": "integer"}},
        "required": ["summary", "priority"],
        "additionalProperties": False,
    }


async def test_a_card_that_does_not_list_json_stops_the_server_naming_the_key() -> None:
    harness = AgentHarness(
        None,
        model=FunctionModel(_triage),
        config="""
[plugins]
enabled = ["example-notes"]
[tenants.agent]
agent = "support.agents:TriageAgent"
[tenants.agent.card]
name = "T"
description = "T."
output_modes = ["text/plain"]
skills = [{ id = "t", name = "T", description = "T.", tags = ["t"] }]
""",
    )
    with pytest.raises(ProblemsError) as stopped:
        await harness.start()
    await harness.stop()
    assert str(stopped.value) == (
        "tenants.agent.card.output_modes: TriageAgent answers with application/json, which "
        "the card does not list; add it (the default lists text/plain and application/json)"
    )
