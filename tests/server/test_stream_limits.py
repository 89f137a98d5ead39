"""What one caller's streams may hold: a client that stops reading is disconnected after the
write deadline (its slot given back), a caller may hold only so many streams at once, and a
stream ends cleanly when its token expires (the client resumes with a new one)."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
import uuid

import pytest

from looping_core.testing import FakeGateway

from support import agents as test_agents
from support.serving import FLOOD, STREAM_LIMITS, RunningAgent, serving
from support.sse import open_stream, streaming_send

TENANTS = FLOOD
LIMITS = STREAM_LIMITS


def release(key: str) -> None:
    test_agents.RELEASE.setdefault(key, asyncio.Event()).set()


async def test_a_client_that_stops_reading_is_disconnected_and_its_slot_given_back(
    gateway: FakeGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "looping_core.server")
    async with serving(gateway, extra=LIMITS + TENANTS) as agent:
        key = uuid.uuid4().hex
        params = streaming_send(gateway, f"flood:{key}")
        envelope = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                    "params": {"tenant": "flood", **params}}  # fmt: skip
        body = json.dumps(envelope).encode()
        token = gateway.token(tenant="flood", aud=agent.endpoint)
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # and it never reads
        client.connect(("127.0.0.1", agent.config.server.port))
        client.setblocking(False)
        head = (
            f"POST /a2a HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {token}\r\nA2A-Version: 1.0\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        await asyncio.get_running_loop().sock_sendall(client, head + body)
        try:
            async with asyncio.timeout(30):
                while "took no event" not in caplog.text:
                    await asyncio.sleep(0.05)
        finally:
            client.close()
        # Its slot is free again: the caller opens two more streams (the cap) at once.
        task_id = await first_task_id(agent, gateway)
        async with (
            open_stream(agent.endpoint, gateway, "SubscribeToTask", {"id": task_id},
                        tenant="flood") as one,
            open_stream(agent.endpoint, gateway, "SubscribeToTask", {"id": task_id},
                        tenant="flood") as two,
        ):  # fmt: skip
            assert (one.status, two.status) == (200, 200)
            release(key)


async def first_task_id(agent: RunningAgent, gateway: FakeGateway) -> str:
    token = gateway.token(tenant="flood", aud=agent.endpoint)
    envelope = {"jsonrpc": "2.0", "id": 2, "method": "ListTasks", "params": {"tenant": "flood"}}
    headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}
    async with agent.session.post(agent.endpoint, json=envelope, headers=headers) as response:
        tasks = (await response.json())["result"]["tasks"]
    task_id: str = tasks[0]["id"]
    return task_id


async def test_a_caller_holds_at_most_its_cap_of_streams(gateway: FakeGateway) -> None:
    async with serving(gateway, extra=LIMITS) as agent:
        key = "hold-" + uuid.uuid4().hex
        async with open_stream(
            agent.endpoint, gateway, "SendStreamingMessage", streaming_send(gateway, key),
            tenant="bob",
        ) as first:  # fmt: skip
            task_id = (await first.next()).result["task"]["id"]  # type: ignore[union-attr]
            subscribe = {"id": task_id}
            async with open_stream(
                agent.endpoint, gateway, "SubscribeToTask", subscribe, tenant="bob"
            ) as second:
                assert second.status == 200
                async with open_stream(
                    agent.endpoint, gateway, "SubscribeToTask", subscribe, tenant="bob"
                ) as third:
                    assert third.status == 429
                    error = (await third.json())["error"]
                    assert error["data"][0]["reason"] == "TOO_MANY_STREAMS"
                    assert error["data"][0]["metadata"] == {"maxStreams": "2"}
                before = len(await tasks_of(agent, gateway))
                async with open_stream(  # a send beyond the cap accepts nothing
                    agent.endpoint, gateway, "SendStreamingMessage",
                    streaming_send(gateway, "hold-other"), tenant="bob",
                ) as refused:  # fmt: skip
                    assert refused.status == 429
                assert len(await tasks_of(agent, gateway)) == before
                async with open_stream(  # another caller has slots of its own
                    agent.endpoint, gateway, "SubscribeToTask", subscribe, tenant="bob",
                    subject="someone-else",
                ) as other:  # fmt: skip
                    assert other.status == 200  # (task not found for them: a JSON answer)
            async with open_stream(  # one closed: its slot is free
                agent.endpoint, gateway, "SubscribeToTask", subscribe, tenant="bob"
            ) as again:
                assert again.status == 200
                assert again.is_sse
                release(key)


async def tasks_of(agent: RunningAgent, gateway: FakeGateway) -> list[object]:
    token = gateway.token(tenant="bob", aud=agent.endpoint)
    envelope = {"jsonrpc": "2.0", "id": 3, "method": "ListTasks", "params": {"tenant": "bob"}}
    headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}
    async with agent.session.post(agent.endpoint, json=envelope, headers=headers) as response:
        tasks: list[object] = (await response.json())["result"].get("tasks", [])
    return tasks


async def test_a_stream_ends_cleanly_when_its_token_expires_and_resumes_with_a_new_one(
    gateway: FakeGateway,
) -> None:
    async with serving(gateway, extra=LIMITS) as agent:
        key = "hold-" + uuid.uuid4().hex
        # Expired 28 s ago: with the 30 s leeway, good for 2 s more.
        short = gateway.token(tenant="bob", aud=agent.endpoint, lifetime=2, now=time.time() - 30)
        began = time.monotonic()
        async with open_stream(
            agent.endpoint, gateway, "SendStreamingMessage", streaming_send(gateway, key),
            tenant="bob", token=short,
        ) as stream:  # fmt: skip
            events = await stream.rest(timeout=10)  # ends: no error event, no hang
        lasted = time.monotonic() - began
        assert 0.5 < lasted < 8
        assert [e.kind for e in events][:2] == ["task", "statusUpdate"]
        assert all(e.event is None for e in events)  # no `error` event: a clean end
        task_id, last = events[0].result["task"]["id"], events[-1].id
        async with open_stream(
            agent.endpoint, gateway, "SubscribeToTask", {"id": task_id}, tenant="bob",
            last_event_id=last,
        ) as resumed:  # fmt: skip
            release(key)
            rest = await resumed.rest()
        assert rest[-1].state == "TASK_STATE_COMPLETED"
