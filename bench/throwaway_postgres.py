"""A throwaway PostgreSQL server for the benchmarks: initdb in a temporary folder, listening on
127.0.0.1 only, fsync off (nothing here needs to survive a power loss), removed at exit. As root
it runs as the `postgres` user, as the test suite's does."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs
import psycopg
from aiohttp.test_utils import unused_port


def _binaries() -> Path:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    installed = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if not installed:
        raise SystemExit(
            "PostgreSQL is not installed (pg_ctl not found): apt-get install postgresql"
        )
    return installed[-1].parent


@contextmanager
def throwaway_postgres(database: str = "bench") -> Iterator[str]:
    """Yields the URL of an empty database on a new server."""
    binaries = _binaries()
    folder = Path(tempfile.mkdtemp(prefix="looping-bench-postgres-"))
    data, sockets = folder / "data", folder / "sockets"
    sockets.mkdir()
    prefix: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
        shutil.chown(sockets, "postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    port = unused_port()

    def run(*command: str) -> None:
        subprocess.run([*prefix, *command], check=True, capture_output=True, timeout=120)

    run(str(binaries / "initdb"), "-D", str(data), "-U", "looping", "--auth=trust", "-E", "UTF8")
    options = (
        f"-h 127.0.0.1 -p {port} -k {sockets} -c fsync=off -c synchronous_commit=off"
        " -c full_page_writes=off -c max_connections=300"
        # Every top-level statement's calls and time, for the benchmarks that print them
        # (`postgres_cost`).
        " -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=top"
    )
    run(str(binaries / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(folder / "log"),
        "-w", "start")  # fmt: skip
    try:
        admin = psycopg.connect(f"postgresql://looping@127.0.0.1:{port}/postgres", autocommit=True)
        with admin:
            admin.execute(f"CREATE DATABASE {database}")
        url = f"postgresql://looping@127.0.0.1:{port}/{database}"
        with psycopg.connect(url, autocommit=True) as bench:
            bench.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        yield url
    finally:
        run(str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(folder, ignore_errors=True)


@attrs.frozen
class PostgresCost:
    """What the server spent over a stretch of work: CPU seconds (every backend's, and the
    postmaster's), and the statements run on the benchmark's database, by who sent them."""

    cpu_seconds: float
    statements: int
    procrastinate_statements: int
    execution_ms: float
    procrastinate_execution_ms: float
    by_statement: tuple[tuple[int, float, str], ...] = ()
    """Each statement's calls, total execution time (ms) and text, the costliest first."""


def _cpu_of(pid: int) -> float:
    """The CPU seconds of a process, its ended children's included (`/proc/<pid>/stat`)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def postgres_cpu(url: str) -> float:
    """CPU seconds the server has spent: its postmaster's (ended backends' included) and every
    live backend's."""
    with psycopg.connect(url) as connection:
        row = connection.execute("SHOW data_directory").fetchone()
    assert row is not None
    postmaster = int((Path(row[0]) / "postmaster.pid").read_text().split()[0])
    spent = _cpu_of(postmaster)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[1]) == postmaster:  # a backend: its own time (not yet in the parent's)
            spent += sum(int(value) for value in fields[11:13]) / os.sysconf("SC_CLK_TCK")
    return spent


_LOOPING_TABLES = re.compile(
    r"\b(tasks|messages|artifacts|task_events|push_configs|push_outbox|push_attempts)\b"
)


def reset_statements(url: str) -> float:
    """Forget the statements counted so far; the server's CPU now (`postgres_cost`'s start)."""
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("SELECT pg_stat_statements_reset()")
    return postgres_cpu(url)


def postgres_cost(url: str, cpu_before: float) -> PostgresCost:
    """What the server spent since `reset_statements` gave `cpu_before`: procrastinate's
    statements are those it sends, naming its tables or functions and none of looping-core's
    (a statement of looping-core's that calls procrastinate's defer or finish is
    looping-core's, procrastinate's work in it included)."""
    cpu = postgres_cpu(url) - cpu_before
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT query, calls, total_exec_time FROM pg_stat_statements"
            " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchall()
    ours = [(calls, ms) for query, calls, ms in rows if "pg_stat_statements" not in query]
    timed = [
        (calls, ms, " ".join(query.split()))
        for query, calls, ms in rows
        if "pg_stat_statements" not in query
    ]
    engine = [
        (calls, ms)
        for query, calls, ms in rows
        if "procrastinate" in query.lower() and not _LOOPING_TABLES.search(query)
    ]
    return PostgresCost(
        cpu_seconds=cpu,
        statements=sum(calls for calls, _ in ours),
        procrastinate_statements=sum(calls for calls, _ in engine),
        execution_ms=sum(ms for _, ms in ours),
        procrastinate_execution_ms=sum(ms for _, ms in engine),
        by_statement=tuple(sorted(timed, key=lambda row: -row[1])),
    )
