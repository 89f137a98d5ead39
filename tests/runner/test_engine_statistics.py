"""procrastinate's jobs table is analyzed by the engine's sweep once it has changed by more rows
than it had when last analyzed: statistics from a quiet spell (a sweep job or two) would plan
the fetch of a burst of turns on the queue-name index, tens of times slower. Few changes never
trigger it."""

from __future__ import annotations

import asyncio

import procrastinate
import psycopg
import pytest

from looping_core.runner._engine_schema import (
    apply_engine_schema,
    engine_schema,
    refresh_jobs_statistics,
)

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


def fetch_plan(url: str) -> str:
    """The plan procrastinate's fetch ran with (the function's inner statement, logged by
    auto_explain to this session), after its job was handed back: the queue is left as it was."""
    plans: list[str] = []
    with psycopg.connect(url) as connection:
        connection.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
        for setting in (
            "LOAD 'auto_explain'",
            "SET auto_explain.log_min_duration = 0",
            "SET auto_explain.log_nested_statements = on",
            "SET client_min_messages = log",
        ):
            connection.execute(setting)
        connection.execute(
            "SELECT * FROM procrastinate_fetch_job_v2(ARRAY['looping-turns']::varchar[], NULL)"
        ).fetchall()
        connection.rollback()
    return "\n".join(plan for plan in plans if "WITH candidate" in plan)


def add_locked_turns(url: str, count: int) -> None:
    """`count` waiting turn jobs, each locked on a task of its own, as the engine defers them."""
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(
            "INSERT INTO procrastinate_jobs (queue_name, task_name, lock, queueing_lock, args)"
            " SELECT 'looping-turns', 'looping.run_turn', 't' || n, 't' || n, '{}'"
            " FROM generate_series(1, %s) AS n",
            (count,),
        )


def test_the_fetch_takes_the_first_due_job_in_order_even_with_statistics_of_a_quiet_spell(
    postgres_url: str,
) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        assert apply_engine_schema(connection) == [
            "schema", "index on open jobs' locks", "fetch planned in queue order",
        ]  # fmt: skip
        connection.execute("ALTER TABLE procrastinate_jobs SET (autovacuum_enabled = false)")
    add_jobs(postgres_url, 1, queue="looping-sweeps")  # a quiet spell, analyzed: no turns
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("ANALYZE procrastinate_jobs")
    add_locked_turns(postgres_url, 2000)  # then a burst the statistics do not know of

    plan = fetch_plan(postgres_url)
    assert "Index Scan using procrastinate_jobs_priority_idx_v1 on procrastinate_jobs jobs" in plan
    assert "Sort" not in plan  # not every waiting turn read and sorted
    assert "Index Scan using looping_jobs_open_lock_idx" in plan  # each lock checked at once

    # procrastinate's own function and indexes, as it ships them, read and sort them all: the
    # plan the additions prevent (this also proves the test can tell them apart).
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("ALTER FUNCTION procrastinate_fetch_job_v2 RESET enable_sort")
        connection.execute("DROP INDEX looping_jobs_open_lock_idx")
    plan = fetch_plan(postgres_url)
    assert "Sort" in plan
    assert "procrastinate_jobs_id_lock_idx_v1" in plan


def test_additions_a_procrastinate_migration_undid_are_missing_and_applied_again(
    postgres_url: str,
) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        apply_engine_schema(connection)
        assert engine_schema(connection).current
        assert apply_engine_schema(connection) == []  # nothing twice

        # A migration that replaces the fetch function (CREATE OR REPLACE drops its settings)
        # and one that rebuilds the table's indexes.
        connection.execute("ALTER FUNCTION procrastinate_fetch_job_v2 RESET enable_sort")
        connection.execute("DROP INDEX looping_jobs_open_lock_idx")
        schema = engine_schema(connection)
        assert not schema.current
        assert schema.pending == ()  # procrastinate's own scripts are all applied
        assert schema.missing == ("index on open jobs' locks", "fetch planned in queue order")

        assert apply_engine_schema(connection) == list(schema.missing)
        assert engine_schema(connection).current
        settings = connection.execute(
            "SELECT proconfig FROM pg_proc WHERE proname = 'procrastinate_fetch_job_v2'"
        ).fetchone()
        assert settings == (["enable_sort=off"],)
