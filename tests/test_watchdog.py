"""The suite's watchdog (`support.watchdog`): a test that hangs fails, with the stacks of every
thread and asyncio task, and the run goes on with the next test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HANGING = """
import asyncio


async def wait_for_ever() -> None:
    await asyncio.Event().wait()


async def test_hangs() -> None:
    await wait_for_ever()


def test_after() -> None:
    pass
"""


def test_a_hanging_test_fails_with_its_stacks_and_the_run_goes_on(tmp_path: Path) -> None:
    (tmp_path / "test_hanging.py").write_text(HANGING)
    environment = dict(
        os.environ,
        LOOPING_TEST_HANG_SECONDS="1",
        PYTHONPATH=str(Path(__file__).parent),  # where `support` lives
    )
    result = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-p", "support.watchdog", "-p", "no:cacheprovider",
            "-o", "asyncio_mode=auto", "-o", "asyncio_default_fixture_loop_scope=function",
            "-q", str(tmp_path),
        ],
        capture_output=True, text=True, env=environment, cwd=tmp_path, timeout=120, check=False,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "1 failed, 1 passed" in output
    assert "TestHung: " in output
    assert "ran longer than 1 s" in output
    assert "in wait_for_ever" in output  # down the task's awaits to where it waits
    assert "--- thread MainThread ---" in output
