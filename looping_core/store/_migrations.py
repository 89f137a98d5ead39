"""Core's numbered migration journal, and plugin stores' `ensure_tables`.

Core migrations are applied in order at startup, before the first request is served, each in a
transaction and recorded in `core_migration`. Plugin stores run `ensure_tables(db, from_version)`
at every start (idempotent DDL) and their version is recorded in `plugin_migration`; plugins never
touch core's journal.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence

import attrs
import peewee

from looping_core.contract import PluginStore
from looping_core.store._models import (
    APPROVAL_MODELS,
    CORE_MODELS,
    EVENT_MODELS,
    SESSION_MODELS,
    SPEND_MODELS,
    SUBTASK_MODELS,
    CoreMigration,
    PluginMigration,
    _Base,
)
from looping_core.store._rows import RUNNING
from looping_core.store._unreachable import StoreError

__all__ = [
    "MIGRATIONS",
    "POSTGRES_OLDEST",
    "Migration",
    "MigrationStatus",
    "bind",
    "ensure_plugin_stores",
    "migration_status",
    "nothing_applied",
    "plugin_versions",
    "upgrade",
]


@attrs.frozen
class Migration:
    version: int
    name: str
    apply: Callable[[peewee.Database], None]


def _initial_schema(db: peewee.Database) -> None:
    db.create_tables(list(CORE_MODELS))


def _owners(db: peewee.Database) -> None:
    """Tasks and queued pushes belong to one server process: a node and a worker slot."""
    statements = []
    for table in ("tasks", "push_outbox"):
        columns = {column.name for column in db.get_columns(table)}
        if "node" not in columns:
            statements.append(f"ALTER TABLE {table} ADD COLUMN node TEXT NOT NULL DEFAULT ''")
        if "worker" not in columns:
            statements.append(f"ALTER TABLE {table} ADD COLUMN worker INTEGER NOT NULL DEFAULT 0")
    statements += [
        "DROP INDEX IF EXISTS push_outbox_state_next_attempt_ts",
        "CREATE INDEX IF NOT EXISTS tasks_node_worker_state ON tasks (node, worker, state)",
        "CREATE INDEX IF NOT EXISTS push_outbox_node_worker_state_next_attempt_ts"
        " ON push_outbox (node, worker, state, next_attempt_ts)",
    ]
    for statement in statements:
        db.execute_sql(statement)  # type: ignore[no-untyped-call]


def _sessions(db: peewee.Database) -> None:
    """Durable sessions: one per caller and conversation, their messages in order."""
    db.create_tables(list(SESSION_MODELS), safe=True)


def _task_metadata(db: peewee.Database) -> None:
    """A task's metadata: what its turns report about themselves."""
    if "metadata" not in {column.name for column in db.get_columns("tasks")}:
        db.execute_sql("ALTER TABLE tasks ADD COLUMN metadata TEXT")  # type: ignore[no-untyped-call]


def _follow_ups(db: peewee.Database) -> None:
    """Follow-ups to a running task: which message began the current turn, and which messages
    joined a turn while it ran."""
    statements = []
    if "turn_message" not in {column.name for column in db.get_columns("tasks")}:
        statements.append("ALTER TABLE tasks ADD COLUMN turn_message TEXT")
    if "joined" not in {column.name for column in db.get_columns("messages")}:
        kind = "INTEGER" if isinstance(db, peewee.SqliteDatabase) else "BOOLEAN"  # as peewee's
        statements.append(f"ALTER TABLE messages ADD COLUMN joined {kind} NOT NULL DEFAULT FALSE")
    for statement in statements:
        db.execute_sql(statement)  # type: ignore[no-untyped-call]


def _subtasks(db: peewee.Database) -> None:
    """Delegation plans: each task's subtasks, their states and results."""
    db.create_tables(list(SUBTASK_MODELS), safe=True)


def _events(db: peewee.Database) -> None:
    """Task events for streaming (numbered per task, resumable), and message answers."""
    columns = {column.name for column in db.get_columns("tasks")}
    if "event_seq" not in columns:
        kind = "INTEGER" if isinstance(db, peewee.SqliteDatabase) else "BIGINT"  # as peewee's
        db.execute_sql(f"ALTER TABLE tasks ADD COLUMN event_seq {kind} NOT NULL DEFAULT 0")  # type: ignore[no-untyped-call]
    if "answer" not in columns:
        db.execute_sql("ALTER TABLE tasks ADD COLUMN answer TEXT NOT NULL DEFAULT 'task'")  # type: ignore[no-untyped-call]
    db.create_tables(list(EVENT_MODELS), safe=True)


def _push_traces(db: peewee.Database) -> None:
    """Queued pushes carry the trace context of the change they report."""
    if "traceparent" not in {column.name for column in db.get_columns("push_outbox")}:
        db.execute_sql("ALTER TABLE push_outbox ADD COLUMN traceparent TEXT")  # type: ignore[no-untyped-call]


