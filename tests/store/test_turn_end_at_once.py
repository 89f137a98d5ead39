"""A turn's end, told the task's context or not, writes the same: the state, the addressed
status and reply, the artifacts, the events numbered on from the begin's, the caller's spend and
the push. On PostgreSQL, told the context, all but the push is one statement; a context that is
not the task's is never written (the end learns the task's own), and an end its guards refuse
writes nothing at all."""

from __future__ import annotations

import json
import uuid
from typing import Any

import peewee
import pytest

from looping_core.a2a import (
    Artifact,
    Message,
    Part,
    Role,
    StreamResponse,
    TaskPushNotificationConfig,
    TaskState,
    to_wire,
)
from looping_core.contract import Identity
from looping_core.store.internal import Database, JobTicket, TaskStore

from support.statements import record_statements

ALICE = Identity("t", "https://gateway.example", "alice")
PUSH = TaskPushNotificationConfig(url="https://gateway.example/push", token="t0k")
AWKWARD_CONTEXT = 'ctx "quoted" \\ back\u00e9 \u2028 \n'
"""A context a caller chose: quotes, a backslash, non-ASCII, a line separator, a newline."""
KNOWN = pytest.mark.parametrize("told", [True, False], ids=["told-context", "not-told"])


def _message(role: Role, text: str, *, task_id: str = "", context_id: str = "") -> Message:
    return Message(
        message_id=str(uuid.uuid4()), role=role, parts=(Part(text=text),), task_id=task_id,
        context_id=context_id,
    )  # fmt: skip


async def _working(store: TaskStore, push: TaskPushNotificationConfig | None = PUSH) -> Any:
    first = _message(Role.ROLE_USER, "hi", context_id=AWKWARD_CONTEXT)
    task = (await store.start_turn(ALICE, first, push)).task
    begun = await store.begin_turn(task.id)
    assert begun is not None
    return begun


async def _rows(database: Database, query: str, *params: Any) -> list[tuple[Any, ...]]:
    return await database.run(lambda: [tuple(r) for r in database.execute(query, params)])


@KNOWN
async def test_an_end_writes_the_same_told_its_context_or_not(
    database: Database, told: bool
) -> None:
    statements = record_statements(database)
    store = TaskStore(database)
    begun = await _working(store)
    task_id = begun.task.id
    *_, working = await store.events_after({task_id: 0})
    answer = _message(Role.ROLE_AGENT, "done")  # unaddressed: the store addresses it
    artifacts = [
        Artifact(artifact_id="a1", parts=(Part(text="draft"),)),
        Artifact(artifact_id="a2", parts=(Part(data={"n": 1.5}),), name="two"),
        Artifact(artifact_id="a1", parts=(Part(text="final \u00e9"),)),
    ]
    statements.clear()

    end = await store.end_turn(
        task_id, TaskState.TASK_STATE_COMPLETED, status_message=answer, reply=answer,
        artifacts=artifacts, metadata={"note": "\u00fcber"}, taken_through=begun.turn_message,
        job=JobTicket(7), spent=0.25, context_id=AWKWARD_CONTEXT if told else None,
    )  # fmt: skip

    assert end.won
    if told and isinstance(database.peewee, peewee.PostgresqlDatabase):
        # The change, its artifacts, its events, their notice and the configs' read; then the
        # push, whose config's secrets are opened here.
        assert len(statements) == 2
        assert statements[1].startswith("INSERT INTO push_outbox")
    read = await store.get(ALICE, task_id, history_length=None)
    assert read.status.state is TaskState.TASK_STATE_COMPLETED
    assert read.status.message is not None
    assert (read.status.message.task_id, read.status.message.context_id) == (
        task_id, AWKWARD_CONTEXT,
    )  # fmt: skip
    assert read.metadata == {"note": "\u00fcber"}
    assert [(a.artifact_id, a.parts[0]) for a in read.artifacts] == [
        ("a1", Part(text="final \u00e9")),
        ("a2", Part(data={"n": 1.5})),
    ]
    events = await store.events_after({task_id: working.seq})
    assert [event.seq for event in events] == [working.seq + n for n in (1, 2, 3, 4)]
    bodies = [json.loads(event.body) for event in events]
    assert [body["artifactUpdate"]["artifact"]["artifactId"] for body in bodies[:3]] == [
        "a1", "a2", "a1",
    ]  # fmt: skip
    for body in bodies:
        (update,) = body.values()
        assert (update["taskId"], update["contextId"]) == (task_id, AWKWARD_CONTEXT)
    assert bodies[3]["statusUpdate"]["status"] == to_wire(read.status)
    [push] = end.pushes or ()
    without_history = await store.get(ALICE, task_id, history_length=0)
    assert json.loads(push.body) == to_wire(StreamResponse(task=without_history))
    assert push.token == "t0k"
    spend = await _rows(database, "SELECT subject, cost FROM caller_spend")
    assert spend == [("alice", 0.25)]


