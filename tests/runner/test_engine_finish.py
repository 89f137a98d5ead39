"""A job finished in the transaction of its last write (`EngineHooks.job_done`): procrastinate's
own finish, run on the store's connection, ends the job only if that transaction commits; a
turn's end does it only when it wins and queues no push (else the push's record does); the
engine's job manager then skips the finish procrastinate's worker asks for after the job returns,
and one whose last write was never answered is finished (or retried) unless that write
committed."""

from __future__ import annotations

import contextlib
import uuid

import attrs
import procrastinate
import psycopg
import pytest
from procrastinate import jobs as engine_jobs

from looping_core.a2a import Message, Part, Role, TaskPushNotificationConfig, TaskState
from looping_core.contract import Identity
from looping_core.runner._engine_jobs import EngineHooks, JobManager
from looping_core.runner._engine_schema import apply_engine_schema
from looping_core.store.internal import Database, JobTicket, TaskStore, bind, upgrade

from support.engine import rows
from support.statements import record_statements

pytestmark = pytest.mark.usefixtures("postgres_url")

CALLER = Identity(tenant="alice", issuer="https://gateway.example", subject="caller")
PUSH = TaskPushNotificationConfig(url="https://gateway.example/push", id="inbox")


def turn_message() -> Message:
    return Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=(Part(text="hi"),))


def reply() -> Message:
    return Message(message_id=uuid.uuid4().hex, role=Role.ROLE_AGENT, parts=(Part(text="ok"),))


def running_jobs(url: str, count: int) -> list[int]:
    """`count` jobs a worker is running (status `doing`)."""
    with psycopg.connect(url, autocommit=True) as connection:
        return [
            connection.execute(
                "INSERT INTO procrastinate_jobs (queue_name, task_name, args, status)"
                " VALUES ('looping-turns', 'looping.run_turn', '{}', 'doing') RETURNING id"
            ).fetchone()[0]  # type: ignore[index]
            for _ in range(count)
        ]


def statuses(url: str, ids: list[int]) -> list[str | None]:
    """Each job's status, `None` for a job that is gone (finished and deleted)."""
    with psycopg.connect(url) as connection:
        found = dict(
            connection.execute(
                "SELECT id, status FROM procrastinate_jobs WHERE id = ANY(%s)", (ids,)
            ).fetchall()
        )
    return [found.get(job_id) for job_id in ids]


def job(job_id: int) -> engine_jobs.Job:
    return engine_jobs.Job(
        id=job_id, queue="looping-turns", lock=None, queueing_lock=None,
        task_name="looping.run_turn",
    )  # fmt: skip


async def test_a_job_ends_with_the_write_that_finishes_it_and_only_if_it_commits(
    postgres_url: str,
) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        apply_engine_schema(connection)
    committed, rolled_back = running_jobs(postgres_url, 2)
    hooks = EngineHooks()
    with psycopg.connect(postgres_url) as connection:
        with connection.transaction():
            hooks.job_done(connection, committed)
        with contextlib.suppress(RuntimeError), connection.transaction():
            hooks.job_done(connection, rolled_back)
            raise RuntimeError("the write failed after it")  # its transaction is rolled back
    assert statuses(postgres_url, [committed, rolled_back]) == [None, "doing"]