def _reply_in_status(db: peewee.Database) -> None:
    """A finished turn's reply kept once, as the task's status message."""
    if "reply_in_status" not in {column.name for column in db.get_columns("tasks")}:
        kind = "INTEGER" if isinstance(db, peewee.SqliteDatabase) else "BOOLEAN"  # as peewee's
        db.execute_sql(  # type: ignore[no-untyped-call]
            f"ALTER TABLE tasks ADD COLUMN reply_in_status {kind} NOT NULL DEFAULT FALSE"
        )


def _sealed_push_secrets(db: peewee.Database) -> None:
    """Push configs say which key their secrets are sealed with."""
    if "secrets_key" not in {column.name for column in db.get_columns("push_configs")}:
        db.execute_sql("ALTER TABLE push_configs ADD COLUMN secrets_key TEXT")  # type: ignore[no-untyped-call]


def _unsettled_tasks(db: peewee.Database) -> None:
    """Tasks not yet settled, by caller: the turn limits count them at every accept. Partial,
    so it holds only the few tasks waiting or running, whatever the table holds."""
    submitted, working = RUNNING
    db.execute_sql(  # type: ignore[no-untyped-call]
        "CREATE INDEX IF NOT EXISTS tasks_unsettled ON tasks (tenant, issuer, subject)"
        f" WHERE state IN ({submitted}, {working})"
    )


def _unsettled_tasks_newest_first(db: peewee.Database) -> None:
    """The unsettled tasks' index ends with the task's id (time-ordered), so that the turn
    limits' bounded count reads a caller's or a tenant's newest first: the tasks most likely
    still unsettled, before the entries of settled ones that vacuum has not yet removed (the
    oldest, which a count in the index's order used to step over first)."""
    submitted, working = RUNNING
    db.execute_sql("DROP INDEX IF EXISTS tasks_unsettled")  # type: ignore[no-untyped-call]
    db.execute_sql(  # type: ignore[no-untyped-call]
        "CREATE INDEX IF NOT EXISTS tasks_unsettled_newest ON tasks (tenant, issuer, subject, id)"
        f" WHERE state IN ({submitted}, {working})"
    )


SERVED_BY_ANOTHER_INDEX = (
    "artifacts_task_id",
    "task_events_task_id",
    "push_configs_task_id",
    "session_messages_session_id",
    "subtasks_task_id",
)
"""Indexes on a foreign key that a unique index (or the primary key) beginning with the same
column serves as well: each only cost every insert one more page to write."""


def _single_column_indexes(db: peewee.Database) -> None:
    """Indexes another index already serves, dropped."""
    for name in SERVED_BY_ANOTHER_INDEX:
        db.execute_sql(f"DROP INDEX IF EXISTS {name}")  # type: ignore[no-untyped-call]


def _checked_push_targets(db: peewee.Database) -> None:
    """Push configs keep the verdict of the one check of their target; the rows an older
    release wrote are left unchecked, for their first push to check once."""
    if "target_checked" not in {column.name for column in db.get_columns("push_configs")}:
        db.execute_sql(  # type: ignore[no-untyped-call]
            "ALTER TABLE push_configs ADD COLUMN target_checked BOOLEAN NOT NULL DEFAULT FALSE"
        )
        db.execute_sql("ALTER TABLE push_configs ADD COLUMN undeliverable TEXT")  # type: ignore[no-untyped-call]


def _tool_approvals(db: peewee.Database) -> None:
    """Tool calls that wait for the caller's approval, and their decisions."""
    db.create_tables(list(APPROVAL_MODELS), safe=True)


def _spend(db: peewee.Database) -> None:
    """What each caller's turns cost per day, and each subtask's cost."""
    db.create_tables(list(SPEND_MODELS), safe=True)
    if "cost" not in {column.name for column in db.get_columns("subtasks")}:
        db.execute_sql("ALTER TABLE subtasks ADD COLUMN cost REAL")  # type: ignore[no-untyped-call]


def _joined_follow_ups(db: peewee.Database) -> None:
    """Tasks keep the last follow-up that joined a running turn (what a turn's end is guarded
    on), taken from the messages for the tasks an older release wrote."""
    if "joined_seq" not in {column.name for column in db.get_columns("tasks")}:
        kind = "INTEGER" if isinstance(db, peewee.SqliteDatabase) else "BIGINT"  # as peewee's
        db.execute_sql(f"ALTER TABLE tasks ADD COLUMN joined_seq {kind} NOT NULL DEFAULT 0")  # type: ignore[no-untyped-call]
        db.execute_sql(  # type: ignore[no-untyped-call]
            "UPDATE tasks SET joined_seq = (SELECT MAX(seq) FROM messages"
            " WHERE messages.task_id = tasks.id AND joined)"
            " WHERE EXISTS (SELECT 1 FROM messages WHERE messages.task_id = tasks.id AND joined)"
        )


