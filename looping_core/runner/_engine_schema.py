"""The job engine's tables in the store's PostgreSQL database: applied by `looping db upgrade`
(and by `looping serve` as it prepares the store), beside core's migrations, shown by
`looping db status`, and checked by `looping worker`, which refuses a schema that is not the one
the installed procrastinate expects.

procrastinate ships its full schema and numbered migration scripts. The version applied is the
name of the newest script at the time (`03.04.00_50_post_add_retry_failed_job_procedure`),
recorded in `looping_job_engine_schema`; an upgrade runs the scripts named after it, in order.
Both run in one transaction, under an advisory lock, so servers starting together apply it once.
"""

from __future__ import annotations

import importlib.resources
from typing import Any

import attrs

__all__ = [
    "ENGINE_TABLES",
    "EngineSchema",
    "analyze_engine_tables",
    "apply_engine_schema",
    "engine_schema",
    "refresh_jobs_statistics",
]

_TABLE = "looping_job_engine_schema"
ENGINE_TABLES = ("procrastinate_periodic_defers", "tasks", "push_outbox")
"""The tables the engine's hot queries read that a start analyzes: the turns and pushes, and
procrastinate's periodic jobs. Not `procrastinate_jobs`: see `analyze_engine_tables`."""
_LOCK = 0x6C6F6F70  # "loop": one advisory lock for whoever applies the schema


@attrs.frozen
class EngineSchema:
    applied: str | None
    """The version in the database (`None`: no job engine tables yet)."""
    expected: str
    """The version the installed procrastinate needs."""

    @property
    def current(self) -> bool:
        return self.applied == self.expected

    @property
    def pending(self) -> tuple[str, ...]:
        """The migration scripts an upgrade runs (all of them before the first: the schema)."""
        if self.applied is None:
            return ("schema",)
        return tuple(name for name in _migrations() if name > self.applied)


def _sql_files() -> Any:
    return importlib.resources.files("procrastinate.sql")


def _migrations() -> list[str]:
    folder = _sql_files() / "migrations"
    return sorted(
        entry.name.removesuffix(".sql") for entry in folder.iterdir() if entry.name.endswith(".sql")
    )


def _expected() -> str:
    return _migrations()[-1]


def engine_schema(connection: Any) -> EngineSchema:
    """What the database has, and what it needs (`connection`: a psycopg connection)."""
    return EngineSchema(_applied(connection), _expected())


def _applied(connection: Any) -> str | None:
    exists = connection.execute("SELECT to_regclass(%s)", (_TABLE,)).fetchone()[0]
    if exists is None:
        return None
    row = connection.execute(f"SELECT version FROM {_TABLE}").fetchone()
    return row[0] if row else None


def apply_engine_schema(connection: Any) -> list[str]:
    """Bring the job engine's tables to the installed procrastinate's version; returns what was
    run (empty when current). `connection`: a psycopg connection not in a transaction."""
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
        schema = engine_schema(connection)
        if schema.current:
            return []
        connection.execute(f"CREATE TABLE IF NOT EXISTS {_TABLE} (version TEXT NOT NULL)")
        if schema.applied is None:
            connection.execute((_sql_files() / "schema.sql").read_text())
        else:
            for name in schema.pending:
                script = _sql_files() / "migrations" / f"{name}.sql"
                connection.execute(script.read_text())
        connection.execute(f"DELETE FROM {_TABLE}")
        connection.execute(f"INSERT INTO {_TABLE} (version) VALUES (%s)", (schema.expected,))
        return list(schema.pending)


def analyze_engine_tables(connection: Any) -> None:
    """Give the planner statistics for the engine's tables (`connection`: a psycopg connection
    not in a transaction). Run when the schema is applied and at every start; it samples, so it
    stays cheap on a large table.

    `procrastinate_jobs` is left to autovacuum: at a start it holds a handful of jobs, often a
    periodic sweep alone, and statistics from that say the turns queue is empty. procrastinate's
    fetch is then planned on the queue-name index (every waiting turn, each checked for its
    lock, then sorted) instead of taking the first due job: 57 ms per fetch with 1500 turns
    waiting instead of 1.5, which is what made the job engine's benchmark slow in some runs and
    not others. Never analyzed, or analyzed empty, it is planned well."""
    connection.execute(f"ANALYZE {', '.join(ENGINE_TABLES)}")


_JOBS_CHURN = (
    "SELECT s.n_mod_since_analyze AS changed, GREATEST(c.reltuples, 0) AS analyzed_rows"
    " FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid"
    " WHERE s.relid = 'procrastinate_jobs'::regclass"
)
_JOBS_CHURN_FLOOR = 100
"""Fewer changes than this never make the jobs table analyzed (a quiet engine's sweeps)."""


async def refresh_jobs_statistics(connector: Any) -> bool:
    """Analyze `procrastinate_jobs` once it has changed by more rows than it had when last
    analyzed (at least `_JOBS_CHURN_FLOOR`); whether it did. `connector`: procrastinate's
    async connector. Called by every sweep (`sweep_seconds`).

    Statistics taken during a quiet spell (a periodic job or two) say the turns queue is empty,
    and procrastinate's fetch is then planned to read every waiting turn (see
    `analyze_engine_tables`). Autovacuum corrects them only after its own threshold and its
    nap (a minute by default), while a burst of turns is fetched tens of times slower; a
    sweep corrects them within `sweep_seconds`. The check is one catalog read."""
    row = await connector.execute_query_one_async(_JOBS_CHURN)
    if row["changed"] < max(_JOBS_CHURN_FLOOR, row["analyzed_rows"]):
        return False
    await connector.execute_query_async("ANALYZE procrastinate_jobs")
    return True
