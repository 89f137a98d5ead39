"""The state layer: the database, its migrations, and the task store.

- `Database`: peewee behind one executor-bound access layer (its own thread(s); SQLite
  group-commits); `open_database(url)` for `sqlite:///...` and `postgresql://...`;
- migrations: core's numbered journal (`upgrade`, `migration_status`), plugin stores'
  `ensure_tables` (`ensure_plugin_stores`, `plugin_versions`);
- `TaskStore`: tasks, turns, push configs and the push outbox, scoped to the verified caller;
  what it refuses are `StoreRefusal`s (the edge maps them to JSON-RPC errors); a store out
  of reach for now (a restart, SQLite busy) raises `StoreUnavailable` (the edge answers 503);
- `SessionStore`: durable sessions, one per caller and conversation, messages in order;
- task events: every status and artifact update, numbered per task (`TaskEvent`), for streams
  that resume where they left off;
- `SubtaskStore`: the subtasks of tasks' delegation plans, their states and results;
- `adopt_orphans`, `adopt_node`: hand rows of gone worker slots or machines to live ones;
- `prune`: delete finished work past its `RetentionPolicy`, in bounded batches.

What an app or a plugin meets of it is only its errors (`StoreError`, `StoreUnavailable`, which a
plugin's `StoreAccess` calls may raise); the layers above reach the rest through
`looping_core.store.internal`.
"""

from looping_core.store.internal import StoreError, StoreUnavailable

__all__ = ["StoreError", "StoreUnavailable"]
