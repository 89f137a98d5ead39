"""Core's tables. Plugin tables are the plugins' own (see `PluginStore`).

Wire objects (messages, artifacts, push configs, push bodies) are stored as their ProtoJSON text:
the store keeps what the edge said and will say, and the columns beside them are what queries
filter and sort on. Every caller-owned row carries (tenant, issuer, subject).
"""

from __future__ import annotations

import peewee

__all__ = [
    "APPROVAL_MODELS",
    "CORE_MODELS",
    "EVENT_MODELS",
    "SESSION_MODELS",
    "SPEND_MODELS",
    "SUBTASK_MODELS",
    "CoreMigration",
    "MessageRow",
    "PluginMigration",
    "PushAttempt",
    "PushConfigRow",
    "PushOutbox",
    "SessionMessageRow",
    "SessionRow",
    "TaskArtifactRow",
    "TaskEventRow",
    "TaskRow",
]


class _Base(peewee.Model):
    class Meta:
        database = peewee.DatabaseProxy()
        legacy_table_names = False


class CoreMigration(_Base):
    version = peewee.IntegerField(primary_key=True)
    name = peewee.TextField()
    applied_at = peewee.DateTimeField()


class PluginMigration(_Base):
    plugin = peewee.TextField(primary_key=True)
    version = peewee.IntegerField()
    updated_at = peewee.DateTimeField()


class TaskRow(_Base):
    id = peewee.TextField(primary_key=True)
    tenant = peewee.TextField()
    issuer = peewee.TextField()
    subject = peewee.TextField()
    context_id = peewee.TextField()
    state = peewee.IntegerField()
    status_message = peewee.TextField(null=True)
    status_ts = peewee.BigIntegerField()
    """Microseconds since the epoch of the last status change (ListTasks sorts on it)."""
    created_ts = peewee.BigIntegerField()
    node = peewee.TextField(default="", constraints=[peewee.SQL("DEFAULT ''")])
    """The server (`[server] node`) that runs the task's turns."""
    worker = peewee.IntegerField(default=0, constraints=[peewee.SQL("DEFAULT 0")])
    """Its process (`[server] workers` slot) that runs them."""
    metadata = peewee.TextField(null=True)
    """The task's metadata (JSON): what its last turn reported (usage, models, rounds)."""
    turn_message = peewee.TextField(null=True)
    """The messageId that began the task's current (or last) turn."""
    event_seq = peewee.BigIntegerField(default=0, constraints=[peewee.SQL("DEFAULT 0")])
    """The sequence number of the task's latest event (0: none yet; see `TaskEventRow`)."""
    answer = peewee.TextField(default="task", constraints=[peewee.SQL("DEFAULT 'task'")])
    """How a blocking SendMessage answers once the turn ended: with the `task`, or with the
    agent's reply as a direct `message` (the task record stays, for idempotency and history)."""
    reply_in_status = peewee.BooleanField(default=False, constraints=[peewee.SQL("DEFAULT FALSE")])
    """The turn ended with the agent's reply as its status message, kept only here: the task's
    history is its messages and then this one (one row fewer written per finished turn)."""
    joined_seq = peewee.BigIntegerField(default=0, constraints=[peewee.SQL("DEFAULT 0")])
    """The `seq` of the last follow-up that joined a running turn (0: none). A turn's end is
    guarded on it (`UNSEEN_FOLLOW_UP`), in the task's own row: on PostgreSQL an end that
    waited for a join's write checks the row again as the join left it, where a look at the
    messages table would still miss the joined message."""

    class Meta:
        table_name = "tasks"
        indexes = (
            (("tenant", "issuer", "subject", "status_ts"), False),
            (("node", "worker", "state"), False),
        )


class MessageRow(_Base):
    seq = peewee.AutoField()
    task = peewee.ForeignKeyField(TaskRow, backref="messages", on_delete="CASCADE")
    tenant = peewee.TextField()
    issuer = peewee.TextField()
    subject = peewee.TextField()
    message_id = peewee.TextField()
    body = peewee.TextField()
    joined = peewee.BooleanField(default=False, constraints=[peewee.SQL("DEFAULT FALSE")])
    """A follow-up sent while the task's turn ran: the running turn takes it (or the next)."""

    class Meta:
        table_name = "messages"
        # Idempotent turn start: one message id per caller, ever.
        indexes = ((("tenant", "issuer", "subject", "message_id"), True),)


