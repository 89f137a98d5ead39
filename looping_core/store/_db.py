"""Opening the database, and the one executor-bound layer all database work goes through.

peewee is synchronous; the event loop must never wait on SQLite or PostgreSQL. `Database.run(fn)`
runs `fn` on the store's own thread(s): one for SQLite (a single writer, no lock fights), a small
pool for PostgreSQL. Nothing else in the package touches a connection from the loop.

SQLite work is group-committed: the store thread takes every job waiting for it (up to
`SQLITE_BATCH`) and runs them in one transaction. No job's result is handed back before the
commit, and the loop is woken once per batch rather than once per job: under load a commit and a
wake-up per job become one per batch; with no load a batch is a single job. Server processes
sharing the file take turns on a kernel lock beside it (`<file>.lock`).

A job's own transaction (`Database.write()`) is the batch's: no savepoint per job. A job that
raises has its batch undone, and the batch runs again without it, so a job may run more than
once: `run` takes only jobs whose sole effects are their statements (core's). A job whose code
must run once (a plugin's, `run_once`) runs in a transaction of its own. A job that catches an
error from inside its own `write()` and goes on runs again behind a real savepoint, so what the
error left half-written is undone, as it was before.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import importlib.util
import queue
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

import attrs

try:
    import fcntl
except ImportError:  # not POSIX: SQLite's own busy waiting still orders the writers
    fcntl = None  # type: ignore[assignment]
import peewee
from playhouse.db_url import connect

from looping_core import _metrics, _tracing
from looping_core.store._unreachable import (
    CONNECTION_ERRORS,
    Outage,
    StoreError,
    transient,
    unavailable,
)

__all__ = ["Database", "open_database", "store_url_problem"]

_T = TypeVar("_T")

SQLITE_PRAGMAS = {
    "journal_mode": "wal",  # readers never block the writer
    # A commit survives the process being killed; a power loss may take the last ones back.
    "synchronous": "normal",
    "busy_timeout": 5000,
    "foreign_keys": 1,
}


SQLITE_BATCH = 64
"""The most jobs one SQLite transaction carries."""
POSTGRES_THREADS = 8
"""PostgreSQL's store threads (and connections), unless `[store] connections` says."""

READ_SNAPSHOT = "REPEATABLE READ, READ ONLY"
"""A PostgreSQL read's transaction modes (see `Database.read`)."""

SQLITE_OLDEST = (3, 35, 0)
"""The oldest SQLite the store runs on: its writes read back what they changed (`RETURNING`)."""


def store_url_problem(url: str) -> str | None:
    """What keeps `[store] url` from being opened, without connecting (the scheme, the driver,
    SQLite's version), in one line naming the fix; `None` when nothing does."""
    if url.startswith("sqlite:///"):
        if sqlite3.sqlite_version_info < SQLITE_OLDEST:
            oldest = ".".join(map(str, SQLITE_OLDEST))
            return (
                f"the embedded store needs SQLite {oldest} or later, and this Python's sqlite3"
                f" module uses SQLite {sqlite3.sqlite_version}; run looping-core on a Python"
                " built with a newer SQLite, or set [store] url to a PostgreSQL database"
            )
        return None
    if url.startswith(("postgresql://", "postgres://")):
        if any(importlib.util.find_spec(name) is None for name in ("psycopg", "procrastinate")):
            return (
                "the PostgreSQL driver or job engine is not installed; install them with "
                "pip install 'looping-core[postgres]'"
            )
        return None
    scheme = url.split(":", 1)[0] if ":" in url else url
    return f"[store] url must start with sqlite:/// or postgresql://, got {scheme}:"


def open_database(url: str) -> peewee.Database:
    """A peewee database for `[store] url`: `sqlite:///path` (WAL) or `postgresql://...`."""
    problem = store_url_problem(url)
    if problem is not None:
        raise StoreError(problem)
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        return peewee.SqliteDatabase(path, pragmas=SQLITE_PRAGMAS)
    # psycopg 3: the driver procrastinate (the job engine) uses too, so one is enough.
    database: peewee.Database = connect(bounded_connects(url), prefer_psycopg3=True)
    return database


CONNECT_TIMEOUT_SECONDS = 10
"""How long opening a PostgreSQL connection may take unless the URL says (`connect_timeout`)."""


