"""The push deliverer given an outbox part of the test's own (`PushOutbox`), not the task store:
what it needs of the store is that small protocol, so a runner's part can be swapped for a fake
(or, later, for a tenant's own store). The receiver is a real server on 127.0.0.1 that checks
each push's signature with the agent's real key set."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import aiohttp
import attrs
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from looping_core.a2a import PushSigner, SigningKey, verify_push
from looping_core.config import PushConfig
from looping_core.runner.internal import PushDeliverer
from looping_core.store.internal import JobTicket, OutboxItem, PendingPushes, now_us
from looping_core.testing import ed25519_private_jwk


@attrs.define
class MemoryOutbox:
    """An outbox in memory: items by id, and every attempt recorded."""

    items: dict[int, OutboxItem] = attrs.field(factory=dict)
    states: dict[int, str] = attrs.field(factory=dict)
    due: dict[int, int] = attrs.field(factory=dict)
    attempts: list[tuple[int, int | None, str]] = attrs.field(factory=list)
    listeners: list[Callable[[], None]] = attrs.field(factory=list)

    def add(self, item: OutboxItem) -> None:
        self.items[item.id] = item
        self.states[item.id] = "pending"
        self.due[item.id] = item.created_ts
        for listener in self.listeners:
            listener()

    def watch_pushes(self, listener: Callable[[], None]) -> None:
        self.listeners.append(listener)

    async def due_pushes(self, limit: int = 32) -> list[OutboxItem]:
        now = now_us()
        return [
            item for item in self.items.values()
            if self.states[item.id] == "pending" and self.due[item.id] <= now
        ][:limit]  # fmt: skip

    async def pending_pushes(self) -> PendingPushes:
        pending = [i for i, state in self.states.items() if state == "pending"]
        return PendingPushes(
            next_due_ts=min((self.due[i] for i in pending), default=None),
            oldest_ts=min((self.items[i].created_ts for i in pending), default=None),
        )

    async def record_attempt(
        self,
        item: OutboxItem,
        *,
        status: int | None,
        error: str | None,
        duration_ms: int,
        outcome: str,
        next_attempt_ts: int | None = None,
        job: JobTicket | None = None,
    ) -> bool:
        self.attempts.append((item.id, status, outcome))
        self.states[item.id] = outcome
        self.items[item.id] = attrs.evolve(item, attempts=item.attempts + 1)
        if next_attempt_ts is not None:
            self.due[item.id] = next_attempt_ts
        return job is not None and outcome != "pending"


@pytest.fixture
def key() -> SigningKey:
    return SigningKey.from_jwk(ed25519_private_jwk())


@pytest.fixture
async def receiver(key: SigningKey) -> AsyncIterator[tuple[TestServer, list[str]]]:
    """Answers 503 to the first push, then 200 to every push whose signature checks out."""
    received: list[str] = []

    async def push(request: web.Request) -> web.Response:
        body = await request.read()
        claims = verify_push(request.headers, body, {"keys": [key.public_jwk]})
        received.append(str(claims["jti"]))
        return web.Response(status=503 if len(received) == 1 else 200)

    app = web.Application()
    app.router.add_post("/push", push)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield server, received
    await server.close()


async def test_the_deliverer_runs_on_an_outbox_part_of_its_own(
    key: SigningKey, receiver: tuple[TestServer, list[str]]
) -> None:
    server, received = receiver
    outbox = MemoryOutbox()
    signer = PushSigner(key=key, jwks_url="http://127.0.0.1:1/jwks", issuer="http://127.0.0.1:1")
    policy = PushConfig(backoff_seconds=0.01, backoff_max_seconds=0.01)
    async with aiohttp.ClientSession() as session:
        deliverer = PushDeliverer(outbox, session, signer, policy, jitter=lambda: 0.0)
        deliverer.start()  # it watches the part for pushes queued
        assert outbox.listeners
        item = OutboxItem(
            id=7, task_id="t1", config_id="c1", jti="jti-7", url=str(server.make_url("/push")),
            body=b'{"task":{}}', attempts=0, created_ts=now_us(), token="", authentication=None,
        )  # fmt: skip
        outbox.add(item)
        for _ in range(500):
            if outbox.states[7] != "pending":
                break
            await asyncio.sleep(0.01)
        await deliverer.stop()
    assert outbox.attempts == [(7, 503, "pending"), (7, 200, "delivered")]
    assert received == ["jti-7", "jti-7"]  # the same jti on the retry
    # A job engine's attempt on the same part says whether its record finished the job.
    again = attrs.evolve(item, id=8, jti="jti-8")
    outbox.add(again)
    async with aiohttp.ClientSession() as session:
        deliverer = PushDeliverer(outbox, session, signer, policy)
        attempt = await deliverer.deliver(again, JobTicket(1, push=8))
    assert attempt.job_finished
    assert attempt.again_in is None
