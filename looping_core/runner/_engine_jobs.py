"""procrastinate's side of the job engine: the names of its tasks and queues, the hooks the store
calls to defer and finish jobs inside its own transaction (`EngineHooks`), the worker and job
manager adapted to them (`Worker`, `JobManager`, `engine_app`), the retry strategy that runs a
job again only when it asks (`RetryLater`), the connection pool's check, and the start-up pass
that gives orphaned rows a job (`queue_orphans`). `JobEngine` (`_engine.py`) runs turns and
pushes with them, through procrastinate's public names only.

Every use of procrastinate's internals is here, each because no public hook carries it:

- `JobManager` replaces the app's job manager (`App.job_manager`), to skip the worker's finish
  of a job that its own last write finished. procrastinate 3.9's middleware wraps a job's run,
  not the finish the worker records after it, so it cannot carry this.
- `Worker` overrides `_fetch_and_process_jobs` (3.8 and later) to learn that a fetch failed,
  which no public hook says, and sets `shutdown_graceful_timeout` on a running worker. Its
  `notified` hands it a notice through `_handle_notification`: the process listens once for
  all its workers (`JobEngine`), not once per worker as `listen_notify` would.
- `EngineHooks.job_done` runs procrastinate's own finish statement (`procrastinate.sql`) in the
  store's transaction; `job_done_call` and `new_turn_call` embed its finish and its defer in a
  statement of the store's, read from the installed release's statements (each only when they
  have the shape this module knows: else the store runs them in a transaction of its own).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import procrastinate
import procrastinate.manager
import procrastinate.worker
import psycopg_pool
from procrastinate import exceptions as engine_errors
from procrastinate import jobs as engine_jobs
from procrastinate import sql as engine_sql
from procrastinate import types as engine_types
from procrastinate.retry import BaseRetryStrategy, RetryDecision

from looping_core.a2a import TaskState
from looping_core.store.internal import JobAlreadyQueued

__all__ = [
    "PRUNE_TASK",
    "PUSH_QUEUE",
    "PUSH_TASK",
    "QUEUES",
    "SWEEP_QUEUE",
    "SWEEP_TASK",
    "TURN_QUEUE",
    "TURN_TASK",
    "EngineHooks",
    "JobManager",
    "RetryLater",
    "RetryWhenAsked",
    "Worker",
    "connection_pool",
    "engine_app",
    "queue_orphans",
    "still_connected",
]

_log = logging.getLogger("looping_core.runner")

TURN_TASK = "looping.run_turn"
PUSH_TASK = "looping.deliver_push"
SWEEP_TASK = "looping.retry_stalled_jobs"
PRUNE_TASK = "looping.prune"
TURN_QUEUE = "looping-turns"
PUSH_QUEUE = "looping-pushes"
SWEEP_QUEUE = "looping-sweeps"
QUEUES = (TURN_QUEUE, PUSH_QUEUE, SWEEP_QUEUE)


def engine_app(
    conninfo: str, pool_wait_seconds: float
) -> tuple[procrastinate.App, procrastinate.PsycopgConnector, JobManager]:
    """procrastinate's app on a pool of connections to `conninfo` (whose check costs no round
    trip: `connection_pool`, waiting at most `pool_wait_seconds` for a connection), with our
    job manager in place of its own, set before any task is registered (they keep it)."""
    connector = procrastinate.PsycopgConnector(
        conninfo=conninfo, timeout=pool_wait_seconds, pool_factory=connection_pool
    )
    app = procrastinate.App(connector=connector)
    manager = JobManager(connector)
    app.job_manager = manager
    return app, connector, manager


class Worker(procrastinate.worker.Worker):
    """procrastinate's worker, telling `on_stop` the moment it decides to stop (its store went
    away, say), not when its shutdown is over: readiness must not say "running" meanwhile. A
    worker stops two ways: `stop` (a side task such as its listener failed), or a fetch that
    raises, after which it drains its running jobs (up to the grace) before `run` raises; it
    heart-beats while they drain."""

    def __init__(self, *, on_stop: Callable[[], None], **options: Any) -> None:
        super().__init__(**options)
        self._on_stop = on_stop
        self._heartbeat: asyncio.Task[None] | None = None
        self._channels = frozenset(procrastinate.manager.get_channel_for_queues(self.queues))

    async def notified(self, *, channel: str, notification: engine_jobs.Notification) -> None:
        """A notice from the process's one listener: a job inserted in one of this worker's
        queues (it fetches at once) or one to abort (it cancels it, if it runs it here)."""
        if channel in self._channels:
            await self._handle_notification(channel=channel, notification=notification)

    def stop(self) -> None:
        self._stopping()
        super().stop()  # type: ignore[no-untyped-call]

    async def run(self) -> None:
        try:
            await super().run()  # type: ignore[no-untyped-call]
        finally:
            if self._heartbeat is not None:
                self._heartbeat.cancel()

    async def _fetch_and_process_jobs(self) -> None:
        # procrastinate's own fetch loop (3.8 and later; the floors run that release): no
        # public hook says that a fetch failed, and the worker fetches nothing after one.
        try:
            await super()._fetch_and_process_jobs()  # type: ignore[no-untyped-call]
        except Exception:
            self._stopping()
            raise

    def _stopping(self) -> None:
        """Say so, and keep the heartbeat going while running jobs drain: procrastinate's own
        stopped with the worker, and a turn waiting out an outage would otherwise look like a
        dead worker's once the store is back (the sweep would run it again elsewhere)."""
        self._on_stop()
        if self._heartbeat is None:
            self._heartbeat = asyncio.create_task(
                self._beat_while_draining(), name="looping-drain-heartbeat"
            )

    def shorten_grace(self, seconds: float) -> None:
        """Give running jobs at most `seconds` once the worker stops (a stop asked for)."""
        self.shutdown_graceful_timeout = seconds

    async def beat(self) -> None:
        """Say this worker lives (nothing once it has unregistered)."""
        if self.worker_id is not None:
            await self.app.job_manager.update_heartbeat(self.worker_id)

    async def _beat_while_draining(self) -> None:
        while self.worker_id is not None:
            await asyncio.sleep(self.update_heartbeat_interval)
            with contextlib.suppress(Exception):  # the store may still be away: next beat
                await self.beat()


