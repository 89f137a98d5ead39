"""Slow and idle clients cannot hold the server: header and body deadlines, a connection cap.

Raw sockets against a real server listening as `looping serve` does (through its connection
guard). Deadlines here are short so the tests are quick; waiting for a close is bounded by a
generous timeout, never measured.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator

import pytest

from looping_core.server.internal import SERVICES
from looping_core.testing import FakeGateway

from support.serving import RunningAgent, start_agent

CLOSED_WITHIN = 10.0


@pytest.fixture
def no_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.INFO)
    yield
    during = caplog.get_records("setup") + caplog.get_records("call")
    assert [r.getMessage() for r in during if r.levelno >= logging.ERROR] == []


async def running(gateway: FakeGateway, server: str) -> AsyncIterator[RunningAgent]:
    agent, listener = await start_agent([gateway.origin], server=server)
    gateway.agent_jwks_url = agent.base_url + "/.well-known/jwks.json"
    yield agent
    await agent.session.close()
    await listener.cleanup()


@pytest.fixture
async def agent(gateway: FakeGateway) -> AsyncIterator[RunningAgent]:
    async for served in running(
        gateway, "header_timeout_seconds = 0.3\nbody_timeout_seconds = 0.3\nmax_connections = 50"
    ):
        yield served


async def connect(agent: RunningAgent) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", agent.config.server.port)


async def closed_by_server(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sent until it closed the connection."""
    async with asyncio.timeout(CLOSED_WITHIN):
        return await reader.read()


def request_head(agent: RunningAgent, gateway: FakeGateway, length: int) -> bytes:
    token = gateway.token(tenant="alice", aud=agent.endpoint)
    return (
        f"POST /a2a HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"A2A-Version: 1.0\r\nAuthorization: Bearer {token}\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


async def still_serves(agent: RunningAgent, gateway: FakeGateway) -> None:
    _, body = await gateway.send_turn(agent.endpoint, tenant="alice", text="still here")
    assert body["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"


async def test_incomplete_headers_are_cut_off_while_others_are_served(
    agent: RunningAgent, gateway: FakeGateway, no_errors: None
) -> None:
    reader, writer = await connect(agent)
    writer.write(b"POST /a2a HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Len")
    await still_serves(agent, gateway)
    assert await closed_by_server(reader) == b""
    writer.close()


async def test_a_connection_that_sends_nothing_is_closed(
    agent: RunningAgent, no_errors: None
) -> None:
    reader, writer = await connect(agent)
    assert await closed_by_server(reader) == b""
    writer.close()


async def test_two_hundred_slow_connections_are_all_released(
    gateway: FakeGateway, no_errors: None
) -> None:
    async for agent in running(gateway, "header_timeout_seconds = 0.5"):
        connections = [await connect(agent) for _ in range(200)]
        for _, writer in connections:
            writer.write(b"GET /.well-known/agent-card.json HTTP/1.1\r\nHo")
        await still_serves(agent, gateway)
        received = await asyncio.gather(*(closed_by_server(r) for r, _ in connections))
        assert set(received) == {b""}
        assert agent.app[SERVICES].guard.open_connections <= 1  # at most a kept-alive one
        for _, writer in connections:
            writer.close()


async def test_an_idle_kept_alive_connection_is_not_cut_but_its_next_slow_request_is(
    agent: RunningAgent, no_errors: None
) -> None:
    reader, writer = await connect(agent)
    writer.write(b"GET /.well-known/jwks.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    length = int(next(line for line in head.split(b"\r\n") if b"Content-Length" in line)[16:])
    await reader.readexactly(length)
    await asyncio.sleep(0.6)  # idle for twice the header deadline: keep-alive, not a slow client
    writer.write(b"GET /.well-known/jwks.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
    await reader.readexactly(length)
    writer.write(b"GET /.well-known/jwks.json HTTP/1.1\r\nHo")  # and now too slowly
    assert await closed_by_server(reader) == b""
    writer.close()


async def test_headers_that_trickle_in_within_the_deadline_are_served(
    gateway: FakeGateway, no_errors: None
) -> None:
    """A slow client (a byte every 10 ms) passes with the default deadlines."""
    async for agent in running(gateway, ""):
        reader, writer = await connect(agent)
        for byte in b"GET /.well-known/jwks.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n":
            writer.write(bytes([byte]))
            await asyncio.sleep(0.01)
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        writer.close()


async def test_a_body_that_does_not_arrive_in_time_is_answered_408(
    agent: RunningAgent, gateway: FakeGateway, no_errors: None
) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}).encode()
    reader, writer = await connect(agent)
    writer.write(request_head(agent, gateway, len(body)) + body[:10])
    answer = await closed_by_server(reader)
    writer.close()
    head, _, document = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408")
    assert b"Connection: close" in head
    error = json.loads(document)["error"]
    assert error["code"] == -32600
    assert error["data"][0]["reason"] == "REQUEST_TIMEOUT"
    await still_serves(agent, gateway)


async def test_health_probes_are_answered_when_the_connections_are_all_taken(
    gateway: FakeGateway, no_errors: None
) -> None:
    """An orchestrator must see a full server as busy, not dead: past `max_connections`,
    `/healthz` and `/readyz` are still answered (a few at once); anything else gets 503, and
    a connection that says nothing gets 503 at the header deadline."""
    async for agent in running(gateway, "max_connections = 3\nheader_timeout_seconds = 0.3"):
        held = [await connect(agent) for _ in range(3)]
        for _, writer in held:  # a request each, so the header deadline does not close them
            writer.write(b"GET /.well-known/jwks.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        for reader, _ in held:
            await reader.readuntil(b"\r\n\r\n")
        assert agent.app[SERVICES].guard.open_connections == 3
        for path in ("/healthz", "/readyz", "/healthz"):
            reader, writer = await connect(agent)
            writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode())
            writer.write(b"Connection: close\r\n\r\n")  # in two writes: the guard waits
            assert (await closed_by_server(reader)).startswith(b"HTTP/1.1 200"), path
            writer.close()
        reader, writer = await connect(agent)
        writer.write(b"POST /a2a HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert (await closed_by_server(reader)).startswith(b"HTTP/1.1 503")
        writer.close()
        reader, writer = await connect(agent)  # silent: 503 at the header deadline
        assert (await closed_by_server(reader)).startswith(b"HTTP/1.1 503")
        writer.close()
        for _, other in held:
            other.close()


async def test_connections_beyond_the_cap_are_refused_503_then_served_again(
    gateway: FakeGateway, no_errors: None
) -> None:
    async for agent in running(gateway, "max_connections = 3"):
        held = [await connect(agent) for _ in range(3)]
        for _ in range(50):  # until the server has accepted all three
            if agent.app[SERVICES].guard.open_connections == 3:
                break
            await asyncio.sleep(0.01)
        reader, writer = await connect(agent)
        writer.write(b"GET /.well-known/jwks.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answer = await closed_by_server(reader)
        assert answer.startswith(b"HTTP/1.1 503")
        assert b"Retry-After: 1" in answer
        writer.close()
        _, first = held.pop()
        first.close()
        for _ in range(50):
            if agent.app[SERVICES].guard.open_connections == 2:
                break
            await asyncio.sleep(0.01)
        reader, writer = await connect(agent)
        writer.write(b"GET /.well-known/jwks.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        writer.close()
        for _, other in held:
            other.close()
