"""A new task's accept, the same on both stores: the task, its message and its push config
written only if the message is new and the turn within the limits; a duplicate returns the first
task even past a limit; a turn past a limit writes nothing. On PostgreSQL the count, the task,
the message and the config are one statement."""

from __future__ import annotations

import uuid

import peewee
import pytest

from looping_core.a2a import Message, Part, Role, TaskPushNotificationConfig
from looping_core.contract import Identity
from looping_core.store.internal import Database, TaskStore, TooManyTurns, TurnLimits

from support.statements import record_statements

ALICE = Identity("t", "https://gateway.example", "alice")
BOB = Identity("t", "https://gateway.example", "bob")
PUSH = TaskPushNotificationConfig(url="https://gateway.example/push", token="t0k")


def _message(text: str) -> Message:
    return Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=(Part(text=text),))


async def test_new_tasks_are_accepted_once_and_within_the_limits(database: Database) -> None:
    statements = record_statements(database)
    store = TaskStore(database)
    limits = TurnLimits(caller=2, tenant=3)
    first = _message("one")

    start = await store.start_turn(ALICE, first, PUSH, limits=limits)
    assert start.started
    if isinstance(database.peewee, peewee.PostgresqlDatabase):
        assert len(statements) == 1  # the count, the task, its message and its config
    [config] = await store.list_push_configs(ALICE, start.task.id)
    assert config.id == start.task.id  # an inline config without an id takes the task's
    assert config.url == PUSH.url
    read = await store.get(ALICE, start.task.id, history_length=None)
    assert [m.message_id for m in read.history] == [first.message_id]

    again = await store.start_turn(ALICE, first, PUSH, limits=limits)
    assert not again.started
    assert again.task.id == start.task.id  # the duplicate returns the first task

    second = await store.start_turn(ALICE, _message("two"), None, limits=limits)
    assert second.started
    with pytest.raises(TooManyTurns) as refused:
        await store.start_turn(ALICE, _message("three"), None, limits=limits)
    assert refused.value.scope == "caller"
    # Past the limit, a duplicate still returns its task.
    assert (await store.start_turn(ALICE, first, None, limits=limits)).task.id == start.task.id

    third = await store.start_turn(BOB, _message("bob's"), None, limits=limits)
    assert third.started
    with pytest.raises(TooManyTurns) as refused:
        await store.start_turn(BOB, _message("bob's second"), None, limits=limits)
    assert refused.value.scope == "tenant"

    # Nothing of the refused turns was written: three tasks, three messages, one config.
    def totals() -> tuple[int, ...]:
        return tuple(
            int(database.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
            for table in ("tasks", "messages", "push_configs")
        )

    assert await database.run(totals) == (3, 3, 1)
