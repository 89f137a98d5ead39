"""The job engine's runner waits for a blocking SendMessage's task through PostgreSQL's
LISTEN/NOTIFY, and listens only from a wait on until nothing has waited for a while: a process
that waits for nothing is not told of every event written."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest

from looping_core.a2a import TaskState
from looping_core.runner._engine_runner import EngineRunner
from looping_core.store import _notify
from looping_core.store.internal import TaskStore

from support.engine import rows
from support.working import LISTENING, two_stores, until_listening, working_task


@pytest.fixture
async def stores(postgres_url: str) -> AsyncIterator[tuple[TaskStore, TaskStore]]:
    async with two_stores(postgres_url) as both:
        yield both


@pytest.fixture
async def runner(
    stores: tuple[TaskStore, TaskStore], monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[EngineRunner]:
    """This process's runner, idle after 50 ms. Only its store's side is used: waits read the
    task and are woken by its notices."""
    monkeypatch.setattr(_notify, "LISTEN_IDLE_SECONDS", 0.05)
    runner = EngineRunner(stores[0], cast(Any, None), cast(Any, None))
    await runner.open()
    yield runner
    await runner.close()


async def test_the_runner_listens_while_a_send_waits_and_stops_once_nothing_has(
    stores: tuple[TaskStore, TaskStore], runner: EngineRunner, postgres_url: str
) -> None:
    there = stores[1]
    await until_listening(postgres_url, 0)  # nothing waits: no connection
    for _turn in range(2):  # the first wait listens, and so does one after the idle pause
        remote = await working_task(there)
        waiting = asyncio.create_task(runner.wait_settled(remote, timeout=30))
        await until_listening(postgres_url, 1)
        assert not waiting.done()
        await there.transition(remote, TaskState.TASK_STATE_COMPLETED)  # another process
        await asyncio.wait_for(waiting, 10)  # woken by the notice: the runner never polls
        await until_listening(postgres_url, 0)  # idle: the connection is closed


async def test_waits_that_overlap_share_one_connection_and_keep_it_open(
    stores: tuple[TaskStore, TaskStore], runner: EngineRunner, postgres_url: str
) -> None:
    there = stores[1]
    first, second = await working_task(there), await working_task(there)
    waits = [
        asyncio.create_task(runner.wait_settled(task_id, timeout=30)) for task_id in (first, second)
    ]
    await until_listening(postgres_url, 1)
    await there.transition(first, TaskState.TASK_STATE_COMPLETED)
    await asyncio.wait_for(waits[0], 10)
    await asyncio.sleep(0.2)  # past the idle time: the second still waits
    await until_listening(postgres_url, 1)
    await there.transition(second, TaskState.TASK_STATE_COMPLETED)
    await asyncio.wait_for(waits[1], 10)
    await until_listening(postgres_url, 0)


async def test_a_second_wait_goes_on_only_once_the_first_has_listened_again(
    stores: tuple[TaskStore, TaskStore], postgres_url: str
) -> None:
    """Two waits begin after an idle pause: the second does not read the task before the
    LISTEN the first asked for is in place (an event between the two would be lost to it)."""
    here, there = stores
    told: list[str] = []
    notices = here.event_notices(told.append, lambda: None)
    assert notices is not None
    await notices.start()
    try:
        await notices.pause()
        await until_listening(postgres_url, 0)
        first = asyncio.create_task(notices.resume())
        await asyncio.sleep(0)  # the first is connecting
        await notices.resume()
        assert rows(postgres_url, LISTENING) == [(1,)]  # already in place, no waiting for it
        await first
        remote = await working_task(there)  # notified: its WORKING event
        async with asyncio.timeout(10):
            while remote not in told:
                await asyncio.sleep(0.02)
        pausing = asyncio.create_task(notices.pause())
        await asyncio.sleep(0)  # a pause under way, and a wait begins
        await notices.resume()
        await pausing
        assert rows(postgres_url, LISTENING) == [(1,)]
    finally:
        await notices.close()
