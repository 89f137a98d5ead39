"""`[retention]`: what goes (ended tasks with all that hangs off them, old events of ended
tasks, pushes done with) and what never does (a task that has not ended, one waiting for
input, a push still pending), in bounded batches, on both stores."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from looping_core.a2a import Message, Part, Role, TaskPushNotificationConfig, TaskState
from looping_core.config import RetentionConfig
from looping_core.content import TextBlock, UserMessage
from looping_core.contract import Identity, SessionRef
from looping_core.runner.internal import cron_of, keep_pruning
from looping_core.store import _retention as retention_module
from looping_core.store.internal import (
    Database,
    PruneCounts,
    RetentionPolicy,
    SessionStore,
    TaskStore,
    now_us,
    prune,
)

ALICE = Identity("t", "https://gateway.example", "alice")
DAY = 86400
OLD = now_us() - 40 * DAY * 1_000_000
HI = UserMessage((TextBlock("hi"),))
POLICY = RetentionPolicy(finished_after=30 * DAY, events_after=DAY, delivered_after=DAY)


def message(context: str | None = None) -> Message:
    return Message(
        message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=(Part(text="hi"),),
        context_id=context,
    )  # fmt: skip


def rows(database: Database, query: str, *params: Any) -> list[tuple[Any, ...]]:
    return list(database.run_sync(lambda: database.execute(query, params).fetchall()))


async def task(
    store: TaskStore,
    database: Database,
    state: TaskState | None,
    *,
    context: str | None = None,
    push: bool = True,
) -> str:
    """A task of ALICE, ended as `state` (None: still SUBMITTED), its end 40 days ago."""
    config = TaskPushNotificationConfig(url="https://gateway.example/push", token="t")
    begun = await store.start_turn(ALICE, message(context), config if push else None)
    task_id = begun.task.id
    if state is not None:
        await store.transition(task_id, state)
    database.run_sync(lambda: database.execute(
        "UPDATE tasks SET status_ts = ?, created_ts = ? WHERE id = ?", (OLD, OLD, task_id)
    ))  # fmt: skip
    return task_id


def age_everything(database: Database) -> None:
    """Events and pushes 40 days old, pushes delivered (as the deliverer would mark them)."""
    database.run_sync(lambda: database.execute("UPDATE task_events SET created_ts = ?", (OLD,)))
    database.run_sync(lambda: database.execute("UPDATE push_outbox SET created_ts = ?", (OLD,)))


async def test_ended_tasks_go_with_everything_and_nothing_unfinished_does(
    database: Database,
) -> None:
    store = TaskStore(database)
    sessions = SessionStore(database)
    ended = await task(store, database, TaskState.TASK_STATE_COMPLETED, context="c-ended")
    await sessions.append(SessionRef(ALICE, "c-ended"), [HI], task_id=ended)
    await sessions.append(SessionRef(ALICE, f"c-ended\x1f{ended}\x1fs1"), [HI])
    shared = await task(store, database, TaskState.TASK_STATE_FAILED, context="c-shared")
    still = await task(store, database, TaskState.TASK_STATE_CANCELED, context="c-shared")
    database.run_sync(lambda: database.execute(  # this one ended yesterday: kept
        "UPDATE tasks SET status_ts = ? WHERE id = ?", (now_us(), still)
    ))  # fmt: skip
    await sessions.append(SessionRef(ALICE, "c-shared"), [HI])
    running = await task(store, database, TaskState.TASK_STATE_WORKING)
    waiting = await task(store, database, TaskState.TASK_STATE_INPUT_REQUIRED)
    pending = await task(
        store, database, TaskState.TASK_STATE_COMPLETED
    )  # its push not delivered yet
    age_everything(database)
    database.run_sync(lambda: database.execute(
        "UPDATE push_outbox SET state = 'delivered' WHERE task_id <> ?", (pending,)
    ))  # fmt: skip

    counts = await prune(database, POLICY)

    left = {row[0] for row in rows(database, "SELECT id FROM tasks")}
    assert left == {still, running, waiting, pending}
    assert counts.tasks == 2
    for table in ("messages", "artifacts", "task_events", "push_configs", "subtasks"):
        orphans = rows(database, f"SELECT COUNT(*) FROM {table} WHERE task_id IN (?, ?)",
                       ended, shared)  # fmt: skip
        assert orphans == [(0,)], table
    assert rows(database, "SELECT COUNT(*) FROM push_outbox WHERE task_id IN (?, ?)",
                ended, shared) == [(0,)]  # fmt: skip
    assert rows(database, "SELECT state FROM push_outbox WHERE task_id = ?", pending) == [
        ("pending",)
    ]
    contexts = {row[0] for row in rows(database, "SELECT context_id FROM sessions")}
    assert contexts == {"c-shared"}  # c-ended and its subagent's went; c-shared has a task
    assert counts.sessions == 2
    assert rows(database, "SELECT COUNT(*) FROM session_messages") == [(1,)]
    # The ended task kept (yesterday's end) lost its 40-day-old events; the running one kept
    # its own: a stream may still resume from them.
    assert rows(database, "SELECT COUNT(*) FROM task_events WHERE task_id = ?", still) == [(0,)]
    assert rows(database, "SELECT COUNT(*) FROM task_events WHERE task_id = ?", running) != [(0,)]
    assert counts.events > 0
    assert await prune(database, POLICY) == PruneCounts()  # nothing twice


async def test_pushes_done_with_go_and_pending_ones_never(database: Database) -> None:
    store = TaskStore(database)
    ids = [await task(store, database, TaskState.TASK_STATE_COMPLETED) for _ in range(3)]
    database.run_sync(lambda: database.execute(  # the tasks ended recently: they stay
        "UPDATE tasks SET status_ts = ?", (now_us(),)
    ))  # fmt: skip
    age_everything(database)
    for task_id, state in zip(ids, ("delivered", "failed", "pending"), strict=True):
        database.run_sync(lambda t=task_id, s=state: database.execute(
            "UPDATE push_outbox SET state = ?, attempts = 1 WHERE task_id = ?", (s, t)
        ))  # fmt: skip
    outbox = rows(database, "SELECT id FROM push_outbox WHERE task_id = ?", ids[0])[0][0]
    database.run_sync(lambda: database.execute(
        "INSERT INTO push_attempts (outbox_id, attempt, at_ts, status, error, duration_ms)"
        " VALUES (?, 1, ?, 200, NULL, 3)", (outbox, OLD)
    ))  # fmt: skip
    counts = await prune(database, POLICY)
    assert counts.pushes == 2
    assert rows(database, "SELECT state FROM push_outbox") == [("pending",)]
    assert rows(database, "SELECT COUNT(*) FROM push_attempts") == [(0,)]
    assert len(rows(database, "SELECT id FROM tasks")) == 3


async def test_zero_keeps_a_kind_forever(database: Database) -> None:
    store = TaskStore(database)
    await task(store, database, TaskState.TASK_STATE_COMPLETED)
    age_everything(database)
    forever = RetentionPolicy(finished_after=0, events_after=0, delivered_after=0)
    assert await prune(database, forever) == PruneCounts()
    assert len(rows(database, "SELECT id FROM tasks")) == 1


async def test_a_backlog_goes_in_bounded_batches(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retention_module, "BATCH", 4)
    store = TaskStore(database)
    for _ in range(11):
        await task(store, database, TaskState.TASK_STATE_REJECTED, push=False)
    batches: list[int] = []
    original = retention_module._tasks_batch

    def counted(db: Database, cutoff: int) -> PruneCounts:
        done = original(db, cutoff)
        batches.append(done.tasks)
        return done

    monkeypatch.setattr(retention_module, "_tasks_batch", counted)
    counts = await prune(database, POLICY)
    assert counts.tasks == 11
    assert batches == [4, 4, 3]
    assert rows(database, "SELECT COUNT(*) FROM tasks") == [(0,)]


async def test_the_embedded_timer_prunes_every_interval(database: Database) -> None:
    store = TaskStore(database)
    await task(store, database, TaskState.TASK_STATE_COMPLETED, push=False)
    config = RetentionConfig(interval_seconds=0.05)  # type: ignore[arg-type]  # fast, for the test
    timer = asyncio.create_task(keep_pruning(database, config))
    try:
        async with asyncio.timeout(10):
            while rows(database, "SELECT COUNT(*) FROM tasks") != [(0,)]:
                await asyncio.sleep(0.02)
    finally:
        timer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await timer


def test_intervals_become_cron_lines() -> None:
    assert [cron_of(s) for s in (60, 600, 1800, 3600, 21600, 86400)] == [
        "*/1 * * * *", "*/10 * * * *", "*/30 * * * *", "0 */1 * * *", "0 */6 * * *",
        "0 0 * * *",
    ]  # fmt: skip


def test_looping_db_prune_deletes_now_and_says_what(
    looping_cli: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    config = tmp_path / "looping.toml"
    config.write_text(f'[store]\nurl = "sqlite:///{tmp_path / "store.db"}"\n')
    assert looping_cli("db", "upgrade", "--config", config).returncode == 0
    database = Database.from_url(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        asyncio.run(_two_old_tasks(database))
    finally:
        database.close()
    done = looping_cli("db", "prune", "--config", config)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "deleted 2 ended task(s), 0 session(s), 0 event(s) and 0 push(es)"
    again = looping_cli("db", "prune", "--config", config)
    assert again.stdout.startswith("deleted 0 ended task(s)")


async def _two_old_tasks(database: Database) -> None:
    store = TaskStore(database)
    for _ in range(2):
        await task(store, database, TaskState.TASK_STATE_COMPLETED, push=False)
