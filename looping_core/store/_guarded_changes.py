"""A task's guarded state change, the write under every turn's end, cancel and next turn: one
statement decides (the task must be in one of the allowed states), and the artifacts, the reply,
the events and the pushes it reports are written in the same transaction. On PostgreSQL, when
the caller knows the task's context, all but the pushes are one statement (`end_at_once`), and
a job's end is that statement alone, its pushes and its job's finish in it (`_end_alone`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from looping_core import _tracing
from looping_core.a2a import TERMINAL_STATES, Artifact, Message, TaskState, TaskStatus, to_wire
from looping_core.store._one_statement import (
    ARTIFACT_UPSERT,
    SPEND_ADDED,
    TURN_END,
    UNSEEN_FOLLOW_UP,
    EndAlone,
    EndWrite,
    end_at_once,
)
from looping_core.store._outbox import OutboxItem, task_head
from looping_core.store._rows import DAY_US, compact, now_us, timestamp
from looping_core.store._turn_starts import TurnStarts

__all__ = ["GuardedChanges"]

_SPEND = (
    "INSERT INTO caller_spend (tenant, issuer, subject, day, cost)"
    f" VALUES (?, ?, ?, ?, ?){SPEND_ADDED}"
)
"""A turn's cost added to its caller's spend of the day."""
_ARTIFACT = ARTIFACT_UPSERT.format(rows="VALUES (?, ?, ?)")
_NOTIFY = TERMINAL_STATES | {
    TaskState.TASK_STATE_INPUT_REQUIRED,
    TaskState.TASK_STATE_AUTH_REQUIRED,
}


def _addressed(message: Message, task_id: str, context_id: str) -> Message:
    return attrs.evolve(message, task_id=task_id, context_id=context_id)


def _unaddressed(message: Message, task_id: str, context_id: str) -> bool:
    return message.task_id != task_id or message.context_id != context_id


@attrs.frozen
class _Encoded:
    """A change's events and artifacts as JSON, each encoded once (its row, the task's status,
    the events and the push share it)."""

    artifacts: dict[str, str]
    """By id, in the order of their first writing, as `seq` keeps them (an id written twice:
    its last body)."""
    bodies: list[str]
    """The events: each artifact's update, then the status update."""
    status: str


@attrs.frozen
class _Change:
    """What a guarded write changes, before it is encoded."""

    task_id: str
    to: TaskState
    allowed_from: tuple[TaskState, ...]
    stamp: int
    status_message: Message | None
    reply: Message | None
    artifacts: tuple[Artifact, ...]
    metadata: str | None
    """The task's metadata from now on (JSON), if it changes."""
    taken_through: str | None
    answer_with_message: bool
    spent: float | None

    @property
    def reply_in_status(self) -> bool:
        """A turn that ends with its reply as the status message keeps it once, on the row (it
        stays the status for good); a turn that stops for input stores it in the history,
        since the next turn replaces the status."""
        return (
            self.reply is not None
            and self.reply == self.status_message
            and self.to in TERMINAL_STATES
        )

    @property
    def answered(self) -> bool:
        """Whether a blocking SendMessage answers with the reply, as a direct message."""
        return self.answer_with_message and self.reply is not None

    def encoded(self, context_id: str, message_wire: dict[str, Any] | None) -> _Encoded:
        artifacts: dict[str, str] = {}
        bodies = []
        for artifact in self.artifacts:
            wire = to_wire(artifact)
            artifacts[artifact.artifact_id] = compact(wire)
            update = {"taskId": self.task_id, "contextId": context_id, "artifact": wire}
            bodies.append(compact({"artifactUpdate": update}))
        status = to_wire(TaskStatus(state=self.to, timestamp=timestamp(self.stamp)))
        if message_wire:
            status["message"] = message_wire
        update = {"taskId": self.task_id, "contextId": context_id, "status": status}
        bodies.append(compact({"statusUpdate": update}))
        return _Encoded(artifacts, bodies, compact(status))


@attrs.frozen
class _Changed:
    """What a guarded write that won found and wrote."""

    context_id: str
    encoded: _Encoded
    metadata: str | None
    """The task's metadata now (JSON)."""
    had_artifacts: bool
    """Whether an earlier write stored artifacts of the task."""
    configs: list[Any] | None
    """The task's push configs (`Outbox.queue_pushes`), when the write read them; `None`:
    it has none, or they are still to be read."""
    pushed: bool


