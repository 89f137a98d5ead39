"""A throwaway PostgreSQL server the suite starts itself, and that a test may stop and start
again (an outage)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import psycopg
import pytest

from support.ports import unused_port

__all__ = ["PostgresServer"]


class PostgresServer:
    """A PostgreSQL server of our own on 127.0.0.1 (trust auth, fsync off) that a test may stop
    and start again (an outage), on the same port and data."""

    def __init__(self, binaries: Path) -> None:
        self._binaries = binaries
        # Not under pytest's temporary folder: as root that one is closed to the `postgres` user.
        self._folder = Path(tempfile.mkdtemp(prefix="looping-postgres-"))
        self._data, sockets = self._folder / "data", self._folder / "sockets"
        sockets.mkdir()
        self._prefix: list[str] = []
        if os.geteuid() == 0:  # initdb refuses to run as root
            shutil.chown(self._folder, "postgres")
            shutil.chown(sockets, "postgres")
            self._prefix = ["runuser", "-u", "postgres", "--"]
        self.port = unused_port()
        self.url = f"postgresql://looping@127.0.0.1:{self.port}"
        """The admin URL, without a database name."""
        self._options = f"-h 127.0.0.1 -p {self.port} -k {sockets} -c fsync=off"
        self._options += " -c full_page_writes=off"
        self._run("initdb", "-D", str(self._data), "-U", "looping", "--auth=trust", "-E", "UTF8")

    def _run(self, program: str, *arguments: str) -> None:
        command = [*self._prefix, str(self._binaries / program), *arguments]
        result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
        if result.returncode != 0:
            pytest.fail(f"{program} failed:\n{result.stdout}\n{result.stderr}")

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self._data), "-o", self._options,
                  "-l", str(self._folder / "log"), "-w", "start")  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """`pg_ctl stop -m mode`: `fast` ends every session (a routine restart)."""
        self._run("pg_ctl", "-D", str(self._data), "-m", mode, "-w", "stop")

    def stop_surely(self, mode: str = "fast", patience: int = 15) -> str:
        """Stop it as `mode` says, or immediately if that takes longer than `patience` seconds
        (a fast shutdown waits for its checkpoint, which a loaded machine may stretch); the
        mode it took."""
        command = [*self._prefix, str(self._binaries / "pg_ctl"), "-D", str(self._data),
                   "-m", mode, "-t", str(patience), "-w", "stop"]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
        if result.returncode == 0:
            return mode
        self.stop("immediate")
        return "immediate"

    def remove(self) -> None:
        with contextlib.suppress(BaseException):
            self.stop("immediate")
        shutil.rmtree(self._folder, ignore_errors=True)

    def create_database(self) -> str:
        """A fresh, empty database; its URL."""
        name = f"looping_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(f"{self.url}/postgres", autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name}")  # type: ignore[arg-type]
        return f"{self.url}/{name}"
