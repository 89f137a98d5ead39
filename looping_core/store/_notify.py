"""Being told at once that another process wrote task events: PostgreSQL LISTEN/NOTIFY.

Each event write also runs `pg_notify(channel, task_id)` in its transaction, so the notice goes
out when (and only if) the events commit. A process that streams listens on its own asynchronous
connection (psycopg's, on the event loop: no thread, no polling), and hands each notified task
id on. If that connection fails it is opened again with a growing delay; the stream hub's slower
poll covers the gap. What waits for events (a stream, a blocking SendMessage) holds the notices
(`hold`, `release`); once nothing has held them for `LISTEN_IDLE_SECONDS` the process stops
listening, until the next wait: a listening connection costs PostgreSQL work for every notice
written, whoever it is for. SQLite has no such thing: there the hub polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["EVENTS_CHANNEL", "LISTEN_IDLE_SECONDS", "EventNotices"]

EVENTS_CHANNEL = "looping_task_events"

LISTEN_IDLE_SECONDS = 30.0
"""How long a process keeps listening once nothing in it waits for events (a stream, a blocking
SendMessage): waits that come and go do not reconnect each time, and a process that waits for
nothing is not told of every event written (each notice costs PostgreSQL work for every
listening connection, whoever it is for)."""

_log = logging.getLogger("looping_core.store")

_RETRY_FIRST, _RETRY_MAX = 0.5, 30.0


class EventNotices:
    """LISTEN on `EVENTS_CHANNEL`: `on_task(task_id)` for each notice, on the event loop, and
    `on_missed()` when listening starts again after a failure (notices may have been lost)."""

    def __init__(
        self,
        connect: Callable[[], Awaitable[Any]],
        on_task: Callable[[str], None],
        on_missed: Callable[[], None],
    ) -> None:
        """`connect()` opens an autocommit `psycopg.AsyncConnection` to the store."""
        self._connect = connect
        self._on_task = on_task
        self._on_missed = on_missed
        self._connection: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._retry: asyncio.Task[None] | None = None
        self._wanted = False
        self._closed = False
        self._switching = asyncio.Lock()
        """Held while listening starts or stops: a `resume` returns once the LISTEN is in
        place (also to a second caller), and never meets a `pause` halfway."""
        self._holders = 0
        self._idle: asyncio.Task[None] | None = None
        """Pauses once nothing has held the notices for `LISTEN_IDLE_SECONDS`."""
        self._idle_sleeping = False
        """`_idle` has not begun its pause: it can still be canceled."""

    async def start(self) -> None:
        """Listen; raises when the first connection cannot be made (the server then fails to
        start, as it would on the store itself)."""
        self._wanted = True
        await self._listen()

    async def resume(self) -> None:
        """Listen again after `pause` (nothing if listening). Never raises: a connection that
        cannot be made is tried again with a growing delay, and `on_missed` says when it is
        made (the notices meanwhile are lost)."""
        async with self._switching:
            if self._wanted or self._closed:
                return
            self._wanted = True
            try:
                await self._listen()
            except Exception as exc:
                _log.info("listening for task events: %s; trying again", _line(exc))
                self._retry = asyncio.create_task(
                    self._reconnect(), name="looping-event-notices-retry"
                )

    def hold(self) -> None:
        """Something begins to wait for events: listening is not stopped while it waits (it
        `resume`s before it reads, so an event written after the read is notified)."""
        self._holders += 1
        self._stop_idle_timer()

    def release(self) -> None:
        """A wait `hold` began has ended: once none has been held for `LISTEN_IDLE_SECONDS`,
        stop listening (`pause`). A wait that begins once the pause has begun is not lost: its
        `resume` waits for the pause to end, then listens again."""
        self._holders -= 1
        if self._holders == 0 and not self._closed:
            self._stop_idle_timer()
            self._idle = asyncio.create_task(self._pause_when_idle(), name="looping-notices-idle")
            self._idle_sleeping = True

    async def _pause_when_idle(self) -> None:
        try:
            await asyncio.sleep(LISTEN_IDLE_SECONDS)
        finally:
            self._idle_sleeping = False
        if self._holders == 0:  # no await between this check and the pause taking its lock
            await self.pause()

    def _stop_idle_timer(self) -> None:
        if self._idle is not None and self._idle_sleeping:
            self._idle.cancel()
        self._idle_sleeping = False

    async def pause(self) -> None:
        """Stop listening, and close the connection, until `resume`."""
        async with self._switching:
            self._wanted = False
            await self._stop_tasks()
            await self._drop()

    async def _listen(self) -> None:
        connection = await self._connect()
        try:
            await connection.execute(f"LISTEN {EVENTS_CHANNEL}")
        except BaseException:
            await connection.close()
            raise
        self._connection = connection
        self._reader = asyncio.create_task(self._read(connection), name="looping-event-notices")

    async def _read(self, connection: Any) -> None:
        try:
            async for notice in connection.notifies():
                self._on_task(notice.payload)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the server went away: listen again, later
            _log.warning("listening for task events failed (%s); connecting again", _line(exc))
        if self._closed:
            return
        await self._drop()
        self._retry = asyncio.create_task(self._reconnect(), name="looping-event-notices-retry")

    async def _reconnect(self) -> None:
        delay = _RETRY_FIRST
        while self._wanted and not self._closed:
            await asyncio.sleep(delay)
            try:
                await self._listen()
            except Exception as exc:
                # Said at INFO: the store logs the outage itself, once.
                _log.info("listening for task events: %s; trying again in %gs", _line(exc), delay)
                delay = min(delay * 2, _RETRY_MAX)
                continue
            _log.info("listening for task events again")
            self._on_missed()
            return

    async def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close()

    async def close(self) -> None:
        self._stop_idle_timer()
        async with self._switching:
            self._closed = True
            self._wanted = False
            await self._stop_tasks()
            await self._drop()

    async def _stop_tasks(self) -> None:
        for task in (self._retry, self._reader):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._retry = self._reader = None


def _line(error: BaseException) -> str:
    """The first line of a driver's error (psycopg's run over several)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
