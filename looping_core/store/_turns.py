"""Turns: every state change of a task after it was accepted (`_turn_starts`), as one guarded
write. Terminal states are written only from non-terminal ones, so the first writer wins and
every writer learns from the write itself whether it did; the pushes a change reports are queued
in the same transaction (a transactional outbox), so a crash can lose neither.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from looping_core.a2a import Artifact, Message, Role, Task, TaskState, from_wire
from looping_core.contract import Identity
from looping_core.store._errors import TaskNotCancelable
from looping_core.store._guarded_changes import GuardedChanges
from looping_core.store._jobs import JobTicket
from looping_core.store._one_statement import BEGIN_TURN, begin_turn_arguments
from looping_core.store._one_statement import begin_at_once as begin_at_once_statement
from looping_core.store._outbox import OutboxItem
from looping_core.store._rows import NON_TERMINAL, Head, compact, now_us
from looping_core.store._turn_starts import BegunTurn

__all__ = ["TurnEnd", "Turns"]


def _turn_message(task: Task, recorded: str | None) -> str:
    """The message that began the task's turn (a task from before follow-ups were recorded:
    its latest caller message)."""
    if recorded is not None:
        return recorded
    return next(m.message_id for m in reversed(task.history) if m.role is Role.ROLE_USER)


@attrs.frozen
class TurnEnd:
    """What a turn's end wrote (`Turns.end_turn`)."""

    won: bool
    """Whether it ended the task (a cancel, or a follow-up the turn never took, may be first)."""
    pushes: tuple[OutboxItem, ...] | None = ()
    """With a job: the pushes it queued for the job to deliver (none when it lost: what won
    gave its pushes jobs of their own). `None` when this call does not know them: a retry
    found the end written already (the commit's answer was lost), so they are read back
    (`untried_pushes`). Without a job: none (they have jobs of their own, or the deliverer's
    loop sends them)."""
    job_finished: bool = False
    """Whether it finished the job (it won, and queued no push for the job to deliver)."""


