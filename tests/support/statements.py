"""Counting the statements a store runs, to pin the writes that must be one statement."""

from __future__ import annotations

from looping_core.store.internal import Database


def record_statements(database: Database) -> list[str]:
    """Every statement the store's parts run on `database` from now on, in order: wraps its
    `execute`, which parts bind when they are made (call this before `TaskStore(database)`).
    Statements a job engine's hooks run on the connection itself are not in it."""
    statements: list[str] = []
    execute = database.execute

    def recorded(statement: str, params: tuple[object, ...] = ()) -> object:
        statements.append(statement)
        return execute(statement, params)

    database.execute = recorded  # type: ignore[method-assign]
    return statements
