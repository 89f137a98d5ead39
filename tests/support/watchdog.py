"""A test that hangs fails, with the stack of every thread and asyncio task, instead of holding
CI until its time limit. A hang seen once on the dependency floors left only an idle event loop to
look at (py-spy shows threads, not the coroutine that waits for ever).

`LOOPING_TEST_HANG_SECONDS` sets the limit per test (setup, call and teardown together; default
300, far above the slowest test); 0 turns the watchdog off (a debugger session, say)."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest

LIMIT_SECONDS = float(os.environ.get("LOOPING_TEST_HANG_SECONDS", "300"))


class TestHung(Exception):
    """The test ran past the watchdog's limit."""

    __test__ = False  # not a test class, whatever its name


def stacks() -> str:
    """Every thread's stack, and every task's of the running event loop (if one runs)."""
    out = io.StringIO()
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        out.write(f"\n--- thread {names.get(ident, ident)} ---\n")
        out.write("".join(traceback.format_stack(frame)))
    try:
        tasks = asyncio.all_tasks()
    except RuntimeError:
        tasks = set()  # no loop runs: the threads say it all
    for task in tasks:
        out.write(f"\n--- task {task.get_name()} ---\n")
        # Down the chain of awaits to what it waits on (a task's own stack stops at its top
        # coroutine, which says little about a hang).
        awaited: Any = task.get_coro()
        while awaited is not None:
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
            if frame is None:
                out.write(f"  waiting on {awaited!r}\n")
                break
            code = frame.f_code
            out.write(f'  File "{code.co_filename}", line {frame.f_lineno}, in {code.co_name}\n')
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    return out.getvalue()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    if LIMIT_SECONDS <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum: int, frame: FrameType | None) -> None:
        sys.stderr.write(f"\n=== {item.nodeid} hung; stacks ==={stacks()}\n")
        raise TestHung(f"{item.nodeid} ran longer than {LIMIT_SECONDS:g} s (stacks in stderr)")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, LIMIT_SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