async def test_the_workers_finish_is_skipped_after_the_jobs_own_and_done_when_unknown(
    postgres_url: str,
) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        apply_engine_schema(connection)
    ended, ending_committed, ending_lost, ordinary = running_jobs(postgres_url, 4)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        EngineHooks().job_done(connection, ending_committed)  # its write committed, unanswered
    connector = procrastinate.PsycopgConnector(conninfo=postgres_url)
    await connector.open_async()
    try:
        manager = JobManager(connector)
        manager.finished_itself(ended)
        manager.may_finish_itself(ending_committed)
        manager.may_finish_itself(ending_lost)
        succeeded = engine_jobs.Status.SUCCEEDED
        for job_id in (ended, ending_committed, ending_lost, ordinary):
            await manager.finish_job(job(job_id), status=succeeded, delete_job=True)
        # `ended` is left as it is: its finish committed with its write, so none is sent (were
        # it sent, this job, still `doing` here, would be gone).
        assert statuses(postgres_url, [ended, ending_committed, ending_lost, ordinary]) == [
            "doing", None, None, None,
        ]  # fmt: skip
        # Each is forgotten as it is finished: a second finish is an ordinary one.
        with pytest.raises(procrastinate.exceptions.ConnectorException):
            await manager.finish_job(job(ending_committed), status=succeeded, delete_job=True)
        # Only a job whose own write may have finished it is forgiven a finish that finds it
        # gone.
        with pytest.raises(procrastinate.exceptions.ConnectorException):
            await manager.finish_job(job(ordinary), status=succeeded, delete_job=True)
    finally:
        await connector.close_async()


async def test_a_turns_end_finishes_its_job_only_when_it_queues_no_push_and_wins(
    postgres_url: str,
) -> None:
    """The store's side: a turn's end made by the job (`JobTicket`) finishes it in the same
    transaction when it wins and queues no push for the job to deliver, and says so."""
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        apply_engine_schema(connection)
    database = Database.from_url(postgres_url)
    await database.run_alone(lambda: (bind(database.peewee), upgrade(database.peewee)))
    store = TaskStore(database, jobs=EngineHooks())
    completed = TaskState.TASK_STATE_COMPLETED
    try:

        async def begun(push: TaskPushNotificationConfig | None) -> tuple[str, int]:
            """A task begun, and the id of the job its accept deferred."""
            task = (await store.start_turn(CALLER, turn_message(), push)).task
            assert await store.begin_turn(task.id) is not None
            [job_id] = [job for job, in rows(postgres_url, "SELECT id FROM procrastinate_jobs"
                                             f" WHERE lock = '{task.id}'")]  # fmt: skip
            return task.id, int(job_id)  # type: ignore[call-overload]

        quiet, quiet_job = await begun(None)
        end = await store.end_turn(quiet, completed, reply=reply(), job=JobTicket(quiet_job))
        assert end.won
        assert end.job_finished
        assert end.pushes == ()

        pushed, pushed_job = await begun(PUSH)
        end = await store.end_turn(pushed, completed, reply=reply(), job=JobTicket(pushed_job))
        assert end.won
        assert not end.job_finished  # its push is the job's to deliver
        assert end.pushes is not None
        [item] = end.pushes

        lost, lost_job = await begun(None)
        assert await store.transition(lost, TaskState.TASK_STATE_CANCELED)
        end = await store.end_turn(lost, completed, reply=reply(), job=JobTicket(lost_job))
        assert not end.won
        assert not end.job_finished

        # A failed attempt the turn's job made, not its last write: its retry gets a push job
        # of its own, scheduled when the deliverer said (the one place that time is kept: the
        # outbox row keeps its first), and the turn's job goes on.
        later = item.created_ts + 3_600_000_000
        assert not await store.record_attempt(
            item, status=503, error=None, duration_ms=1, outcome="pending",
            next_attempt_ts=later, job=JobTicket(pushed_job, last=False),
        )  # fmt: skip
        [(push_job, scheduled)] = rows(
            postgres_url,
            "SELECT id, extract(epoch FROM scheduled_at) * 1000000 FROM procrastinate_jobs"
            f" WHERE task_name = 'looping.deliver_push' AND args ->> 'outbox_id' = '{item.id}'",
        )
        assert abs(float(scheduled) - later) < 1_000_000  # type: ignore[arg-type]
        [(row_due,)] = rows(
            postgres_url, f"SELECT next_attempt_ts FROM push_outbox WHERE id = {item.id}"
        )
        assert row_due == item.created_ts
        # The pushed turn's job ends with its push's record instead; a push job whose push is
        # to be tried again does not end (it runs again), and no other job is deferred for it.
        again = attrs.evolve(item, attempts=1)
        assert not await store.record_attempt(
            again, status=503, error=None, duration_ms=1, outcome="pending",
            next_attempt_ts=later, job=JobTicket(int(push_job), push=item.id),  # type: ignore[call-overload]
        )  # fmt: skip
        assert await store.record_attempt(
            attrs.evolve(item, attempts=2), status=200, error=None, duration_ms=1,
            outcome="delivered", job=JobTicket(pushed_job),
        )  # fmt: skip
        pushes = rows(
            postgres_url,
            "SELECT count(*) FROM procrastinate_jobs WHERE task_name = 'looping.deliver_push'",
        )
        assert pushes == [(1,)]

        left = [quiet_job, pushed_job, lost_job]
        assert statuses(postgres_url, left) == [None, None, "todo"]
    finally:
        database.close()


