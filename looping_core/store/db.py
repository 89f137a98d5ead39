"""Opening the database, and the one executor-bound layer all database work goes through.

peewee is synchronous; the event loop must never wait on SQLite or PostgreSQL. `Database.run(fn)`
runs `fn` on the store's own worker thread(s): one for SQLite (a single writer, no lock fights),
a small pool for PostgreSQL. Nothing else in the package touches a connection from the loop.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import peewee
from playhouse.db_url import connect

from looping_core.errors import LoopingError

__all__ = ["Database", "StoreError", "open_database"]

_T = TypeVar("_T")

SQLITE_PRAGMAS = {
    "journal_mode": "wal",  # readers never block the writer
    "synchronous": "normal",  # durable at every checkpoint; WAL keeps commits atomic
    "busy_timeout": 5000,
    "foreign_keys": 1,
}


class StoreError(LoopingError):
    """The store cannot be opened or migrated."""


def open_database(url: str) -> peewee.Database:
    """A peewee database for `[store] url`: `sqlite:///path` (WAL) or `postgresql://...`."""
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        return peewee.SqliteDatabase(path, pragmas=SQLITE_PRAGMAS)
    if url.startswith(("postgresql://", "postgres://")):
        database: peewee.Database = connect(url)
        return database
    raise StoreError(
        f"[store] url must start with sqlite:/// or postgresql://, got {url.split(':', 1)[0]}:"
    )


class Database:
    """A peewee database plus the executor its work runs on."""

    def __init__(self, database: peewee.Database) -> None:
        self.peewee = database
        workers = 1 if isinstance(database, peewee.SqliteDatabase) else 8
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="looping-db")

    @classmethod
    def from_url(cls, url: str) -> Database:
        return cls(open_database(url))

    async def run(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run `fn(*args)` on the store's thread, inside a connection, and await the result."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(self._call, fn, *args))

    def run_sync(self, fn: Callable[..., _T], *args: Any) -> _T:
        """The same, from synchronous code (the CLI): still on the store's thread."""
        return self._executor.submit(self._call, fn, *args).result()

    def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        self.peewee.connect(reuse_if_open=True)
        return fn(*args)

    def close(self) -> None:
        def close_connection() -> None:
            if not self.peewee.is_closed():
                self.peewee.close()

        self._executor.submit(close_connection).result()
        self._executor.shutdown(wait=True)