@KNOWN
async def test_a_question_keeps_its_reply_in_the_history_and_pushes_it(
    database: Database, told: bool
) -> None:
    store = TaskStore(database)
    begun = await _working(store)
    question = _message(Role.ROLE_AGENT, "which one?")
    end = await store.end_turn(
        begun.task.id, TaskState.TASK_STATE_INPUT_REQUIRED, status_message=question,
        reply=question, job=JobTicket(1), context_id=AWKWARD_CONTEXT if told else None,
    )  # fmt: skip
    assert end.won
    read = await store.get(ALICE, begun.task.id, history_length=None)
    assert [m.parts[0].text for m in read.history] == ["hi", "which one?"]
    assert read.history[-1].context_id == AWKWARD_CONTEXT
    [push] = end.pushes or ()
    assert json.loads(push.body)["task"]["status"]["message"]["contextId"] == AWKWARD_CONTEXT


async def test_a_context_that_is_not_the_tasks_is_never_written(database: Database) -> None:
    store = TaskStore(database)
    begun = await _working(store)
    answer = _message(Role.ROLE_AGENT, "done")
    end = await store.end_turn(
        begun.task.id, TaskState.TASK_STATE_COMPLETED, status_message=answer, reply=answer,
        job=JobTicket(1), context_id="not-the-tasks",
    )  # fmt: skip
    assert end.won  # the end learns the task's own context and writes it
    read = await store.get(ALICE, begun.task.id, history_length=None)
    assert read.status.message is not None
    assert read.status.message.context_id == AWKWARD_CONTEXT
    *_, status = await store.events_after({begun.task.id: 0})
    assert json.loads(status.body)["statusUpdate"]["contextId"] == AWKWARD_CONTEXT
    [push] = end.pushes or ()
    assert json.loads(push.body)["task"]["contextId"] == AWKWARD_CONTEXT
    assert json.loads(push.body)["task"]["status"]["message"]["contextId"] == AWKWARD_CONTEXT


@KNOWN
async def test_an_end_the_guards_refuse_writes_nothing(database: Database, told: bool) -> None:
    store = TaskStore(database)
    begun = await _working(store)
    task_id = begun.task.id
    follow_up = _message(Role.ROLE_USER, "and this", task_id=task_id, context_id=AWKWARD_CONTEXT)
    await store.start_turn(ALICE, follow_up, None)  # joins the running turn, unseen by it
    assert [m.message_id for m in await store.arrivals(task_id, begun.turn_message)] == [
        follow_up.message_id
    ]
    *_, last = await store.events_after({task_id: 0})
    context = AWKWARD_CONTEXT if told else None
    answer = _message(Role.ROLE_AGENT, "done")

    unseen = await store.end_turn(
        task_id, TaskState.TASK_STATE_COMPLETED, status_message=answer, reply=answer,
        artifacts=[Artifact(artifact_id="a1", parts=(Part(text="x"),))],
        taken_through=begun.turn_message, job=JobTicket(1), spent=0.5, context_id=context,
    )  # fmt: skip
    await store.cancel(ALICE, task_id)
    *_, canceled = await store.events_after({task_id: 0})
    late = await store.end_turn(
        task_id, TaskState.TASK_STATE_COMPLETED, status_message=answer, reply=answer,
        job=JobTicket(2), spent=0.5, context_id=context,
    )  # fmt: skip

    assert not unseen.won
    assert not late.won
    read = await store.get(ALICE, task_id, history_length=None)
    assert read.status.state is TaskState.TASK_STATE_CANCELED
    assert read.artifacts == ()
    assert [m.parts[0].text for m in read.history] == ["hi", "and this"]
    assert canceled.seq == last.seq + 1  # only the cancel's event
    assert await store.events_after({task_id: canceled.seq}) == []
    assert await _rows(database, "SELECT cost FROM caller_spend") == []
    assert len(await _rows(database, "SELECT id FROM push_outbox")) == 1  # the cancel's


@KNOWN
async def test_an_end_without_push_configs_queues_none(database: Database, told: bool) -> None:
    statements = record_statements(database)
    store = TaskStore(database)
    begun = await _working(store, push=None)
    statements.clear()
    end = await store.end_turn(
        begun.task.id, TaskState.TASK_STATE_FAILED, context_id=AWKWARD_CONTEXT if told else None
    )
    assert end.won
    assert end.pushes == ()
    if told and isinstance(database.peewee, peewee.PostgresqlDatabase):
        assert len(statements) == 1
    assert await _rows(database, "SELECT id FROM push_outbox") == []
