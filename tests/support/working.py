"""Two stores on one database, as two processes have them, and a task one of them is working
on: for the tests of how one process learns of another's events."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

from looping_core.a2a import Message, Part, Role
from looping_core.contract import Identity
from looping_core.store.internal import Database, TaskStore, bind, upgrade

from support.engine import rows

CALLER = Identity("t", "https://gateway.example", "caller")


@contextlib.asynccontextmanager
async def two_stores(url: str) -> AsyncIterator[tuple[TaskStore, TaskStore]]:
    """This process's store (`here`) and another process's (`there`), each with its own
    connections to the database at `url`, migrated."""
    here, there = Database.from_url(url), Database.from_url(url)
    try:
        await here.run_alone(lambda: (bind(here.peewee), upgrade(here.peewee)))
        yield TaskStore(here, node="here"), TaskStore(there, node="there")
    finally:
        here.close()
        there.close()


async def working_task(store: TaskStore) -> str:
    """A new task of `CALLER`'s, its turn begun (WORKING, its first event written)."""
    message = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=(Part(text="hi"),))
    task = (await store.start_turn(CALLER, message, None)).task
    assert await store.begin_turn(task.id) is not None
    return task.id


LISTENING = (
    "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()"
    " AND query = 'LISTEN looping_task_events'"
)
"""How many connections listen for task events (PostgreSQL)."""


async def until_listening(url: str, count: int) -> None:
    """Wait (at most 10 s) until `count` connections to the database at `url` listen."""
    async with asyncio.timeout(10):
        while rows(url, LISTENING) != [(count,)]:
            await asyncio.sleep(0.02)
