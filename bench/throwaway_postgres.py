"""A throwaway PostgreSQL server for the benchmarks: initdb in a temporary folder, listening on
127.0.0.1 only, fsync off (nothing here needs to survive a power loss), removed at exit. As root
it runs as the `postgres` user, as the test suite's does."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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
    )
    run(str(binaries / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(folder / "log"),
        "-w", "start")  # fmt: skip
    try:
        admin = psycopg.connect(f"postgresql://looping@127.0.0.1:{port}/postgres", autocommit=True)
        with admin:
            admin.execute(f"CREATE DATABASE {database}")
        yield f"postgresql://looping@127.0.0.1:{port}/{database}"
    finally:
        run(str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(folder, ignore_errors=True)
