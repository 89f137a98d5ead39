"""The in-process runner: turns run in the process that accepted them (the embedded default).

At most `[runner] concurrency` turns run at once (the driver's slots, handed to waiting turns
round robin by tenant and caller: `FairSlots`). On start, turns a crash
left SUBMITTED or WORKING are resumed or failed, as `[runner] on_restart` says. A turn that
another process canceled (a `CancelTask` that reached another server worker) is found by a
look at the store every `CANCEL_POLL_SECONDS` and stopped. A turn the store's outage cut off
is taken up again once the store answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from looping_core import _metrics
from looping_core.a2a import Message, TaskState
from looping_core.contract import Identity
from looping_core.runner._patience import OUTAGE_RETRY_FIRST, OUTAGE_RETRY_MAX
from looping_core.runner._ports import TaskStates
from looping_core.runner._turns import UNSETTLED, TurnDriver
from looping_core.store.internal import BegunTurn, StoreUnavailable, TurnStart

__all__ = ["LocalRunner"]

_log = logging.getLogger("looping_core.runner")

CANCEL_POLL_SECONDS = 1.0


class LocalRunner:
    """Runs the turns this process accepted, in this process."""

    def __init__(
        self,
        store: TaskStates,
        turns: TurnDriver,
        *,
        cancel_poll_seconds: float = CANCEL_POLL_SECONDS,
    ) -> None:
        self._store = store
        self._turns = turns
        self._cancel_poll_seconds = cancel_poll_seconds
        self._open = False
        self._running: dict[str, asyncio.Task[Any]] = {}
        self._settled: dict[str, asyncio.Event] = {}
        self._watcher: asyncio.Task[None] | None = None

    def start(self, task_id: str, owner: Identity | None = None) -> None:
        """Schedule the task's pending turn (idempotent while it is scheduled); `owner`: whose
        turn it is, for its place among waiting turns."""
        if task_id in self._running:
            return
        self._schedule(task_id, None, owner)

    async def accept(
        self, begin: Callable[[bool], Awaitable[TurnStart]], caller: Identity, *, new_task: bool
    ) -> TurnStart:
        """Accept a message: a new task whose turn can have a slot now (never waited for) is
        accepted and begun in one write, and runs in that slot; any other turn it began waits
        for a slot in `caller`'s place."""
        reserved = new_task and self._open and await self._turns.reserve()
        try:
            start = await begin(reserved)
        except BaseException:
            if reserved:
                self._turns.release()
            raise
        if start.begun is not None:
            self._schedule(start.task.id, start.begun)
            return start
        if reserved:
            self._turns.release()  # a duplicate, a follow-up, a refusal
        if start.started:
            self.start(start.task.id, caller)
        return start

    def _schedule(
        self, task_id: str, begun: BegunTurn | None, owner: Identity | None = None
    ) -> None:
        job = asyncio.create_task(self._run(task_id, begun, owner), name=f"looping-turn-{task_id}")
        self._running[task_id] = job
        job.add_done_callback(functools.partial(self._forget, task_id))  # canceled before it ran

    async def wait_settled(self, task_id: str, timeout: float) -> None:
        """Wait (at most `timeout` s) until the task's turn ends or asks for input.

        Returns at once when no turn of the task runs here: it has settled already, or another
        server process runs it (a duplicate that reached another worker).
        """
        if task_id not in self._running:
            return
        event = self._settled.setdefault(task_id, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await event.wait()

    async def cancel(self, task_id: str) -> None:
        """Stop the task's turn if it runs here (another process's watcher stops its own)."""
        job = self._running.get(task_id)
        if job is not None:
            job.cancel()
            _metrics.TURNS.inc(outcome="canceled")
        self._settle(task_id)

    def canceled_message(self, tenant: str) -> Message | None:
        return self._turns.canceled_message(tenant)

    @property
    def running(self) -> bool:
        """Whether it watches its turns (opened, not closed)."""
        return self._watcher is not None and not self._watcher.done()

    async def open(self) -> None:
        """Resume or fail the turns a crash left, then watch for turns canceled elsewhere."""
        self._open = True
        await self._recover_all()
        self._watcher = asyncio.create_task(
            self._watch_cancellations(), name="looping-cancel-watcher"
        )

    async def close(self) -> None:
        self._open = False
        if self._watcher is not None:
            self._watcher.cancel()
        jobs = list(self._running.values())
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)

    async def _recover_all(self) -> None:
        """Deal with turns a crash left SUBMITTED or WORKING: resume or fail them.

        A task whose recovery fails is logged and left as it is: one bad row must never keep
        the server from starting, nor the other tasks from being recovered.
        """
        for task_id in await self._store.unfinished():
            try:
                if await self._turns.recover(task_id):
                    self.start(task_id)
            except Exception:
                _log.exception("recovering task %s failed; it is left as it is", task_id)

    async def _watch_cancellations(self) -> None:
        """Stop turns whose task another process ended: their store state is looked up every
        `cancel_poll_seconds` while any runs here."""
        while True:
            await asyncio.sleep(self._cancel_poll_seconds)
            if not self._running:
                continue
            try:
                ended = await self._store.ended_among(list(self._running))
            except Exception:
                _log.exception("looking up canceled tasks failed; trying again")
                continue
            for task_id in ended:
                _log.info("task %s was ended elsewhere; stopping its turn", task_id)
                await self.cancel(task_id)

    async def _run(self, task_id: str, begun: BegunTurn | None, owner: Identity | None) -> None:
        try:
            await self._turns.run(task_id, begun, owner=owner)
        except StoreUnavailable:
            self._take_up_later(task_id)
        finally:
            # Forgotten in the same step as its waiters are woken: a duplicate arriving one step
            # later must find no running turn (and answer at once), not wait on a fresh event.
            self._forget(task_id, asyncio.current_task())
            self._settle(task_id)

    def _take_up_later(self, task_id: str) -> None:
        """Run (or, found WORKING, resume or fail) a turn the store's outage cut off, once the
        store answers again."""
        if self._open:
            asyncio.get_running_loop().create_task(
                self._after_outage(task_id), name=f"looping-retake-{task_id}"
            )

    async def _after_outage(self, task_id: str) -> None:
        delay = OUTAGE_RETRY_FIRST
        while self._open:
            await asyncio.sleep(delay)
            delay = min(delay * 2, OUTAGE_RETRY_MAX)
            if task_id in self._running:
                return  # taken up already (a duplicate, a follow-up)
            try:
                state = await self._store.task_state(task_id)
                working = state is TaskState.TASK_STATE_WORKING
                if working and not await self._turns.recover(task_id):
                    return
            except StoreUnavailable:
                continue
            if state in UNSETTLED:
                self.start(task_id)
            return

    def _forget(self, task_id: str, job: asyncio.Future[Any] | None) -> None:
        """Drop `job` from the running turns, unless a newer turn of its task took its place."""
        if self._running.get(task_id) is job:
            del self._running[task_id]

    def _settle(self, task_id: str) -> None:
        event = self._settled.pop(task_id, None)
        if event is not None:
            event.set()
