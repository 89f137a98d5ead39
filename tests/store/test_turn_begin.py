"""A turn's begin: the guarded move to WORKING, its WORKING event, and the task as the runner
gets it, the same on both stores. On PostgreSQL it is one statement (its own transaction, one
round trip): the event it encodes there takes the row's context, whatever characters the
caller gave it, and a task no longer SUBMITTED is begun by no one and gets no event."""

from __future__ import annotations

import json
import uuid

import peewee

from looping_core.a2a import Message, Part, Role, TaskState, to_wire
from looping_core.contract import Identity
from looping_core.store.internal import Database, TaskStore

from support.statements import record_statements

ALICE = Identity("t", "https://gateway.example", "alice")
AWKWARD_CONTEXT = 'ctx "quoted" \\ back\u00e9 \u2028 \n'
"""A context a caller chose: quotes, a backslash, non-ASCII, a line separator, a newline."""


def _message(text: str, context_id: str = "") -> Message:
    return Message(
        message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=(Part(text=text),),
        context_id=context_id,
    )  # fmt: skip


async def test_a_begin_moves_to_working_writes_its_event_and_returns_the_task(
    database: Database,
) -> None:
    statements = record_statements(database)
    store = TaskStore(database)
    task = (await store.start_turn(ALICE, _message("hi", AWKWARD_CONTEXT), None)).task
    assert task.context_id == AWKWARD_CONTEXT
    statements.clear()

    begun = await store.begin_turn(task.id)

    assert begun is not None
    if isinstance(database.peewee, peewee.PostgresqlDatabase):
        assert len(statements) == 1  # the write, the event, the notice and the read at once
    assert begun.caller == ALICE
    assert begun.task.status.state is TaskState.TASK_STATE_WORKING
    assert begun.task.context_id == AWKWARD_CONTEXT
    assert [m.parts[0].text for m in begun.task.history] == ["hi"]
    assert begun.turn_message == task.history[0].message_id
    read = await store.get(ALICE, task.id, history_length=None)
    assert begun.task.history == read.history
    *_, event = await store.events_after({task.id: 0})  # the begin's is the last
    update = json.loads(event.body)["statusUpdate"]
    assert update["taskId"] == task.id
    assert update["contextId"] == AWKWARD_CONTEXT
    assert update["status"]["state"] == "TASK_STATE_WORKING"
    assert update["status"] == to_wire(read.status)  # the row's own time

    statements.clear()
    assert await store.begin_turn(task.id) is None  # WORKING already: begun by no one
    assert await store.events_after({task.id: event.seq}) == []
