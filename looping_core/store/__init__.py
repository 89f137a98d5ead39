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
"""

from looping_core.store._access import PluginAccess
from looping_core.store._db import (
    Database,
    StoreError,
    StoreUnavailable,
    connection_problem,
    open_database,
    raise_one_line,
    store_url_problem,
)
from looping_core.store._errors import (
    ContextMismatch,
    InvalidPageToken,
    PushConfigNotFound,
    StoreRefusal,
    TaskNotCancelable,
    TaskNotFound,
    TurnRefused,
)
from looping_core.store._events import TaskEvent
from looping_core.store._jobs import JobAlreadyQueued, JobHooks
from looping_core.store._migrations import (
    Migration,
    MigrationStatus,
    bind,
    ensure_plugin_stores,
    migration_status,
    nothing_applied,
    plugin_versions,
    upgrade,
)
from looping_core.store._outbox import OutboxItem
from looping_core.store._owners import adopt_node, adopt_orphans
from looping_core.store._retention import PruneCounts, RetentionPolicy, prune
from looping_core.store._rows import NON_TERMINAL, now_us
from looping_core.store._sessions import SessionStore
from looping_core.store._subtasks import SubtaskStore
from looping_core.store._task_store import TaskStore
from looping_core.store._turns import BegunTurn, TurnStart

__all__ = [
    "NON_TERMINAL",
    "BegunTurn",
    "ContextMismatch",
    "Database",
    "InvalidPageToken",
    "JobAlreadyQueued",
    "JobHooks",
    "Migration",
    "MigrationStatus",
    "OutboxItem",
    "PluginAccess",
    "PruneCounts",
    "PushConfigNotFound",
    "RetentionPolicy",
    "SessionStore",
    "StoreError",
    "StoreRefusal",
    "StoreUnavailable",
    "SubtaskStore",
    "TaskEvent",
    "TaskNotCancelable",
    "TaskNotFound",
    "TaskStore",
    "TurnRefused",
    "TurnStart",
    "adopt_node",
    "adopt_orphans",
    "bind",
    "connection_problem",
    "ensure_plugin_stores",
    "migration_status",
    "nothing_applied",
    "now_us",
    "open_database",
    "plugin_versions",
    "prune",
    "raise_one_line",
    "store_url_problem",
    "upgrade",
]
