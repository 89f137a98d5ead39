"""The executor-bound store layer: group commit (a failing job's batch undone and run again
without it, no savepoint per job), ordering, and the writer lock."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import peewee
import psycopg
import pytest

from looping_core.store._db import POSTGRES_THREADS
from looping_core.store.internal import Database, StoreError, StoreUnavailable, bounded_connects

ROWS = "CREATE TABLE IF NOT EXISTS rows (id INTEGER PRIMARY KEY, owner TEXT NOT NULL UNIQUE)"


class Boom(Exception):
    pass


@pytest.fixture
async def database(store_url: str) -> AsyncIterator[Database]:
    database = Database.from_url(store_url)
    await database.run_alone(database.execute, ROWS.replace("INTEGER PRIMARY KEY", "SERIAL")
                             if store_url.startswith("postgresql") else ROWS)  # fmt: skip
    yield database
    database.close()


def insert(database: Database, owner: str, fail: bool = False) -> str:
    with database.write():
        database.execute("INSERT INTO rows (owner) VALUES (?)", (owner,))
        if fail:
            raise Boom(owner)
    return owner


def owners(database: Database) -> list[str]:
    return sorted(owner for (owner,) in database.execute("SELECT owner FROM rows").fetchall())


async def test_a_failing_job_undoes_only_its_own_writes(database: Database) -> None:
    jobs = [database.run(insert, database, f"job-{n:02}", n == 7) for n in range(20)]
    results = await asyncio.gather(*jobs, return_exceptions=True)
    assert isinstance(results[7], Boom)
    assert [r for n, r in enumerate(results) if n != 7] == [
        f"job-{n:02}" for n in range(20) if n != 7
    ]
    assert await database.run(owners, database) == [f"job-{n:02}" for n in range(20) if n != 7]


async def test_a_batch_runs_its_jobs_without_a_savepoint_each(tmp_path: Path) -> None:
    """SQLite: twenty writes queued together are one BEGIN and one COMMIT, and no SAVEPOINT."""
    database = Database.from_url(f"sqlite:///{tmp_path / 'store.db'}")
    statements: list[str] = []
    try:
        await database.run_alone(database.execute, ROWS)
        await database.run_alone(
            lambda: database.peewee.connection().set_trace_callback(statements.append)
        )
        await asyncio.gather(*(database.run(insert, database, f"r{n}") for n in range(20)))
    finally:
        database.close()
    kinds = [statement.split()[0].upper() for statement in statements]
    assert kinds.count("INSERT") == 20
    assert "SAVEPOINT" not in kinds
    assert kinds.count("BEGIN") == kinds.count("COMMIT") <= 2  # one batch, or two at most


async def test_a_failing_job_has_its_batch_run_again_without_it(tmp_path: Path) -> None:
    """The others of its batch ran twice (their first run undone with the batch), so each is
    stored once; a `run_once` job queued among them ran once, in a transaction of its own."""
    database = Database.from_url(f"sqlite:///{tmp_path / 'store.db'}")
    runs: dict[str, int] = {}

    def counted(owner: str, fail: bool = False) -> str:
        runs[owner] = runs.get(owner, 0) + 1
        return insert(database, owner, fail)

    try:
        await database.run_alone(database.execute, ROWS)
        blocker = threading.Event()
        held = asyncio.ensure_future(database.run_alone(blocker.wait, 30))
        await asyncio.sleep(0.05)  # the store thread is busy: the jobs below form one batch
        calls = [database.run(counted, f"job-{n}", n == 3) for n in range(6)]
        calls.append(database.run_once(counted, "once"))
        calls.extend(database.run(counted, f"late-{n}") for n in range(2))
        jobs = [asyncio.ensure_future(call) for call in calls]
        await asyncio.sleep(0)  # every job is queued behind the blocker
        blocker.set()
        results = await asyncio.gather(*jobs, return_exceptions=True)
        await held
        stored = await database.run(owners, database)
    finally:
        database.close()
    assert isinstance(results[3], Boom)
    expected = [f"job-{n}" for n in range(6) if n != 3]
    assert results[:3] + results[4:6] == expected
    assert stored == sorted([*expected, "once", "late-0", "late-1"])
    assert runs["once"] == 1
    assert runs["job-3"] == 1  # a failure is not tried again
    assert {runs[owner] for owner in ("job-0", "job-1", "job-2")} == {2}  # undone, run again


async def test_a_job_that_goes_on_after_its_write_failed_keeps_only_what_followed(
    database: Database,
) -> None:
    """A job catching an error from inside its own `write()`: what that block wrote is undone
    (it runs again behind a savepoint), what it wrote after the error is kept, and its
    batch-mates are stored once, on both stores."""

    def forgiving() -> str:
        try:
            with database.write():
                database.execute("INSERT INTO rows (owner) VALUES (?)", ("half",))
                database.execute("INSERT INTO rows (owner) VALUES (?)", ("taken",))  # violates
        except peewee.IntegrityError:
            pass
        database.execute("INSERT INTO rows (owner) VALUES (?)", ("after",))
        return "went on"

    await database.run(insert, database, "taken")
    results = await asyncio.gather(
        database.run(insert, database, "before"),
        database.run(forgiving),
        database.run(insert, database, "next"),
    )
    assert results == ["before", "went on", "next"]
    assert await database.run(owners, database) == ["after", "before", "next", "taken"]


async def test_a_constraint_violation_reaches_its_caller_only(database: Database) -> None:
    await database.run(insert, database, "taken")
    jobs = [database.run(insert, database, "taken"), database.run(insert, database, "free")]
    results = await asyncio.gather(*jobs, return_exceptions=True)
    assert isinstance(results[0], peewee.IntegrityError)
    assert results[1] == "free"


async def test_a_result_is_handed_back_only_once_committed(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    database = Database.from_url(f"sqlite:///{path}")
    try:
        await database.run_alone(database.execute, ROWS)
        outsider = sqlite3.connect(path)
        for n in range(20):  # each answer is visible to another connection when it arrives
            await database.run(insert, database, f"row-{n}")
            assert outsider.execute("SELECT COUNT(*) FROM rows").fetchone() == (n + 1,)
        outsider.close()
    finally:
        database.close()


async def test_batched_jobs_share_a_transaction_alone_jobs_have_none(database: Database) -> None:
    in_transaction = [database.run(database.peewee.in_transaction) for _ in range(5)]
    assert await asyncio.gather(*in_transaction) == [True] * 5
    assert await database.run_alone(database.peewee.in_transaction) is False
    assert database.run_sync(database.peewee.in_transaction) is False


async def test_sqlite_jobs_run_in_the_order_they_were_queued(tmp_path: Path) -> None:
    """One SQLite thread: a job queued later never overtakes an earlier one (PostgreSQL's
    threads promise no order)."""
    database = Database.from_url(f"sqlite:///{tmp_path / 'store.db'}")
    order: list[int] = []
    jobs = [database.run(order.append, n) for n in range(30)]
    jobs.insert(15, database.run_alone(order.append, 99))
    try:
        await asyncio.gather(*jobs)
    finally:
        database.close()
    assert order == [*range(15), 99, *range(15, 30)]


async def test_close_finishes_the_queued_work_first(tmp_path: Path) -> None:
    database = Database.from_url(f"sqlite:///{tmp_path / 'store.db'}")
    await database.run_alone(database.execute, ROWS)
    jobs = [asyncio.ensure_future(database.run(insert, database, f"r{n}")) for n in range(10)]
    await asyncio.sleep(0)  # every job is queued
    await asyncio.to_thread(database.close)
    assert len(await asyncio.gather(*jobs)) == 10


async def test_a_write_waits_for_another_process_holding_the_writer_lock(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    database = Database.from_url(f"sqlite:///{path}")
    try:
        await database.run_alone(database.execute, ROWS)
        with open(f"{path}.lock", "ab") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # as another server process's transaction would
            job = asyncio.ensure_future(database.run(insert, database, "after"))
            await asyncio.sleep(0.3)
            assert not job.done()
            fcntl.flock(lock, fcntl.LOCK_UN)
        assert await asyncio.wait_for(job, 10) == "after"
    finally:
        database.close()


WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from looping_core.store.internal import Database

    async def main(path, name):
        database = Database.from_url(f"sqlite:///{path}")
        def insert(owner):
            with database.write():
                database.execute("INSERT INTO rows (owner) VALUES (?)", (owner,))
        await asyncio.gather(*(database.run(insert, f"{name}-{n}") for n in range(300)))
        database.close()

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def test_two_processes_write_one_sqlite_file_without_locking_errors(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    database = Database.from_url(f"sqlite:///{path}")
    await database.run_alone(database.execute, ROWS)
    database.close()
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), name], stderr=subprocess.PIPE)
        for name in ("a", "b", "c")
    ]
    for writer in writers:
        _, errors = writer.communicate(timeout=120)
        assert writer.returncode == 0, errors.decode()
    with sqlite3.connect(path) as connection:
        assert connection.execute("SELECT COUNT(*) FROM rows").fetchone() == (900,)


async def test_a_job_raising_what_a_future_cannot_carry_is_wrapped(database: Database) -> None:
    def exhausted() -> None:
        next(iter(()))

    with pytest.raises(StoreError, match="StopIteration"):
        await database.run(exhausted)
    assert await database.run(lambda: "still serving") == "still serving"


async def test_a_store_that_cannot_be_opened_fails_every_call_and_hangs_none(
    tmp_path: Path,
) -> None:
    database = Database.from_url(f"sqlite:///{tmp_path}")  # a folder, not a database file
    try:
        for _ in range(3):
            with pytest.raises(peewee.OperationalError):
                await asyncio.wait_for(database.run(lambda: 1), 10)
    finally:
        database.close()


async def test_sqlite_busy_is_unavailable_and_a_bad_statement_is_not(tmp_path: Path) -> None:
    """SQLite's busy (another process holds the write lock past the timeout) is the store out of
    reach for now (`StoreUnavailable`, which the edge answers with 503); an error of the SQL
    itself stays the driver's error (a fault, not an outage)."""
    path = tmp_path / "store.db"
    database = Database(peewee.SqliteDatabase(str(path), pragmas={"busy_timeout": 0}))
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        await database.run(database.execute, "CREATE TABLE rows (n INTEGER)")
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreUnavailable, match="database is locked"):
            await database.run(database.execute, "INSERT INTO rows VALUES (1)")
        assert not database.available
        holder.execute("ROLLBACK")
        await database.run(database.execute, "INSERT INTO rows VALUES (1)")
        assert database.available
        with pytest.raises(peewee.OperationalError, match="no such table"):
            await database.run(database.execute, "SELECT * FROM missing")
        assert database.available
    finally:
        holder.close()
        database.close()


