"""Task events: every status and artifact update of a task, numbered per task from 1, written in
the same transaction as the change it reports. A stream sends each with its number as the SSE
`id`, so a client that reconnects with `Last-Event-ID` gets exactly what it missed, whichever
process or machine made the change.

The number comes from `tasks.event_seq`, incremented by the same statement that locks the task's
row: two writers of one task take their numbers in the order they commit, so a reader that has
seen number n of a task never later finds a smaller one appear.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import peewee

from looping_core.a2a import (
    Artifact,
    Message,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
    to_wire,
)
from looping_core.contract import Identity
from looping_core.store._notify import EVENTS_CHANNEL, EventNotices
from looping_core.store._outbox import Outbox, OutboxItem
from looping_core.store._rows import StoreBase, compact, dump, now_us, timestamp

__all__ = ["Events", "TaskEvent"]

_CHUNK = 200
"""Tasks per query when reading several tasks' events (well under any placeholder limit)."""


@attrs.frozen
class TaskEvent:
    """One stored event: its task, its number, and its `StreamResponse` JSON as stored."""

    task_id: str
    seq: int
    body: str
    created_ts: int = 0
    """When it was written (µs since the epoch)."""

    @property
    def closes_stream(self) -> bool:
        """A status update to a terminal or interrupted state: a stream ends after it."""
        status = json.loads(self.body).get("statusUpdate", {}).get("status", {})
        state = TaskState.__members__.get(status.get("state", ""))
        return state is not None and (state.is_terminal or state.is_interrupted)


