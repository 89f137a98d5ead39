"""The store tests' database: SQLite, then PostgreSQL, with core's migrations applied."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from looping_core.store.internal import Database, bind, upgrade


@pytest.fixture
async def database(store_url: str) -> AsyncIterator[Database]:
    database = Database.from_url(store_url)
    await database.run_alone(lambda: (bind(database.peewee), upgrade(database.peewee)))
    yield database
    database.close()