async def test_postgresql_connections_lost_are_opened_again(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The server drops every connection (a restart, a failover): each store thread fails one
    job with `StoreUnavailable` (the driver's error its cause), then reconnects. The outage is
    one WARNING, and its end one more, however many jobs failed."""
    database = Database.from_url(postgres_url)
    try:
        await asyncio.gather(*(database.run(lambda: 1) for _ in range(32)))  # all threads connect
        with psycopg.connect(postgres_url) as admin, admin.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            assert len(cursor.fetchall()) == POSTGRES_THREADS
        outcomes = []
        causes: list[BaseException | None] = []
        for _ in range(100):
            try:
                await database.run(database.execute, "SELECT 1")
                outcomes.append("ok")
            except StoreUnavailable as exc:
                causes.append(exc.__cause__)
                outcomes.append("lost")
    finally:
        database.close()
    assert 1 <= outcomes.count("lost") <= POSTGRES_THREADS  # at most once per thread...
    assert outcomes[-60:] == ["ok"] * 60  # ...then each has connected again
    assert all(isinstance(c, (peewee.OperationalError, peewee.InterfaceError)) for c in causes)
    said = [r.getMessage() for r in caplog.records if r.name == "looping_core.store"]
    assert len(said) == 2, said
    assert said[0].startswith("the store is unavailable: ")
    assert said[1].startswith("the store is available again after ")
    assert database.available


async def test_a_closed_store_refuses_work_instead_of_hanging(tmp_path: Path) -> None:
    database = Database.from_url(f"sqlite:///{tmp_path / 'store.db'}")
    database.close()
    database.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        await database.run(lambda: 1)
    with pytest.raises(StoreError, match="closed"):
        database.run_sync(lambda: 1)


def test_an_sqlite_older_than_the_store_needs_is_refused_before_a_file_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 34, 1))
    monkeypatch.setattr(sqlite3, "sqlite_version", "3.34.1")
    with pytest.raises(StoreError, match=r"needs SQLite 3\.35\.0 or later.*uses SQLite 3\.34\.1"):
        Database.from_url(f"sqlite:///{tmp_path / 'new' / 'store.db'}")
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize(
    ("url", "bounded"),
    [
        ("postgresql://u@h/db", "postgresql://u@h/db?connect_timeout=10"),
        (
            "postgresql://u:p%40x@h:5/db?options=-c%20search_path%3Dx",
            "postgresql://u:p%40x@h:5/db?options=-c%20search_path%3Dx&connect_timeout=10",
        ),
        ("postgresql://u@h/db?connect_timeout=3", "postgresql://u@h/db?connect_timeout=3"),
        ("sqlite:///looping.db", "sqlite:///looping.db"),
    ],
)
def test_postgresql_connections_are_bounded_unless_the_url_says(url: str, bounded: str) -> None:
    assert bounded_connects(url) == bounded


@pytest.mark.slow
async def test_a_connection_the_server_takes_but_never_answers_gives_up(
    tmp_path: Path,
) -> None:
    """A PostgreSQL address that accepts and then says nothing (a server caught mid-shutdown, a
    failover's old address): the store's connection attempt fails after `connect_timeout`, so
    the next attempt can find the server, instead of waiting as long as the network does."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        silent.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                held.append(silent.accept()[0])

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    port = silent.getsockname()[1]
    database = Database.from_url(f"postgresql://looping@127.0.0.1:{port}/db")  # 10 s, ours
    try:
        with pytest.raises((peewee.OperationalError, StoreUnavailable)):
            await asyncio.wait_for(database.run(lambda: 1), 60)  # fails: never hangs
        assert held  # it did connect, and was never answered
    finally:
        stop.set()
        acceptor.join()
        database.close()
        for connection in held:
            connection.close()
        silent.close()


async def test_postgresql_runs_jobs_on_as_many_connections_as_configured(
    postgres_url: str,
) -> None:
    """`[store] connections`: that many threads, each its connection, and every job on one of
    them; SQLite keeps its one writer whatever it says."""
    database = Database.from_url(postgres_url, connections=2)
    try:
        # Jobs that wait for one another: each blocks its thread until all have begun or time
        # is up, so as many threads as there are run at once.
        begun: set[str] = set()
        every = threading.Barrier(3, timeout=1)

        def hold() -> str:
            name = threading.current_thread().name
            begun.add(name)
            with contextlib.suppress(threading.BrokenBarrierError):
                every.wait()
            return name

        names = await asyncio.gather(*(database.run_alone(hold) for _ in range(6)))
        assert set(names) == begun == {"looping-db-0", "looping-db-1"}
        with psycopg.connect(postgres_url) as admin:
            (connected,) = admin.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone() or (0,)
        assert connected == 2
    finally:
        database.close()


async def test_sqlite_keeps_one_writer_whatever_connections_says(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one connection, not 0"):
        Database.from_url(f"sqlite:///{tmp_path / 'none.db'}", connections=0)
    database = Database.from_url(f"sqlite:///{tmp_path / 'one.db'}", connections=4)
    try:
        names = await asyncio.gather(
            *(database.run(lambda: threading.current_thread().name) for _ in range(8))
        )
        assert set(names) == {"looping-db-0"}
    finally:
        database.close()
