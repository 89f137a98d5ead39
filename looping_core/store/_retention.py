"""Deleting finished work (`[retention]`), in bounded batches so no transaction grows with
the backlog and the server keeps answering while a large one is worked off.

- **Ended tasks** (completed, failed, canceled, rejected) whose end is older than
  `finished_after`: each with what hangs off it (its messages, artifacts, events, push configs,
  subtasks and tool approvals go with its row; its pushes and their attempts are deleted beside
  it), then the sessions of its conversation (and that conversation's subagents) once no task
  of it is left. A task with a push still pending is left for the deliverer to finish or
  expire.
- **Events of ended tasks** older than `events_after`: streams resume from events only while a
  task runs, and a resume after them is told the task ended.
- **Pushes done with** (delivered, failed, expired, dropped) older than `delivered_after`, with
  their attempts. A pending push is never deleted.
- **Callers' spend per day** (the daily budgets' count) of days that ended `finished_after`
  ago, with the ended tasks: one statement a run, which after the first run meets one day's
  rows.

Never a task that has not ended: a task waiting for input is not finished. 0 keeps a kind
forever.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from looping_core.a2a import TERMINAL_STATES
from looping_core.store._db import Database
from looping_core.store._rows import DAY_US, now_us

__all__ = ["BATCH", "PruneCounts", "RetentionPolicy", "prune"]

BATCH = 500
"""Rows of one kind one transaction deletes at most."""
MAX_BATCHES = 200
"""Batches of one kind one run deletes at most (the next run goes on from there)."""
SUBAGENT_SEPARATOR = "\x1f"
"""Joins a conversation and a subagent's scope in a session's context (the runner's)."""
_ENDED = tuple(state.value for state in TERMINAL_STATES)
_DONE_PUSHES = ("delivered", "failed", "expired", "dropped")


@attrs.frozen
class RetentionPolicy:
    """How old (seconds) each kind must be to go; 0 keeps it forever."""

    finished_after: int
    events_after: int
    delivered_after: int


@attrs.frozen
class PruneCounts:
    """What one run deleted."""

    tasks: int = 0
    sessions: int = 0
    events: int = 0
    pushes: int = 0

    def __add__(self, other: PruneCounts) -> PruneCounts:
        pairs = zip(attrs.astuple(self), attrs.astuple(other), strict=True)
        return PruneCounts(*(a + b for a, b in pairs))

    @property
    def total(self) -> int:
        return self.tasks + self.sessions + self.events + self.pushes


async def prune(database: Database, policy: RetentionPolicy, now: int | None = None) -> PruneCounts:
    """Delete what `policy` says has been kept long enough (`now`: microseconds since the
    epoch), batch by batch, each batch its own transaction."""
    moment = now_us() if now is None else now
    counts = PruneCounts()
    steps = (
        (policy.finished_after, _tasks_batch),
        (policy.events_after, _events_batch),
        (policy.delivered_after, _pushes_batch),
    )
    if policy.finished_after > 0:
        await database.run(_spend_days, database, moment - policy.finished_after * 1_000_000)
    for after, batch in steps:
        if after <= 0:
            continue
        cutoff = moment - after * 1_000_000
        for _ in range(MAX_BATCHES):
            done = await database.run(batch, database, cutoff)
            counts += done
            if done.total < BATCH:
                break
    return counts


def _marks(count: int) -> str:
    return ", ".join("?" for _ in range(count))


def _tasks_batch(database: Database, cutoff: int) -> PruneCounts:
    sql = database.execute
    rows = sql(
        f"SELECT id, tenant, issuer, subject, context_id FROM tasks WHERE state IN"
        f" ({_marks(len(_ENDED))}) AND status_ts < ? AND NOT EXISTS (SELECT 1 FROM push_outbox"
        " o WHERE o.task_id = tasks.id AND o.state = 'pending') ORDER BY status_ts LIMIT ?",
        (*_ENDED, cutoff, BATCH),
    ).fetchall()
    if not rows:
        return PruneCounts()
    ids = [row[0] for row in rows]
    with database.write():
        # Attempts go with their push (a foreign key); the rest with the task's row.
        sql(f"DELETE FROM push_outbox WHERE task_id IN ({_marks(len(ids))})", ids)
        sql(f"DELETE FROM tasks WHERE id IN ({_marks(len(ids))})", ids)
        sessions = sum(_drop_sessions(database, key) for key in {tuple(r[1:]) for r in rows})
    return PruneCounts(tasks=len(ids), sessions=sessions)


def _spend_days(database: Database, cutoff: int) -> None:
    """Callers' spend of the days that ended before `cutoff`."""
    database.execute("DELETE FROM caller_spend WHERE day < ?", (cutoff // DAY_US,))


def _drop_sessions(database: Database, key: Sequence[Any]) -> int:
    """The sessions of a conversation (and of its subagents) once no task of it is left."""
    tenant, issuer, subject, context_id = key
    left = database.execute(
        "SELECT 1 FROM tasks WHERE tenant = ? AND issuer = ? AND subject = ? AND context_id = ?"
        " LIMIT 1",
        (tenant, issuer, subject, context_id),
    ).fetchone()
    if left is not None:
        return 0
    prefix = f"{context_id}{SUBAGENT_SEPARATOR}"
    cursor = database.execute(
        "DELETE FROM sessions WHERE tenant = ? AND issuer = ? AND subject = ? AND"
        " (context_id = ? OR substr(context_id, 1, ?) = ?)",
        (tenant, issuer, subject, context_id, len(prefix), prefix),
    )
    return max(0, int(cursor.rowcount))


def _events_batch(database: Database, cutoff: int) -> PruneCounts:
    cursor = database.execute(
        "DELETE FROM task_events WHERE id IN (SELECT e.id FROM task_events e JOIN tasks t ON"
        f" t.id = e.task_id WHERE t.state IN ({_marks(len(_ENDED))}) AND e.created_ts < ?"
        " LIMIT ?)",
        (*_ENDED, cutoff, BATCH),
    )
    return PruneCounts(events=max(0, int(cursor.rowcount)))


def _pushes_batch(database: Database, cutoff: int) -> PruneCounts:
    cursor = database.execute(
        "DELETE FROM push_outbox WHERE id IN (SELECT id FROM push_outbox WHERE state IN"
        f" ({_marks(len(_DONE_PUSHES))}) AND created_ts < ? LIMIT ?)",
        (*_DONE_PUSHES, cutoff, BATCH),
    )
    return PruneCounts(pushes=max(0, int(cursor.rowcount)))
