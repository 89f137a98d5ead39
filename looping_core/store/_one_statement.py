"""PostgreSQL's one-statement writes: several of a write's statements sent as one (a
data-modifying `WITH`), where later ones need nothing from earlier ones but what SQL itself can
pass on. A statement costs PostgreSQL about 40 µs of CPU and the store's thread about 50 µs
besides its work (`docs/benchmarks.md`), so the hottest writes of the job engine's turn are
built here: a turn's begin (its own transaction), a new task's accept (with its push config
and its job's defer, its own transaction), and a turn's end (made by a job: its own
transaction, with the pushes it queues or its job's finish; else all but its pushes, which
then follow in the same transaction). SQLite runs each statement in-process, group-committed:
its writes stay as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from looping_core.a2a import StreamResponse, TaskState, TaskStatus, TaskStatusUpdateEvent
from looping_core.store._notify import EVENTS_CHANNEL
from looping_core.store._push_configs import PUSH_CONFIG_INSERT, PUSH_CONFIG_REPLACING
from looping_core.store._rows import DAY_US, RUNNING_SQL, dump, timestamp

__all__ = [
    "ARTIFACT_UPSERT",
    "BEGIN_TURN",
    "SPEND_ADDED",
    "TURN_END",
    "UNSEEN_FOLLOW_UP",
    "UNSETTLED",
    "EndAlone",
    "EndWrite",
    "accept_at_once",
    "begin_at_once",
    "begin_turn_arguments",
    "end_at_once",
    "unsettled_arguments",
]

BEGIN_TURN = (
    "UPDATE tasks SET state = ?, status_ts = ?, event_seq = event_seq + 1"
    " WHERE id = ? AND state = ? RETURNING event_seq, tenant, issuer, subject,"
    " turn_message, id, context_id, state, status_message, status_ts, metadata,"
    " reply_in_status"
)
"""A turn's begin: the guarded move from SUBMITTED to WORKING, returning the number of its
WORKING event, the owner, the message that began it, and the columns of a snapshot (`Head`)."""

_CONTEXT_SLOT = "looping:context-id"
"""Where the WORKING event of a one-statement begin takes the row's context (never an id)."""


def begin_turn_arguments(task_id: str, stamp: int) -> tuple[Any, ...]:
    return (
        TaskState.TASK_STATE_WORKING.value,
        stamp,
        task_id,
        TaskState.TASK_STATE_SUBMITTED.value,
    )


def begin_at_once(task_id: str, stamp: int) -> tuple[str, tuple[Any, ...]]:
    """A turn's begin as one statement, its own transaction: `BEGIN_TURN`, its WORKING event
    (`TurnStarts._working_event`'s, encoded here; its context is the row's, spliced in by
    PostgreSQL as a JSON string) and the notice of it, and the task's messages, newest first,
    for its snapshot. Its row: `BEGIN_TURN`'s columns, the notice's (void), the bodies."""
    working = TaskStatus(TaskState.TASK_STATE_WORKING, timestamp=timestamp(stamp))
    event = TaskStatusUpdateEvent(task_id, _CONTEXT_SLOT, working)
    body = dump(StreamResponse(status_update=event))
    statement = (
        f"WITH begun AS ({BEGIN_TURN}),"
        " event AS (INSERT INTO task_events (task_id, seq, body, created_ts)"
        " SELECT id, event_seq, replace(?, ?, to_json(context_id)::text), ? FROM begun)"
        " SELECT begun.*, pg_notify(?, id),"
        " ARRAY(SELECT body FROM messages WHERE task_id = begun.id ORDER BY seq DESC)"
        " FROM begun"
    )
    slot = f'"{_CONTEXT_SLOT}"'
    return statement, (*begin_turn_arguments(task_id, stamp), body, slot, stamp, EVENTS_CHANNEL)