async def test_a_retry_asked_of_a_job_its_own_write_finished_is_forgiven(
    postgres_url: str,
) -> None:
    """A shutdown cut a turn off while its end was in flight: the worker asks for the job to run
    again, and the end may have finished it meanwhile."""
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        apply_engine_schema(connection)
    gone, still_running = running_jobs(postgres_url, 2)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        EngineHooks().job_done(connection, gone)
    connector = procrastinate.PsycopgConnector(conninfo=postgres_url)
    await connector.open_async()
    try:
        manager = JobManager(connector)
        for job_id in (gone, still_running):
            manager.may_finish_itself(job_id)
        for job_id in (gone, still_running):
            await manager.retry_job(job(job_id))
        assert statuses(postgres_url, [gone, still_running]) == [None, "todo"]
        # Unless it may have finished itself, a retry of a job that is gone fails as
        # procrastinate's does.
        with pytest.raises(procrastinate.exceptions.ConnectorException):
            await manager.retry_job(job(gone))
    finally:
        await connector.close_async()


async def test_a_jobs_last_push_record_is_one_statement_that_records_and_finishes_or_neither(
    postgres_url: str,
) -> None:
    """The record of a delivered push that is its job's last write is one statement (the
    attempt, the row's new state, procrastinate's finish: one round trip, one transaction), so a
    finish that fails records nothing."""
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        apply_engine_schema(connection)
    database = Database.from_url(postgres_url)
    await database.run_alone(lambda: (bind(database.peewee), upgrade(database.peewee)))
    statements = record_statements(database)
    store = TaskStore(database, jobs=EngineHooks())
    try:
        task = (await store.start_turn(CALLER, turn_message(), PUSH)).task
        assert await store.begin_turn(task.id) is not None
        [(job_id,)] = rows(
            postgres_url, f"SELECT id FROM procrastinate_jobs WHERE lock = '{task.id}'"
        )
        end = await store.end_turn(
            task.id,
            TaskState.TASK_STATE_COMPLETED,
            reply=reply(),
            job=JobTicket(int(job_id)),  # type: ignore[call-overload]
        )
        assert end.pushes is not None
        [item] = end.pushes
        statements.clear()
        with psycopg.connect(postgres_url, autocommit=True) as connection:
            EngineHooks().job_done(connection, int(job_id))  # type: ignore[call-overload]
        with pytest.raises(Exception, match="Job was not found"):  # finished already: refused
            await store.record_attempt(
                item, status=200, error=None, duration_ms=1, outcome="delivered",
                job=JobTicket(int(job_id)),  # type: ignore[call-overload]
            )  # fmt: skip
        assert len(statements) == 1
        assert rows(
            postgres_url, f"SELECT count(*) FROM push_attempts WHERE outbox_id = {item.id}"
        ) == [(0,)]
        assert rows(postgres_url, f"SELECT state FROM push_outbox WHERE id = {item.id}") == [
            ("pending",)
        ]
    finally:
        database.close()