class GuardedChanges(TurnStarts):
    """The guarded change (store thread), a statement at a time or as one."""

    def _transition(
        self,
        task_id: str,
        to: TaskState,
        queued: list[OutboxItem],
        *,
        allowed_from: tuple[TaskState, ...],
        status_message: Message | None,
        reply: Message | None,
        artifacts: tuple[Artifact, ...],
        metadata: Mapping[str, Any] | None = None,
        taken_through: str | None = None,
        answer_with_message: bool = False,
        for_job: bool = False,
        spent: float | None = None,
        context_id: str | None = None,
    ) -> bool:
        """The guarded write (store thread); the pushes it queues are added to `queued`.
        `context_id`: the task's, when the caller knows it: on PostgreSQL all but the pushes
        are then one statement (`end_at_once`)."""
        change = self._change_of(
            task_id, to, allowed_from=allowed_from, status_message=status_message, reply=reply,
            artifacts=artifacts, metadata=metadata, taken_through=taken_through,
            answer_with_message=answer_with_message, spent=spent,
        )  # fmt: skip
        if change is None:
            return False
        with self._db.write():
            if context_id is not None and self._one_statement_writes:
                row = self._change_at_once(change, context_id)
            else:
                row = self._change(change)
            if row is None:
                return False
            if to in _NOTIFY and row.pushed:
                # The task as this write left it, from the JSON this write holds (its artifacts
                # too, unless an earlier turn stored some: those are read).
                encoded = row.encoded
                body = self._outbox.task_body(
                    task_id, row.context_id, encoded.status, row.metadata,
                    artifacts=None if row.had_artifacts else list(encoded.artifacts.values()),
                )  # fmt: skip
                self._outbox.queue_pushes(
                    task_id, queued, body, for_job=for_job, configs=row.configs
                )
            return True

    @staticmethod
    def _change_of(
        task_id: str,
        to: TaskState,
        *,
        allowed_from: tuple[TaskState, ...],
        status_message: Message | None,
        reply: Message | None,
        artifacts: tuple[Artifact, ...],
        metadata: Mapping[str, Any] | None,
        taken_through: str | None,
        answer_with_message: bool,
        spent: float | None,
    ) -> _Change | None:
        """The change a guarded write makes; `None` when no state it is allowed from is left
        (a terminal state is never left)."""
        if to in TERMINAL_STATES:
            allowed_from = tuple(state for state in allowed_from if state not in TERMINAL_STATES)
        if not allowed_from:
            return None
        return _Change(
            task_id, to, allowed_from, now_us(), status_message, reply, artifacts,
            None if metadata is None else compact(dict(metadata)), taken_through,
            answer_with_message, spent,
        )  # fmt: skip

    def _change(self, change: _Change) -> _Changed | None:
        """The change a statement at a time: its context is learnt from the guarded write."""
        task_id, status_message, reply = change.task_id, change.status_message, change.reply
        # Each message and artifact is turned into wire JSON once: its row, the task's status
        # and the events share it.
        message_wire = to_wire(status_message) if status_message else None
        reply_wire = message_wire if reply == status_message else to_wire(reply) if reply else None
        # One guarded statement decides, and takes the numbers of the events it reports
        # (each artifact, then the status).
        marks = ", ".join("?" * len(change.allowed_from))
        taken_through = change.taken_through
        row = self._sql(
            f"{TURN_END} WHERE id = ? AND state IN ({marks})"
            f"{UNSEEN_FOLLOW_UP if taken_through is not None else ''}"
            " RETURNING event_seq, context_id, tenant, issuer, subject, metadata,"
            " EXISTS (SELECT 1 FROM push_configs WHERE task_id = tasks.id),"
            " EXISTS (SELECT 1 FROM artifacts WHERE task_id = tasks.id)",
            (
                change.to.value,
                compact(message_wire) if message_wire else None,
                change.stamp,
                change.metadata,
                change.answered,
                change.reply_in_status,
                len(change.artifacts) + 1,
                task_id,
                *(state.value for state in change.allowed_from),
                *(() if taken_through is None else (taken_through,)),
            ),
        ).fetchone()
        if row is None:
            return None
        last, context_id, *owner, metadata_now, pushed, had_artifacts = row
        if change.spent:
            self._sql(_SPEND, (*owner, change.stamp // DAY_US, change.spent))
        # The agent's messages carry their task and context, as A2A asks of a server's: the
        # runner addresses them; here those of callers that could not.
        if status_message and _unaddressed(status_message, task_id, context_id):
            message_wire = to_wire(_addressed(status_message, task_id, context_id))
            self._sql(
                "UPDATE tasks SET status_message = ? WHERE id = ?",
                (compact(message_wire), task_id),
            )
        if reply is not None and not change.reply_in_status:
            if _unaddressed(reply, task_id, context_id):
                reply_wire = to_wire(_addressed(reply, task_id, context_id))
            self._sql(
                "INSERT INTO messages (task_id, tenant, issuer, subject, message_id, body)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (task_id, *owner, reply.message_id, compact(reply_wire)),
            )
        encoded = change.encoded(context_id, message_wire)
        for artifact_id, body in encoded.artifacts.items():
            self._sql(_ARTIFACT, (task_id, artifact_id, body))
        bodies = encoded.bodies
        self._events.insert_events(task_id, int(last) - len(bodies) + 1, bodies, change.stamp)
        return _Changed(context_id, encoded, metadata_now, had_artifacts, None, bool(pushed))

    def _change_at_once(self, change: _Change, context_id: str) -> _Changed | None:
        """The change as one statement (`end_at_once`), its context known: the messages are
        addressed and the events encoded before it. A task whose context is not `context_id`
        is changed a statement at a time (`_change`), which learns it."""
        end, encoded = self._end_write(change, context_id)
        row = self._sql(*end_at_once(end)).fetchone()
        if row is None:
            found = self._sql("SELECT context_id FROM tasks WHERE id = ?", (change.task_id,))
            context = found.fetchone()
            if context is not None and context[0] != context_id:
                return self._change(change)
            return None
        _last, metadata_now, had_artifacts, configs, _notified = row
        return _Changed(context_id, encoded, metadata_now, had_artifacts, configs, bool(configs))

    def _end_alone(
        self, change: _Change, context_id: str, finish: tuple[str, tuple[Any, ...]]
    ) -> tuple[list[OutboxItem], bool] | None:
        """The change as one statement that is its own transaction (`EndAlone`; store thread,
        outside a transaction): the pushes it queues and whether it finished the job, or `None`
        when its guard refused. Then nothing was written, and the write a statement at a time,
        in a transaction, decides: the task may have left the state, or have another context,
        or a push config not checked deliverable yet."""
        end, encoded = self._end_write(change, context_id)
        stamp, trace = change.stamp, _tracing.traceparent()
        head = task_head(change.task_id, context_id, encoded.status)
        alone = EndAlone(head, (stamp, stamp, self._node, self._worker, trace), finish)
        row = self._sql(*end_at_once(attrs.evolve(end, alone=alone))).fetchone()
        if row is None:
            return None
        outbox, body, finished = row[3]
        queued = self._outbox.opened_pushes(change.task_id, outbox, body, stamp, trace)
        return queued, bool(finished)

    def _end_write(self, change: _Change, context_id: str) -> tuple[EndWrite, _Encoded]:
        """The change encoded for `end_at_once`, its messages addressed to the task."""
        task_id, status_message, reply = change.task_id, change.status_message, change.reply
        if status_message and _unaddressed(status_message, task_id, context_id):
            status_message = _addressed(status_message, task_id, context_id)
        message_wire = to_wire(status_message) if status_message else None
        message_json = compact(message_wire) if message_wire else None
        kept_reply = None
        if reply is not None and not change.reply_in_status:
            # A question asked as the status too is the same message, addressed the same.
            if reply == change.status_message and message_json is not None:
                kept_reply = (reply.message_id, message_json)
            else:
                if _unaddressed(reply, task_id, context_id):
                    reply = _addressed(reply, task_id, context_id)
                kept_reply = (reply.message_id, compact(to_wire(reply)))
        encoded = change.encoded(context_id, message_wire)
        end = EndWrite(
            task_id, context_id, change.to, change.allowed_from, change.stamp,
            message_json, change.metadata, change.answered,
            change.reply_in_status, kept_reply, encoded.artifacts, encoded.bodies,
            change.taken_through, change.spent, change.to in _NOTIFY,
        )  # fmt: skip
        return end, encoded