NEW_TASK = (
    "INSERT INTO tasks (id, tenant, issuer, subject, context_id, state, status_message,"
    " status_ts, created_ts, node, worker, turn_message, event_seq)"
    " SELECT ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, ?"
)
"""A new task's row (12 values; no status message yet), selected so that it is written only
`WHERE` its message is new (`MESSAGE_IS_NEW`)."""
MESSAGE_IS_NEW = (
    "NOT EXISTS (SELECT 1 FROM messages"
    " WHERE tenant = ? AND issuer = ? AND subject = ? AND message_id = ?)"
)

_UNSETTLED_OF = (
    "(SELECT COUNT(*) FROM (SELECT 1 FROM tasks WHERE {owner}"
    f" AND state IN ({RUNNING_SQL}) ORDER BY {{order}} LIMIT ?) AS unsettled)"
)
UNSETTLED = (
    "SELECT "
    + _UNSETTLED_OF.format(owner="tenant = ?", order="issuer DESC, subject DESC, id DESC")
    + " AS tenant_turns, "
    + _UNSETTLED_OF.format(owner="tenant = ? AND issuer = ? AND subject = ?", order="id DESC")
    + " AS caller_turns"
)
"""A tenant's unsettled tasks, and its caller's, each counted up to a bound (`unsettled_arguments`)
so that the count costs at most that many index entries whatever the backlog (the turn limits'
count, alone or in `accept_at_once`). Newest first, backwards along the partial index
`tasks_unsettled_newest` (migration 16): the entries of tasks settled since the last vacuum are
the oldest, so a bounded count seldom steps over them. The states are literals, as in the
index: a query with parameters there could not use it."""


def unsettled_arguments(
    scope: tuple[str, str, str], tenant_bound: int, caller_bound: int
) -> tuple[Any, ...]:
    """`UNSETTLED`'s arguments for a (tenant, issuer, subject) `scope`: the tenant's turns counted
    up to `tenant_bound`, its caller's up to `caller_bound` (0: not counted)."""
    tenant, issuer, subject = scope
    return (tenant, tenant_bound, tenant, issuer, subject, caller_bound)


def accept_at_once(
    task: tuple[Any, ...],
    message: tuple[Any, ...],
    push_config: tuple[Any, ...] | None,
    *,
    counted: tuple[int, int],
    caller_limit: int,
    tenant_limit: int,
    defer: tuple[str, tuple[Any, ...]] | None = None,
) -> tuple[str, tuple[Any, ...]]:
    """A new task's accept as one statement: the count of the tenant's and the caller's
    unsettled turns (`counted`: the bounds `unsettled_arguments` takes; (0, 0): none), the task
    (only if its message is new and the turn is within both limits, 0 meaning none), its
    message and its push config. `task`: the `tasks` row's 12 values (`status_message` is
    NULL; its owner and `turn_message` say which message must be new); `message`: the
    `messages` row's 7 values; `push_config`: the row's first five
    (`PushConfigs.push_config_row`); `defer`: the job engine's defer of the task's turn
    (`JobHooks.new_turn_call`), made only when the task is written, its priority minus the
    tenant's unsettled turns as counted. Its row: the tenant's and the caller's unsettled
    turns (0 when not counted), and whether the task was written."""
    scope = task[1:4]
    new_message = (*scope, task[10])
    count, count_arguments = "SELECT 0 AS tenant_turns, 0 AS caller_turns", ()
    if any(counted):
        count, count_arguments = UNSETTLED, unsettled_arguments(scope, *counted)
    config = ""
    config_arguments: tuple[Any, ...] = ()
    if push_config is not None:
        config = (
            f", config AS ({PUSH_CONFIG_INSERT} SELECT ?, ?, ?, ?, ?, NULL FROM task"
            f" {PUSH_CONFIG_REPLACING})"
        )
        config_arguments = push_config
    job, deferred = "", "NULL"
    job_arguments: tuple[Any, ...] = ()
    if defer is not None:
        # A volatile function: its query runs once, and only for a task written (the row's
        # last column reads it, so it is not left out).
        call, job_arguments = defer
        priority = "(-counted.tenant_turns)::integer"
        job = f", job AS (SELECT {call.format(priority=priority)} AS ids FROM task, counted)"
        deferred = "(SELECT ids FROM job)"
    statement = (
        f"WITH counted AS ({count}),"
        f" task AS ({NEW_TASK} FROM counted WHERE {MESSAGE_IS_NEW}"
        " AND (? = 0 OR caller_turns < ?) AND (? = 0 OR tenant_turns < ?) RETURNING id),"
        " message AS (INSERT INTO messages (task_id, tenant, issuer, subject, message_id, body,"
        f" joined) SELECT ?, ?, ?, ?, ?, ?, ? FROM task){config}{job}"
        f" SELECT tenant_turns, caller_turns, EXISTS (SELECT 1 FROM task), {deferred}"
        " FROM counted"
    )
    limits = (caller_limit, caller_limit, tenant_limit, tenant_limit)
    arguments = (
        *count_arguments, *task, *new_message, *limits, *message, *config_arguments,
        *job_arguments,
    )  # fmt: skip
    return statement, arguments


