"""Who runs which turns: rows belong to a node (a machine) and its worker slot. These hand the
rows of slots or machines that are gone to live ones."""

from __future__ import annotations

from typing import Any

from looping_core.store._db import Database
from looping_core.store._rows import RUNNING_SQL

__all__ = ["adopt_node", "adopt_orphans"]


def adopt_orphans(database: Database, node: str, workers: int) -> int:
    """Give `node`'s running tasks and pending pushes of worker slots beyond `workers` to its
    live slots, and take those written before rows had an owner (node "").

    Runs once when `node`'s server starts, before any of its workers, on the store's thread: each
    worker then recovers and delivers only its own slot's rows, so no two processes touch the same
    turn. Other nodes' rows are never touched. Returns how many rows moved.
    """
    tasks, pushes = _move_rows(
        database, "(node = '' OR (node = ? AND worker >= ?))", (node, workers), node, workers
    )
    return tasks + pushes


def adopt_node(database: Database, gone: str, node: str, workers: int) -> tuple[int, int]:
    """Give the unfinished tasks and pending pushes of node `gone` (a machine that will not
    come back) to `node`, spread over its `workers` slots; on the store's thread.

    Its pushes go out from `node`'s running server; its turns are recovered (resumed or failed)
    when `node`'s server next starts. Returns (tasks, pushes) moved.
    """
    return _move_rows(database, "node = ?", (gone,), node, workers)


def _move_rows(
    database: Database, owned: str, params: tuple[Any, ...], node: str, workers: int
) -> tuple[int, int]:
    """Hand running tasks and pending pushes matching `owned` to `node`'s slots (slot mod N)."""
    modulo = "worker - (worker / ?) * ?"  # integer division in both stores; `%` means a parameter
    with database.write():
        tasks = database.execute(
            f"UPDATE tasks SET node = ?, worker = {modulo}"
            f" WHERE {owned} AND state IN ({RUNNING_SQL})",
            (node, workers, workers, *params),
        ).rowcount
        pushes = database.execute(
            f"UPDATE push_outbox SET node = ?, worker = {modulo}"
            f" WHERE {owned} AND state = 'pending'",
            (node, workers, workers, *params),
        ).rowcount
    return int(tasks), int(pushes)
