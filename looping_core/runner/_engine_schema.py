"""The job engine's tables in the store's PostgreSQL database: applied by `looping db upgrade`
(and by `looping serve` as it prepares the store), beside core's migrations, shown by
`looping db status`, and checked by `looping worker`, which refuses a schema that is not the one
the installed procrastinate expects.

procrastinate ships its full schema and numbered migration scripts. The version applied is the
name of the newest script at the time (`03.04.00_50_post_add_retry_failed_job_procedure`),
recorded in `looping_job_engine_schema`; an upgrade runs the scripts named after it, in order.
Both run in one transaction, under an advisory lock, so servers starting together apply it once.

Two additions of ours to procrastinate's objects keep its fetch (`procrastinate_fetch_job_v2`,
one call per job) cheap whatever the queue holds; each is checked by what the database has, not
by a version, so one that a procrastinate migration replaced is applied again (`ADDITIONS`):

- an index on open jobs' `lock`: the fetch checks each candidate for an open job with the same
  lock, and procrastinate's own index for that is keyed by `(id, lock)`, so each check read the
  whole index (every waiting turn: a turn's job is locked on its task);
- `enable_sort = off` on the fetch function alone: with statistics that underestimate the
  waiting jobs (taken in a quiet spell, or before a burst), the planner read and sorted every
  waiting turn, each checked for its lock, instead of taking the first due one in the priority
  index's order; with the index above it did so more often, since each check looked cheap.
"""

from __future__ import annotations

import importlib.resources
import re
from typing import Any

import attrs
from procrastinate import sql as engine_sql

__all__ = [
    "ADDITIONS",
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


_LOCK_INDEX = "looping_jobs_open_lock_idx"
ADDITIONS = ("index on open jobs' locks", "fetch planned in queue order")
"""Our additions to procrastinate's objects, as `looping db status` names them."""


@attrs.frozen
class EngineSchema:
    applied: str | None
    """The version in the database (`None`: no job engine tables yet)."""
    expected: str
    """The version the installed procrastinate needs."""
    missing: tuple[str, ...] = ADDITIONS
    """Our additions (`ADDITIONS`) the database lacks."""

    @property
    def current(self) -> bool:
        return self.applied == self.expected and not self.missing

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
    applied = _applied(connection)
    missing = ADDITIONS if applied is None else _missing_additions(connection)
    return EngineSchema(applied, _expected(), missing)


def _applied(connection: Any) -> str | None:
    exists = connection.execute("SELECT to_regclass(%s)", (_TABLE,)).fetchone()[0]
    if exists is None:
        return None
    row = connection.execute(f"SELECT version FROM {_TABLE}").fetchone()
    return row[0] if row else None


def apply_engine_schema(connection: Any) -> list[str]:
    """Bring the job engine's tables to the installed procrastinate's version, with our
    additions; returns what was run (empty when current). `connection`: a psycopg connection
    not in a transaction."""
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
        schema = engine_schema(connection)
        if schema.current:
            return []
        if schema.pending:
            _apply_procrastinate(connection, schema)
        _apply_additions(connection)
        return [*schema.pending, *schema.missing]


def _apply_procrastinate(connection: Any, schema: EngineSchema) -> None:
    connection.execute(f"CREATE TABLE IF NOT EXISTS {_TABLE} (version TEXT NOT NULL)")
    if schema.applied is None:
        connection.execute((_sql_files() / "schema.sql").read_text())
    else:
        for name in schema.pending:
            script = _sql_files() / "migrations" / f"{name}.sql"
            connection.execute(script.read_text())
    connection.execute(f"DELETE FROM {_TABLE}")
    connection.execute(f"INSERT INTO {_TABLE} (version) VALUES (%s)", (schema.expected,))


def _fetch_function() -> str:
    """The name of the function procrastinate's fetch calls, in the installed release."""
    found = re.search(r"\b(procrastinate_fetch_job\w*)\(", engine_sql.queries["fetch_job"])
    if found is None:  # pragma: no cover - a release that fetches otherwise
        raise RuntimeError("procrastinate's fetch query calls no procrastinate_fetch_job function")
    return found.group(1)


def _missing_additions(connection: Any) -> tuple[str, ...]:
    index = connection.execute("SELECT to_regclass(%s)", (_LOCK_INDEX,)).fetchone()[0]
    settings = connection.execute(
        "SELECT proconfig FROM pg_proc WHERE proname = %s", (_fetch_function(),)
    ).fetchone()
    tuned = settings is not None and "enable_sort=off" in (settings[0] or [])
    have = (index is not None, tuned)
    return tuple(name for name, present in zip(ADDITIONS, have, strict=True) if not present)


def _apply_additions(connection: Any) -> None:
    """Both additions (in the schema's transaction; each one present is left as it is). The
    index is built under a lock that holds defers back meanwhile: short, since the engine has
    procrastinate delete the jobs that succeed, so the table holds little but the waiting and
    running ones."""
    connection.execute(
        f"CREATE INDEX IF NOT EXISTS {_LOCK_INDEX} ON procrastinate_jobs (lock)"
        " WHERE status IN ('todo', 'doing')"
    )
    connection.execute(f"ALTER FUNCTION {_fetch_function()} SET enable_sort = off")


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
