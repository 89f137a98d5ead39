"""Where the store hands new work to a job engine, inside the transaction that makes the work.

A turn accepted and a push queued are rows; with a job engine (procrastinate, on PostgreSQL) each
also becomes a job, deferred in the same transaction, so a crash can lose neither the row nor its
job, and a duplicate can never make two. A job's last write can end the job in its transaction
too (`job_done`): one commit less, and no moment when the work is recorded but its job is not.
The store knows only this small interface; the engine behind it lives in the runtime layer. The
embedded store has none: its runner is told in process.
"""

from __future__ import annotations

from typing import Any, Protocol

import attrs

__all__ = ["JobAlreadyQueued", "JobHooks", "JobTicket"]


@attrs.frozen
class JobTicket:
    """The job engine's job that makes a write, and what that write is to the job: the one
    value a runner passes instead of a mode. With it, the pushes a turn's end queues are the
    job's to deliver (they get no job of their own), and the job's last write finishes it in
    its own transaction."""

    id: int
    """procrastinate's id of the job."""
    push: int | None = None
    """The outbox row the job exists to deliver (a push job): it runs again to try it again.
    `None`: a turn's job, whose pushes to try again get push jobs of their own."""
    last: bool = True
    """Whether this write is the job's last if it leaves the job nothing to do: it then
    finishes the job in its transaction."""


class JobAlreadyQueued(Exception):
    """A job for this work waits already (the engine's queueing lock): nothing to add."""


class JobHooks(Protocol):
    """Called on the store's thread, inside the writing transaction, with its connection."""

    def turn_queued(self, connection: Any, task_id: str, priority: int = 0) -> None:
        """The task's next turn waits to run, before waiting turns of a lower `priority`.
        Raises `JobAlreadyQueued` if a job waits already."""

    def new_turn_call(self, task_id: str) -> tuple[str, tuple[Any, ...]] | None:
        """`turn_queued` for a new task (whose id no job can hold yet) as an SQL expression
        (with `?` placeholders, and `{priority}` where an SQL expression of its priority
        goes) and its parameters, for an accept that is one statement: the job is deferred in
        the statement's own transaction. `None` when the engine cannot say it so: the accept
        runs `turn_queued` in a transaction."""

    def push_queued(self, connection: Any, outbox_id: int, at: int | None = None) -> None:
        """The outbox row `outbox_id` waits to be delivered (from `at`, µs since the epoch, when
        given: a delivery to try again)."""

    def job_done(self, connection: Any, job_id: int) -> None:
        """The engine's job `job_id` did its work with this write: it is finished here, in the
        same transaction, instead of in one of its own after it returns."""

    def job_done_call(self, job_id: int) -> tuple[str, tuple[Any, ...]] | None:
        """`job_done` as an SQL expression (with `?` placeholders) and its parameters, for a
        write that is one statement: it finishes the job in the statement's own transaction.
        `None` when the engine cannot say it so: the write runs `job_done` in a transaction."""
