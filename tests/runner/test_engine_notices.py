"""A process running jobs listens for procrastinate's notices on one connection for all its
workers (the turns' and the pushes' and sweeps'), and hands each notice to the worker whose
queue it is: PostgreSQL wakes every listening connection for every notice written in the
database, so a connection per worker would cost it work per turn for each."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from looping_core.runner import _engine
from looping_core.testing import FakeGateway

from support import agents as test_agents
from support.engine import rows
from support.serving import start_agent

PROCRASTINATE_LISTENING = (
    "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()"
    """ AND query LIKE 'LISTEN "procrastinate%'"""
)
"""Connections whose last statement was a LISTEN of procrastinate's (one per channel, in a row:
the connection shows the last)."""


async def test_one_connection_listens_for_every_worker_and_wakes_the_one_whose_queue_it_is(
    gateway: FakeGateway, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workers' own look for jobs comes far beyond the test, so a job that runs was
    announced: the turn (the turns' worker) and the push of a cancel at the edge, a push job of
    its own (the other worker)."""
    monkeypatch.setattr(_engine, "FETCH_SECONDS", 600)
    agent, listener = await start_agent([gateway.origin], store_url=postgres_url)
    gateway.agent_jwks_url = agent.base_url + "/.well-known/jwks.json"
    text = f"held-{uuid.uuid4()}"
    try:
        status, body = await gateway.send_turn(agent.endpoint, tenant="bob", text=text)
        assert status == 200, body
        task_id = body["result"]["task"]["id"]
        async with asyncio.timeout(30):  # a hang guard: the look would come in 10 minutes
            while text not in test_agents.RELEASE:
                await asyncio.sleep(0.02)  # the turn's job runs: its worker was told
        assert rows(postgres_url, PROCRASTINATE_LISTENING) == [(1,)]
        status, body = await gateway.call(
            agent.endpoint, "CancelTask", {"tenant": "bob", "id": task_id}, tenant="bob"
        )
        assert status == 200, body
        assert body["result"]["status"]["state"] == "TASK_STATE_CANCELED"
        [push] = await gateway.wait_for_pushes(1, timeout=30)
    finally:
        await agent.session.close()
        await listener.cleanup()
    assert push.error is None, push.error
    assert push.json["task"]["id"] == task_id
    assert push.json["task"]["status"]["state"] == "TASK_STATE_CANCELED"
