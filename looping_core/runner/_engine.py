"""The job engine: turns and pushes as procrastinate jobs in the store's PostgreSQL database.

- **Deferring.** Accepting a turn defers `looping.run_turn(task_id)` in the same transaction
  (`EngineHooks`, called by the store), its task id the queueing lock (one waiting job per task,
  however many duplicates arrive, on whichever edge) and the lock (one task's turns never run at
  once). A queued push defers `looping.deliver_push(outbox_id)` the same way.
- **Running.** Any worker process on any machine runs any job (`JobEngine`): a turn through the
  same turn driver as the embedded mode, whose guarded writes still decide which terminal state
  wins, then the pushes its end queued, through the same deliverer, from the same job (one job
  per turn; the turn's job is done only once they were tried). A push that must be tried again
  gets a push job of its own, deferred in the transaction that records the failed attempt; a
  push job that must try again raises `RetryLater` with the deliverer's backoff (exponential,
  with jitter, within `[push] max_attempts` and `max_age_seconds`), and the engine runs the same
  job again then: the same row, the same `jti`. Pushes queued elsewhere (a cancel at the edge,
  progress) get a push job as they are queued.
- **Finishing.** A job is finished in the transaction of its last write, with procrastinate's
  own finish statement (`EngineHooks.job_done`): a turn's end that queues no push, or else the
  record of its last push's attempt; a push job's attempt unless it must run again. The
  worker's finish after the job returns is then skipped (`JobManager`): one commit less per
  job, and never work recorded under a job still `doing`. A delivered push's record that
  finishes its job is one statement (`EngineHooks.job_done_call`): one round trip. A crash
  before that commit has the job run again, as before.
- **Dead workers.** Workers heart-beat. A periodic job (`looping.retry_stalled_jobs`, every
  `sweep_seconds`) hands the jobs of workers silent for `stalled_after_seconds` back to the
  queue. Their turn finds its task WORKING and is resumed or failed as `[runner] on_restart`
  says, exactly as after a local crash. A turn whose worker died `LOST_WORKER_LIMIT` times is
  failed instead (`WORKER_LOST`): it may be what kills them. A worker that stops gracefully
  hands its running turns back the same way. The same sweep analyzes procrastinate's jobs table
  once it has changed by more rows than it had (`refresh_jobs_statistics`): statistics from a
  quiet spell would plan the fetch of a burst of turns tens of times slower.
- **Cancellation.** `CancelTask` aborts the turn's job: the engine tells the worker running it at
  once (LISTEN/NOTIFY), which cancels it (one in this process is canceled directly). No one
  polls for ended tasks.
- **Listening.** A process listens for procrastinate's notices (a job inserted, a job to abort)
  on one connection for all its workers (`_listen`), not one per worker: PostgreSQL wakes every
  listening connection for every notice written in the database, whoever it is for, so each
  costs it work per turn. Between a failure and the next try, the workers' fetches poll.
- **Store outages.** procrastinate stops a worker whose store went away (its listener,
  heartbeat or fetch fails: it returns, or raises). `JobEngine` starts every such worker again,
  after 0.5 s doubling to 10 s, for as long as it runs, with the pool's broken connections
  replaced first, and says so in `running` (readiness) from the moment the worker stops
  fetching. Before it returns it drains its running jobs, for up to `OUTAGE_PATIENCE_SECONDS`
  (a stop asked for: `SHUTDOWN_GRACE_SECONDS`), heart-beating meanwhile: a running turn waits
  out the outage (its store calls are tried again) and goes on, so its agent is not run twice.
  A job a longer outage interrupted raises `RetryLater` when the store answers again; one whose
  end could not be recorded at all stays `doing` under its dead worker, and the sweep hands it
  back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable
from typing import Any

import procrastinate
from procrastinate import exceptions as engine_errors
from procrastinate import jobs as engine_jobs
from procrastinate.job_context import AbortReason

from looping_core import _metrics
from looping_core.config import RetentionConfig, RunnerConfig
from looping_core.runner._delivery import PushDeliverer
from looping_core.runner._engine_jobs import (
    PRUNE_TASK,
    PUSH_QUEUE,
    PUSH_TASK,
    QUEUES,
    SWEEP_QUEUE,
    SWEEP_TASK,
    TURN_QUEUE,
    TURN_TASK,
    RetryLater,
    RetryWhenAsked,
    Worker,
    engine_app,
)
from looping_core.runner._engine_schema import refresh_jobs_statistics
from looping_core.runner._patience import OUTAGE_PATIENCE_SECONDS, Backoff
from looping_core.runner._ports import JobPushes
from looping_core.runner._retention import cron_of, run_retention
from looping_core.runner._turns import TurnDriver
from looping_core.store.internal import (
    Database,
    JobTicket,
    OutboxItem,
    StoreUnavailable,
    bounded_connects,
)

__all__ = ["JobEngine"]

_log = logging.getLogger("looping_core.runner")

FETCH_SECONDS = 1.0
OTHER_JOB_SLOTS = 8
"""Push deliveries (and sweeps) a process runs at once, beside its turns."""
LOST_WORKER_LIMIT = 3
"""A turn whose worker dies this many times is failed, not run again: it may be what kills
them (a poison turn), and it must not take down every worker in turn."""
SHUTDOWN_GRACE_SECONDS = 2.0
"""A stopping worker waits this long for its running jobs, then stops them: their turns run
again elsewhere (per `on_restart`), their pushes are tried again."""
STOP_PATIENCE_SECONDS = 3.0
"""How much longer than the grace a stopping worker is waited for before shutdown goes on."""
_RETRY_FIRST, _RETRY_MAX = 0.5, 10.0
"""A job worker that stopped is started again after this pause, doubling up to the second."""
POOL_WAIT_SECONDS = 2.0
"""How long the engine waits for a connection from its pool before the call fails."""
OUTAGE_RETRY_SECONDS = 1.0
"""When a job the store's outage interrupted runs again."""


