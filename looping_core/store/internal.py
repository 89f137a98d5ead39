"""The door of `looping_core.store` for looping-core's own upper layers (the runner, the server,
the CLI, the test harness): every name described in the package's docstring. Not part of the
app-facing API: it may change with any release, and the API snapshot leaves it out.
"""

from looping_core.store._access import PluginAccess
from looping_core.store._approvals import ApprovalStore
from looping_core.store._db import Database, bounded_connects, open_database, store_url_problem
from looping_core.store._errors import (
    ApprovalRefused,
    BudgetSpent,
    ContextMismatch,
    GenerationMismatch,
    InvalidPageToken,
    PushConfigNotFound,
    StoreRefusal,
    TaskNotCancelable,
    TaskNotFound,
    TooManyTurns,
    TurnRefused,
)
from looping_core.store._events import TaskEvent
from looping_core.store._inspection import TaskInspection
from looping_core.store._jobs import JobAlreadyQueued, JobHooks, JobTicket
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
from looping_core.store._outbox import OutboxItem, PendingPushes
from looping_core.store._owners import adopt_node, adopt_orphans
from looping_core.store._retention import PruneCounts, RetentionPolicy, prune
from looping_core.store._rows import NON_TERMINAL, now_us
from looping_core.store._sealing import check_sealed_secrets, seal_again
from looping_core.store._secrets import PushSecrets, SecretsUnreadable
from looping_core.store._sessions import SessionStore
from looping_core.store._subtasks import SubtaskStore
from looping_core.store._task_store import TaskStore
from looping_core.store._turn_starts import BegunTurn, TurnLimits, TurnStart
from looping_core.store._turns import TurnEnd
from looping_core.store._unreachable import (
    StoreError,
    StoreUnavailable,
    connection_problem,
    raise_one_line,
)

__all__ = [
    "NON_TERMINAL",
    "ApprovalRefused",
    "ApprovalStore",
    "BegunTurn",
    "BudgetSpent",
    "ContextMismatch",
    "Database",
    "GenerationMismatch",
    "InvalidPageToken",
    "JobAlreadyQueued",
    "JobHooks",
    "JobTicket",
    "Migration",
    "MigrationStatus",
    "OutboxItem",
    "PendingPushes",
    "PluginAccess",
    "PruneCounts",
    "PushConfigNotFound",
    "PushSecrets",
    "RetentionPolicy",
    "SecretsUnreadable",
    "SessionStore",
    "StoreError",
    "StoreRefusal",
    "StoreUnavailable",
    "SubtaskStore",
    "TaskEvent",
    "TaskInspection",
    "TaskNotCancelable",
    "TaskNotFound",
    "TaskStore",
    "TooManyTurns",
    "TurnEnd",
    "TurnLimits",
    "TurnRefused",
    "TurnStart",
    "adopt_node",
    "adopt_orphans",
    "bind",
    "bounded_connects",
    "check_sealed_secrets",
    "connection_problem",
    "ensure_plugin_stores",
    "migration_status",
    "nothing_applied",
    "now_us",
    "open_database",
    "plugin_versions",
    "prune",
    "raise_one_line",
    "seal_again",
    "store_url_problem",
    "upgrade",
]