# Migration 1 creates the tables as the models are now; every later one brings a database made
# by an older release up to them, and skips what a newer migration 1 already made.
MIGRATIONS: Sequence[Migration] = (
    Migration(1, "tasks, messages, artifacts, push", _initial_schema),
    Migration(2, "owners (node, worker slot) of tasks and queued pushes", _owners),
    Migration(3, "sessions and their messages", _sessions),
    Migration(4, "task metadata", _task_metadata),
    Migration(5, "follow-ups to a running turn", _follow_ups),
    Migration(6, "subtasks of delegation plans", _subtasks),
    Migration(7, "task events for streaming, and message answers", _events),
    Migration(8, "trace context of queued pushes", _push_traces),
    Migration(9, "a finished turn's reply kept as its status message", _reply_in_status),
    Migration(10, "indexes another index already serves, dropped", _single_column_indexes),
    Migration(11, "push configs' secrets sealed at rest, by key", _sealed_push_secrets),
    Migration(12, "unsettled tasks by caller, for the turn limits", _unsettled_tasks),
    Migration(13, "tool calls that wait for approval, and their decisions", _tool_approvals),
    Migration(
        14,
        "push configs' targets checked once, older releases' rows at first use",
        _checked_push_targets,
    ),
    Migration(15, "what callers' turns cost per day, and subtasks' costs", _spend),
    Migration(16, "unsettled tasks counted newest first", _unsettled_tasks_newest_first),
    Migration(17, "the last follow-up that joined each task's turn", _joined_follow_ups),
)


@attrs.frozen
class MigrationStatus:
    applied: tuple[int, ...]
    pending: tuple[Migration, ...]


def nothing_applied() -> MigrationStatus:
    """The status of a database that does not exist yet: every migration pending."""
    return MigrationStatus((), tuple(MIGRATIONS))


def bind(db: peewee.Database) -> None:
    """Point core's models at `db`."""
    _Base._meta.database.initialize(db)


def _journal(db: peewee.Database) -> None:
    db.create_tables([CoreMigration, PluginMigration], safe=True)


POSTGRES_OLDEST = 13
"""The oldest PostgreSQL (major version) the store runs on: a turn's end on the job engine makes
its pushes' `jti` with `gen_random_uuid()`, built in since PostgreSQL 13."""


def _require_supported_server(db: peewee.Database) -> None:
    """Refuse a PostgreSQL older than `POSTGRES_OLDEST` before anything is migrated or served:
    on it the first turn's end would fail, far from the cause."""
    if not isinstance(db, peewee.PostgresqlDatabase):
        return
    cursor = db.execute_sql(  # type: ignore[no-untyped-call]
        "SELECT current_setting('server_version_num')::int, current_setting('server_version')"
    )
    number, version = cursor.fetchone()
    if number // 10000 < POSTGRES_OLDEST:
        raise StoreError(
            f"the store needs PostgreSQL {POSTGRES_OLDEST} or later, and the server at"
            f" [store] url runs PostgreSQL {version}; upgrade it, or set [store] url to a"
            f" PostgreSQL {POSTGRES_OLDEST} or later"
        )


def migration_status(db: peewee.Database) -> MigrationStatus:
    """What core's journal in `db` has applied, and what is pending (on a server the store
    runs on: see `POSTGRES_OLDEST`)."""
    _require_supported_server(db)
    bind(db)
    _journal(db)
    applied = tuple(row.version for row in CoreMigration.select().order_by(CoreMigration.version))
    return MigrationStatus(applied, tuple(m for m in MIGRATIONS if m.version not in applied))


def plugin_versions(db: peewee.Database) -> dict[str, int]:
    """The plugin store versions recorded so far."""
    bind(db)
    _journal(db)
    return {row.plugin: row.version for row in PluginMigration.select()}


def upgrade(db: peewee.Database) -> list[Migration]:
    """Apply every pending core migration, in order; return what was applied."""
    done = []
    for migration in migration_status(db).pending:
        with db.atomic():
            migration.apply(db)
            CoreMigration.create(version=migration.version, name=migration.name, applied_at=_now())
        done.append(migration)
    return done


def ensure_plugin_stores(db: peewee.Database, stores: Sequence[PluginStore]) -> None:
    """Run each plugin's `ensure_tables` from the version recorded last time, then record it."""
    bind(db)
    _journal(db)
    for store in stores:
        row = PluginMigration.get_or_none(PluginMigration.plugin == store.plugin)
        store.ensure_tables(db, row.version if row else 0)
        PluginMigration.insert(
            plugin=store.plugin, version=store.version, updated_at=_now()
        ).on_conflict(
            conflict_target=[PluginMigration.plugin],
            update={PluginMigration.version: store.version, PluginMigration.updated_at: _now()},
        ).execute()


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
