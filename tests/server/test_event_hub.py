"""The stream hub against a real SQLite file written by two stores (two connections: to SQLite,
two processes): another process's events reach a subscriber even while this process's own
writes keep the hub busy, and an event is never handed out past a missing one. On PostgreSQL,
the hub listens only while something is subscribed (or was, lately)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from looping_core.a2a import Message, Part, Role, TaskState
from looping_core.config import StreamingConfig
from looping_core.server._streams import EventHub, Subscription
from looping_core.store import _notify
from looping_core.store.internal import TaskEvent, TaskStore

from support.working import two_stores, until_listening, working_task


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[tuple[TaskStore, TaskStore]]:
    async with two_stores(f"sqlite:///{tmp_path / 'store.db'}") as both:
        yield both


def note(task_id: str, text: str) -> Message:
    return Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_AGENT,
        parts=(Part(text=text),),
        task_id=task_id,
        context_id="c",
    )


async def next_text(subscription: Subscription, timeout: float = 10) -> str:
    event = await subscription.next(timeout)
    assert event is not None
    return event.body


async def test_another_process_events_arrive_while_this_one_keeps_writing(
    stores: tuple[TaskStore, TaskStore],
) -> None:
    here, there = stores
    hub = EventHub(here, StreamingConfig(poll_seconds=0.02))
    await hub.start()
    local, remote = await working_task(here), await working_task(there)
    busy = hub.subscribe(local, 1)
    watched = hub.subscribe(remote, 1)

    async def keep_writing() -> None:
        """This process's own writes, waking the hub more often than it polls (every write
        wakes it; here a write every millisecond, and the store's own wake-up in between)."""
        for n in range(100_000):
            if n % 10 == 0:
                await here.progress(local, note(local, f"local {n}"), push=False)
            hub.written(local)
            await asyncio.sleep(0.001)

    writers = [asyncio.create_task(keep_writing())]
    try:
        await next_text(busy)
        await there.progress(remote, note(remote, "from there"), push=False)
        # A hundred polls' time: a hub that looks elsewhere only when idle would wait for a lull.
        assert "from there" in await next_text(watched, timeout=2)
        assert not any(writer.done() for writer in writers)  # the local writes went on
    finally:
        for writer in writers:
            writer.cancel()
        await asyncio.gather(*writers, return_exceptions=True)
        await hub.close()


async def test_an_event_after_a_missing_one_waits_for_it() -> None:
    subscription = Subscription("t", 3, buffer=8)
    assert not subscription.offer(TaskEvent("t", 5, "{}"))  # 4 is missing: not handed out
    assert subscription.cursor == 3
    assert subscription.offer(TaskEvent("t", 4, "{}"))
    assert subscription.offer(TaskEvent("t", 5, "{}"))
    assert subscription.offer(TaskEvent("t", 4, "{}"))  # already given: ignored, no gap
    assert [(await subscription.next(1)).seq for _ in range(2)] == [4, 5]  # type: ignore[union-attr]
    assert await subscription.next(0.01) is None


async def test_a_subscriber_that_falls_behind_is_dropped_and_told_why(
    stores: tuple[TaskStore, TaskStore],
) -> None:
    here, _ = stores
    hub = EventHub(here, StreamingConfig(buffer_events=2))
    await hub.start()
    task_id = await working_task(here)
    slow = hub.subscribe(task_id, 0)
    fast = hub.subscribe(task_id, 0)

    async def read_all() -> list[int]:
        seen = []
        while (event := await fast.next(5)) is not None:
            seen.append(event.seq)
            if event.closes_stream:
                break
        return seen

    reader = asyncio.create_task(read_all())
    try:
        for n in range(5):
            await here.progress(task_id, note(task_id, f"step {n}"), push=False)
            await asyncio.sleep(0.01)  # the reader keeps up; the slow one never reads
        await here.transition(task_id, TaskState.TASK_STATE_COMPLETED)
        assert await reader == [1, 2, 3, 4, 5, 6, 7]  # WORKING, five steps, COMPLETED
    finally:
        await hub.close()
    assert slow.ended is not None
    assert "dropped" in slow.ended


async def test_on_postgresql_the_hub_listens_only_while_something_is_subscribed(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With nothing subscribed, the hub does not listen (no connection: PostgreSQL does not work
    on its behalf for every notice written); a subscription listens before its first read, so
    another process's events arrive at once, with the poll far beyond the test; once idle
    again, it stops."""
    monkeypatch.setattr(_notify, "LISTEN_IDLE_SECONDS", 0.05)
    async with two_stores(postgres_url) as (here, there):
        hub = EventHub(here, StreamingConfig(poll_seconds=60))  # notified: a look every 10 minutes
        await hub.start()
        try:
            await until_listening(postgres_url, 0)  # nothing subscribed
            remote = await working_task(there)
            watched = hub.subscribe(remote, 1)
            await until_listening(postgres_url, 1)
            await there.progress(remote, note(remote, "from there"), push=False)
            assert "from there" in await next_text(watched, timeout=5)
            hub.unsubscribe(watched)
            await until_listening(postgres_url, 0)
        finally:
            await hub.close()
