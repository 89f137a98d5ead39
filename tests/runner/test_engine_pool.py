"""The job engine's connection pool lends no connection the server has closed, and finds them
without a round trip: the check is one the engine gives procrastinate's pool, replacing the
empty query procrastinate's own check sends before every query. Its connections are in
autocommit: procrastinate's one-statement queries get no BEGIN and COMMIT around them."""

from __future__ import annotations

import psycopg
import pytest

from looping_core.runner._engine_jobs import connection_pool, still_connected


async def test_a_connection_the_server_closed_is_replaced_before_a_query_meets_it(
    postgres_url: str,
) -> None:
    pool = connection_pool(conninfo=postgres_url, min_size=1, max_size=1, open=False, timeout=5)
    await pool.open(wait=True)
    try:
        async with pool.connection() as connection:
            first = (await (await connection.execute("SELECT pg_backend_pid()")).fetchone())[0]
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", (first,))  # and it is gone
        async with pool.connection() as connection:  # no OperationalError: another one
            second = (await (await connection.execute("SELECT pg_backend_pid()")).fetchone())[0]
        assert second != first
    finally:
        await pool.close()


async def test_the_check_sends_nothing_to_the_server_and_refuses_a_closed_connection(
    postgres_url: str,
) -> None:
    connection = await psycopg.AsyncConnection.connect(postgres_url, autocommit=True)
    await connection.execute("SELECT 'the last query'")
    pid = connection.pgconn.backend_pid
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        for _ in range(50):
            await still_connected(connection)
        # The server's own view of what that connection last ran: an empty query (what
        # procrastinate's check sends) would show here as ''.
        row = admin.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
        assert row == ("SELECT 'the last query'",)
        admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))  # and it is gone
    with pytest.raises(psycopg.OperationalError):
        await still_connected(connection)
    await connection.close()


async def test_a_query_through_the_pool_is_no_transaction_of_its_own(postgres_url: str) -> None:
    pool = connection_pool(conninfo=postgres_url, min_size=1, max_size=1, open=False, timeout=5)
    await pool.open(wait=True)
    try:
        async with pool.connection() as connection:
            pid = connection.pgconn.backend_pid
            await connection.execute("SELECT 'the query'")
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            # In a transaction, the server would have seen COMMIT last (and BEGIN before it).
            row = admin.execute(
                "SELECT query, state FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone()
        assert row == ("SELECT 'the query'", "idle")
    finally:
        await pool.close()
