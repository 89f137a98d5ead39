"""A real store for a plugin's tests: what its tools get as `ToolContext.store` in a served
turn, on a database file (or URL) of the test's, its `ensure_tables` run as at startup."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

from looping_core.contract import PluginStore, StoreAccess
from looping_core.store.internal import Database, PluginAccess, ensure_plugin_stores

__all__ = ["plugin_store"]


@contextlib.contextmanager
def plugin_store(url: str, stores: Iterable[PluginStore] = ()) -> Iterator[StoreAccess]:
    """The store at `url` (`sqlite:///path`), with `stores`' tables ensured as the server does
    at startup, as the `StoreAccess` a served turn's tools get; closed on exit.

    ```python
    with plugin_store(f"sqlite:///{tmp_path / 'notes.db'}", stores()) as store:
        [family] = tool_families(config)
        tools = family.factory(ToolContext("tenant", "caller", store=store))
    ```
    """
    database = Database.from_url(url)
    try:
        database.run_sync(ensure_plugin_stores, database.peewee, list(stores))
        yield PluginAccess(database)
    finally:
        database.close()
