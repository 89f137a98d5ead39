"""A push config's target is checked once: at the edge as it is written (the store keeps that
verdict), or, for a row an older release wrote unchecked, the first time a push to it is queued
or sent; the verdict is kept on the row and never worked out again, and the deliverer sends
what it is given."""

from __future__ import annotations

import json
import uuid

from looping_core.a2a import Message, Part, Role, TaskPushNotificationConfig, TaskState
from looping_core.contract import Identity
from looping_core.store.internal import Database, TaskStore

ALICE = Identity("t", "https://gateway.example", "alice")
GOOD = TaskPushNotificationConfig(url="https://gateway.example/push", token="t0k")


def _user() -> Message:
    return Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=(Part(text="hi"),))


async def _sql(database: Database, statement: str, *params: object) -> list[tuple[object, ...]]:
    """Run one statement on the store's thread; the rows it returns (none for a write)."""

    def run() -> list[tuple[object, ...]]:
        cursor = database.execute(statement, params)
        return list(cursor.fetchall()) if cursor.description else []

    return await database.run(run)


async def _verdicts(database: Database, task_id: str) -> list[tuple[object, ...]]:
    rows = await _sql(
        database,
        "SELECT config_id, target_checked, undeliverable FROM push_configs WHERE task_id = ?"
        " ORDER BY config_id",
        task_id,
    )
    return [(config, bool(checked), why) for config, checked, why in rows]


async def test_a_config_the_edge_wrote_is_checked_already(database: Database) -> None:
    store = TaskStore(database)
    task = (await store.start_turn(ALICE, _user(), GOOD)).task
    assert await _verdicts(database, task.id) == [(task.id, True, None)]


async def test_an_older_releases_row_is_checked_at_its_first_push_and_never_again(
    database: Database,
) -> None:
    store = TaskStore(database)
    task = (await store.start_turn(ALICE, _user(), None)).task
    legacy = {"url": "https://gateway.example/push", "token": "a\nb", "taskId": task.id}
    fine = {"url": "https://gateway.example/push", "token": "ok", "taskId": task.id}
    for config_id, body in (("bad", legacy), ("good", fine)):
        await _sql(
            database,
            "INSERT INTO push_configs (task_id, config_id, body) VALUES (?, ?, ?)",
            task.id, config_id, json.dumps({**body, "id": config_id}),
        )  # fmt: skip
    assert [checked for _, checked, _ in await _verdicts(database, task.id)] == [False, False]

    assert await store.transition(task.id, TaskState.TASK_STATE_INPUT_REQUIRED)
    rows = await store.outbox_rows(task.id)
    assert {row["configId"]: row["state"] for row in rows} == {"bad": "failed", "good": "pending"}
    [failed] = [row for row in rows if row["configId"] == "bad"]
    assert failed["attempts"][0]["error"].startswith("undeliverable config: token")
    [(_, bad_checked, why), (_, good_checked, fine_why)] = await _verdicts(database, task.id)
    assert bad_checked
    assert good_checked
    assert why is not None
    assert why.startswith("token")
    assert fine_why is None

    # Swap the rows' bodies behind the store's back: the kept verdicts decide, not a new check.
    await _sql(
        database, "UPDATE push_configs SET body = ? WHERE config_id = 'bad'",
        json.dumps({**fine, "id": "bad"}),
    )  # fmt: skip
    await _sql(
        database, "UPDATE push_configs SET body = ? WHERE config_id = 'good'",
        json.dumps({**legacy, "id": "good"}),
    )  # fmt: skip
    follow_up = Message(
        message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=(Part(text="more"),),
        task_id=task.id, context_id=task.context_id,
    )  # fmt: skip
    assert (await store.start_turn(ALICE, follow_up, None)).started
    assert await store.transition(task.id, TaskState.TASK_STATE_COMPLETED)
    latest = (await store.outbox_rows(task.id))[-2:]
    assert {row["configId"]: row["state"] for row in latest} == {
        "bad": "failed", "good": "pending",
    }  # fmt: skip


async def test_a_pending_push_an_older_release_queued_is_failed_once_when_read(
    database: Database,
) -> None:
    store = TaskStore(database)
    task = (await store.start_turn(ALICE, _user(), None)).task
    body = {"url": "https://gateway.example/push", "token": "a\nb", "taskId": task.id, "id": "c"}
    await _sql(
        database,
        "INSERT INTO push_configs (task_id, config_id, body) VALUES (?, 'c', ?)",
        task.id, json.dumps(body),
    )  # fmt: skip
    await _sql(
        database,
        "INSERT INTO push_outbox (task_id, config_id, jti, url, body, state, attempts,"
        " next_attempt_ts, created_ts, node, worker) VALUES (?, 'c', 'j1', ?, '{}', 'pending',"
        " 0, 0, 0, '', 0)",
        task.id, body["url"],
    )  # fmt: skip
    assert await store.due_pushes() == []  # never handed to the deliverer
    [row] = await store.outbox_rows(task.id)
    assert row["state"] == "failed"
    assert [a["error"][:22] for a in row["attempts"]] == ["undeliverable config: "]
    assert await store.due_pushes() == []
    assert len((await store.outbox_rows(task.id))[0]["attempts"]) == 1  # failed once
