"""A new task's accept on the job engine is one statement, its own transaction: the limits'
count, the task, its message, its push config and its turn's job, deferred by procrastinate's
own function with the job its public deferrer makes (`EngineHooks.new_turn_call`). Only a task
written gets a job: a duplicate and a turn past a limit defer none. A procrastinate whose defer
has another shape is not embedded: the accept then defers in a transaction, as before."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from looping_core.a2a import Message, Part, Role, TaskPushNotificationConfig
from looping_core.contract import Identity
from looping_core.runner._engine_jobs import _JOB_TO_DEFER, EngineHooks, _defer_call
from looping_core.runner._engine_schema import apply_engine_schema
from looping_core.store._one_statement import UNSETTLED
from looping_core.store.internal import (
    Database,
    TaskStore,
    TooManyTurns,
    TurnLimits,
    bind,
    upgrade,
)

from support.engine import rows
from support.statements import record_statements

pytestmark = pytest.mark.usefixtures("postgres_url")

ALICE = Identity(tenant="t", issuer="https://gateway.example", subject="alice")
BOB = Identity(tenant="t", issuer="https://gateway.example", subject="bob")
PUSH = TaskPushNotificationConfig(url="https://gateway.example/push", id="inbox")
JOB_COLUMNS = "queue_name, task_name, priority, lock, queueing_lock, args, scheduled_at, status"
DEFER = (
    "SELECT unnest(procrastinate_defer_jobs_v1(%(jobs)s::procrastinate_job_to_defer_v1[])) AS id;"
)


def message() -> Message:
    return Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=(Part(text="hi"),))


BOUND = 4
"""The fair order's bound in these tests (the server's is the default tenant limit)."""


def job_of(url: str, task_id: str) -> list[tuple[object, ...]]:
    return rows(url, f"SELECT {JOB_COLUMNS} FROM procrastinate_jobs WHERE lock = '{task_id}'")


async def test_an_accept_defers_its_job_in_its_one_statement(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        apply_engine_schema(connection)
    database = Database.from_url(postgres_url)
    await database.run_alone(lambda: (bind(database.peewee), upgrade(database.peewee)))
    statements = record_statements(database)
    hooks = EngineHooks()
    store = TaskStore(database, jobs=hooks)
    limits = TurnLimits(caller=2, tenant=3)
    try:
        first = (await store.start_turn(ALICE, message(), PUSH, limits=limits)).task
        statements.clear()
        second_message = message()
        second = (await store.start_turn(ALICE, second_message, PUSH, limits=limits)).task
        assert len(statements) == 1  # no BEGIN, no COMMIT, no defer of its own

        # The job procrastinate's deferrer makes in a transaction, for comparison.
        with psycopg.connect(postgres_url) as connection:
            hooks.turn_queued(connection, "compared", priority=-1)
        [compared] = job_of(postgres_url, "compared")
        [deferred] = job_of(postgres_url, second.id)
        assert deferred[:2] == compared[:2]  # its queue and task
        assert deferred[2] == -1  # minus the tenant's unsettled turns when it was accepted
        assert deferred[3:5] == (second.id, second.id)  # its lock and queueing lock
        assert deferred[5] == {"task_id": second.id}
        assert deferred[6:] == compared[6:] == (None, "todo")
        assert len(job_of(postgres_url, first.id)) == 1

        # A duplicate returns its task and defers nothing; a turn past a limit writes nothing.
        again = await store.start_turn(ALICE, second_message, PUSH, limits=limits)
        assert again.task.id == second.id
        assert len(job_of(postgres_url, second.id)) == 1
        with pytest.raises(TooManyTurns):
            await store.start_turn(ALICE, message(), PUSH, limits=limits)
        third = (await store.start_turn(BOB, message(), None, limits=limits)).task
        with pytest.raises(TooManyTurns):
            await store.start_turn(BOB, message(), None, limits=limits)
        jobs = rows(postgres_url, "SELECT lock FROM procrastinate_jobs ORDER BY id")
        assert jobs == [(first.id,), (second.id,), ("compared",), (third.id,)]
        assert rows(postgres_url, "SELECT COUNT(*) FROM tasks") == [(3,)]
    finally:
        database.close()


async def test_the_fair_order_counts_a_tenants_backlog_up_to_its_bound(postgres_url: str) -> None:
    """Without a tenant limit, the fair order's count stops at its bound (`TurnLimits.fair`): a
    job's priority is minus the tenant's unsettled turns up to it, then stays there, so an
    accept costs the same whatever the backlog. A tenant limit is counted up to the limit."""
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        apply_engine_schema(connection)
    database = Database.from_url(postgres_url)
    await database.run_alone(lambda: (bind(database.peewee), upgrade(database.peewee)))
    store = TaskStore(database, jobs=EngineHooks())
    fair = TurnLimits(fair=BOUND)
    try:
        for _ in range(BOUND + 3):
            await store.start_turn(ALICE, message(), None, limits=fair)
        priorities = [
            priority for (priority,) in rows(
                postgres_url, "SELECT priority FROM procrastinate_jobs ORDER BY id"
            )
        ]  # fmt: skip
        assert priorities == [*range(0, -BOUND, -1), -BOUND, -BOUND, -BOUND]

        # A limit above the bound is still counted up to the limit, and holds.
        limited = TurnLimits(tenant=BOUND + 5, fair=BOUND)
        await store.start_turn(BOB, message(), None, limits=limited)
        await store.start_turn(BOB, message(), None, limits=limited)
        with pytest.raises(TooManyTurns):
            await store.start_turn(BOB, message(), None, limits=limited)
        last = rows(postgres_url, "SELECT priority FROM procrastinate_jobs ORDER BY id DESC")[:2]
        assert last == [(-BOUND - 4,), (-BOUND - 3,)]
    finally:
        database.close()


async def test_the_count_reads_the_newest_unsettled_tasks_first(postgres_url: str) -> None:
    """Both counts walk the partial index backwards, newest first, as a prepared statement's
    generic plan too: the entries of tasks settled since the last vacuum, the oldest, come
    last, so a bounded count seldom steps over them."""
    database = Database.from_url(postgres_url)
    await database.run_alone(lambda: (bind(database.peewee), upgrade(database.peewee)))
    database.close()
    query = UNSETTLED.replace("?", "%s")
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("SET plan_cache_mode = force_generic_plan")
        plan = connection.execute(f"EXPLAIN {query}", ("t", 64, "t", "i", "s", 8)).fetchall()
    scans = [line for (line,) in plan if "Scan" in line]
    assert len(scans) == 2, plan
    assert all("Index Only Scan Backward using tasks_unsettled_newest" in s for s in scans), plan


def test_a_defer_of_another_shape_is_not_embedded() -> None:
    fields = tuple(_JOB_TO_DEFER)
    call = _defer_call(DEFER, fields)
    assert call is not None
    assert call.startswith("procrastinate_defer_jobs_v1(ARRAY[ROW(")
    assert call.count("?") == len(fields) - 1  # the priority is the store's expression
    assert _defer_call(DEFER.replace("_job_to_defer_v1", "_job_to_defer_v2"), fields) is None
    assert _defer_call(DEFER.replace("AS id", "AS id, 1"), fields) is None
    assert _defer_call(DEFER, (*fields, "abort_requested")) is None
    assert _defer_call(DEFER, None) is None