TURN_END = (
    "UPDATE tasks SET state = ?, status_message = ?, status_ts = ?,"
    " metadata = COALESCE(?, metadata), answer = CASE WHEN ? THEN 'message' ELSE answer END,"
    " reply_in_status = ?, event_seq = event_seq + ?"
)
"""A change of a task's state, its status, metadata and answer, taking the numbers of the
events it reports (7 values; the guard is the caller's `WHERE`)."""
UNSEEN_FOLLOW_UP = (
    " AND tasks.joined_seq <= COALESCE("
    "(SELECT seq FROM messages WHERE task_id = tasks.id AND message_id = ?), tasks.joined_seq)"
)
"""The guard that no follow-up joined after the message `?` (the last one a turn took), read
from the task's row (`TaskRow.joined_seq`), which a join writes: PostgreSQL checks a row that
changed while the statement waited for it again, but not other tables' rows (READ COMMITTED),
so a guard on the messages table let an end racing a join win over a follow-up nobody would
answer."""
SPEND_ADDED = (
    " ON CONFLICT (tenant, issuer, subject, day) DO UPDATE SET cost = caller_spend.cost"
    " + excluded.cost"
)
"""A turn's cost added to its caller's spend of the day (the tail of an `INSERT INTO
caller_spend (tenant, issuer, subject, day, cost)`)."""
ARTIFACT_UPSERT = (
    "INSERT INTO artifacts (task_id, artifact_id, body) {rows}"
    " ON CONFLICT (task_id, artifact_id) DO UPDATE SET body = excluded.body"
)
"""An artifact written again under its id keeps its place (`seq`) and takes the new body."""


@attrs.frozen
class EndAlone:
    """What makes a turn's end its own transaction (the job engine's): the pushes it queues,
    written in it, and its job, finished in it when it queues none. Its guard then also asks
    that each of the task's push configs was checked deliverable (a config an older release
    wrote is checked in Python, by the write a statement at a time)."""

    body_head: str
    """The push body's first task fields (`_outbox.task_head`): the statement adds the task's
    artifacts, as this write leaves them, and its metadata."""
    queued: tuple[Any, ...]
    """Each outbox row's due time, creation time, node, worker and trace context."""
    finish: tuple[str, tuple[Any, ...]]
    """The engine's finish of the job (`JobHooks.job_done_call`)."""


@attrs.frozen
class EndWrite:
    """A turn's end as one write, every value encoded: what `end_at_once` sends."""

    task_id: str
    context_id: str
    """The task's, as its caller knows it: the write is guarded on it."""
    to: TaskState
    allowed_from: tuple[TaskState, ...]
    stamp: int
    status_message: str | None
    """Its JSON, addressed to the task."""
    metadata: str | None
    answer_with_message: bool
    reply_in_status: bool
    reply: tuple[str, str] | None
    """The reply kept in the history: its messageId and JSON."""
    artifacts: Mapping[str, str]
    """Each artifact's JSON by id, in the order of their first writing (the last body of an id
    written twice)."""
    events: Sequence[str]
    taken_through: str | None
    spent: float | None
    with_configs: bool
    """Whether its row carries the task's push configs (a state that is pushed)."""
    alone: EndAlone | None = None
    """Its own transaction, its pushes queued in it (`end_at_once`)."""


