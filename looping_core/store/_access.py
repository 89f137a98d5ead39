"""`PluginAccess`: the `StoreAccess` a tool of a plugin that owns tables is given (contract 2).

Each call is a job on the store's thread, like every write of core's own, behind SQLite's writer
lock; but in a transaction of its own (`Database.run_once`), never in a shared batch, which may be
undone and run again: a plugin's code runs exactly once per call. On PostgreSQL it is a
transaction on one of the store's connections. A tool that wrote through its own connection or
thread instead would race the store's writer for SQLite's lock."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import attrs
import peewee

from looping_core.store._db import Database

__all__ = ["PluginAccess"]

_T = TypeVar("_T")


@attrs.frozen
class PluginAccess:
    """The store's `Database`, as plugins' tools reach it."""

    database: Database = attrs.field(repr=False)

    async def run(self, fn: Callable[[peewee.Database], _T]) -> _T:
        return await self.database.run_once(_written, self.database, fn)


def _written(database: Database, fn: Callable[[peewee.Database], _T]) -> _T:
    with database.write():
        return fn(database.peewee)