class Events(StoreBase):
    """Writing events (store thread, inside the write that makes the change), reading them back,
    and telling this process's listeners (a stream hub) which tasks have new ones. A progress
    that is pushed queues its push in `outbox`, in the same write."""

    def __init__(self, *args: Any, outbox: Outbox, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._outbox = outbox
        self._event_listeners: list[Callable[[str], None]] = []
        self._data_version: int | None = None
        """SQLite's `data_version` at the last look for other processes' events."""

    def watch_events(self, listener: Callable[[str], None]) -> None:
        """Call `listener(task_id)` on the event loop after this process wrote events of a task
        (other processes' events are found by reading: `events_after`)."""
        self._event_listeners.append(listener)

    def events_written(self, task_id: str) -> None:
        for listener in self._event_listeners:
            listener(task_id)

    def next_event(self, task_id: str, *, while_in: TaskState | None = None) -> tuple[int, str]:
        """Take the task's next event number (locking its row), with its contextId; `(0, "")`
        when `while_in` is given and the task is not in that state."""
        guard, args = ("", ()) if while_in is None else (" AND state = ?", (while_in.value,))
        row = self._sql(
            f"UPDATE tasks SET event_seq = event_seq + 1 WHERE id = ?{guard}"
            " RETURNING event_seq, context_id",
            (task_id, *args),
        ).fetchone()
        return (int(row[0]), row[1]) if row is not None else (0, "")

    def insert_event(self, task_id: str, seq: int, event: StreamResponse | str, stamp: int) -> None:
        self.insert_events(task_id, seq, [event], stamp)

    def insert_events(
        self, task_id: str, first: int, events: Sequence[StreamResponse | str], stamp: int
    ) -> None:
        """Store `events` of the task numbered from `first` on, in one statement."""
        rows = [
            (task_id, first + index, event if isinstance(event, str) else dump(event), stamp)
            for index, event in enumerate(events)
        ]
        insert = "INSERT INTO task_events (task_id, seq, body, created_ts) VALUES " + ", ".join(
            "(?, ?, ?, ?)" for _ in rows
        )
        values = [value for row in rows for value in row]
        if isinstance(self._db.peewee, peewee.PostgresqlDatabase):
            # The notice is sent when the transaction commits, so other processes' streams wake
            # at once; in the same statement as the rows (one round trip, not two).
            self._sql(
                f"WITH events AS ({insert}) SELECT pg_notify(?, ?)",
                [*values, EVENTS_CHANNEL, task_id],
            )
        else:
            self._sql(insert, values)

    def event_notices(
        self, on_task: Callable[[str], None], on_missed: Callable[[], None]
    ) -> EventNotices | None:
        """What tells this process at once about events other processes wrote (PostgreSQL's
        LISTEN/NOTIFY; not started); `None` on SQLite, where only reading finds them."""
        database = self._db.peewee
        if not isinstance(database, peewee.PostgresqlDatabase):
            return None

        async def connect() -> Any:
            psycopg = importlib.import_module("psycopg")  # the postgres extra's driver
            return await psycopg.AsyncConnection.connect(
                dbname=database.database, autocommit=True, **database.connect_params
            )

        return EventNotices(connect, on_task, on_missed)

    async def events_since(self, after: int | None) -> tuple[list[TaskEvent], int] | None:
        """Every event other processes committed after the event with store id `after`, in
        commit order, and the id to go on from; `after=None` only finds that id. SQLite only:
        its writers take turns, so ids are in commit order, and `data_version` (a counter of
        other connections' commits, no table read) says cheaply whether there is anything to
        read. `None` on PostgreSQL, where ids are not in commit order (it notifies instead)."""
        if not isinstance(self._db.peewee, peewee.SqliteDatabase):
            return None

        seen = self._data_version

        def read() -> tuple[list[TaskEvent], int, int]:
            # Only statements here: a job may run twice (store._db), so what it saw is kept
            # once it is done, below.
            (version,) = self._sql("PRAGMA data_version").fetchone()
            if after is None:
                (latest,) = self._sql("SELECT COALESCE(MAX(id), 0) FROM task_events").fetchone()
                return [], int(latest), version
            if version == seen:
                return [], after, version
            rows = self._sql(
                "SELECT id, task_id, seq, body, created_ts FROM task_events"
                " WHERE id > ? ORDER BY id",
                (after,),
            ).fetchall()
            found = [TaskEvent(task, int(seq), body, at) for _, task, seq, body, at in rows]
            return found, int(rows[-1][0]) if rows else after, version

        found, last, self._data_version = await self._db.run(read)
        return found, last

    def status_event(
        self, task_id: str, state: TaskState, message: Message | None, stamp: int
    ) -> StreamResponse:
        seq, context_id = self.next_event(task_id)
        status = TaskStatus(state=state, message=message, timestamp=timestamp(stamp))
        event = StreamResponse(status_update=TaskStatusUpdateEvent(task_id, context_id, status))
        self.insert_event(task_id, seq, event, stamp)
        return event

    async def stream_start(self, caller: Identity, task_id: str) -> tuple[Task, int]:
        """The caller's task and the number of its latest event: a stream's first event, and
        where it goes on from. Both are read in one snapshot (`Database.read`), so the task is
        exactly as that event left it: a generation (event number + 1) shown with it is its own,
        and a stream sends no event the snapshot already has."""

        def read() -> tuple[Task, int]:
            self._owned(caller, task_id)
            (seq,) = self._sql("SELECT event_seq FROM tasks WHERE id = ?", (task_id,)).fetchone()
            return self._snapshot(task_id, None, include_artifacts=True), int(seq)

        return await self._db.read(read)

    async def latest_event(self, caller: Identity, task_id: str) -> tuple[TaskState, int]:
        """The caller's task's state and the number of its latest event."""

        def read() -> tuple[TaskState, int]:
            head = self._owned(caller, task_id)
            (seq,) = self._sql("SELECT event_seq FROM tasks WHERE id = ?", (task_id,)).fetchone()
            return TaskState(head.state), int(seq)

        return await self._db.read(read)

    async def events_after(self, cursors: Mapping[str, int]) -> list[TaskEvent]:
        """The events of each task of `cursors` numbered above its cursor, in order per task."""

        def read() -> list[TaskEvent]:
            found: list[TaskEvent] = []
            items = list(cursors.items())
            for start in range(0, len(items), _CHUNK):
                chunk = items[start : start + _CHUNK]
                where = " OR ".join("(task_id = ? AND seq > ?)" for _ in chunk)
                rows = self._sql(
                    f"SELECT task_id, seq, body, created_ts FROM task_events WHERE {where}"
                    " ORDER BY task_id, seq",
                    [value for pair in chunk for value in pair],
                ).fetchall()
                found += [TaskEvent(task, int(seq), body, at) for task, seq, body, at in rows]
            return found

        return await self._db.run(read) if cursors else []

    async def progress(self, task_id: str, message: Message, *, push: bool) -> bool:
        """A working task's status message (what the agent is doing; addressed to the task: its
        `taskId` and `contextId` set): stored as the task's status, recorded as an event, and
        pushed if `push`. `False` if the task is no longer WORKING (canceled meanwhile)."""

        queued: list[OutboxItem] = []

        def write() -> bool:
            queued.clear()  # a batch undone runs its writes again
            stamp = now_us()
            status = TaskStatus(TaskState.TASK_STATE_WORKING, message, timestamp(stamp))
            update = TaskStatusUpdateEvent(task_id, message.context_id, status)
            event = StreamResponse(status_update=update)
            wire = to_wire(event)  # once: the event and the status message share it
            with self._db.write():
                row = self._sql(
                    "UPDATE tasks SET status_message = ?, status_ts = ?,"
                    " event_seq = event_seq + 1 WHERE id = ? AND state = ? RETURNING event_seq",
                    (
                        compact(wire["statusUpdate"]["status"]["message"]),
                        stamp,
                        task_id,
                        TaskState.TASK_STATE_WORKING.value,
                    ),
                ).fetchone()
                if row is None:
                    return False
                body = compact(wire)
                self.insert_event(task_id, int(row[0]), body, stamp)
                if push:
                    self._outbox.queue_pushes(task_id, queued, body)
                return True

        written = await self._db.run(write)
        if written:
            self.events_written(task_id)
            self._outbox.pushes_written(queued)
        return written

    async def artifact_update(
        self, task_id: str, artifact: Artifact, *, append: bool, last_chunk: bool
    ) -> bool:
        """An artifact (or a chunk of one) of a working task, as an event only: the turn's end
        writes its artifacts whole. `False` if the task is no longer WORKING."""

        def write() -> bool:
            with self._db.write():
                seq, context_id = self.next_event(task_id, while_in=TaskState.TASK_STATE_WORKING)
                if not seq:
                    return False
                update = TaskArtifactUpdateEvent(
                    task_id, context_id, artifact, append=append, last_chunk=last_chunk
                )
                event = StreamResponse(artifact_update=update)
                self.insert_event(task_id, seq, event, now_us())
                return True

        written = await self._db.run(write)
        if written:
            self.events_written(task_id)
        return written