def connection_pool(**options: Any) -> psycopg_pool.AsyncConnectionPool[Any]:
    """procrastinate's connection pool, with a check before each connection it lends that costs
    no round trip (`still_connected`) instead of the empty query procrastinate asks for: that
    query was a quarter of the engine's round trips, two per turn (the fetch's, the finish's).
    Its connections are in autocommit: every query procrastinate sends through them is one
    statement (its functions), which needs no BEGIN and COMMIT around it (two statements per
    fetch, one fetch per turn)."""
    return psycopg_pool.AsyncConnectionPool(
        **{**options, "configure": _autocommit, "check": still_connected}
    )


async def _autocommit(connection: Any) -> None:
    """Set on each connection as the pool opens it (not through the pool's `kwargs`, which
    procrastinate also passes, with its own `autocommit`, to its listening connection)."""
    await connection.set_autocommit(True)


async def still_connected(connection: Any) -> None:
    """Raise for a connection the server has closed (a restart, an outage, an administrator),
    so the pool opens another instead of lending it. It reads what the socket holds without
    waiting: the server's goodbye first, then the closed socket. A connection cut off without
    a word from the server is found by its first query, as with any check."""
    for _ in range(2):
        connection.pgconn.consume_input()


class RetryLater(Exception):
    """Run this job again in `seconds` (a push to try again, a turn cut off by a shutdown)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"run again in {seconds:.3f} s")
        self.seconds = max(0.0, seconds)


class RetryWhenAsked(BaseRetryStrategy):
    """Jobs are run again only when they say so (`RetryLater`); every other failure is final."""

    def get_retry_decision(
        self, *, exception: BaseException, job: engine_jobs.Job
    ) -> RetryDecision | None:
        if isinstance(exception, RetryLater):
            return RetryDecision(retry_at=datetime.now(UTC) + timedelta(seconds=exception.seconds))
        return None


class EngineHooks:
    """Defers jobs on the store's connection, inside its transaction (the store's `JobHooks`),
    through procrastinate's public `configure_task(..., connection=)` (3.8 and later)."""

    def __init__(self) -> None:
        # Never opened: every defer goes through the connection it is given.
        self._app = procrastinate.App(connector=procrastinate.SyncPsycopgConnector())

    def turn_queued(self, connection: Any, task_id: str, priority: int = 0) -> None:
        # procrastinate fetches by priority first, then age: a turn accepted while its tenant
        # has many waiting comes after other tenants' (the store's `TurnLimits.fair`).
        deferrer = self._app.configure_task(
            TURN_TASK, queue=TURN_QUEUE, lock=task_id, queueing_lock=task_id,
            priority=priority, connection=connection,
        )  # fmt: skip
        try:
            deferrer.defer(task_id=task_id)
        except engine_errors.AlreadyEnqueued:
            raise JobAlreadyQueued(task_id) from None

    def new_turn_call(self, task_id: str) -> tuple[str, tuple[Any, ...]] | None:
        call = _DEFER_CALL
        if call is None:
            return None
        # The job `turn_queued` defers, as procrastinate's public deferrer makes it.
        job = self._app.configure_task(
            TURN_TASK, queue=TURN_QUEUE, lock=task_id, queueing_lock=task_id
        ).make_new_job(task_id=task_id)
        scheduled = job.scheduled_at.isoformat() if job.scheduled_at else None
        values = (job.queue, job.task_name, job.lock, job.queueing_lock)
        return call, (*values, json.dumps(job.task_kwargs), scheduled)

    def push_queued(self, connection: Any, outbox_id: int, at: int | None = None) -> None:
        when = None if at is None else datetime.fromtimestamp(at / 1_000_000, UTC)
        deferrer = self._app.configure_task(
            PUSH_TASK, queue=PUSH_QUEUE, connection=connection, schedule_at=when
        )
        deferrer.defer(outbox_id=outbox_id)

    def job_done(self, connection: Any, job_id: int) -> None:
        # procrastinate's own finish, the statement its worker runs after a job returns (taken
        # from the installed release, so it follows its schema), with what the worker would
        # pass: succeeded, and deleted (`delete_jobs="successful"`).
        connection.execute(engine_sql.queries["finish_job"], _finished(job_id))

    def job_done_call(self, job_id: int) -> tuple[str, tuple[Any, ...]] | None:
        call = _FINISH_CALL
        if call is None:
            return None
        expression, names = call
        arguments = _finished(job_id)
        return expression, tuple(arguments[name] for name in names)