class Turns(GuardedChanges):
    """Every state change of a task after it was accepted, each one guarded write."""

    async def transition(
        self,
        task_id: str,
        to: TaskState,
        *,
        allowed_from: Iterable[TaskState] = NON_TERMINAL,
        status_message: Message | None = None,
        reply: Message | None = None,
        artifacts: Sequence[Artifact] = (),
        metadata: Mapping[str, Any] | None = None,
    ) -> bool:
        """Move the task to `to` if (and only if) it is in one of `allowed_from`; `metadata`,
        when given, becomes the task's. `reply` and `artifacts`, its events, and its pushes for
        terminal and interrupted states (each with a job of its own) are written in the same
        transaction. Whether this call won (a turn's own end is `end_turn`)."""
        queued: list[OutboxItem] = []

        def write() -> bool:
            queued.clear()  # a batch undone runs its writes again
            return self._transition(
                task_id,
                to,
                queued,
                allowed_from=tuple(allowed_from),
                status_message=status_message,
                reply=reply,
                artifacts=tuple(artifacts),
                metadata=metadata,
            )

        won = await self._db.run(write)
        if won:
            self._events.events_written(task_id)
            self._outbox.pushes_written(queued)
        return won

    async def end_turn(
        self,
        task_id: str,
        to: TaskState,
        *,
        status_message: Message | None = None,
        reply: Message | None = None,
        artifacts: Sequence[Artifact] = (),
        metadata: Mapping[str, Any] | None = None,
        taken_through: str | None = None,
        answer_with_message: bool = False,
        job: JobTicket | None = None,
        spent: float | None = None,
        context_id: str | None = None,
    ) -> TurnEnd:
        """End a turn: move its WORKING task to `to`, unless a follow-up joined after
        `taken_through` (the last message the turn took: a turn never ends over a message it
        has not seen) or the task is no longer WORKING. `metadata`, when given, becomes the
        task's; `answer_with_message`: a blocking SendMessage answers with `reply` as a direct
        message. Artifacts, the reply, the events and the pushes are written in the same
        transaction. `job`: the engine's job running the turn, which delivers the pushes
        (they get no job of their own) and is finished in this write if there are none.
        `spent`: what the turn's model calls cost, added to its caller's spend of the day (the
        daily budget's count) in the same write. `context_id`: the task's, when the caller
        knows it (the begun turn's). On PostgreSQL the write is then one statement, and one
        more with pushes to queue; with a `job` whose finish can be embedded, that one
        statement is its own transaction, its pushes queued or its job finished in it
        (`EndAlone`), and if its guard refuses, the write a statement at a time decides.

        Retried after its commit's answer was lost (`patiently`), it finds the task in `to`
        already: that counts as won, and its pushes are read back (`TurnEnd.pushes` is None).
        """
        queued: list[OutboxItem] = []
        finish = self._job_done_call(job) if context_id and self._one_statement_writes else None
        if finish is not None and context_id is not None:
            change = self._change_of(
                task_id, to, allowed_from=(TaskState.TASK_STATE_WORKING,),
                status_message=status_message, reply=reply, artifacts=tuple(artifacts),
                metadata=metadata, taken_through=taken_through,
                answer_with_message=answer_with_message, spent=spent,
            )  # fmt: skip
            alone = None
            if change is not None:
                alone = await self._db.run_alone(self._end_alone, change, context_id, finish)
            if alone is not None:
                pushes, finished = alone
                self._events.events_written(task_id)
                self._outbox.pushes_written(pushes)
                return TurnEnd(True, tuple(pushes), finished)

        def write() -> TurnEnd:
            queued.clear()  # a batch undone runs its writes again
            won = self._transition(
                task_id,
                to,
                queued,
                allowed_from=(TaskState.TASK_STATE_WORKING,),
                status_message=status_message,
                reply=reply,
                artifacts=tuple(artifacts),
                metadata=metadata,
                taken_through=taken_through,
                answer_with_message=answer_with_message,
                for_job=job is not None,
                spent=spent,
                context_id=context_id,
            )
            if won:
                finished = not queued and self._end_job(job)
                return TurnEnd(True, tuple(queued) if job else (), finished)
            if job is not None and self._in_state(task_id, to):
                return TurnEnd(True, None)  # this very write won before its answer was lost
            return TurnEnd(False)

        end = await self._db.run(write)
        if end.won:
            self._events.events_written(task_id)
            self._outbox.pushes_written(queued)
        return end

    def _in_state(self, task_id: str, state: TaskState) -> bool:
        """Whether the task is in `state` now (store thread)."""
        row = self._sql("SELECT state FROM tasks WHERE id = ?", (task_id,)).fetchone()
        return row is not None and row[0] == state.value

    async def begin_turn(self, task_id: str) -> BegunTurn | None:
        """For the runner: move a SUBMITTED task to WORKING and return it with its owner and the
        message that began the turn, or `None` if it is no longer SUBMITTED (canceled, or taken
        by another runner)."""

        def begin() -> BegunTurn | None:
            stamp = now_us()
            with self._db.write():
                # It returns what the snapshot needs too: no read of the row it just wrote.
                row = self._sql(BEGIN_TURN, begin_turn_arguments(task_id, stamp)).fetchone()
                if row is None:
                    return None
                self._working_event(task_id, row[6], int(row[0]), stamp)
                return begun_from(row)

        def begin_at_once() -> BegunTurn | None:
            row = self._sql(*begin_at_once_statement(task_id, now_us())).fetchone()
            if row is None:
                return None
            *columns, _notified, newest_first = row
            return begun_from(columns, newest_first=newest_first)

        def begun_from(row: Sequence[Any], newest_first: Sequence[str] | None = None) -> BegunTurn:
            _seq, tenant, issuer, subject, turn_message, *columns = row
            task = self._snapshot(
                task_id, None, include_artifacts=False, head=Head(*columns),
                newest_first=newest_first,
            )  # fmt: skip
            caller = Identity(tenant, issuer, subject)
            return BegunTurn(task, caller, _turn_message(task, turn_message))

        if self._one_statement_writes:
            begun = await self._db.run_alone(begin_at_once)
        else:
            begun = await self._db.run(begin)
        if begun is not None:
            self._events.events_written(task_id)
        return begun

    async def arrivals(self, task_id: str, after: str) -> list[Message]:
        """The follow-ups that joined the task's turn after message `after`, oldest first."""

        def query() -> list[Message]:
            rows = self._sql(
                "SELECT body FROM messages WHERE task_id = ? AND joined AND seq >"
                " (SELECT seq FROM messages WHERE task_id = ? AND message_id = ?) ORDER BY seq",
                (task_id, task_id, after),
            ).fetchall()
            return [from_wire(json.loads(body), Message) for (body,) in rows]

        return await self._db.query(query)  # asked between a turn's steps: one round trip

    async def next_turn(
        self,
        task_id: str,
        message_id: str,
        *,
        reply: Message | None,
        artifacts: Sequence[Artifact],
        metadata: Mapping[str, Any] | None,
        spent: float | None = None,
    ) -> bool:
        """Keep a turn's output and let the follow-up `message_id`, which joined it unseen,
        begin the next turn, the task still WORKING; `False` if it no longer is (canceled).
        `spent`: as `end_turn`'s."""

        def write() -> bool:
            with self._db.write():
                won = self._transition(
                    task_id,
                    TaskState.TASK_STATE_WORKING,
                    [],  # WORKING is pushed only as progress: nothing is queued
                    allowed_from=(TaskState.TASK_STATE_WORKING,),
                    status_message=None,
                    reply=reply,
                    artifacts=tuple(artifacts),
                    metadata=metadata,
                    spent=spent,
                )
                if won:
                    self._sql(
                        "UPDATE tasks SET turn_message = ? WHERE id = ?", (message_id, task_id)
                    )
                return won

        won = await self._db.run(write)
        if won:
            self._events.events_written(task_id)
        return won

    async def cancel(
        self, caller: Identity, task_id: str, status_message: Message | None = None
    ) -> tuple[Task, bool]:
        """Cancel the caller's task; `TaskNotCancelable` if it is already terminal.
        `status_message`: what the caller is told (the agent's words), if anything.

        Returns the updated task and whether this call's write won (a racing completion may win).
        """
        queued: list[OutboxItem] = []
        canceled = await self._db.run(self._cancel, caller, task_id, status_message, queued)
        self._events.events_written(task_id)
        self._outbox.pushes_written(queued)
        return canceled

    def _cancel(
        self,
        caller: Identity,
        task_id: str,
        status_message: Message | None,
        queued: list[OutboxItem],
    ) -> tuple[Task, bool]:
        queued.clear()  # a batch undone runs its writes again
        head = self._owned(caller, task_id)
        if TaskState(head.state).is_terminal:
            raise TaskNotCancelable(task_id)
        won = self._transition(
            task_id,
            TaskState.TASK_STATE_CANCELED,
            queued,
            allowed_from=NON_TERMINAL,
            status_message=status_message,
            reply=None,
            artifacts=(),
        )
        if not won:
            raise TaskNotCancelable(task_id)
        return self._snapshot(task_id, None, include_artifacts=True), won

    async def answer(
        self, caller: Identity, task_id: str, history_length: int | None = None
    ) -> Task | Message:
        """What a blocking SendMessage answers, in one read: the agent's reply when the caller's
        task ended answering with a direct message (its `contextId`, no `taskId`: to the caller
        it is a message), else the task (`history_length` of its history)."""

        def read() -> Task | Message:
            head = self._owned(caller, task_id)
            (answer,) = self._sql("SELECT answer FROM tasks WHERE id = ?", (task_id,)).fetchone()
            if answer == "message" and TaskState(head.state).is_terminal:
                last = head.status_message if head.reply_in_status else None
                if last is None:
                    (last,) = self._sql(
                        "SELECT body FROM messages WHERE task_id = ? ORDER BY seq DESC LIMIT 1",
                        (task_id,),
                    ).fetchone()
                reply = from_wire(json.loads(last), Message)
                if reply.role is Role.ROLE_AGENT:
                    return attrs.evolve(reply, task_id="")
            return self._snapshot(task_id, history_length, include_artifacts=True, head=head)

        return await self._db.read(read)

    async def canceled_metadata(self, task_id: str, metadata: Mapping[str, Any]) -> bool:
        """Give a canceled task the metadata its turn had when it was stopped (its subtasks as
        they stood, the usage spent); only while it is CANCELED. Whether it was written."""

        def write() -> bool:
            with self._db.write():
                cursor = self._sql(
                    "UPDATE tasks SET metadata = ? WHERE id = ? AND state = ?",
                    (compact(dict(metadata)), task_id, TaskState.TASK_STATE_CANCELED.value),
                )
            return bool(cursor.rowcount)

        return await self._db.run(write)
