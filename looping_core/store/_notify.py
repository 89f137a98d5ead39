"""Being told at once that another process wrote task events: PostgreSQL LISTEN/NOTIFY.

Each event write also runs `pg_notify(channel, task_id)` in its transaction, so the notice goes
out when (and only if) the events commit. A process that streams listens on its own connection,
watched by the event loop (no thread, no polling), and hands each notified task id on. If that
connection fails it is opened again with a growing delay; the stream hub's slower poll covers the
gap. SQLite has no such thing: there the hub polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

__all__ = ["EVENTS_CHANNEL", "EventNotices"]

EVENTS_CHANNEL = "looping_task_events"

_log = logging.getLogger("looping_core.store")

_RETRY_FIRST, _RETRY_MAX = 0.5, 30.0


class EventNotices:
    """LISTEN on `EVENTS_CHANNEL`: `on_task(task_id)` for each notice, on the event loop, and
    `on_missed()` when listening starts again after a failure (notices may have been lost)."""

    def __init__(
        self,
        connect: Callable[[], Any],
        on_task: Callable[[str], None],
        on_missed: Callable[[], None],
    ) -> None:
        self._connect = connect
        self._on_task = on_task
        self._on_missed = on_missed
        self._connection: Any = None
        self._retry: asyncio.Task[None] | None = None
        self._closed = False

    async def start(self) -> None:
        """Listen; raises when the first connection cannot be made (the server then fails to
        start, as it would on the store itself)."""
        await self._listen()

    async def _listen(self) -> None:
        connection = await asyncio.to_thread(self._connect)
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute(f"LISTEN {EVENTS_CHANNEL}")
        self._connection = connection
        asyncio.get_running_loop().add_reader(connection.fileno(), self._readable)

    def _readable(self) -> None:
        connection = self._connection
        try:
            connection.poll()
        except Exception as exc:  # the server went away: listen again, later
            _log.warning("listening for task events failed (%s); connecting again", exc)
            self._drop()
            self._retry = asyncio.create_task(self._reconnect(), name="looping-event-notices")
            return
        while connection.notifies:
            notice = connection.notifies.pop(0)
            self._on_task(notice.payload)

    async def _reconnect(self) -> None:
        delay = _RETRY_FIRST
        while not self._closed:
            await asyncio.sleep(delay)
            try:
                await self._listen()
            except Exception as exc:
                _log.warning("listening for task events: %s; trying again in %gs", exc, delay)
                delay = min(delay * 2, _RETRY_MAX)
                continue
            _log.info("listening for task events again")
            self._on_missed()
            return

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(connection.fileno())
        with contextlib.suppress(Exception):
            connection.close()

    async def close(self) -> None:
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._retry
        self._drop()
