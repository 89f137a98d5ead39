"""Tool calls that wait for the caller's approval, served over both bindings and a stream: the
turn ends INPUT_REQUIRED with the pending calls as a data part; an approved call runs exactly
once, a denied one never; an answer twice, an answer naming unknown calls or leaving one
undecided, and a message that decides nothing change nothing and get a clear error."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import Message, Part, Role, SendMessageRequest, Task, TaskState
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Struct, Value

from looping_core.agent import ModelRequest
from looping_core.content import TextBlock, ToolResultMessage, UserMessage
from looping_core.modelserver import ModelServer
from looping_core.testing import FakeGateway, FunctionModel, ModelReply, ToolCall

from support import agents as test_agents
from support.bindings import BINDINGS, Binding, message
from support.serving import RunningAgent, serving

ASKS = {
    "pay big": [("bob", 250), ("carol", 50)],
    "pay two big": [("bob", 250), ("dan", 300)],
}


def _payer(request: ModelRequest) -> ModelReply | str:
    """Pays as the user's words say; then says what the latest results were (and what the
    caller said after them, if anything)."""
    last = request.messages[-1]
    said = "".join(b.text for b in last.content if isinstance(b, TextBlock))  # type: ignore[union-attr]
    if isinstance(last, UserMessage) and said in ASKS:
        calls = [ToolCall("pay", {"amount": amount, "to": to}) for to, amount in ASKS[said]]
        return ModelReply(tool_calls=tuple(calls))
    results = next(m for m in reversed(request.messages) if isinstance(m, ToolResultMessage))
    seen = " | ".join(r.text for r in results.content)  # over HTTP, results in a row are one
    return seen + (f" / heard: {said}" if isinstance(last, UserMessage) else "")


TENANT = """
[tenants.payer]
agent = "support.agents:PayingAgent"
allow_configless = true
max_wait_seconds = 10
[tenants.payer.card]
name = "Payer"
description = "Pays."
skills = [{{ id = "pay", name = "Pay", description = "Pays.", tags = ["pay"] }}]
[tenants.payer.model]
model = "m"
base_url = "{url}"
max_retries = 0
"""


@pytest.fixture
async def payer(gateway: FakeGateway) -> AsyncIterator[RunningAgent]:
    server = ModelServer(FunctionModel(_payer))
    await server.start()
    try:
        async with serving(gateway, extra=TENANT.format(url=server.base_url), grpc=True) as running:
            yield running
    finally:
        await server.stop()


@pytest.fixture(params=sorted(BINDINGS))
def binding(request: pytest.FixtureRequest, payer: RunningAgent, gateway: FakeGateway) -> Binding:
    return BINDINGS[request.param](payer, gateway)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as opened:
        yield opened


async def _send(binding: Binding, sent: dict[str, Any]) -> Any:
    params = {
        "message": sent,
        "configuration": {
            "returnImmediately": True,
            "taskPushNotificationConfig": binding.gateway.push_config(),
        },
    }
    return await binding.call("SendMessage", params, tenant="payer")


async def _state(binding: Binding, task_id: str, state: str) -> dict[str, Any]:
    for _ in range(500):
        answer = await binding.call("GetTask", {"id": task_id}, tenant="payer")
        task: dict[str, Any] = answer.result
        if task["status"]["state"] == state:
            ParseDict(task, Task())  # strictly, as the official SDK reads it
            return task
        await asyncio.sleep(0.01)
    raise AssertionError(f"never {state}: {task['status']}")


async def _waiting(binding: Binding, ask: str) -> tuple[str, list[dict[str, Any]]]:
    """Send `ask`; the task id and the calls it waits for."""
    started = await _send(binding, message(ask))
    assert started.ok, started.body
    task_id = started.result["task"]["id"]
    task = await _state(binding, task_id, "TASK_STATE_INPUT_REQUIRED")
    [part] = task["status"]["message"]["parts"]
    assert part["mediaType"] == "application/json"
    pending: list[dict[str, Any]] = part["data"]["toolApprovals"]["pending"]
    return task_id, pending


def _decision(task_id: str, *decisions: dict[str, Any], text: str = "") -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"data": {"toolApprovals": {"decisions": list(decisions)}}}]
    if text:
        parts.append({"text": text})
    return {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "taskId": task_id, "parts": parts}


def _paid(call_id: str) -> list[tuple[str, int, str]]:
    return [p for p in test_agents.PAID if p[0] == call_id]


async def test_an_approved_call_runs_once_and_the_others_ran_as_usual(binding: Binding) -> None:
    task_id, pending = await _waiting(binding, "pay big")
    assert [(p["tool"], p["arguments"]) for p in pending] == [("pay", {"amount": 250, "to": "bob"})]
    call_id = pending[0]["callId"]
    assert _paid(call_id) == []  # asked, not run
    assert any(p[1:] == (50, "carol") for p in test_agents.PAID)  # the small one ran at once
    answer = _decision(task_id, {"callId": call_id, "approve": True}, text="thanks")
    accepted = await _send(binding, answer)
    assert accepted.ok, accepted.body
    done = await _state(binding, task_id, "TASK_STATE_COMPLETED")
    assert _paid(call_id) == [(call_id, 250, "bob")]
    assert done["artifacts"][0]["parts"] == [
        {"text": "paid 50 to carol | paid 250 to bob / heard: thanks"}
    ]
    # The same approval again (another messageId): refused, nothing runs again.
    again = await _send(binding, _decision(task_id, {"callId": call_id, "approve": True}))
    assert again.reason in ("INVALID_PARAMS", "UNSUPPORTED_OPERATION"), again.body
    # And the very same message again (a retry): the first task, nothing started.
    retried = await _send(binding, answer)
    assert retried.ok, retried.body
    await asyncio.sleep(0.1)
    assert _paid(call_id) == [(call_id, 250, "bob")]


async def test_a_denied_call_never_runs_and_the_model_hears_why(binding: Binding) -> None:
    task_id, [pending] = await _waiting(binding, "pay big")
    call_id = pending["callId"]
    denial = {"callId": call_id, "approve": False, "reason": "too much"}
    assert (await _send(binding, _decision(task_id, denial))).ok
    done = await _state(binding, task_id, "TASK_STATE_COMPLETED")
    assert _paid(call_id) == []
    assert done["artifacts"][0]["parts"] == [
        {"text": "paid 50 to carol | not run: denied by the caller (too much)"}
    ]


async def test_pending_calls_are_decided_together_and_wrong_answers_change_nothing(
    binding: Binding,
) -> None:
    task_id, pending = await _waiting(binding, "pay two big")
    ids = [p["callId"] for p in pending]
    assert len(ids) == 2
    cases = [
        _decision(task_id, {"callId": ids[0], "approve": True}),  # one left undecided
        _decision(task_id, {"callId": "call_made_up", "approve": True}),  # unknown
        message("just text", taskId=task_id),  # decides nothing
        _decision(task_id, {"callId": ids[0], "approve": "yes"}),  # malformed
    ]
    for wrong in cases:
        refused = await _send(binding, wrong)
        assert refused.reason == "INVALID_PARAMS", refused.body
    task = await _state(binding, task_id, "TASK_STATE_INPUT_REQUIRED")
    assert len(task["history"]) == 2  # none of them was written
    both = _decision(
        task_id, {"callId": ids[0], "approve": True}, {"callId": ids[1], "approve": False}
    )
    assert (await _send(binding, both)).ok
    done = await _state(binding, task_id, "TASK_STATE_COMPLETED")
    assert done["artifacts"][0]["parts"] == [
        {"text": "paid 250 to bob | not run: denied by the caller"}
    ]
    assert [p[1:] for p in test_agents.PAID if p[0] in ids] == [(250, "bob")]


async def test_a_decision_for_a_new_task_is_refused(binding: Binding) -> None:
    sent = _decision("", {"callId": "c1", "approve": True})
    del sent["taskId"]
    refused = await _send(binding, sent)
    assert refused.reason == "INVALID_PARAMS", refused.body
    assert "params.message.taskId" in str(refused.body)


async def test_a_stream_sees_the_pending_calls(
    binding: Binding, session: aiohttp.ClientSession
) -> None:
    params = {
        "message": message("pay big"),
        "configuration": {"taskPushNotificationConfig": binding.gateway.push_config()},
    }
    events = await binding.stream("SendStreamingMessage", params, tenant="payer")
    last = events[-1]["statusUpdate"]["status"]
    assert last["state"] == "TASK_STATE_INPUT_REQUIRED"
    [part] = last["message"]["parts"]
    [pending] = part["data"]["toolApprovals"]["pending"]
    assert pending["arguments"] == {"amount": 250, "to": "bob"}


async def test_the_official_sdk_client_reads_the_pending_calls_and_answers_them(
    payer: RunningAgent, gateway: FakeGateway
) -> None:
    token = gateway.token(tenant="payer", aud=payer.endpoint)
    ask = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text="pay big")])
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
        client = await create_client(payer.base_url, ClientConfig(httpx_client=http))
        events = [
            e async for e in client.send_message(SendMessageRequest(tenant="payer", message=ask))
        ]
        status = events[-1].status_update.status
        assert status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        [part] = status.message.parts
        [pending] = MessageToDict(part.data)["toolApprovals"]["pending"]
        assert pending["arguments"] == {"amount": 250, "to": "bob"}
        decision = Struct()
        decision.update(
            {"toolApprovals": {"decisions": [{"callId": pending["callId"], "approve": True}]}}
        )
        answer = Message(
            message_id=str(uuid.uuid4()), role=Role.ROLE_USER, task_id=status.message.task_id,
            parts=[Part(data=Value(struct_value=decision))],
        )  # fmt: skip
        done = [
            e async for e in client.send_message(SendMessageRequest(tenant="payer", message=answer))
        ]
        await client.close()
    assert done[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert _paid(pending["callId"]) == [(pending["callId"], 250, "bob")]