def _job_id(context: procrastinate.JobContext) -> int:
    job_id = context.job.id
    assert job_id is not None  # a job a worker fetched has its row
    return job_id


def _drained(run: asyncio.Task[None]) -> None:
    """A worker that stopped for an outage has drained its jobs (its failure to unregister
    from a store still away is expected: the sweep removes it)."""
    failure = None if run.cancelled() else run.exception()
    if failure is not None:
        _log.debug("a job worker finished draining: %s", _one_line(failure))


def _one_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class JobEngine:
    """A procrastinate app whose tasks run turns and pushes, and (`start`) a worker running them
    in this process."""

    def __init__(
        self,
        url: str,
        store: JobPushes,
        turns: TurnDriver,
        deliverer: PushDeliverer,
        config: RunnerConfig,
        *,
        database: Database,
        retention: RetentionConfig,
    ) -> None:
        """`database` and `retention`: what the periodic retention job prunes, and how."""
        self._store = store
        self._database = database
        self._retention = retention
        self._turns = turns
        self._turn_jobs: dict[str, asyncio.Task[Any]] = {}
        """The turn jobs running in this process, by task (a cancel stops one directly)."""
        self._deliverer = deliverer
        self._config = config
        # A pool that waits for a connection only briefly: a worker stopping because the store
        # went away must not hang in its shutdown (psycopg's default wait is 30 s).
        self.app, self._connector, self._manager = engine_app(
            bounded_connects(url), POOL_WAIT_SECONDS
        )
        self._workers: list[asyncio.Task[None]] = []
        self._down: set[str] = set()
        """Workers waiting to be started again after a failure."""
        self._live_workers: dict[Worker, asyncio.Task[None]] = {}
        """procrastinate's workers running now, draining ones included, with their runs."""
        self._listener: asyncio.Task[None] | None = None
        self._stopping = False
        self._register_tasks()

    def _register_tasks(self) -> None:
        retry = RetryWhenAsked()
        self.app.task(name=TURN_TASK, queue=TURN_QUEUE, retry=retry, pass_context=True)(
            self._run_turn
        )
        self.app.task(name=PUSH_TASK, queue=PUSH_QUEUE, retry=retry, pass_context=True)(
            self._deliver_push
        )
        seconds = self._config.sweep_seconds
        cron = f"* * * * * */{seconds}" if seconds < 60 else "* * * * *"
        sweep = self.app.task(name=SWEEP_TASK, queue=SWEEP_QUEUE, queueing_lock=SWEEP_TASK)
        self.app.periodic(cron=cron)(sweep(self._retry_stalled_jobs))
        prune = self.app.task(name=PRUNE_TASK, queue=SWEEP_QUEUE, queueing_lock=PRUNE_TASK)
        self.app.periodic(cron=cron_of(self._retention.interval_seconds))(prune(self._prune))

    async def _prune(self, timestamp: int) -> None:
        """`[retention]`'s pass, as a periodic job: one worker runs it, whichever."""
        try:
            await run_retention(self._database, self._retention)
        except StoreUnavailable:
            return  # the store said so; the next period goes on

    async def _run_turn(self, context: procrastinate.JobContext, task_id: str) -> None:
        job = asyncio.current_task()
        assert job is not None
        job_id = _job_id(context)
        self._turn_jobs[task_id] = job
        # The turn's end finishes this job when it queues no push: until it is known whether
        # that committed, the worker's finish may find the job gone.
        self._manager.may_finish_itself(job_id)
        try:
            ran = await self._turns.run_or_resume(task_id, job=JobTicket(job_id))
        except StoreUnavailable:
            raise RetryLater(OUTAGE_RETRY_SECONDS) from None  # found WORKING then: on_restart
        finally:
            if self._turn_jobs.get(task_id) is job:
                del self._turn_jobs[task_id]
        end = ran.end
        if end is not None and end.job_finished:  # committed, and with it the job's finish
            self._manager.finished_itself(job_id)
            return
        # Unknown whether the end finished the job: a cancel left that write in flight, or the
        # end's commit lost its answer. Then the worker's finish or retry allows for either.
        unknown = job.cancelling() or (end is not None and end.pushes is None)
        if not unknown:
            self._manager.did_not_finish_itself(job_id)
        if not ran.done:
            raise RetryLater(0)  # cut off by this worker's shutdown: another one takes it
        if job.cancelling() or (end is not None and not end.won):
            return  # the turn's end lost: what won (a cancel) gave its pushes jobs of their own
        async with self._again_if_stopping(context):
            await self._deliver_pushes_of(task_id, job_id, end.pushes if end else None)

    @contextlib.asynccontextmanager
    async def _again_if_stopping(self, context: procrastinate.JobContext) -> AsyncIterator[None]:
        """A delivery that its worker's stop cuts off (the grace ran out) is run again by another
        worker (the same outbox rows, the same jtis) instead of being aborted for good:
        procrastinate would record the canceled job ABORTED, and its pending pushes would wait
        for the next start (`queue_orphans`). Any other cancel (the task's own) still aborts
        the job. The worker's own stop is asked too: procrastinate 3.8's `abort_reason` reads
        the id of the last job its fetch loop took, which may be another job's."""
        try:
            yield
        except asyncio.CancelledError:
            shutdown = context.abort_reason() is AbortReason.SHUTDOWN
            if not (shutdown or context.worker_name in self._down):
                raise
            raise RetryLater(0) from None

    async def _deliver_pushes_of(
        self, task_id: str, job_id: int, pushes: tuple[OutboxItem, ...] | None
    ) -> None:
        """Deliver the pushes the turn's end queued (`None`: not known here, so read back:
        the job ran again after its worker died, or the end's commit lost its answer), from
        this job: one job per turn. A push to try again gets a push job of its own, deferred as
        its attempt is recorded. Until then this job is not done, so a worker dying here has
        the job (and the push) run again. The last push's record finishes the job, in its
        transaction."""
        try:
            items = await self._store.untried_pushes(task_id) if pushes is None else pushes
            for item in items[:-1]:
                await self._deliverer.deliver(item, JobTicket(job_id, last=False))
            if items:
                await self._deliver_ending(JobTicket(job_id), items[-1])
        except StoreUnavailable:
            raise RetryLater(OUTAGE_RETRY_SECONDS) from None  # the same rows, the same jtis

    async def _deliver_push(self, context: procrastinate.JobContext, outbox_id: int) -> None:
        try:
            item = await self._store.pending_push(outbox_id)
            if item is None:
                return  # done with already (a job run twice), or its config was deleted
            async with self._again_if_stopping(context):
                job = JobTicket(_job_id(context), push=outbox_id)
                again_in = await self._deliver_ending(job, item)
        except StoreUnavailable:
            raise RetryLater(OUTAGE_RETRY_SECONDS) from None  # the same row, the same jti
        if again_in is not None:
            raise RetryLater(again_in)

    async def _deliver_ending(self, job: JobTicket, item: OutboxItem) -> float | None:
        """The job's last attempt, whose record finishes the job in its own transaction unless
        the job must run again (`JobTicket`): one commit less per job. procrastinate's finish
        after the job returns is then skipped (`JobManager`)."""
        self._manager.may_finish_itself(job.id)
        attempt = await self._deliverer.deliver(item, job)
        if attempt.job_finished:
            self._manager.finished_itself(job.id)
        else:
            self._manager.did_not_finish_itself(job.id)  # it runs again: procrastinate retries
        return attempt.again_in

    async def _retry_stalled_jobs(self, timestamp: int) -> None:
        try:
            await refresh_jobs_statistics(self._connector)
            stalled = await self.app.job_manager.get_stalled_jobs(
                seconds_since_heartbeat=self._config.stalled_after_seconds
            )
        except engine_errors.ConnectorException:
            return  # the store is out of reach (said once already): the next sweep looks
        for job in stalled:
            if job.task_name == TURN_TASK and job.attempts + 1 >= LOST_WORKER_LIMIT:
                await self._give_up(job)
                continue
            _log.warning(
                "job %s (%s) was running on a worker that stopped; running it again",
                job.id, job.call_string,
            )  # fmt: skip
            with contextlib.suppress(engine_errors.ConnectorException):
                await self.app.job_manager.retry_job(job)

    async def _give_up(self, job: engine_jobs.Job) -> None:
        """A turn whose worker died every time it ran (it may be what kills them): fail its
        task instead of handing it to the next worker."""
        task_id = str(job.task_kwargs.get("task_id", ""))
        _log.error(
            "the turn of task %s was running on a worker that stopped, %d times; failing it",
            task_id, job.attempts + 1,
        )  # fmt: skip
        await self._turns.fail_lost(task_id)
        with contextlib.suppress(engine_errors.ConnectorException):
            await self.app.job_manager.finish_job(
                job, status=engine_jobs.Status.FAILED, delete_job=False
            )

    async def open(self) -> None:
        await self.app.open_async()

    async def close(self) -> None:
        await self.stop()
        await self.app.close_async()

    def start(self, *, concurrency: int, queues: Iterable[str] = QUEUES) -> None:
        """Run jobs of `queues` in this process until `stop`: turns `concurrency` at a time, and
        pushes and sweeps beside them, so long turns never hold up deliveries."""
        wanted = list(queues)
        turns = [TURN_QUEUE] if TURN_QUEUE in wanted else []
        others = [queue for queue in wanted if queue != TURN_QUEUE]
        for group, slots in ((turns, concurrency), (others, OTHER_JOB_SLOTS)):
            if group:
                self._workers.append(
                    asyncio.create_task(self._work(group, slots), name="looping-job-worker")
                )
        if wanted:
            self._listener = asyncio.create_task(self._listen(wanted), name="looping-job-notices")

    async def _listen(self, queues: list[str]) -> None:
        """Listen for notices of `queues` and hand each to the workers fetching its queue, until
        `stop`; after a failure (the store went away), again after a growing pause."""
        backoff = Backoff(_RETRY_FIRST, _RETRY_MAX)
        while not self._stopping:
            began = asyncio.get_running_loop().time()
            why = "it could not begin"  # procrastinate returns then
            try:
                await self._manager.listen_for_jobs(on_notification=self._notified, queues=queues)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                why = _one_line(exc)
            pause = backoff.pause(asyncio.get_running_loop().time() - began)
            # At INFO: the workers say that the store is away.
            _log.info("listening for jobs stopped (%s); trying again in %g s", why, pause)
            await asyncio.sleep(pause)

    async def _notified(self, *, channel: str, notification: engine_jobs.Notification) -> None:
        for worker in list(self._live_workers):
            await worker.notified(channel=channel, notification=notification)

    async def _work(self, queues: list[str], concurrency: int) -> None:
        """Run a procrastinate worker; one that fails (the store went away) is started again,
        after a growing pause, until `stop`. Meanwhile `running` is false (readiness)."""
        name = f"looping-{'+'.join(q.removeprefix('looping-') for q in queues)}"
        backoff = Backoff(_RETRY_FIRST, _RETRY_MAX)
        while not self._stopping:
            began = asyncio.get_running_loop().time()
            try:
                await self._run_worker(name, queues, concurrency)
                why = "its connection to the store was lost"  # procrastinate returns then
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._stopping:
                    # Stopping it failed (the store is gone, say), which swallowed the cancel.
                    _log.warning("job worker %s stopped uncleanly: %s", name, exc)
                    return
                why = _one_line(exc)
            if self._stopping:
                return
            pause = backoff.pause(asyncio.get_running_loop().time() - began)
            _log.warning("job worker %s stopped (%s); starting it again in %g s", name, why, pause)
            self._down.add(name)  # until the next try begins (`_run_worker`)
            await asyncio.sleep(pause)

    async def _run_worker(self, name: str, queues: list[str], concurrency: int) -> None:
        """Run one procrastinate worker until it stops. One that stops for an outage returns
        at once while its running jobs drain (`_drained` notes their end), so the next one can
        fetch as soon as the store is back: a turn waiting out the outage holds up no other."""
        stopping = asyncio.Event()

        def on_stop() -> None:
            self._down.add(name)
            stopping.set()

        worker = Worker(
            on_stop=on_stop,
            app=self.app,
            queues=queues,
            concurrency=concurrency,
            name=name,
            wait=True,
            install_signal_handlers=False,
            listen_notify=False,  # the process listens once for all its workers (`_listen`)
            # New jobs are announced (LISTEN/NOTIFY); a job handed back (a dead worker's, a
            # push to try again) is found by this look, at most a second late.
            fetch_job_polling_interval=FETCH_SECONDS,
            delete_jobs="successful",
            update_heartbeat_interval=self._config.heartbeat_seconds,
            stalled_worker_timeout=self._config.stalled_after_seconds,
            # A worker stops for an outage by itself: its running turns wait out the outage
            # (`patiently`) and go on, so it waits for them as long. A stop asked for
            # (`stop`) gives them the short grace instead.
            shutdown_graceful_timeout=OUTAGE_PATIENCE_SECONDS,
        )
        # The pool's idle connections may be ones the outage closed (a store restart closes
        # them all). The pool checks each one it lends, but after one that fails it pauses (a
        # second, then two) before the next, long enough to time the worker out again: they
        # are all tried here at once, and the broken ones replaced.
        await self._connector.pool.check()
        await self._beat_for_draining()
        self._down.discard(name)
        run = asyncio.create_task(worker.run(), name=f"{name}-run")
        self._live_workers[worker] = run
        run.add_done_callback(lambda _: self._live_workers.pop(worker, None))
        stopped = asyncio.create_task(stopping.wait())
        try:
            await asyncio.wait((run, stopped), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            run.cancel()
            raise
        finally:
            stopped.cancel()
        if run.done():
            run.result()  # its failure, if it failed
            return
        run.add_done_callback(_drained)

    async def _beat_for_draining(self) -> None:
        """Say that this process's draining workers live, before a new worker starts: it
        begins by pruning workers whose heartbeat is older than `stalled_after_seconds`, and
        an outage that long would have their turns, still running here, run again elsewhere."""
        for worker in list(self._live_workers):
            await worker.beat()

    @property
    def running(self) -> bool:
        """Whether every worker `start` started runs (true when none was asked for): false
        while one waits to be started again after the store's outage stopped it."""
        return not self._down and not any(worker.done() for worker in self._workers)

    async def wait(self) -> None:
        """Until a worker ends for good: only `stop`, or a bug (an outage never ends one)."""
        if self._workers:
            await asyncio.wait(self._workers, return_when=asyncio.FIRST_COMPLETED)

    async def stop(self) -> None:
        self._stopping = True
        for live in self._live_workers:
            live.shorten_grace(SHUTDOWN_GRACE_SECONDS)
        if self._listener is not None:
            self._listener.cancel()
        workers, self._workers = self._workers, []
        workers += list(self._live_workers.values())  # draining ones too
        for worker in workers:
            worker.cancel()  # a graceful stop: running jobs get SHUTDOWN_GRACE_SECONDS
        for worker in workers:
            # Bounded: a worker whose store went away mid-stop may never return (its listener
            # stuck on a dead connection), and a shutdown must not hang on it.
            try:
                async with asyncio.timeout(SHUTDOWN_GRACE_SECONDS + STOP_PATIENCE_SECONDS):
                    await worker
            except asyncio.CancelledError:
                pass
            except TimeoutError:
                _log.warning(
                    "a job worker did not stop within %g s; shutting down without it",
                    SHUTDOWN_GRACE_SECONDS + STOP_PATIENCE_SECONDS,
                )
            except Exception as exc:  # a draining worker's own end (its store went away)
                _log.info("a job worker stopped uncleanly: %s", _one_line(exc))

    async def abort_turn(self, task_id: str) -> None:
        """Stop the turn of `task_id` wherever it runs (its task was canceled)."""
        running_here = self._turn_jobs.get(task_id)
        if running_here is not None:
            running_here.cancel()
            _metrics.TURNS.inc(outcome="canceled")
        for job in await self.app.job_manager.list_jobs_async(lock=task_id, status="doing"):
            if job.id is not None:
                await self.app.job_manager.cancel_job_by_id_async(job.id, abort=True)
