"""procrastinate's jobs table is analyzed by the engine's sweep once it has changed by more rows
than it had when last analyzed: statistics from a quiet spell (a sweep job or two) would plan
the fetch of a burst of turns on the queue-name index, tens of times slower. Few changes never
trigger it."""

from __future__ import annotations

import asyncio

import procrastinate
import psycopg
import pytest

from looping_core.runner._engine_schema import apply_engine_schema, refresh_jobs_statistics

pytestmark = pytest.mark.usefixtures("postgres_url")


def add_jobs(url: str, count: int, queue: str = "looping-turns") -> None:
    """`count` waiting jobs, from a connection that is closed at once: a backend reports its
    row counts to the statistics views when it exits (an idle one may wait seconds)."""
    with psycopg.connect(url, autocommit=True) as connection:
        for _ in range(count):
            connection.execute(
                "INSERT INTO procrastinate_jobs (queue_name, task_name, args, status)"
                " VALUES (%s, 'looping.run_turn', '{}', 'todo')",
                (queue,),
            )


async def refreshed(connector: procrastinate.PsycopgConnector) -> bool:
    """Whether the sweep's check analyzes the table, once the counts it reads have arrived."""
    for _ in range(40):
        if await refresh_jobs_statistics(connector):
            return True
        await asyncio.sleep(0.05)
    return False


def last_analyze(url: str) -> object:
    with psycopg.connect(url) as connection:
        row = connection.execute(
            "SELECT last_analyze FROM pg_stat_user_tables WHERE relname = 'procrastinate_jobs'"
        ).fetchone()
    assert row is not None
    return row[0]


async def test_the_jobs_table_is_analyzed_once_it_changed_by_more_than_its_size(
    postgres_url: str,
) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        apply_engine_schema(connection)
        # Only the sweep's check analyzes here: an autoanalyze between two steps (its
        # threshold is 50 rows and a tenth of the table) would reset the counts it reads.
        connection.execute("ALTER TABLE procrastinate_jobs SET (autovacuum_enabled = false)")
    connector = procrastinate.PsycopgConnector(conninfo=postgres_url)
    await connector.open_async()
    try:
        add_jobs(postgres_url, 2, queue="looping-sweeps")  # a quiet spell: a sweep or two
        assert not await refreshed(connector)
        assert last_analyze(postgres_url) is None

        add_jobs(postgres_url, 150)  # a burst of turns: more changes than the floor
        assert await refreshed(connector)
        first = last_analyze(postgres_url)
        assert first is not None
        assert not await refresh_jobs_statistics(connector)  # analyzed: nothing changed since

        add_jobs(postgres_url, 100)  # fewer changes than the 152 rows it had: not yet
        assert not await refreshed(connector)
        assert last_analyze(postgres_url) == first
        add_jobs(postgres_url, 60)  # now more than it had
        assert await refreshed(connector)
        assert last_analyze(postgres_url) != first
    finally:
        await connector.close_async()
