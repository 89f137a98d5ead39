"""The job-engine runner: the store defers each turn's job with the task, and any worker
process on any machine runs it (`JobEngine`); this is what the edge of every process sees.

A blocking `SendMessage` waits for the task's events, not on a timer: this process's own
writes announce themselves (`TaskStore.watch_events`), other processes' through PostgreSQL's
LISTEN/NOTIFY (every event write notifies in its transaction). The task's state is read once
when the wait begins and again only when an event of that task was written; if listening was
interrupted (notices may have been lost), every waiter reads again. The process listens from its
first wait until nothing has waited for a while (`EventNotices.hold`), and again from the next.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from looping_core.a2a import Message
from looping_core.contract import Identity
from looping_core.runner._turns import UNSETTLED, TurnDriver
from looping_core.store.internal import StoreUnavailable, TaskStore, TurnStart

if TYPE_CHECKING:
    from looping_core.runner._engine import JobEngine

__all__ = ["EngineRunner"]


class _Notices(Protocol):
    """The store's LISTEN connection (`TaskStore.event_notices`)."""

    async def start(self) -> None: ...
    async def resume(self) -> None: ...
    def hold(self) -> None: ...
    def release(self) -> None: ...
    async def close(self) -> None: ...


class EngineRunner:
    """Turns as jobs: `start` has nothing to do (the job was deferred with the turn), waiting
    listens for the task's events, and a cancel aborts the job wherever it runs."""

    def __init__(self, store: TaskStore, turns: TurnDriver, engine: JobEngine) -> None:
        self._store = store
        self._turns = turns
        self._engine = engine
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._notices: _Notices | None = None
        self._listening: asyncio.Task[None] | None = None
        self._open = False
        store.watch_events(self._written)

    async def accept(
        self, begin: Callable[[bool], Awaitable[TurnStart]], caller: Identity, *, new_task: bool
    ) -> TurnStart:
        """Accept a message: the store defers the turn's job in the same write (its priority
        says its place among other tenants' turns), and whichever worker takes the job begins
        it."""
        return await begin(False)

    async def wait_settled(self, task_id: str, timeout: float) -> None:
        """Wait (at most `timeout` s) until the task's turn ends or asks for input, whichever
        worker runs it."""
        woken = asyncio.Event()
        # Listed before the first read: an event written between the two still wakes it.
        self._waiters.setdefault(task_id, set()).add(woken)
        notices = self._notices_for_waits()
        notices.hold()
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._listen(notices)
                    while await self._store.task_state(task_id) in UNSETTLED:
                        await woken.wait()
                        woken.clear()
        finally:
            notices.release()
            waiting = self._waiters.get(task_id)
            if waiting is not None:
                waiting.discard(woken)
                if not waiting:
                    del self._waiters[task_id]

    async def cancel(self, task_id: str) -> None:
        await self._engine.abort_turn(task_id)

    def canceled_message(self, tenant: str) -> Message | None:
        return self._turns.canceled_message(tenant)

    @property
    def running(self) -> bool:
        """Opened and not closed (the engine's workers answer for themselves: `jobs`)."""
        return self._open

    async def open(self) -> None:
        """Nothing to take up: the engine runs dead workers' jobs again."""
        self._open = True

    async def close(self) -> None:
        self._open = False
        if self._listening is not None:
            self._listening.cancel()
        if self._notices is not None:
            await self._notices.close()

    def _notices_for_waits(self) -> _Notices:
        """The LISTEN connection, made (not opened) at the first wait: a worker process that
        serves no requests never opens it."""
        if self._notices is None:
            notices = self._store.event_notices(self._written, self._wake_all)
            if notices is None:
                raise RuntimeError("the job engine runs on PostgreSQL, which notifies")
            self._notices = notices
        return self._notices

    async def _listen(self, notices: _Notices) -> None:
        """Listen for other processes' events: opened at the first wait (again at the next
        wait if that failed), and again after an idle pause."""
        if self._listening is None:
            self._listening = asyncio.ensure_future(notices.start())
        listening = self._listening
        try:
            await asyncio.shield(listening)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if self._listening is listening:
                self._listening = None  # the next wait tries again
            raise StoreUnavailable(exc) from exc
        # After an idle pause, listen again. Asked of every wait: it returns only once the
        # LISTEN is in place, also to a wait that begins while another's is being made.
        await notices.resume()

    def _written(self, task_id: str) -> None:
        for woken in self._waiters.get(task_id, ()):
            woken.set()

    def _wake_all(self) -> None:
        for waiting in self._waiters.values():
            for woken in waiting:
                woken.set()