def bounded_connects(url: str) -> str:
    """A PostgreSQL URL whose connections give up after `CONNECT_TIMEOUT_SECONDS` unless it sets
    `connect_timeout` itself. libpq otherwise waits as long as the network does: during a
    restart or a failover a connection attempt the server took but never answers, or one to an
    address that drops it, would keep the store unavailable for minutes after the server is
    back, instead of a next attempt finding it."""
    if not url.startswith(("postgresql://", "postgres://")):
        return url
    parts = urllib.parse.urlsplit(url)
    if any(key == "connect_timeout" for key, _ in urllib.parse.parse_qsl(parts.query)):
        return url
    # Added as text: what the URL has already stays exactly as written (libpq decodes it).
    bound = f"connect_timeout={CONNECT_TIMEOUT_SECONDS}"
    return urllib.parse.urlunsplit(
        parts._replace(query=f"{parts.query}&{bound}" if parts.query else bound)
    )


def _writer_lock_file(database: peewee.Database) -> IO[bytes] | None:
    """The lock file beside an SQLite database file (none in memory, or without `fcntl`)."""
    path: str = database.database
    if fcntl is None or path == ":memory:" or path.startswith("file:"):
        return None
    return open(f"{path}.lock", "ab")


@attrs.define
class _Job:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    future: asyncio.Future[Any] | concurrent.futures.Future[Any]
    loop: asyncio.AbstractEventLoop | None
    """The loop awaiting `future`; `None` for a synchronous caller."""
    alone: bool = False
    """Run outside any batch transaction (migrations, plugin DDL, CLI work)."""
    once: bool = False
    """Its code must not run twice: a transaction of its own, not a shared batch."""
    guarded: bool = False
    """Its own `write()` is a real savepoint (it caught an error from inside one)."""
    reads: bool = False
    """It only reads, and its statements must see one moment (`Database.read`)."""
    context: contextvars.Context | None = None
    """The caller's context (its span, its log fields), which `fn` runs in."""

    def call(self) -> Any:
        if self.context is None:
            return self.fn(*self.args)
        return self.context.run(self.fn, *self.args)


_Outcome = tuple[_Job, Any, BaseException | None]


class _Undo(Exception):
    """Undo the batch and run it again: without `job` (it raised `error`), or, with no error,
    with `job` behind a savepoint (it caught an error from inside its own `write()`)."""

    def __init__(self, job: _Job, error: BaseException | None) -> None:
        super().__init__()
        self.job = job
        self.error = error


class _JobState(threading.local):
    """What the store thread knows about the job it runs."""

    def __init__(self) -> None:
        self.bare = False
        """The job's next `write()` is the batch's transaction (its first, outermost one)."""
        self.escaped: BaseException | None = None
        """The error that left that bare `write()`: what it wrote half may still be there."""


