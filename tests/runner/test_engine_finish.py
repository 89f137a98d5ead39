"""A job finished in the transaction of its last write (`EngineHooks.job_done`): procrastinate's
own finish, run on the store's connection, ends the job only if that transaction commits; the
engine's job manager then skips the finish procrastinate's worker asks for after the job returns,
and one whose last write was never answered is finished unless that write committed."""

from __future__ import annotations

import contextlib

import procrastinate
import psycopg
import pytest
from procrastinate import jobs as engine_jobs

from looping_core.runner._engine import EngineHooks, _JobManager
from looping_core.runner._engine_schema import apply_engine_schema

pytestmark = pytest.mark.usefixtures("postgres_url")


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
        manager = _JobManager(connector)
        manager.ended.add(ended)
        manager.ending.update({ending_committed, ending_lost})
        succeeded = engine_jobs.Status.SUCCEEDED
        for job_id in (ended, ending_committed, ending_lost, ordinary):
            await manager.finish_job(job(job_id), status=succeeded, delete_job=True)
    finally:
        await connector.close_async()
    # `ended` is left as it is: its finish committed with its write, so none is sent (were it
    # sent, this job, still `doing` here, would be gone).
    assert statuses(postgres_url, [ended, ending_committed, ending_lost, ordinary]) == [
        "doing", None, None, None,
    ]  # fmt: skip
    assert not manager.ended
    assert not manager.ending
    # Only a job whose own write may have finished it is forgiven a finish that finds it gone.
    with pytest.raises(procrastinate.exceptions.ConnectorException):
        await _finish_twice(postgres_url, ordinary)


async def _finish_twice(url: str, job_id: int) -> None:
    connector = procrastinate.PsycopgConnector(conninfo=url)
    await connector.open_async()
    try:
        manager = _JobManager(connector)
        await manager.finish_job(job(job_id), status=engine_jobs.Status.SUCCEEDED, delete_job=True)
    finally:
        await connector.close_async()
