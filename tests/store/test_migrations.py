"""Core migrations bring a database made by an older release up to the current models."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from looping_core.store import _migrations
from looping_core.store.internal import (
    Database,
    StoreError,
    bind,
    migration_status,
    open_database,
    upgrade,
)

SCHEMA_V1 = Path(__file__).with_name("schema_v1.sql")


def columns(connection: sqlite3.Connection, table: str) -> dict[str, tuple[object, ...]]:
    return {row[1]: row for row in connection.execute(f"PRAGMA table_info({table})")}


def indexes(connection: sqlite3.Connection) -> set[str]:
    rows = connection.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
    return {name for (name,) in rows if not name.startswith("sqlite_autoindex")}


def test_a_release_1_database_gains_owners_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as old:
        old.executescript(SCHEMA_V1.read_text())
        old.execute("INSERT INTO core_migration VALUES (1, 'initial', '2026-11-01')")
        old.execute("INSERT INTO tasks VALUES ('t1', 't', 'i', 's', 'c', 2, NULL, 5, 5)")
        old.execute(
            "INSERT INTO push_outbox VALUES (1, 't1', 'c1', 'j1', 'https://g/p', '{}', 'pending',"
            " 0, 5, 5)"
        )
    database = Database.from_url(f"sqlite:///{path}")
    try:
        applied = database.run_sync(lambda: (bind(database.peewee), upgrade(database.peewee))[1])
        status = database.run_sync(migration_status, database.peewee)
    finally:
        database.close()
    assert [migration.version for migration in applied] == list(range(2, 18))
    assert status.applied == (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17)

    with sqlite3.connect(path) as upgraded:
        for table in ("tasks", "push_outbox"):
            assert columns(upgraded, table)["node"][3:5] == (1, "''")  # NOT NULL DEFAULT ''
            assert columns(upgraded, table)["worker"][3:5] == (1, "0")  # NOT NULL DEFAULT 0
            assert upgraded.execute(f"SELECT node, worker FROM {table}").fetchall() == [("", 0)]
        assert upgraded.execute(
            "SELECT event_seq, answer, reply_in_status FROM tasks"
        ).fetchall() == [(0, "task", 0)]
        assert upgraded.execute("SELECT traceparent FROM push_outbox").fetchall() == [(None,)]
        # Configs an older release wrote are left for their first push to check, once.
        assert columns(upgraded, "push_configs")["target_checked"][3:5] == (1, "FALSE")
        assert "undeliverable" in columns(upgraded, "push_configs")
        assert "push_outbox_state_next_attempt_ts" not in indexes(upgraded)
        # Release 1 indexed these foreign keys on their own; their unique indexes serve them.
        assert not {"artifacts_task_id", "push_configs_task_id"} & indexes(upgraded)
        assert {"artifacts_task_id_artifact_id", "push_configs_task_id_config_id"} <= indexes(
            upgraded
        )
        assert {
            "tasks_node_worker_state",
            "push_outbox_node_worker_state_next_attempt_ts",
        } <= indexes(upgraded)
        # The limits' count reads unsettled tasks newest first; the index before is gone.
        assert "tasks_unsettled_newest" in indexes(upgraded)
        assert "tasks_unsettled" not in indexes(upgraded)


def test_tasks_made_before_migration_17_keep_their_last_joined_follow_up(store_url: str) -> None:
    """A task's end is guarded on the last follow-up that joined its turn, now kept in the
    task's row: the tasks an older release wrote take it from their messages."""
    database = Database.from_url(store_url)

    def sql(statement: str) -> list[tuple[object, ...]]:
        def run() -> list[tuple[object, ...]]:
            cursor = database.execute(statement)
            return list(cursor.fetchall()) if cursor.description else []

        return database.run_sync(run)

    try:
        database.run_sync(lambda: (bind(database.peewee), upgrade(database.peewee)))
        for task in ("joined", "alone"):
            sql(
                "INSERT INTO tasks (id, tenant, issuer, subject, context_id, state, status_ts,"
                f" created_ts) VALUES ('{task}', 't', 'i', 's', 'c', 2, 5, 5)"
            )
        for seq, task, joined in ((1, "joined", False), (2, "alone", False), (3, "joined", True),
                                  (4, "joined", True), (5, "joined", False)):  # fmt: skip
            sql(
                "INSERT INTO messages (seq, task_id, tenant, issuer, subject, message_id, body,"
                f" joined) VALUES ({seq}, '{task}', 't', 'i', 's', 'm{seq}', '{{}}', {joined})"
            )
        # The database as release 16 left it.
        sql("ALTER TABLE tasks DROP COLUMN joined_seq")
        sql("DELETE FROM core_migration WHERE version = 17")
        applied = database.run_sync(lambda: upgrade(database.peewee))
        assert [migration.version for migration in applied] == [17]
        assert sql("SELECT id, joined_seq FROM tasks ORDER BY id") == [("alone", 0), ("joined", 4)]
    finally:
        database.close()


def test_a_new_database_and_an_upgraded_one_have_the_same_schema(tmp_path: Path) -> None:
    def schema(path: Path) -> dict[str, object]:
        with sqlite3.connect(path) as connection:
            return {
                "tasks": columns(connection, "tasks"),
                "messages": columns(connection, "messages"),
                "push_outbox": columns(connection, "push_outbox"),
                "sessions": columns(connection, "sessions"),
                "session_messages": columns(connection, "session_messages"),
                "subtasks": columns(connection, "subtasks"),
                "task_events": columns(connection, "task_events"),
                "indexes": indexes(connection),
            }

    old = tmp_path / "old.db"
    with sqlite3.connect(old) as connection:
        connection.executescript(SCHEMA_V1.read_text())
        connection.execute("INSERT INTO core_migration VALUES (1, 'initial', '2026-11-01')")
    for path in (old, tmp_path / "new.db"):
        database = Database.from_url(f"sqlite:///{path}")
        try:
            database.run_sync(lambda db=database: (bind(db.peewee), upgrade(db.peewee)))
        finally:
            database.close()
    assert schema(old) == schema(tmp_path / "new.db")


def test_a_postgresql_older_than_the_store_needs_is_refused_before_anything_is_written(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = open_database(postgres_url)
    try:
        running = db.execute_sql("SHOW server_version").fetchone()[0]
        major = int(running.split(".")[0])
        assert major >= _migrations.POSTGRES_OLDEST  # the suite's own server is supported
        monkeypatch.setattr(_migrations, "POSTGRES_OLDEST", major + 1)  # as if it were older
        with pytest.raises(StoreError) as refused:
            upgrade(db)
        assert str(refused.value) == (
            f"the store needs PostgreSQL {major + 1} or later, and the server at [store] url"
            f" runs PostgreSQL {running}; upgrade it, or set [store] url to a PostgreSQL"
            f" {major + 1} or later"
        )
        with pytest.raises(StoreError):
            migration_status(db)  # `looping db status`, and a worker's check, say it too
        assert db.get_tables() == []  # not even the journal
    finally:
        db.close()