class TaskArtifactRow(_Base):
    seq = peewee.AutoField()
    task = peewee.ForeignKeyField(
        TaskRow, backref="artifacts", on_delete="CASCADE", index=False
    )  # the unique (task, artifact_id) index serves it
    artifact_id = peewee.TextField()
    body = peewee.TextField()

    class Meta:
        table_name = "artifacts"
        indexes = ((("task", "artifact_id"), True),)


class TaskEventRow(_Base):
    """One event of a task (a status or artifact update, as A2A streams it), numbered per task
    from 1 in the order they happened: the SSE `id` a client resumes from (`Last-Event-ID`)."""

    id = peewee.AutoField()
    task = peewee.ForeignKeyField(
        TaskRow, backref="events", on_delete="CASCADE", index=False
    )  # the unique (task, seq) index serves it
    seq = peewee.BigIntegerField()
    body = peewee.TextField()
    """The `StreamResponse` JSON (one of `statusUpdate`, `artifactUpdate`)."""
    created_ts = peewee.BigIntegerField()

    class Meta:
        table_name = "task_events"
        indexes = ((("task", "seq"), True),)


class PushConfigRow(_Base):
    seq = peewee.AutoField()
    task = peewee.ForeignKeyField(
        TaskRow, backref="push_configs", on_delete="CASCADE", index=False
    )  # the unique (task, config_id) index serves it
    config_id = peewee.TextField()
    body = peewee.TextField()
    secrets_key = peewee.TextField(null=True)
    """The id of the key its token and credentials are sealed with (`None`: none to seal)."""
    target_checked = peewee.BooleanField(default=False, constraints=[peewee.SQL("DEFAULT FALSE")])
    """Whether its target was checked: at the edge as it was written, or, for a row an older
    release wrote, the first time a push to it was queued or sent (`target_verdict`)."""
    undeliverable = peewee.TextField(null=True)
    """Why its target cannot be delivered to, as that one check found (`None`: it can)."""

    class Meta:
        table_name = "push_configs"
        indexes = ((("task", "config_id"), True),)


class PushOutbox(_Base):
    id = peewee.AutoField()
    task_id = peewee.TextField()
    config_id = peewee.TextField()
    jti = peewee.TextField(unique=True)
    url = peewee.TextField()
    body = peewee.TextField()
    state = peewee.TextField(default="pending")
    """pending, delivered, failed (attempts used up), expired (too old), or dropped."""
    attempts = peewee.IntegerField(default=0)
    next_attempt_ts = peewee.BigIntegerField()
    created_ts = peewee.BigIntegerField()
    node = peewee.TextField(default="", constraints=[peewee.SQL("DEFAULT ''")])
    worker = peewee.IntegerField(default=0, constraints=[peewee.SQL("DEFAULT 0")])
    """The server and process that deliver it (the one that queued it, or its successor)."""
    traceparent = peewee.TextField(null=True)
    """The W3C trace context of the change it reports: its delivery continues that trace."""

    class Meta:
        table_name = "push_outbox"
        indexes = ((("node", "worker", "state", "next_attempt_ts"), False),)


class PushAttempt(_Base):
    id = peewee.AutoField()
    outbox = peewee.ForeignKeyField(PushOutbox, backref="attempt_rows", on_delete="CASCADE")
    attempt = peewee.IntegerField()
    at_ts = peewee.BigIntegerField()
    status = peewee.IntegerField(null=True)
    error = peewee.TextField(null=True)
    duration_ms = peewee.IntegerField()

    class Meta:
        table_name = "push_attempts"


class SessionRow(_Base):
    """One conversation of one verified caller: (tenant, issuer, subject, A2A contextId)."""

    id = peewee.TextField(primary_key=True)
    tenant = peewee.TextField()
    issuer = peewee.TextField()
    subject = peewee.TextField()
    context_id = peewee.TextField()
    created_ts = peewee.BigIntegerField()

    class Meta:
        table_name = "sessions"
        indexes = ((("tenant", "issuer", "subject", "context_id"), True),)


