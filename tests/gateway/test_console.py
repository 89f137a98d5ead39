"""The development console's API on the local gateway: it answers only the page it served (its
token, its own origin, JSON), calls the agent as a gateway does (a fresh token per call, only the
methods it offers), and adds what only the gateway knows (token claims, verified pushes)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from looping_core.gateway.internal import (
    CONSOLE_HEADER,
    ConsoleGateway,
    ConsoleTarget,
)
from looping_core.testing import FakeGateway, ed25519_private_jwk

from support.agents import RELEASE
from support.serving import RunningAgent, serving
from support.sse import Stream


@contextlib.asynccontextmanager
async def console(inspection: bool = True) -> AsyncIterator[tuple[ConsoleGateway, RunningAgent]]:
    async with (
        ConsoleGateway(ed25519_private_jwk("console-gateway")) as gateway,
        serving(gateway, server="inspection = true" if inspection else "") as agent,
    ):
        gateway.target = ConsoleTarget.of(agent.config)
        yield gateway, agent


async def api(
    gateway: ConsoleGateway,
    path: str,
    body: Any = None,
    *,
    token: str | None = "",
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    sent = dict(headers or {})
    if token is not None:
        sent[CONSOLE_HEADER] = token or gateway.console_token
    url = f"{gateway.origin}/console/api/{path}"
    async with aiohttp.ClientSession() as session:
        if body is None:
            request = session.get(url, headers=sent)
        elif isinstance(body, str):
            request = session.post(url, data=body, headers=sent)
        else:  # a file's bytes make it large: a stream, not one write of raw bytes
            sent["Content-Type"] = "application/json"
            request = session.post(url, data=io.BytesIO(json.dumps(body).encode()), headers=sent)
        async with request as response:
            stream = Stream(response)
            if stream.is_sse:
                events = await stream.rest()
                return response.status, [
                    {"event": e.event or "message", "id": e.id, "data": e.data} for e in events
                ]
            return response.status, await response.json()


async def test_the_page_is_served_with_a_policy_that_allows_only_its_origin() -> None:
    async with (
        console() as (gateway, _),
        aiohttp.ClientSession() as session,
    ):
        async with session.get(f"{gateway.origin}/console", allow_redirects=False) as moved:
            assert moved.status == 302
        async with session.get(f"{gateway.origin}/console/") as page:
            html = await page.text()
            policy = page.headers["Content-Security-Policy"]
        async with session.get(f"{gateway.origin}/console/console.js") as script:
            assert script.content_type == "text/javascript"
        for name in ("_console.py", "..%2F_console.py", "index.htm"):
            async with session.get(f"{gateway.origin}/console/{name}") as missing:
                assert missing.status == 404
    assert '<script src="console.js" defer></script>' in html
    assert "default-src 'none'" in policy
    assert "script-src 'self'" in policy
    assert "frame-ancestors 'none'" in policy


@pytest.mark.parametrize(
    ("token", "headers", "body", "status"),
    [
        (None, {}, None, 403),  # no console token
        ("wrong", {}, None, 403),
        ("", {"Host": "evil.example:80"}, None, 403),  # a rebound DNS name
        ("", {"Content-Type": "text/plain"}, "{}", 415),  # a form a page could post anywhere
    ],
)
async def test_the_api_answers_only_its_own_page(
    token: str | None, headers: dict[str, str], body: Any, status: int
) -> None:
    async with console() as (gateway, agent):
        fetched = len(gateway.pushes)
        path = "agents" if body is None else "send"
        answered, answer = await api(gateway, path, body, token=token, headers=headers)
        tasks = await agent.rpc(
            "ListTasks",
            {"tenant": "alice"},
            token=gateway.token(tenant="alice", aud=agent.endpoint),
        )
    assert answered == status
    assert "error" in answer
    assert len(gateway.pushes) == fetched
    assert tasks[2]["result"]["tasks"] == []  # nothing was sent


async def test_the_agents_cards_are_listed_with_their_signatures_verified() -> None:
    async with console() as (gateway, agent):
        status, answer = await api(gateway, "agents")
        other = FakeGateway()  # another key set: the cards' signatures do not verify with it
        async with other:
            gateway.agent_jwks_url = other.jwks_url
            _, unverified = await api(gateway, "agents")
    assert status == 200
    assert answer["endpoint"] == agent.endpoint
    by_tenant = {entry["tenant"]: entry for entry in answer["agents"]}
    assert set(by_tenant) == {"alice", "bob", "sdk"}
    assert by_tenant["alice"]["card"]["name"] == "Alice"
    assert by_tenant["alice"]["signature"] == {
        "verified": True,
        "kid": "agent-key-1",
        "jku": agent.base_url + "/.well-known/jwks.json",
    }
    assert all(not entry["signature"]["verified"] for entry in unverified["agents"])


async def test_a_turn_streams_through_the_console_and_its_push_is_shown_verified() -> None:
    async with console() as (gateway, agent):
        status, events = await api(gateway, "send", {"tenant": "alice", "text": "hello"})
        token = events[0]
        task_id = events[1]["data"]["result"]["task"]["id"]
        await gateway.wait_for_pushes_of([task_id])
        _, found = await api(gateway, f"inspect?tenant=alice&task={task_id}")
    assert status == 200
    assert token["event"] == "token"
    assert token["data"]["aud"] == agent.endpoint
    assert (token["data"]["tenant"], token["data"]["sub"]) == ("alice", "caller")
    states = [
        e["data"]["result"]["statusUpdate"]["status"]["state"]
        for e in events[1:]
        if "statusUpdate" in e["data"]["result"]
    ]
    assert states[-1] == "TASK_STATE_COMPLETED"
    assert [e["id"] for e in events[1:] if e["id"]] == sorted(
        (e["id"] for e in events[1:] if e["id"]), key=int
    )
    assert found["status"] == 200
    inspection = found["inspection"]
    assert inspection["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert inspection["owner"]["subject"] == "caller"
    [received] = found["received"]
    assert received["verified"] is True
    assert received["claims"]["jti"] == inspection["pushes"][0]["jti"]
    assert found["tokenClaims"]["aud"] == agent.base_url + "/_looping/inspect"


async def test_a_file_travels_as_a_part_with_its_bytes() -> None:
    data = base64.b64encode(b"\x89PNG fake").decode()
    async with console() as (gateway, _):
        file = {"name": "a.png", "mediaType": "image/png", "data": data}
        _, events = await api(gateway, "send", {"tenant": "alice", "text": "mirror", "file": file})
        refused, answer = await api(
            gateway, "send", {"tenant": "alice", "text": "x", "file": {"data": "not base64!"}}
        )
    artifacts = [e["data"]["result"]["artifactUpdate"] for e in events[1:] if
                 "artifactUpdate" in e["data"]["result"]]  # fmt: skip
    [mirrored] = [a["artifact"] for a in artifacts if a["artifact"]["name"] == "mirror"]
    assert mirrored["parts"] == [{"raw": data, "mediaType": "image/png", "filename": "a.png"}]
    assert (refused, answer["error"]) == (400, "file data is not base64")


async def test_a_file_over_the_limit_is_refused_before_any_call() -> None:
    data = base64.b64encode(b"x" * (4 * 1024 * 1024 + 1)).decode()
    async with console() as (gateway, agent):
        status, answer = await api(
            gateway, "send", {"tenant": "alice", "text": "big", "file": {"data": data}}
        )
        tasks = await agent.rpc(
            "ListTasks",
            {"tenant": "alice"},
            token=gateway.token(tenant="alice", aud=agent.endpoint),
        )
    assert (status, answer) == (413, {"error": "the file is larger than 4 MiB"})
    assert tasks[2]["result"]["tasks"] == []


async def test_decisions_from_the_page_must_answer_a_task_and_be_a_list() -> None:
    async with console() as (gateway, _):
        decision = [{"callId": "c1", "approve": True}]
        no_task = await api(gateway, "send", {"tenant": "alice", "decisions": decision})
        not_list = await api(
            gateway, "send", {"tenant": "alice", "taskId": "t1", "decisions": {"c1": True}}
        )
    assert no_task == (400, {"error": "decisions answer a task: name it (taskId)"})
    assert not_list == (400, {"error": "decisions must be a list of {callId, approve, reason}"})


async def test_an_input_required_turn_is_answered_on_the_same_task() -> None:
    async with console() as (gateway, _):
        _, first = await api(gateway, "send", {"tenant": "alice", "text": "ask"})
        task = first[1]["data"]["result"]["task"]
        _, second = await api(
            gateway,
            "send",
            {"tenant": "alice", "text": "this one", "taskId": task["id"],
             "contextId": task["contextId"]},
        )  # fmt: skip
    asked = [e["data"]["result"]["statusUpdate"]["status"]["state"] for e in first[1:]
             if "statusUpdate" in e["data"]["result"]]  # fmt: skip
    assert asked[-1] == "TASK_STATE_INPUT_REQUIRED"
    answered = second[1]["data"]["result"]
    assert answered["task"]["id"] == task["id"]
    assert second[-1]["data"]["result"]["statusUpdate"]["status"]["state"] == (
        "TASK_STATE_COMPLETED"
    )


async def test_a_running_task_is_canceled_and_other_methods_are_refused() -> None:
    async with console() as (gateway, _):
        sending = asyncio.create_task(api(gateway, "send", {"tenant": "bob", "text": "console-1"}))
        _, listed = await _wait_for_task(gateway, "bob")
        task_id = listed[0]["id"]
        status, canceled = await api(
            gateway, "call", {"tenant": "bob", "method": "CancelTask", "params": {"id": task_id}}
        )
        _, sent = await sending
        RELEASE.pop("console-1", None)
        _, refused = await api(
            gateway, "call", {"tenant": "bob", "method": "DeleteTaskPushNotificationConfig",
                              "params": {"id": task_id}},
        )  # fmt: skip
    assert status == 200
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert sent[-1]["data"]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert refused == {"error": "the console calls only CancelTask, GetTask, ListTasks"}


async def _wait_for_task(gateway: ConsoleGateway, tenant: str) -> tuple[int, list[Any]]:
    for _ in range(200):
        status, answer = await api(
            gateway, "call", {"tenant": tenant, "method": "ListTasks", "params": {}}
        )
        tasks = answer["result"]["tasks"]
        if tasks and tasks[0]["status"]["state"] == "TASK_STATE_WORKING":
            return status, tasks
        await asyncio.sleep(0.02)
    raise AssertionError("no task began")


async def test_subscribing_with_a_cursor_sends_only_what_came_after_it() -> None:
    async with console() as (gateway, _):
        sending = asyncio.create_task(api(gateway, "send", {"tenant": "bob", "text": "console-2"}))
        _, listed = await _wait_for_task(gateway, "bob")
        task_id = listed[0]["id"]
        following = asyncio.create_task(
            api(gateway, "subscribe", {"tenant": "bob", "taskId": task_id, "lastEventId": "1"})
        )
        await asyncio.sleep(0.2)
        RELEASE.setdefault("console-2", asyncio.Event()).set()
        _, sent = await sending
        _, resumed = await following
    ids = [int(e["id"]) for e in resumed[1:] if e["id"]]
    assert ids
    assert min(ids) > 1  # nothing at or before the cursor again
    assert resumed[-1]["data"]["result"]["statusUpdate"]["status"]["state"] == (
        "TASK_STATE_COMPLETED"
    )
    assert sent[-1]["data"]["result"]["statusUpdate"]["status"]["state"] == ("TASK_STATE_COMPLETED")


async def test_without_inspection_the_console_says_how_to_turn_it_on() -> None:
    async with console(inspection=False) as (gateway, _):
        _, events = await api(gateway, "send", {"tenant": "alice", "text": "hello"})
        task_id = events[1]["data"]["result"]["task"]["id"]
        _, found = await api(gateway, f"inspect?tenant=alice&task={task_id}")
    assert found["status"] == 404
    assert "[server] inspection = true" in found["inspection"]["error"]["message"]


async def test_a_tenant_the_agent_does_not_serve_is_refused_before_any_call() -> None:
    async with console() as (gateway, _):
        status, answer = await api(gateway, "send", {"tenant": "mallory", "text": "hi"})
    assert (status, answer) == (400, {"error": "choose one of the agent's tenants"})


async def test_an_agent_that_does_not_answer_is_named_not_a_500() -> None:
    async with ConsoleGateway(ed25519_private_jwk("console-gateway")) as gateway:
        gateway.target = ConsoleTarget(
            endpoint="http://127.0.0.1:9/a2a",  # the discard port: nothing listens
            inspection_url="http://127.0.0.1:9/_looping/inspect",
            tenants=("alice",),
        )
        gateway.agent_jwks_url = "http://127.0.0.1:9/.well-known/jwks.json"
        answers = [
            await api(gateway, "agents"),
            await api(gateway, "send", {"tenant": "alice", "text": "hi"}),
            await api(gateway, "call", {"tenant": "alice", "method": "GetTask",
                                        "params": {"id": "t"}}),
            await api(gateway, "inspect?tenant=alice&task=t"),
        ]  # fmt: skip
    for status, answer in answers:
        assert status == 502
        assert answer["error"].startswith("the agent at http://127.0.0.1:9/a2a does not answer")


@pytest.mark.parametrize("cursor", ["1\r\nX-Injected: 1", "-1", "abc", 1.5, True, "9" * 19])
async def test_a_cursor_that_is_not_an_event_number_is_refused_before_any_call(
    cursor: Any,
) -> None:
    """A CR or LF in `lastEventId` would split the header it is sent in (it was a 500): it is
    the page's mistake, a 400, and nothing is called (the agent here would answer 502)."""
    async with ConsoleGateway(ed25519_private_jwk("console-gateway")) as gateway:
        gateway.target = ConsoleTarget(
            endpoint="http://127.0.0.1:9/a2a",  # the discard port: a call would be a 502
            inspection_url="http://127.0.0.1:9/_looping/inspect",
            tenants=("alice",),
        )
        body = {"tenant": "alice", "taskId": "t-1"}
        refused = await api(gateway, "subscribe", {**body, "lastEventId": cursor})
        called = await api(gateway, "subscribe", {**body, "lastEventId": "12"})
    assert refused == (400, {"error": "lastEventId must be an event number (digits only)"})
    assert called[0] == 502  # a good cursor goes on to the agent
