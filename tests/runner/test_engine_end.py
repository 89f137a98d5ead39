"""A turn's end on the job engine, told its task's context, is one statement and its own
transaction (`EndAlone`): the change, the artifacts, the events, the pushes queued for the job to
deliver (their body built from what the write leaves, earlier turns' artifacts included) and,
when it queues none, the job's finish. What it cannot decide in SQL is left to the write a
statement at a time: a push config an older release wrote (its target not checked yet). A config
whose secrets cannot be opened fails its push after the end, as it would have been queued."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
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
from looping_core.runner._engine_jobs import EngineHooks
from looping_core.runner._engine_schema import apply_engine_schema
from looping_core.store.internal import (
    Database,
    JobTicket,
    PushSecrets,
    TaskStore,
    TurnEnd,
    bind,
    upgrade,
)

from support.engine import rows
from support.statements import record_statements

pytestmark = pytest.mark.usefixtures("postgres_url")

ALICE = Identity("t", "https://gateway.example", "alice")
PUSH = TaskPushNotificationConfig(url="https://gateway.example/push", token="t0k")
CONTEXT = 'ctx "quoted" \\ back\u00e9 \u2028 \n'
"""A context a caller chose: quotes, a backslash, non-ASCII, a line separator, a newline."""
COMPLETED = TaskState.TASK_STATE_COMPLETED


@pytest.fixture
async def engine_store(postgres_url: str) -> AsyncIterator[tuple[Database, list[str], TaskStore]]:
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        apply_engine_schema(connection)
    database = Database.from_url(postgres_url)
    await database.run_alone(lambda: (bind(database.peewee), upgrade(database.peewee)))
    statements = record_statements(database)
    secrets = PushSecrets(b"a test's key material, 32 bytes or more")
    yield database, statements, TaskStore(database, jobs=EngineHooks(), secrets=secrets)
    database.close()


def _message(role: Role, text: str, *, task_id: str = "") -> Message:
    return Message(
        message_id=str(uuid.uuid4()), role=role, parts=(Part(text=text),), task_id=task_id,
        context_id=CONTEXT,
    )  # fmt: skip


def _job_of(url: str, task_id: str) -> int:
    [(job_id,)] = rows(url, f"SELECT max(id) FROM procrastinate_jobs WHERE lock = '{task_id}'")
    return int(job_id)  # type: ignore[call-overload]


async def _begun(store: TaskStore, url: str, message: Message, push: Any = PUSH) -> tuple[str, int]:
    """A turn accepted (its job deferred) and begun: the task's id and its job's."""
    task = (await store.start_turn(ALICE, message, push)).task
    assert await store.begin_turn(task.id) is not None
    return task.id, _job_of(url, task.id)


async def _end(store: TaskStore, task_id: str, job_id: int, **change: Any) -> TurnEnd:
    answer = _message(Role.ROLE_AGENT, "done")
    return await store.end_turn(
        task_id, change.pop("to", COMPLETED), status_message=answer, reply=answer,
        job=JobTicket(job_id), context_id=CONTEXT, **change,
    )  # fmt: skip


def _job_gone(url: str, job_id: int) -> bool:
    return rows(url, f"SELECT status FROM procrastinate_jobs WHERE id = {job_id}") == []


async def test_an_end_with_a_push_is_one_statement_and_queues_it(
    engine_store: tuple[Database, list[str], TaskStore], postgres_url: str
) -> None:
    """Two turns of one task: the second's push carries the first turn's artifacts with its own
    (an id written again keeps its place and takes the new body), as the task reads back."""
    _, statements, store = engine_store
    first = _message(Role.ROLE_USER, "hi")
    task_id, job_id = await _begun(store, postgres_url, first)
    asked = await _end(
        store, task_id, job_id, to=TaskState.TASK_STATE_INPUT_REQUIRED,
        artifacts=[Artifact(artifact_id="a1", parts=(Part(text="one"),)),
                   Artifact(artifact_id="a2", parts=(Part(text="two"),))],
    )  # fmt: skip
    assert asked.won
    follow_up = _message(Role.ROLE_USER, "go on", task_id=task_id)
    await store.start_turn(ALICE, follow_up, None)
    assert await store.begin_turn(task_id) is not None
    job_id = _job_of(postgres_url, task_id)
    statements.clear()

    end = await _end(
        store, task_id, job_id, metadata={"note": "\u00fcber"}, spent=0.5,
        artifacts=[Artifact(artifact_id="a3", parts=(Part(text="three"),)),
                   Artifact(artifact_id="a2", parts=(Part(data={"n": 2}),))],
    )  # fmt: skip

    assert len(statements) == 1  # no transaction around it, no INSERT of its own for the push
    assert statements[0].startswith("WITH changed AS")
    assert end.won
    assert not end.job_finished  # its push is the job's to deliver
    assert not _job_gone(postgres_url, job_id)
    [push] = end.pushes or ()
    without_history = await store.get(ALICE, task_id, history_length=0)
    assert json.loads(push.body) == to_wire(StreamResponse(task=without_history))
    assert [a.artifact_id for a in without_history.artifacts] == ["a1", "a2", "a3"]
    assert without_history.artifacts[1].parts == (Part(data={"n": 2}),)
    assert (push.token, push.url, push.attempts) == ("t0k", PUSH.url, 0)
    [(jti, url, body, state)] = rows(
        postgres_url,
        f"SELECT jti, url, body, state FROM push_outbox WHERE id = {push.id}",
    )
    assert (jti, url, body, state) == (push.jti, PUSH.url, push.body.decode(), "pending")
    uuid.UUID(str(jti))  # a jti of its own, as every push's
    assert rows(postgres_url, "SELECT cost FROM caller_spend") == [(0.5,)]


async def test_an_end_without_pushes_finishes_its_job_in_its_statement(
    engine_store: tuple[Database, list[str], TaskStore], postgres_url: str
) -> None:
    _, statements, store = engine_store
    task_id, job_id = await _begun(store, postgres_url, _message(Role.ROLE_USER, "hi"), None)
    statements.clear()
    end = await _end(store, task_id, job_id)
    assert end.won
    assert end.job_finished
    assert end.pushes == ()
    assert len(statements) == 1
    assert "procrastinate_finish_job" in statements[0]
    assert _job_gone(postgres_url, job_id)


async def test_a_refused_end_writes_nothing_and_finishes_nothing(
    engine_store: tuple[Database, list[str], TaskStore], postgres_url: str
) -> None:
    _, _, store = engine_store
    task_id, job_id = await _begun(store, postgres_url, _message(Role.ROLE_USER, "hi"))
    await store.cancel(ALICE, task_id)
    outbox = rows(postgres_url, "SELECT id FROM push_outbox")
    end = await _end(store, task_id, job_id)
    assert not end.won
    assert not end.job_finished
    assert not _job_gone(postgres_url, job_id)
    assert rows(postgres_url, "SELECT id FROM push_outbox") == outbox  # the cancel's alone
    read = await store.get(ALICE, task_id, history_length=None)
    assert read.status.state is TaskState.TASK_STATE_CANCELED
    assert [m.parts[0].text for m in read.history] == ["hi"]


async def test_a_config_an_older_release_wrote_is_checked_by_the_end_a_statement_at_a_time(
    engine_store: tuple[Database, list[str], TaskStore], postgres_url: str
) -> None:
    _, statements, store = engine_store
    task_id, job_id = await _begun(store, postgres_url, _message(Role.ROLE_USER, "hi"))
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("UPDATE push_configs SET target_checked = FALSE")
    statements.clear()
    end = await _end(store, task_id, job_id)
    assert end.won
    [push] = end.pushes or ()
    assert push.token == "t0k"
    assert len(statements) > 1  # refused as one statement, written a statement at a time
    assert rows(postgres_url, "SELECT target_checked, undeliverable FROM push_configs") == [
        (True, None)
    ]


async def test_a_config_whose_secrets_do_not_open_fails_its_push_after_the_end(
    engine_store: tuple[Database, list[str], TaskStore], postgres_url: str
) -> None:
    """A sealed token is bound to its task and config: copied to another task's config, it does
    not open. The end commits, and that push is failed with its reason, not handed over."""
    _, _, store = engine_store
    task_id, job_id = await _begun(store, postgres_url, _message(Role.ROLE_USER, "hi"))
    other = (await store.start_turn(ALICE, _message(Role.ROLE_USER, "other"), PUSH)).task
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(
            "UPDATE push_configs SET body = (SELECT body FROM push_configs WHERE task_id = %s)"
            " WHERE task_id = %s",
            (other.id, task_id),
        )
    end = await _end(store, task_id, job_id)
    assert end.won
    assert end.pushes == ()
    [row] = await store.outbox_rows(task_id)
    assert row["state"] == "failed"
    [attempt] = row["attempts"]
    assert attempt["error"].startswith("undeliverable config:")
    read = await store.get(ALICE, task_id, history_length=0)
    assert read.status.state is COMPLETED