class Database:
    """A peewee database plus the thread(s) its work runs on."""

    def __init__(self, database: peewee.Database, *, connections: int | None = None) -> None:
        """`connections`: PostgreSQL's threads, each with its connection (`[store]
        connections`; none: `POSTGRES_THREADS`); SQLite has one."""
        if connections is not None and connections < 1:
            raise ValueError(f"a store needs at least one connection, not {connections}")
        self.peewee = database
        self._param: str = database.param
        self._statements: dict[str, str] = {}
        sqlite = isinstance(database, peewee.SqliteDatabase)
        self._postgres = isinstance(database, peewee.PostgresqlDatabase)
        self._lock_file = _writer_lock_file(database) if sqlite else None
        # PostgreSQL runs jobs one per transaction on several connections: batches that hold row
        # locks until a shared commit could deadlock one another there.
        self._batch = SQLITE_BATCH if sqlite else 1
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._closing = threading.Lock()
        self._closed = False
        self._generation = 0
        """Counts connection failures seen by any thread: each thread reconnects when it moves."""
        self._outage = Outage()
        self._job = _JobState()
        self._threads = [
            threading.Thread(target=self._work, name=f"looping-db-{index}", daemon=True)
            for index in range(1 if sqlite else connections or POSTGRES_THREADS)
        ]
        for thread in self._threads:
            thread.start()

    @classmethod
    def from_url(cls, url: str, *, connections: int | None = None) -> Database:
        return cls(open_database(url), connections=connections)

    @property
    def available(self) -> bool:
        """False from the first job that found the store out of reach until one succeeds."""
        return self._outage.since is None

    async def run(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run `fn(*args)` on the store's thread, in a transaction, and await the result.

        `fn` may run more than once (its batch undone and run again when another job of it
        fails), so its only effects must be its statements; otherwise use `run_once`."""
        return await self._await(fn, args)

    async def read(self, fn: Callable[..., _T], *args: Any) -> _T:
        """`run` for a job that only reads, several statements that must agree with one another
        (a task's row, then its history, artifacts and event number). SQLite's transactions
        see one moment already. PostgreSQL's default (READ COMMITTED) lets every statement see
        what committed since the one before, so there the job runs in a read-only REPEATABLE
        READ transaction: one snapshot, and a statement that would write is refused."""
        return await self._await(fn, args, reads=True)

    async def query(self, fn: Callable[..., _T], *args: Any) -> _T:
        """`run` for a job that is one statement which only reads. On PostgreSQL it runs
        outside any transaction (the statement is its own snapshot), without the round trips of
        a BEGIN and a COMMIT; on SQLite it joins a batch like any job."""
        return await self._await(fn, args, alone=self._postgres)

    async def run_once(self, fn: Callable[..., _T], *args: Any) -> _T:
        """`run` for code that must run exactly once: in a transaction of its own."""
        return await self._await(fn, args, once=True)

    async def run_alone(self, fn: Callable[..., _T], *args: Any) -> _T:
        """The same, outside any transaction (`fn` opens its own): migrations, plugin DDL, and
        on PostgreSQL a write that is one statement (its own transaction: no BEGIN, no COMMIT)."""
        return await self._await(fn, args, alone=True)

    async def _await(
        self,
        fn: Callable[..., _T],
        args: tuple[Any, ...],
        *,
        alone: bool = False,
        once: bool = False,
        reads: bool = False,
    ) -> _T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_T] = loop.create_future()
        if not _tracing.recording():  # the hot path: no span, no name, no context to hold
            self._queue(_Job(fn, args, future, loop, alone=alone, once=once, reads=reads))
            return await future
        with _tracing.span("store", looping__store__job=_job_name(fn)):
            # The job runs in this context (its span; a push it queues keeps the trace). Only
            # when tracing records: holding every caller's context costs p99 a few ms.
            context = contextvars.copy_context()
            job = _Job(fn, args, future, loop, alone=alone, once=once, reads=reads, context=context)
            self._queue(job)
            return await future

    def run_sync(self, fn: Callable[..., _T], *args: Any) -> _T:
        """`run_alone` for synchronous code (the CLI, the supervisor): still on the store's
        thread, and waits for the result."""
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()
        self._queue(_Job(fn, args, future, None, alone=True))
        return future.result()

    def execute(self, statement: str, params: Sequence[Any] = ()) -> Any:
        """Run one statement, written with `?` placeholders, on this thread's connection (the
        store's thread only); returns the cursor."""
        if self._param != "?":
            statement = self._statements.setdefault(statement, statement.replace("?", self._param))
        return self.peewee.execute_sql(statement, tuple(params))  # type: ignore[no-untyped-call]

    def write(self) -> Any:
        """A write transaction (nested: a savepoint). A job's outermost one is its batch's
        transaction (see the module's docstring).

        SQLite's is `BEGIN IMMEDIATE`: it takes the write lock up front, waiting its turn behind
        another server process, instead of failing at its first write after reading.
        """
        if self._job.bare:
            self._job.bare = False
            return self._bare_write()
        if isinstance(self.peewee, peewee.SqliteDatabase):
            return self.peewee.atomic("IMMEDIATE")
        return self.peewee.atomic()

    @contextlib.contextmanager
    def _bare_write(self) -> Iterator[None]:
        try:
            yield
        except BaseException as exc:
            self._job.escaped = exc  # if the job goes on, it is run again behind a savepoint
            raise

    def close(self) -> None:
        """Finish the queued work, then close every connection and stop the threads."""
        with self._closing:
            if self._closed:
                return
            self._closed = True
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join()
        if self._lock_file is not None:
            self._lock_file.close()

    def _queue(self, job: _Job) -> None:
        with self._closing:  # nothing may queue behind the threads' stop signal
            if self._closed:
                raise StoreError("the store is closed")
            self._jobs.put(job)

    # -- the store thread -----------------------------------------------------------------------

    def _work(self) -> None:
        pending: list[_Job | None] = []  # a job taken from the queue that ends a batch
        generation = self._generation
        while True:
            job = pending.pop() if pending else self._jobs.get()
            if job is None:
                break
            if generation != self._generation:
                # Another thread's connection failed: the server restarted or dropped its
                # connections, so this thread's is most likely dead too. Connect afresh rather
                # than fail one more job per thread.
                self._drop_connection()
                generation = self._generation
            batch = [job]
            while not (job.alone or job.once) and len(batch) < self._batch:
                try:
                    waiting = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if waiting is None or waiting.alone or waiting.once:
                    pending.append(waiting)
                    break
                batch.append(waiting)
            outcomes = self._run_alone(job) if job.alone else self._run_batch(batch)
            if any(isinstance(error, CONNECTION_ERRORS) for _, _, error in outcomes):
                self._drop_connection()  # the next job connects afresh (a restarted server)
                self._generation += 1
                generation = self._generation
            outcomes = [(job, result, unavailable(error)) for job, result, error in outcomes]
            self._outage.note(outcomes)
            _deliver(outcomes)
        self._drop_connection()

    def _run_alone(self, job: _Job) -> list[_Outcome]:
        started = time.perf_counter()
        try:
            self.peewee.connect(reuse_if_open=True)
            with self._writer_turn():
                result = job.call()
        except BaseException as exc:  # never let a job end the store thread
            return [(job, None, exc)]
        # Its own transaction(s): a one-statement write is counted as one, as a batch is.
        _metrics.STORE_BATCH_JOBS.observe(1)
        _metrics.STORE_COMMIT_SECONDS.observe(time.perf_counter() - started)
        return [(job, result, None)]

    def _run_batch(self, batch: list[_Job]) -> list[_Outcome]:
        """Run `batch` in one transaction; a job that fails has the batch undone and run again
        without it (each failure drops one job, so this ends)."""
        failed: list[_Outcome] = []
        while batch:
            started = time.perf_counter()
            try:
                self.peewee.connect(reuse_if_open=True)
                with self._writer_turn(), self._transaction(batch):
                    outcomes = [(job, self._call(job), None) for job in batch]
            except _Undo as undo:  # the transaction was rolled back
                if undo.error is None:
                    undo.job.guarded = True
                    continue
                failed.append((undo.job, None, undo.error))
                batch = [job for job in batch if job is not undo.job]
                if transient(undo.error):  # the store is out of reach: the others would fail too
                    return failed + [(job, None, undo.error) for job in batch]
                continue
            except BaseException as exc:  # no connection, or the commit failed: nothing is stored
                return failed + [(job, None, exc) for job in batch]
            _metrics.STORE_BATCH_JOBS.observe(len(batch))
            _metrics.STORE_COMMIT_SECONDS.observe(time.perf_counter() - started)
            return outcomes + failed
        return failed

    def _transaction(self, batch: list[_Job]) -> Any:
        """The batch's transaction: a snapshot for a PostgreSQL read (`read`; a batch is one
        job there), else `write()`."""
        if batch[0].reads and self._postgres:
            # peewee writes `BEGIN TRANSACTION ISOLATION LEVEL <this>`: one statement, no
            # round trip more than the BEGIN it sends anyway.
            return self.peewee.atomic(isolation_level=READ_SNAPSHOT)
        return self.write()

    def _call(self, job: _Job) -> Any:
        """Run one job of a batch, its outermost `write()` the batch's own (unless `guarded`).
        A job that went on after an error left that `write()` runs again behind a savepoint."""
        self._job.bare, self._job.escaped = not job.guarded, None
        try:
            result = job.call()
        except BaseException as exc:
            escaped = self._job.escaped
            # Caught, then another error (PostgreSQL refuses every statement after a failed
            # one): try it behind a savepoint. The same error passing through: it failed.
            raise _Undo(job, None if escaped not in (None, exc) else exc) from None
        finally:
            self._job.bare = False
        if self._job.escaped is not None:  # it caught the error and went on
            raise _Undo(job, None)
        return result

    def _drop_connection(self) -> None:
        with contextlib.suppress(peewee.PeeweeException, *CONNECTION_ERRORS):
            if not self.peewee.is_closed():
                self.peewee.close()

    @contextlib.contextmanager
    def _writer_turn(self) -> Iterator[None]:
        """Wait for the other server processes' SQLite transactions to end.

        SQLite has one writer at a time, and a process that finds the write lock taken polls
        for it, sleeping 1, 2, 5, 10... ms between tries. Queuing on a kernel lock beside the
        database file first wakes the next process the moment the lock is free instead.
        """
        if self._lock_file is None:
            yield
            return
        fcntl.flock(self._lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)


def _job_name(fn: Callable[..., Any]) -> str:
    """`TaskStore.cancel.write` for a job defined in `TaskStore.cancel`."""
    return getattr(fn, "__qualname__", type(fn).__name__).replace("<locals>.", "")


def _deliver(outcomes: list[_Outcome]) -> None:
    """Hand results back: synchronous callers directly, each loop in one wake-up."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Outcome]] = {}
    for outcome in outcomes:
        job = outcome[0]
        if job.loop is None:
            _settle(outcome)
        else:
            by_loop.setdefault(job.loop, []).append(outcome)
    for loop, settled in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
            loop.call_soon_threadsafe(_settle_all, settled)


def _settle_all(outcomes: list[_Outcome]) -> None:
    for outcome in outcomes:
        _settle(outcome)


def _settle(outcome: _Outcome) -> None:
    job, result, error = outcome
    if job.future.cancelled():
        return
    if error is None:
        job.future.set_result(result)
    elif isinstance(error, Exception) and not isinstance(error, StopIteration):
        job.future.set_exception(error)
    else:  # what a future refuses to carry (StopIteration, a BaseException) arrives wrapped
        job.future.set_exception(StoreError(f"a store job raised {error!r}"))
