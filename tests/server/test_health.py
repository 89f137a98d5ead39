"""`/healthz` and `/readyz`: no token, nothing revealed but up or down and the failing part; the
readiness follows the store (stopped under a running server and back), its migrations, and the
runner and the push deliverer."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from looping_core.server._services import SERVICES
from looping_core.testing import FakeGateway

from support.serving import RunningAgent, start_agent


async def probe(agent: RunningAgent, path: str) -> tuple[int, Any]:
    async with agent.session.get(agent.base_url + path) as response:
        assert response.headers["Cache-Control"] == "no-store"
        return response.status, await response.json()


async def test_health_and_readiness_need_no_token_and_say_little(agent: RunningAgent) -> None:
    assert await probe(agent, "/healthz") == (200, {"status": "ok"})
    assert await probe(agent, "/readyz") == (200, {"status": "ready"})


async def test_readiness_fails_on_pending_migrations_and_a_stopped_runner(
    agent: RunningAgent, caplog: pytest.LogCaptureFixture
) -> None:
    store = Path(agent.config.store.url.removeprefix("sqlite:///"))
    with sqlite3.connect(store) as connection:
        connection.execute(
            "DELETE FROM core_migration WHERE version = (SELECT MAX(version) FROM core_migration)"
        )
    caplog.set_level(logging.INFO, "looping_core.server")
    for _ in range(3):  # a probe every second logs the change once, not every time
        assert await probe(agent, "/readyz") == (
            503,
            {"status": "unavailable", "failing": ["store"]},
        )
    assert [r.getMessage() for r in caplog.records if "ready" in r.getMessage()] == [
        "not ready: store: migrations pending"
    ]
    services = agent.app[SERVICES]
    await services.runner.close()
    status, body = await probe(agent, "/readyz")
    assert (status, body["failing"]) == (503, ["runner", "store"])


async def test_readiness_follows_a_postgresql_store_that_stops_and_returns(
    gateway: FakeGateway, postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    running, listener = await start_agent([gateway.origin], store_url=postgres_url)
    server, _, name = postgres_url.rpartition("/")
    admin = psycopg.connect(f"{server}/postgres")
    admin.autocommit = True
    caplog.set_level(logging.INFO, "looping_core.server")
    try:
        assert await probe(running, "/readyz") == (200, {"status": "ready"})
        with admin.cursor() as cursor:  # the store goes away: no new connections, none left
            cursor.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (name,),
            )
        status, body = await probe(running, "/readyz")
        assert status == 503
        assert "store" in body["failing"]  # (and `jobs`: the job workers stop with it)
        assert (await probe(running, "/healthz"))[0] == 200  # the process itself still answers
        with admin.cursor() as cursor:
            cursor.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")
        for _ in range(200):  # the store's next job connects afresh; the job workers restart
            if (await probe(running, "/readyz"))[0] == 200:
                break
            await asyncio.sleep(0.1)
        # Back for good: no probe lands on a connection the outage left dead (each of the
        # store's connections would otherwise fail once).
        for _ in range(16):
            assert await probe(running, "/readyz") == (200, {"status": "ready"})
        # The readiness lines only: a driver's warning may say "already" (psycopg 3.1 does).
        changes = [
            r.getMessage()
            for r in caplog.records
            if r.name == "looping_core.server" and "ready" in r.getMessage()
        ]
        assert len(changes) == 3
        assert (changes[0], changes[2]) == ("ready", "ready")
        assert changes[1].startswith("not ready: ")
        assert "store: not answering" in changes[1]
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")
        admin.close()
        await running.session.close()
        await listener.cleanup()
