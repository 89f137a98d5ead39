"""The job engine's tests' shared parts: processes stopped at the end of a test, a config whose
[runner] section is the engine's, and reading the store's rows directly."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import psycopg

from looping_core.testing import FakeGateway

from support.served import write_config

ENGINE = """
[runner]
on_restart = "resume"
serve_runs_jobs = {runs}
heartbeat_seconds = 0.5
stalled_after_seconds = 2
sweep_seconds = 1
"""


class Processes:
    def __init__(self) -> None:
        self.running: list[subprocess.Popen[bytes]] = []

    def add(self, process: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
        self.running.append(process)
        return process

    def stop(self) -> None:
        for process in self.running:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.running:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)


def engine_config(
    tmp_path: Path, name: str, port: int, gateway: FakeGateway, store: str, *, runs: bool
) -> Path:
    """A config whose [runner] section is the job engine's (it replaces the default one)."""
    path = write_config(tmp_path / f"{name}.toml", port, gateway, store_url=store)
    text = path.read_text()
    text = re.sub(
        r"\[runner\]\n(?:[^\[\n][^\n]*\n)*", ENGINE.format(runs=str(runs).lower())[1:], text
    )
    path.write_text(text)
    return path


def rows(store: str, query: str) -> list[tuple[object, ...]]:
    with psycopg.connect(store) as connection:
        return connection.execute(query).fetchall()  # type: ignore[arg-type]