def _finished(job_id: int) -> dict[str, Any]:
    return {"job_id": job_id, "status": engine_jobs.Status.SUCCEEDED.value, "delete_job": True}


def _finish_call(query: str) -> tuple[str, tuple[str, ...]] | None:
    """procrastinate's finish statement (`SELECT fn(%(job_id)s, ...);`) as the call alone, with
    `?` placeholders and the names of its arguments in order, to embed in a statement of ours;
    `None` for a statement of another shape (a release that finishes otherwise)."""
    found = re.fullmatch(r"\s*SELECT\s+(\w+\((?:\s*%\(\w+\)s\s*,?)*\))\s*;?\s*", query)
    if found is None:
        return None
    names = tuple(re.findall(r"%\((\w+)\)s", found.group(1)))
    if set(names) != set(_finished(0)):
        return None
    return re.sub(r"%\(\w+\)s", "?", found.group(1)), names


_FINISH_CALL = _finish_call(engine_sql.queries["finish_job"])

_JOB_TO_DEFER = {
    "queue_name": "?::character varying",
    "task_name": "?::character varying",
    "priority": "{priority}",
    "lock": "?::text",
    "queueing_lock": "?::text",
    "args": "?::jsonb",
    "scheduled_at": "?::timestamptz",
}
"""procrastinate's `procrastinate_job_to_defer_v1`, field by field, as `new_turn_call` fills
it: its priority is the store's expression, the rest its parameters, in this order."""


def _defer_call(query: str, fields: tuple[str, ...] | None) -> str | None:
    """procrastinate's defer statement (`SELECT unnest(fn(%(jobs)s::type[])) AS id;`) as the
    call for one job, its fields spelled out (`_JOB_TO_DEFER`); `None` for a statement of
    another shape, another type, or a job of other fields (a release that defers otherwise)."""
    found = re.fullmatch(
        r"\s*SELECT\s+unnest\(\s*(\w+)\(\s*%\(jobs\)s::(\w+)\[\]\s*\)\s*\)\s+AS\s+id\s*;?\s*",
        query,
    )
    if found is None or found.group(2) != "procrastinate_job_to_defer_v1":
        return None
    if fields != tuple(_JOB_TO_DEFER):
        return None
    row = ", ".join(_JOB_TO_DEFER.values())
    return f"{found.group(1)}(ARRAY[ROW({row})::{found.group(2)}])"


