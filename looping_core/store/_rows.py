"""What every part of the task store shares: the base class (the database, this server's node and
worker slot), task snapshots, ownership checks, and time and JSON helpers. Store-thread code only.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Sequence
from typing import Any

import attrs
import peewee

from looping_core._random import random_bytes
from looping_core.a2a import (
    TERMINAL_STATES,
    Artifact,
    Message,
    Task,
    TaskState,
    TaskStatus,
    from_wire,
    to_wire,
)
from looping_core.contract import Identity
from looping_core.store._db import Database
from looping_core.store._errors import TaskNotFound
from looping_core.store._jobs import JobAlreadyQueued, JobHooks, JobTicket
from looping_core.store._secrets import PushSecrets

__all__ = [
    "DAY_US",
    "HEAD",
    "NON_TERMINAL",
    "RUNNING",
    "RUNNING_SQL",
    "Head",
    "StoreBase",
    "compact",
    "dump",
    "new_id",
    "now_us",
    "timestamp",
]

NON_TERMINAL = tuple(state for state in TaskState if state not in TERMINAL_STATES)
RUNNING = (TaskState.TASK_STATE_SUBMITTED.value, TaskState.TASK_STATE_WORKING.value)
RUNNING_SQL = ", ".join(str(state) for state in RUNNING)
"""`RUNNING` as an SQL list: `state IN ({RUNNING_SQL})`."""


DAY_US = 86_400_000_000
"""Microseconds in a day: a time in microseconds since the epoch over it is the UTC day."""


def now_us() -> int:
    return time.time_ns() // 1000


def new_id() -> str:
    """A new row's id: a UUID version 7 (RFC 9562), 48 bits of Unix milliseconds and then 74
    random bits.

    Ids that grow with time put each new row at the end of every index keyed by them, so a
    commit writes the few pages at that end instead of one page per row and index, scattered
    (a version 4 id's cost: about twice the SQLite CPU per turn, measured by
    bench/send_message.py). An id says when its row was made and nothing else; whose it is
    stays checked on every read."""
    milliseconds = time.time_ns() // 1_000_000
    random = int.from_bytes(random_bytes(10), "big")
    value = (
        (milliseconds & 0xFFFF_FFFF_FFFF) << 80
        | 0x7 << 76  # version
        | ((random >> 62) & 0xFFF) << 64  # 12 random bits
        | 0b10 << 62  # variant
        | (random & ((1 << 62) - 1))  # 62 random bits
    )
    digits = f"{value:032x}"  # as str(uuid.UUID(int=value)) spells it, without the object
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


def timestamp(us: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(us / 1_000_000, datetime.UTC)


def dump(value: Any) -> str:
    """A wire model as compact JSON (a row's body)."""
    return compact(to_wire(value))


_COMPACT = json.JSONEncoder(separators=(",", ":"))


def compact(document: Any) -> str:
    """An already-wire JSON value as compact JSON."""
    return _COMPACT.encode(document)


@attrs.frozen
class Head:
    """The columns of a task row a snapshot needs."""

    id: str
    context_id: str
    state: int
    status_message: str | None
    status_ts: int
    metadata: str | None
    reply_in_status: bool = False
    """The agent's reply is the status message, kept only on the row: history ends with it."""


HEAD = (
    "SELECT id, context_id, state, status_message, status_ts, metadata, reply_in_status FROM tasks"
)


class StoreBase:
    """The database and whose rows these are. Every public method of the store's parts is a
    coroutine that hands its work (a method or a closure, store-thread code) to `self._db.run`;
    nothing else touches the database.

    The hot path (a turn's writes, snapshots, the outbox) is plain parameterized SQL: building
    peewee queries cost more than running them. The schema itself is the peewee models'.
    """

    def __init__(
        self,
        database: Database,
        *,
        node: str = "",
        worker: int = 0,
        jobs: JobHooks | None = None,
        secrets: PushSecrets | None = None,
    ) -> None:
        """`node` and `worker` say whose turns these are: the server (`[server] node`) and its
        worker slot. Recovery and push delivery look at this owner's rows only. `jobs`: the job
        engine that runs turns and pushes, told in the transaction that makes them (none: the
        embedded runner, told in process). `secrets`: what seals push configs' token and
        credentials at rest (the server always gives one; without, they are stored as given)."""
        self._db = database
        self._secrets = secrets
        self._node = node
        self._worker = worker
        self._jobs = jobs
        self._sql = database.execute
        self._accepts_alone = jobs is None or jobs.new_turn_call("") is not None
        """Whether a one-statement accept is its own transaction: no job engine to defer to
        (the runner is told in process), or one whose defer it embeds (`new_turn_call`)."""

    def _queue_turn(self, task_id: str, priority: int = 0, *, new_task: bool = False) -> None:
        """Hand the task's next turn to the job engine, in this transaction (store thread),
        before the waiting turns of a lower `priority`. A `new_task`'s id is this
        transaction's own (a version 7 UUID, never used before): no job can hold its queueing
        lock, so its defer needs no savepoint to survive a refusal (two statements less)."""
        if self._jobs is None:
            return
        if new_task:
            self._jobs.turn_queued(self._connection(), task_id, priority)
            return
        try:
            with self._db.write():  # a savepoint: a refused defer leaves the rest intact
                self._jobs.turn_queued(self._connection(), task_id, priority)
        except JobAlreadyQueued:
            pass  # its waiting job runs the turn

    @property
    def _one_statement_writes(self) -> bool:
        """Whether a write of several statements may be sent as one (PostgreSQL's
        data-modifying `WITH`, its own transaction): SQLite's writes are group-committed
        in-process, where a statement costs no round trip."""
        return isinstance(self._db.peewee, peewee.PostgresqlDatabase)

    def _connection(self) -> Any:
        """This thread's open connection (the one the transaction runs on)."""
        return self._db.peewee.connection()  # type: ignore[no-untyped-call]

    def _queue_push(self, outbox_id: int, at: int | None = None) -> None:
        if self._jobs is not None:
            self._jobs.push_queued(self._connection(), outbox_id, at)

    def _end_job(self, job: JobTicket | None) -> bool:
        """Finish the engine's job in this transaction: its work is this write. Whether there
        was one to finish."""
        if self._jobs is None or job is None:
            return False
        self._jobs.job_done(self._connection(), job.id)
        return True

    def _job_done_call(self, job: JobTicket | None) -> tuple[str, tuple[Any, ...]] | None:
        """The engine's finish of `job` as an expression to end a one-statement write with
        (`JobHooks.job_done_call`); `None`: none to finish, or not as an expression."""
        if self._jobs is None or job is None:
            return None
        return self._jobs.job_done_call(job.id)

    def _new_turn_call(self, task_id: str) -> tuple[str, tuple[Any, ...]] | None:
        """The engine's defer of a new task's turn as an expression for a one-statement accept
        (`JobHooks.new_turn_call`); `None`: no engine, or not as an expression."""
        if self._jobs is None:
            return None
        return self._jobs.new_turn_call(task_id)

    def _owned(self, caller: Identity, task_id: str) -> Head:
        row = self._sql(
            f"{HEAD} WHERE id = ? AND tenant = ? AND issuer = ? AND subject = ?",
            (task_id, caller.tenant, caller.issuer, caller.subject),
        ).fetchone()
        if row is None:
            raise TaskNotFound(task_id)
        return Head(*row)

    def _snapshot(
        self,
        task_id: str,
        history_length: int | None,
        *,
        include_artifacts: bool,
        head: Head | None = None,
        newest_first: Sequence[str] | None = None,
    ) -> Task:
        """`newest_first`: the task's message bodies, newest first, when the caller's write read
        them already (all of them: `history_length` is then `None`)."""
        head = head or Head(*self._sql(f"{HEAD} WHERE id = ?", (task_id,)).fetchone())
        status_message = (
            from_wire(json.loads(head.status_message), Message) if head.status_message else None
        )
        # The reply a turn ended with is the last of the history (see `Head.reply_in_status`).
        last = (status_message,) if head.reply_in_status and status_message else ()
        history: tuple[Message, ...] = ()
        if history_length != 0:
            limit = None if history_length is None else history_length - len(last)
            stored: list[Message] = []
            if newest_first is not None:
                stored = [from_wire(json.loads(body), Message) for body in reversed(newest_first)]
            elif limit != 0:
                statement = "SELECT body FROM messages WHERE task_id = ? ORDER BY seq DESC"
                params: tuple[Any, ...] = (task_id,)
                if limit is not None:
                    statement += " LIMIT ?"
                    params = (task_id, limit)
                bodies = [body for (body,) in self._sql(statement, params).fetchall()]
                stored = [from_wire(json.loads(body), Message) for body in reversed(bodies)]
            history = (*stored, *last)
        artifacts: tuple[Artifact, ...] = ()
        if include_artifacts:
            rows = self._sql(
                "SELECT body FROM artifacts WHERE task_id = ? ORDER BY seq", (task_id,)
            ).fetchall()
            artifacts = tuple(from_wire(json.loads(body), Artifact) for (body,) in rows)
        status = TaskStatus(
            state=TaskState(head.state),
            message=status_message,
            timestamp=timestamp(head.status_ts),
        )
        return Task(
            metadata=json.loads(head.metadata) if head.metadata else None,
            id=head.id,
            context_id=head.context_id,
            status=status,
            artifacts=artifacts,
            history=history,
        )
