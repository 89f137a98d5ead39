"""Reads whose statements must agree (a task's row, then its history, artifacts and event
number) see one moment. SQLite's transactions always do (a job holds the writer's lock); on
PostgreSQL they run in one read-only snapshot, so another process's commit that lands between
two of their statements is in neither. A resent message's answer, read inside the accept's
write, reads the task's generation again after the task instead."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import attrs
import peewee
import pytest

from looping_core.a2a import Message, Part, Role, TaskState
from looping_core.store.internal import Database, TaskStore

from support.working import CALLER, two_stores, working_task


def _progress_from(
    there: TaskStore, task_id: str, context_id: str, loop: asyncio.AbstractEventLoop
) -> bool:
    """The other process writes a progress of the task (an event, and the task's status
    message), and this thread waits until it committed: called from this store's thread, in
    the middle of its read."""
    update = Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_AGENT,
        parts=(Part(text="half way"),),
        task_id=task_id,
        context_id=context_id,
    )
    written = asyncio.run_coroutine_threadsafe(there.progress(task_id, update, push=False), loop)
    return written.result(timeout=10)


async def test_a_stream_start_shows_the_task_as_its_event_number_left_it(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process writes a progress (an event, and the task's status message) after this
    process read the task's event number and before it read the task: the task comes back as
    that number left it, not with the progress under the older number (a long-poll on the
    generation answered a newer task under the older generation so)."""
    async with two_stores(postgres_url) as (here, there):
        task_id = await working_task(here)
        before, seq = await here.stream_start(CALLER, task_id)
        assert (before.status.state, before.status.message, seq) == (
            TaskState.TASK_STATE_WORKING,
            None,
            1,
        )
        loop = asyncio.get_running_loop()
        snapshot = here.events._snapshot
        wrote: list[bool] = []

        def between(*args: Any, **kwargs: Any) -> Any:
            # Between the event number's read and the task's.
            wrote.append(_progress_from(there, task_id, before.context_id, loop))
            return snapshot(*args, **kwargs)

        monkeypatch.setattr(here.events, "_snapshot", between)
        task, seq = await here.stream_start(CALLER, task_id)
        assert wrote == [True]
        assert (task.status.message, seq) == (None, 1)
        monkeypatch.undo()
        task, seq = await here.stream_start(CALLER, task_id)
        assert seq == 2
        assert task.status.message is not None
        assert task.status.message.parts[0].text == "half way"


async def test_a_get_reads_the_task_and_its_history_at_one_moment(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GetTask's row, history and artifacts agree, whatever commits while they are read."""
    async with two_stores(postgres_url) as (here, there):
        task_id = await working_task(here)
        loop = asyncio.get_running_loop()
        snapshot = here.reads._snapshot
        context_id = (await here.get(CALLER, task_id)).context_id

        def between(*args: Any, **kwargs: Any) -> Any:
            assert _progress_from(there, task_id, context_id, loop)
            return snapshot(*args, **kwargs)

        monkeypatch.setattr(here.reads, "_snapshot", between)
        task = await here.get(CALLER, task_id)
        assert task.status.message is None  # the task as its row was read: before the progress


async def test_a_postgresql_read_refuses_to_write(postgres_url: str) -> None:
    """`Database.read` is for reads: a statement that writes fails there, and nothing is written
    (a REPEATABLE READ write could fail on another's commit; refused up front it fails in every
    test instead of under load)."""
    database = Database.from_url(postgres_url)
    try:
        await database.run_alone(
            lambda: database.execute("CREATE TABLE IF NOT EXISTS snapshot_rows (owner TEXT)")
        )
        with pytest.raises(peewee.InternalError, match="read-only transaction"):
            await database.read(
                lambda: database.execute("INSERT INTO snapshot_rows (owner) VALUES ('read')")
            )
        count = await database.run(
            lambda: database.execute("SELECT COUNT(*) FROM snapshot_rows").fetchone()[0]
        )
        assert count == 0
        level = await database.read(
            lambda: database.execute("SHOW transaction_isolation").fetchone()[0]
        )
        assert level == "repeatable read"
        assert (
            await database.run(lambda: database.execute("SHOW transaction_isolation").fetchone()[0])
            == "read committed"
        )
    finally:
        database.close()


async def test_a_resent_messages_task_comes_with_its_own_generation(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message sent again answers with its task (A2A 1.1 draft: with the task's generation).
    That answer is read inside the accept, statement by statement: a change committed while
    the task is read is read again, so the generation is the task's own."""
    async with two_stores(postgres_url) as (here, there):
        task_id = await working_task(here)
        first = (await here.get(CALLER, task_id)).history[0]
        loop = asyncio.get_running_loop()
        snapshot = here.turns._snapshot
        wrote: list[bool] = []

        def between(*args: Any, **kwargs: Any) -> Any:
            if not wrote:  # after the generation's first read, before the task's
                wrote.append(_progress_from(there, task_id, first.context_id, loop))
            return snapshot(*args, **kwargs)

        monkeypatch.setattr(here.turns, "_snapshot", between)
        resent = attrs.evolve(first, task_id="", context_id="")
        start = await here.start_turn(CALLER, resent, None, generations=True)
    assert wrote == [True]
    assert not start.started
    assert start.task.status.message is not None  # the progress: event 2
    assert start.generation == 3