_DEFER_CALL = _defer_call(
    engine_sql.queries["defer_jobs"],
    getattr(getattr(engine_types, "JobToDefer", None), "_fields", None),
)


class JobManager(procrastinate.manager.JobManager):
    """procrastinate's job manager, leaving alone the jobs that finished in the transaction of
    their own last write (`EngineHooks.job_done`): its worker finishes every job that returns,
    and a job deleted already would make that finish fail. The one place that knows whether a
    job finished itself: the store only says so of each write it makes (`JobTicket`)."""

    def __init__(self, connector: Any) -> None:
        super().__init__(connector)
        self._finishing: dict[int, bool] = {}
        """Jobs whose own last write may finish them: `True` once that write committed and
        did, `False` while it was asked for but never answered (a shutdown canceled the wait):
        finished here then, unless it was."""

    def may_finish_itself(self, job_id: int) -> None:
        """The job's next write may finish it (its outcome is not known yet)."""
        self._finishing[job_id] = False

    def finished_itself(self, job_id: int) -> None:
        """The job's write committed and finished it: the worker's finish is skipped."""
        self._finishing[job_id] = True

    def did_not_finish_itself(self, job_id: int) -> None:
        """The job's write committed without finishing it: the worker finishes it as usual."""
        self._finishing.pop(job_id, None)

    async def finish_job(
        self, job: engine_jobs.Job, status: engine_jobs.Status, delete_job: bool
    ) -> None:
        finished = self._finishing.pop(job.id, None) if job.id is not None else None
        if finished:
            return
        if finished is False:
            # Not known to have committed: finish it, unless it was (then it is gone).
            await self._unless_gone(job, super().finish_job(job, status, delete_job))
            return
        await super().finish_job(job, status, delete_job)

    async def retry_job(self, job: engine_jobs.Job, *args: Any, **options: Any) -> None:
        if job.id is not None and self._finishing.pop(job.id, None) is False:
            await self._unless_gone(job, super().retry_job(job, *args, **options))
            return
        await super().retry_job(job, *args, **options)

    async def _unless_gone(self, job: engine_jobs.Job, change: Awaitable[None]) -> None:
        """Make `change` to a job whose own last write may have finished it: nothing to do if
        that write did (the job is gone); any other failure is raised."""
        try:
            await change
        except engine_errors.ConnectorException:
            if list(await self.list_jobs_async(id=job.id)):
                raise  # still there: the change failed for another reason


def queue_orphans(connection: Any) -> tuple[int, int]:
    """Defer a job for every unfinished turn and pending push that has none: rows written by
    the embedded runner before the engine (a node's, a worker slot's), or by a release before
    it. Runs at every start (`connection`: a psycopg connection, not in a transaction); jobs
    that exist are left alone. Returns how many turns and pushes were queued."""
    unfinished = (TaskState.TASK_STATE_SUBMITTED.value, TaskState.TASK_STATE_WORKING.value)
    hooks = EngineHooks()
    with connection.transaction():
        turns = connection.execute(
            "SELECT t.id FROM tasks t WHERE t.state IN (%s, %s) AND NOT EXISTS"
            " (SELECT 1 FROM procrastinate_jobs j WHERE j.lock = t.id"
            " AND j.status IN ('todo', 'doing'))",
            unfinished,
        ).fetchall()
        pushes = connection.execute(
            "SELECT o.id FROM push_outbox o WHERE o.state = 'pending' AND NOT EXISTS"
            " (SELECT 1 FROM procrastinate_jobs j WHERE j.task_name = %s"
            " AND j.args ->> 'outbox_id' = o.id::text AND j.status IN ('todo', 'doing'))",
            (PUSH_TASK,),
        ).fetchall()
        for (task_id,) in turns:
            with contextlib.suppress(JobAlreadyQueued):
                hooks.turn_queued(connection, task_id)
        for (outbox_id,) in pushes:
            hooks.push_queued(connection, outbox_id)
    if turns or pushes:
        _log.info(
            "queued %d unfinished turn(s) and %d pending push(es) that had no job",
            len(turns), len(pushes),
        )  # fmt: skip
    return len(turns), len(pushes)