def end_at_once(end: EndWrite) -> tuple[str, tuple[Any, ...]]:
    """A turn's end as one statement: the guarded change (`TURN_END`, guarded on the task's
    state, its context and, with `taken_through`, `UNSEEN_FOLLOW_UP`), the spend, the reply,
    the artifacts, the events numbered from the change's and their notice. Its row: the last
    event's number, the metadata the task has now, whether it had artifacts before, and (when
    `with_configs`) its push configs as JSON (`[config_id, body, target_checked,
    undeliverable]` each, in order), or with `alone` the pushes it queued (`EndAlone`,
    `_queued_alone`); none when the guard refused."""
    marks = ", ".join("?" * len(end.allowed_from))
    unseen = UNSEEN_FOLLOW_UP if end.taken_through is not None else ""
    checked = _CONFIGS_CHECKED if end.alone is not None and end.with_configs else ""
    parts = [
        f"WITH changed AS ({TURN_END} WHERE id = ? AND context_id = ? AND state IN ({marks})"
        f"{unseen}{checked} RETURNING id, event_seq, tenant, issuer, subject, metadata,"
        " EXISTS (SELECT 1 FROM artifacts WHERE task_id = tasks.id) AS had_artifacts)"
    ]
    arguments: list[Any] = [
        end.to.value,
        end.status_message,
        end.stamp,
        end.metadata,
        end.answer_with_message,
        end.reply_in_status,
        len(end.events),
        end.task_id,
        end.context_id,
        *(state.value for state in end.allowed_from),
    ]
    if end.taken_through is not None:
        arguments.append(end.taken_through)
    if end.spent:
        parts.append(
            "spend AS (INSERT INTO caller_spend (tenant, issuer, subject, day, cost)"
            f" SELECT tenant, issuer, subject, ?, ? FROM changed{SPEND_ADDED})"
        )
        arguments += [end.stamp // DAY_US, end.spent]
    if end.reply is not None:
        parts.append(
            "reply AS (INSERT INTO messages (task_id, tenant, issuer, subject, message_id, body)"
            " SELECT id, tenant, issuer, subject, ?, ? FROM changed)"
        )
        arguments += list(end.reply)
    # Rows as VALUES, not arrays: a few text parameters cost the driver less than an array.
    if end.artifacts:
        values = ", ".join(f"(?, ?, {n})" for n in range(len(end.artifacts)))
        parts.append(f"new_artifacts (artifact_id, body, n) AS (VALUES {values})")
        arguments += [value for row in end.artifacts.items() for value in row]
        rows = "SELECT changed.id, a.artifact_id, a.body FROM changed, new_artifacts a ORDER BY a.n"
        parts.append(f"kept AS ({ARTIFACT_UPSERT.format(rows=rows)})")
    values = ", ".join(f"(?, {n})" for n in range(1, len(end.events) + 1))
    parts.append(
        "events AS (INSERT INTO task_events (task_id, seq, body, created_ts)"
        " SELECT changed.id, changed.event_seq - ? + e.n, e.body, ? FROM changed,"
        f" (VALUES {values}) AS e(body, n))"
    )
    arguments += [len(end.events), end.stamp, *end.events]
    configs = "NULL"
    if end.alone is not None:
        configs = _queued_alone(end, end.alone, parts, arguments)
    elif end.with_configs:
        configs = (
            "(SELECT json_agg(json_build_array(config_id, body, target_checked, undeliverable)"
            " ORDER BY seq) FROM push_configs WHERE task_id = changed.id)"
        )
    statement = (
        f"{', '.join(parts)} SELECT event_seq, metadata, had_artifacts, {configs},"
        " pg_notify(?, id) FROM changed"
    )
    return statement, (*arguments, EVENTS_CHANNEL)


_CONFIGS_CHECKED = (
    " AND NOT EXISTS (SELECT 1 FROM push_configs WHERE task_id = tasks.id"
    " AND NOT (target_checked AND undeliverable IS NULL))"
)
"""The guard of an end alone that queues pushes: every config of the task checked deliverable."""
_ARTIFACTS_NOW = (
    "SELECT string_agg(body, ',' ORDER BY fresh, n) FROM ("
    " SELECT COALESCE(a.body, old.body) AS body, FALSE AS fresh, old.seq AS n FROM artifacts old"
    " LEFT JOIN new_artifacts a ON a.artifact_id = old.artifact_id WHERE old.task_id = changed.id"
    " UNION ALL SELECT a.body, TRUE, a.n FROM new_artifacts a WHERE NOT EXISTS (SELECT 1"
    " FROM artifacts old WHERE old.task_id = changed.id AND old.artifact_id = a.artifact_id))"
    " AS now"
)
"""The task's artifacts as this write leaves them, joined: those stored before in their order
(the statement sees them as they were), with this write's bodies under their ids, then this
write's new ones in order (`ARTIFACT_UPSERT`'s result, which the statement cannot read)."""


def _queued_alone(end: EndWrite, alone: EndAlone, parts: list[str], arguments: list[Any]) -> str:
    """The parts of an end alone after its events (added to `parts` and `arguments`): its
    push body, an outbox row per config, and its job's finish if it queued none. Returns the
    expression of its row's pushes column: `[[outbox id, config id, jti, url, config body],
    body, finished]`, the first list in the outbox's order."""
    if end.with_configs:
        artifacts = (
            _ARTIFACTS_NOW
            if end.artifacts
            else "SELECT string_agg(body, ',' ORDER BY seq) FROM artifacts"
            " WHERE task_id = changed.id"
        )
        parts.append(
            """pushed AS (SELECT '{"task":{' || ? || COALESCE(',"artifacts":[' || """
            f"({artifacts})"
            """ || ']', '') || COALESCE(',"metadata":' || changed.metadata, '') || '}}'"""
            " AS body FROM changed)"
        )
        parts.append(
            "outbox AS (INSERT INTO push_outbox (task_id, config_id, jti, url, body, state,"
            " attempts, next_attempt_ts, created_ts, node, worker, traceparent)"
            " SELECT c.task_id, c.config_id, gen_random_uuid()::text,"
            " COALESCE(c.body::json ->> 'url', ''), pushed.body, 'pending', 0, ?, ?, ?, ?, ?"
            " FROM changed JOIN push_configs c ON c.task_id = changed.id, pushed ORDER BY c.seq"
            " RETURNING id, task_id, config_id, jti, url)"
        )
        arguments += [alone.body_head, *alone.queued]
        unpushed = " WHERE NOT EXISTS (SELECT 1 FROM push_configs WHERE task_id = changed.id)"
    else:
        unpushed = ""
    call, finish_arguments = alone.finish
    # A volatile function: its query runs once, and only for an end that won with nothing to
    # deliver (the row's column reads it, so it is not left out).
    parts.append(f"finish AS (SELECT {call} FROM changed{unpushed})")
    arguments += finish_arguments
    if not end.with_configs:
        return "json_build_array(json_build_array(), NULL, (SELECT COUNT(*) FROM finish))"
    return (
        "json_build_array((SELECT COALESCE(json_agg(json_build_array(o.id, o.config_id, o.jti,"
        " o.url, c.body) ORDER BY o.id), json_build_array()) FROM outbox o JOIN push_configs c"
        " ON c.task_id = o.task_id AND c.config_id = o.config_id),"
        " (SELECT body FROM pushed), (SELECT COUNT(*) FROM finish))"
    )