class SessionMessageRow(_Base):
    """A message of a session in the content codec's canonical JSON, at its position (ascending;
    compaction frees the lowest ones and may put a summary there)."""

    seq = peewee.AutoField()
    session = peewee.ForeignKeyField(
        SessionRow, backref="messages", on_delete="CASCADE", index=False
    )  # the unique (session, position) index serves it
    position = peewee.BigIntegerField()
    body = peewee.TextField()
    task_id = peewee.TextField(null=True)
    """The task whose turn added it, if any."""
    turn = peewee.TextField(null=True)
    """The turn that added it: the A2A messageId of the message that started the turn."""
    created_ts = peewee.BigIntegerField()

    class Meta:
        table_name = "session_messages"
        indexes = ((("session", "position"), True),)


class SubtaskRow(_Base):
    """One subtask of a task's delegation plan (see `looping_core.contract.SubtaskRecord`)."""

    task = peewee.ForeignKeyField(
        TaskRow, backref="subtasks", on_delete="CASCADE", index=False
    )  # the primary key (task, subtask_id) serves it
    subtask_id = peewee.TextField()
    seq = peewee.IntegerField()
    """The order the subtasks of a task were added in."""
    type_key = peewee.TextField()
    params = peewee.TextField()
    depends_on = peewee.TextField()
    round = peewee.IntegerField()
    state = peewee.TextField()
    result = peewee.TextField(null=True)
    reason = peewee.TextField(null=True)
    attempts = peewee.IntegerField()
    fingerprint = peewee.TextField(null=True)
    wave = peewee.IntegerField(null=True)
    usage = peewee.TextField(null=True)
    cost = peewee.FloatField(null=True)
    """What its subagent's model calls cost, by the deployment's prices (migration 15)."""
    created_ts = peewee.BigIntegerField()
    started_ts = peewee.BigIntegerField(null=True)
    ended_ts = peewee.BigIntegerField(null=True)

    class Meta:
        table_name = "subtasks"
        primary_key = peewee.CompositeKey("task", "subtask_id")


class ApprovalRow(_Base):
    """A tool call that needed the caller's approval (see `looping_core.content.ToolApproval`):
    asked for, decided, begun and ended, each a guarded write, so an approved call runs at most
    once."""

    task = peewee.ForeignKeyField(
        TaskRow, backref="approvals", on_delete="CASCADE", index=False
    )  # the primary key (task, call_id) serves it
    call_id = peewee.TextField()
    tool = peewee.TextField()
    arguments = peewee.TextField()
    state = peewee.TextField()
    reason = peewee.TextField(default="")
    asked_ts = peewee.BigIntegerField()
    decided_ts = peewee.BigIntegerField(null=True)
    started_ts = peewee.BigIntegerField(null=True)
    ended_ts = peewee.BigIntegerField(null=True)

    class Meta:
        table_name = "tool_approvals"
        primary_key = peewee.CompositeKey("task", "call_id")


class CallerSpendRow(_Base):
    """What one caller's turns cost on one day (UTC), for its daily budget: each turn's end
    adds its cost in the same write (migration 15)."""

    tenant = peewee.TextField()
    issuer = peewee.TextField()
    subject = peewee.TextField()
    day = peewee.IntegerField()
    """Days since 1970-01-01, UTC."""
    cost = peewee.FloatField()

    class Meta:
        table_name = "caller_spend"
        primary_key = peewee.CompositeKey("tenant", "issuer", "subject", "day")


SESSION_MODELS: tuple[type[peewee.Model], ...] = (SessionRow, SessionMessageRow)
SUBTASK_MODELS: tuple[type[peewee.Model], ...] = (SubtaskRow,)

EVENT_MODELS: tuple[type[peewee.Model], ...] = (TaskEventRow,)
APPROVAL_MODELS: tuple[type[peewee.Model], ...] = (ApprovalRow,)
SPEND_MODELS: tuple[type[peewee.Model], ...] = (CallerSpendRow,)

CORE_MODELS: tuple[type[peewee.Model], ...] = (
    TaskRow, MessageRow, TaskArtifactRow, PushConfigRow, PushOutbox, PushAttempt, *SESSION_MODELS,
    *SUBTASK_MODELS, *EVENT_MODELS, *APPROVAL_MODELS, *SPEND_MODELS,
)  # fmt: skip
"""The models migration 1 creates (the journal tables exist before any migration)."""
