"""One suite, every binding: JSON-RPC, HTTP+JSON and gRPC answer the same methods from the same
table, with the same verification first and the same errors (JSON-RPC codes with HTTP 200;
`google.rpc.Status` with the binding's HTTP status, or as the gRPC status and its details).
Server-sent events are the JSON bindings' (gRPC streams have tests of their own)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from a2a.types import AgentCard as ProtoAgentCard
from a2a.types import SendMessageResponse, Task
from google.protobuf.json_format import ParseDict

from looping_core.testing import FakeGateway

from support import agents as test_agents
from support.bindings import BINDINGS, JSON_BINDINGS, Binding, message, read_sse_events
from support.serving import RunningAgent

ERROR_STATUS = {  # the HTTP status of each error in each binding
    "jsonrpc": {"TASK_NOT_FOUND": 200, "INVALID_PARAMS": 200, "UNSUPPORTED_OPERATION": 200,
                "TASK_NOT_CANCELABLE": 200, "METHOD_NOT_FOUND": 200, "UNAUTHENTICATED": 401,
                "VERSION_NOT_SUPPORTED": 200},
    "http+json": {"TASK_NOT_FOUND": 404, "INVALID_PARAMS": 400, "UNSUPPORTED_OPERATION": 400,
                  "TASK_NOT_CANCELABLE": 400, "METHOD_NOT_FOUND": 404, "UNAUTHENTICATED": 401,
                  "VERSION_NOT_SUPPORTED": 400},
    # gRPC status codes: NOT_FOUND 5, INVALID_ARGUMENT 3, FAILED_PRECONDITION 9,
    # UNAUTHENTICATED 16 (A2A 1.0.1 §5.4).
    "grpc": {"TASK_NOT_FOUND": 5, "INVALID_PARAMS": 3, "UNSUPPORTED_OPERATION": 9,
             "TASK_NOT_CANCELABLE": 9, "METHOD_NOT_FOUND": 5, "UNAUTHENTICATED": 16,
             "VERSION_NOT_SUPPORTED": 9},
}  # fmt: skip


@pytest.fixture(params=sorted(BINDINGS))
def binding(
    request: pytest.FixtureRequest, grpc_agent: RunningAgent, gateway: FakeGateway
) -> Binding:
    return BINDINGS[request.param](grpc_agent, gateway)


@pytest.fixture(params=JSON_BINDINGS)
def json_binding(
    request: pytest.FixtureRequest, grpc_agent: RunningAgent, gateway: FakeGateway
) -> Binding:
    return BINDINGS[request.param](grpc_agent, gateway)


def refused(binding: Binding, answer: Any, reason: str) -> None:
    assert answer.reason == reason, answer.body
    assert answer.status == ERROR_STATUS[binding.name][reason], answer.body


async def send(binding: Binding, text: str) -> dict[str, Any]:
    params = {
        "message": message(text),
        "configuration": {
            "returnImmediately": True,
            "taskPushNotificationConfig": binding.gateway.push_config(),
        },
    }
    answer = await binding.call("SendMessage", params)
    assert answer.ok, answer.body
    ParseDict(answer.result, SendMessageResponse())
    task: dict[str, Any] = answer.result["task"]
    return task


async def settled(binding: Binding, task_id: str, state: str) -> dict[str, Any]:
    for _ in range(500):
        task: dict[str, Any] = (await binding.call("GetTask", {"id": task_id})).result
        if task["status"]["state"] == state:
            return task
        await asyncio.sleep(0.01)
    raise AssertionError(f"never {state}")


async def test_a_turn_and_reading_it_back(binding: Binding) -> None:
    task = await send(binding, "hello")
    done = await settled(binding, task["id"], "TASK_STATE_COMPLETED")
    ParseDict(done, Task())
    assert done["artifacts"][0]["parts"] == [{"text": "hello (after 0)"}]
    trimmed = (await binding.call("GetTask", {"id": task["id"], "historyLength": 1})).result
    assert len(trimmed["history"]) == 1
    listed = await binding.call("ListTasks", {"pageSize": 5, "includeArtifacts": True})
    assert [t["id"] for t in listed.result["tasks"]] == [task["id"]]
    assert listed.result["tasks"][0]["artifacts"]
    filtered = await binding.call("ListTasks", {"status": "TASK_STATE_WORKING"})
    assert filtered.result.get("tasks", []) == []
    assert filtered.result.get("nextPageToken", "") == ""


async def test_cancel_and_its_errors(binding: Binding) -> None:
    hold = "bind-" + uuid.uuid4().hex
    configuration = {
        "returnImmediately": True,
        "taskPushNotificationConfig": binding.gateway.push_config(),
    }
    params = {"message": message(hold), "configuration": configuration}
    task = (await binding.call("SendMessage", params, tenant="bob")).result["task"]
    canceled = await binding.call("CancelTask", {"id": task["id"]}, tenant="bob")
    assert canceled.result["status"]["state"] == "TASK_STATE_CANCELED"
    again = await binding.call("CancelTask", {"id": task["id"]}, tenant="bob")
    refused(binding, again, "TASK_NOT_CANCELABLE")
    refused(binding, await binding.call("CancelTask", {"id": str(uuid.uuid4())}), "TASK_NOT_FOUND")
    test_agents.RELEASE.setdefault(hold, asyncio.Event()).set()


async def test_push_configs(binding: Binding) -> None:
    task = await send(binding, "hello")
    config = {**binding.gateway.push_config("second"), "id": "c2"}
    created = await binding.call(
        "CreateTaskPushNotificationConfig", {**config, "taskId": task["id"]}
    )
    assert created.result["id"] == "c2"
    got = await binding.call("GetTaskPushNotificationConfig", {"taskId": task["id"], "id": "c2"})
    assert got.result["url"] == config["url"]
    listed = await binding.call("ListTaskPushNotificationConfigs", {"taskId": task["id"]})
    assert sorted(c["id"] for c in listed.result["configs"]) == sorted([task["id"], "c2"])
    deleted = await binding.call(
        "DeleteTaskPushNotificationConfig", {"taskId": task["id"], "id": "c2"}
    )
    assert deleted.ok
    assert deleted.result in ({}, None)
    missing = await binding.call(
        "GetTaskPushNotificationConfig", {"taskId": task["id"], "id": "c2"}
    )
    refused(binding, missing, "TASK_NOT_FOUND")
    unknown_task = await binding.call(
        "GetTaskPushNotificationConfig", {"taskId": str(uuid.uuid4()), "id": "c2"}
    )
    refused(binding, unknown_task, "TASK_NOT_FOUND")


async def test_the_tenants_extended_card_lists_every_interface(binding: Binding) -> None:
    card = (await binding.call("GetExtendedAgentCard", {})).result
    ParseDict(card, ProtoAgentCard())
    interfaces = [
        (i["protocolBinding"], i["url"], i["tenant"]) for i in card["supportedInterfaces"]
    ]
    server = binding.agent.config.server
    assert interfaces == [
        ("JSONRPC", server.endpoint_url, "alice"),
        ("HTTP+JSON", server.rest_url, "alice"),
        ("GRPC", server.grpc_url, "alice"),
    ]
    assert server.grpc_url == f"127.0.0.1:{server.grpc_port}"


async def test_errors_are_the_same_in_every_binding(binding: Binding) -> None:
    refused(binding, await binding.call("GetTask", {"id": str(uuid.uuid4())}), "TASK_NOT_FOUND")
    mine = (await send(binding, "mine"))["id"]
    theirs = await binding.call("GetTask", {"id": mine}, subject="someone-else")
    refused(binding, theirs, "TASK_NOT_FOUND")
    negative = await binding.call("GetTask", {"id": mine, "historyLength": -1})
    refused(binding, negative, "INVALID_PARAMS")
    refused(binding, await binding.call("ListTasks", {"pageSize": 500}), "INVALID_PARAMS")
    bad_token = binding.gateway.token(tenant="alice", aud="https://elsewhere.example/a2a")
    refused(
        binding, await binding.call("GetTask", {"id": mine}, token=bad_token), "UNAUTHENTICATED"
    )
    # A token for one binding is not one for another: its audience is that binding's URL.
    for other in sorted(set(BINDINGS) - {binding.name}):
        other_binding = BINDINGS[other](binding.agent, binding.gateway)
        crossed = binding.gateway.token(tenant="alice", aud=other_binding.audience)
        answer = await binding.call("GetTask", {"id": mine}, token=crossed)
        refused(binding, answer, "UNAUTHENTICATED")


async def test_an_unauthenticated_request_learns_nothing_and_writes_nothing(
    json_binding: Binding,
) -> None:
    binding = json_binding
    params = {
        "message": message("hi"),
        "configuration": {"taskPushNotificationConfig": binding.gateway.push_config()},
    }
    for method, call_params in (("SendMessage", params), ("GetTask", {"id": "x"})):
        async with aiohttp.ClientSession() as session:
            verb, url, body = binding.stream_request(method, call_params, "alice")
            async with session.request(
                verb, url, json=body, headers={"A2A-Version": "1.0"}
            ) as response:
                assert response.status == 401
                assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert (await binding.call("ListTasks", {})).result["tasks"] == []


async def test_rest_specifics(agent: RunningAgent, gateway: FakeGateway) -> None:
    rest = BINDINGS["http+json"](agent, gateway)
    base = agent.config.server.rest_url
    headers = rest.headers("alice", "caller", None)
    async with aiohttp.ClientSession() as session:
        # No tenant in the path: refused after the token, naming where the tenant goes.
        async with session.post(base + "/message:send", json={}, headers=headers) as response:
            body = await response.json()
            assert response.status == 400
            assert "tenant goes first in the path" in body["error"]["message"]
        # An unknown route and a known one with the wrong verb: 404 METHOD_NOT_FOUND.
        for verb, path in (("GET", "/alice/nothing"), ("DELETE", "/alice/message:send")):
            async with session.request(verb, base + path, headers=headers) as response:
                body = await response.json()
                assert response.status == 404
                assert body["error"]["status"] == "NOT_FOUND"
                assert body["error"]["details"][0]["reason"] == "METHOD_NOT_FOUND"
        # A body that is not JSON, and one with a NaN: 400, nothing written.
        for data in (b"{not json", b'{"message": NaN}'):
            async with session.post(
                base + "/alice/message:send",
                data=data,
                headers={**headers, "Content-Type": "application/a2a+json"},
            ) as response:
                assert response.status == 400
        # Without a version header, 0.3 is meant: refused.
        async with session.get(
            base + "/alice/tasks", headers={"Authorization": headers["Authorization"]}
        ) as response:
            body = await response.json()
            assert response.status == 400
            assert body["error"]["details"][0]["reason"] == "VERSION_NOT_SUPPORTED"
        # The tenant of the path wins over one in the body.
        send = {
            "tenant": "bob",
            "message": message("hello"),
            "configuration": {"taskPushNotificationConfig": gateway.push_config()},
        }
        async with session.post(
            base + "/alice/message:send", json=send, headers=headers
        ) as response:
            task_id = (await response.json())["task"]["id"]
    assert (await rest.call("GetTask", {"id": task_id})).ok
    assert not (await rest.call("GetTask", {"id": task_id}, tenant="bob")).ok


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as opened:
        yield opened


async def test_streaming_and_resuming_in_both_json_bindings(
    json_binding: Binding, session: aiohttp.ClientSession
) -> None:
    binding = json_binding
    hold = "bind-stream-" + uuid.uuid4().hex
    params = {
        "message": message(hold),
        "configuration": {"taskPushNotificationConfig": binding.gateway.push_config()},
    }
    verb, url, body = binding.stream_request("SendStreamingMessage", params, "bob")
    headers = binding.headers("bob", "caller", None)
    async with session.request(verb, url, json=body, headers=headers) as response:
        assert response.content_type == "text/event-stream"
        first_line = await response.content.readline()
        assert first_line.startswith(b"id: ")
    task_id: str | None = None
    # The first stream was cut after its first event; resume from it, then let the turn end.
    state = (await binding.call("ListTasks", {}, tenant="bob")).result["tasks"][0]
    task_id = state["id"]
    test_agents.RELEASE.setdefault(hold, asyncio.Event()).set()
    verb, url, body = binding.stream_request("SubscribeToTask", {"id": task_id}, "bob")
    async with session.request(
        verb, url, json=body, headers={**headers, "Last-Event-ID": "0"}
    ) as response:
        events = await read_sse_events(response)
    results = [binding.event_result(data) for _, data in events]
    assert [int(seq or -1) for seq, _ in events] == list(range(1, len(events) + 1))
    assert "task" not in results[0]
    assert results[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
