"""Streams of task events: one hub per server process, and what a streaming method answers.

Every event of a task is in the store, numbered per task (`looping_core.store` events). A stream
is a cursor over them: the hub reads each subscribed task's events past the lowest cursor of its
subscribers and hands each subscriber those past its own. It reads at once when this process
wrote events of a subscribed task, or when PostgreSQL notifies it that another process did
(LISTEN/NOTIFY), and every `poll_seconds` on SQLite for what other processes wrote; so a stream
sees every event once and in order, whichever process or machine runs the turn.

A subscriber that does not read is dropped once `buffer_events` wait for it: its stream ends,
the turn and the other subscribers never wait, and the client resumes with `Last-Event-ID`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable

import attrs

from looping_core import _metrics
from looping_core.a2a import TooManyStreams
from looping_core.config import StreamingConfig
from looping_core.contract import Identity
from looping_core.store.internal import StoreUnavailable, TaskEvent, TaskStore

__all__ = ["EventHub", "Subscription", "TaskStream", "with_generation", "written_within"]

_log = logging.getLogger("looping_core.streams")

NOTIFIED_POLL_FACTOR = 10
"""Where the store tells of other processes' events (PostgreSQL), polling is only a safety net."""
OUTAGE_PAUSE_SECONDS = 0.5
"""How often streams look again while the store is out of reach."""


async def written_within(write: Awaitable[None], timeout: float) -> bool:
    """Await a stream's `write`; `False` when the client took none of it within `timeout`
    (its socket buffers, or HTTP/2's flow-control window, are full: it stopped reading)."""
    try:
        async with asyncio.timeout(timeout):
            await write
    except TimeoutError:
        return False
    return True


def with_generation(body: str, seq: int) -> str:
    """A stored event (a `StreamResponse`'s JSON) with the task's generation after it: one more
    than its number, since a task is at generation 1 before its first event (A2A 1.1 draft;
    `int64`, so a string in ProtoJSON)."""
    event = json.loads(body)
    for member in ("statusUpdate", "artifactUpdate"):
        if member in event:
            event[member]["generation"] = str(seq + 1)
    return json.dumps(event, separators=(",", ":"))


class _End(Exception):
    """Why a subscription ended early: dropped (too slow) or the server is stopping."""


class Subscription:
    """One stream's place in one task's events: those after `cursor`, waiting to be sent."""

    def __init__(self, task_id: str, cursor: int, buffer: int) -> None:
        self.task_id = task_id
        self.cursor = cursor
        """The number of the last event given to this subscriber."""
        self._queue: asyncio.Queue[TaskEvent | _End] = asyncio.Queue(maxsize=buffer + 1)
        self._buffer = buffer
        self.ended: str | None = None

    def offer(self, event: TaskEvent) -> bool:
        """Queue `event` if it is the next one (one already given is ignored); `False` when one
        is missing before it (the hub reads the task again). A subscriber with too many events
        waiting is dropped."""
        if self.ended is not None or event.seq <= self.cursor:
            return True
        if event.seq != self.cursor + 1:
            return False
        if self._queue.qsize() >= self._buffer:
            self.end("dropped: it read too slowly")
            _metrics.STREAM_DROPS.inc()
            return True
        self._queue.put_nowait(event)
        self.cursor = event.seq
        return True

    def end(self, why: str) -> None:
        if self.ended is None:
            self.ended = why
            self._queue.put_nowait(_End(why))  # the one slot kept free for it

    async def next(self, timeout: float) -> TaskEvent | None:
        """The next event; `None` after `timeout` seconds without one; `_End` when ended."""
        try:
            async with asyncio.timeout(timeout):
                item = await self._queue.get()
        except TimeoutError:
            return None
        if isinstance(item, _End):
            raise item
        return item


class EventHub:
    """This process's subscriptions to task events, fed from the store."""

    def __init__(self, store: TaskStore, config: StreamingConfig) -> None:
        self._store = store
        self._config = config
        self._subscribers: dict[str, set[Subscription]] = {}
        self._dirty: set[str] = set()
        """Subscribed tasks with events not read yet (new subscriptions, notified writes)."""
        self._wake = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self._poll_seconds = config.poll_seconds
        self._scanned: int | None = None
        """Where the look for other processes' events goes on from (SQLite's event ids)."""
        store.watch_events(self.written)
        self._notices = store.event_notices(self.written, self._read_all)
        self._open: collections.Counter[Identity] = collections.Counter()
        """Open streams per caller (tenant, issuer, subject), for `max_streams_per_caller`."""

    def reserve(self, caller: Identity) -> Callable[[], None]:
        """Count a stream of `caller` (`TooManyStreams` past the cap); returns what releases
        it (idempotent)."""
        if self._open[caller] >= self._config.max_streams_per_caller:
            raise TooManyStreams(
                f"This caller has {self._config.max_streams_per_caller} streams open here "
                "already ([streaming] max_streams_per_caller); close one, or use GetTask",
                metadata={"maxStreams": str(self._config.max_streams_per_caller)},
            )
        self._open[caller] += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._open[caller] -= 1
                if self._open[caller] <= 0:
                    del self._open[caller]

        return release

    async def start(self) -> None:
        """Start reading (and, on PostgreSQL, listening: then polling is only a safety net,
        every `NOTIFIED_POLL_FACTOR` times `poll_seconds`). It listens only from a
        subscription's first read until nothing has been subscribed for `LISTEN_IDLE_SECONDS`:
        its first connection, here, only proves that it can (the server fails to start if not)."""
        if self._notices is not None:
            await self._notices.start()
            await self._notices.pause()
            self._poll_seconds = self._config.poll_seconds * NOTIFIED_POLL_FACTOR
        since = await self._store.events_since(None)
        self._scanned = since[1] if since is not None else None
        self._reader = asyncio.create_task(self._read_forever(), name="looping-event-hub")

    def end_streams(self, why: str) -> None:
        """End every stream now (each ends after the events it was given)."""
        for subscribers in list(self._subscribers.values()):
            for subscription in subscribers:
                subscription.end(why)

    async def close(self) -> None:
        """End every stream and stop reading."""
        self.end_streams("the server is stopping")
        if self._notices is not None:
            await self._notices.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader

    def subscribe(self, task_id: str, after: int) -> Subscription:
        """A subscription to the task's events numbered above `after` (stored ones first)."""
        subscription = Subscription(task_id, after, self._config.buffer_events)
        self._subscribers.setdefault(task_id, set()).add(subscription)
        if self._notices is not None:
            self._notices.hold()  # the reader listens before it reads (`resume`)
        self.written(task_id)
        return subscription

    async def wait_for_event(self, task_id: str, after: int, timeout: float) -> bool:
        """Wait until the task has an event numbered above `after` (`True`), for at most
        `timeout` seconds (`False`; also when the server is stopping). The same reads and
        notices as the streams' wake it, whichever process wrote the event."""
        subscription = self.subscribe(task_id, after)
        try:
            return await subscription.next(timeout) is not None
        except _End:
            return False
        finally:
            self.unsubscribe(subscription)

    def unsubscribe(self, subscription: Subscription) -> None:
        subscribers = self._subscribers.get(subscription.task_id)
        if subscribers is None or subscription not in subscribers:
            return
        subscribers.discard(subscription)
        if self._notices is not None:
            self._notices.release()
        if not subscribers:
            del self._subscribers[subscription.task_id]
            if not self._subscribers:
                self._wake.set()  # the reader goes idle

    def written(self, task_id: str) -> None:
        """Events of `task_id` were written (this process's store, or a notice of another's)."""
        if task_id in self._subscribers:
            self._dirty.add(task_id)
            self._wake.set()

    def _read_all(self) -> None:
        self._dirty.update(self._subscribers)
        self._wake.set()

    async def _read_forever(self) -> None:
        """Read what was written to subscribed tasks: those known to have new events at once,
        in one query however many writes came meanwhile; and every `poll_seconds` what other
        processes wrote (also while this process's own writes keep waking it)."""
        loop = asyncio.get_running_loop()
        looked = loop.time()
        while True:
            if self._subscribers:
                remaining = looked + self._poll_seconds - loop.time()
                if remaining > 0:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(remaining):
                            await self._wake.wait()
                if loop.time() >= looked + self._poll_seconds:
                    looked = loop.time()
                    await self._look_elsewhere()
            else:
                await self._wake.wait()
                looked = loop.time()
            self._wake.clear()
            tasks, self._dirty = self._dirty, set()
            if tasks and self._notices is not None:
                # Listening before the read: an event written after it is notified.
                await self._notices.resume()
            try:
                await self._read(tasks)
            except StoreUnavailable:  # logged once by the store; streams wait for it
                self._dirty |= tasks
                await asyncio.sleep(OUTAGE_PAUSE_SECONDS)
            except Exception:
                _log.exception("reading task events failed; trying again")
                self._dirty |= tasks
                await asyncio.sleep(self._config.poll_seconds)

    async def _look_elsewhere(self) -> None:
        """What other processes wrote: on SQLite the events committed since the last look (if
        anyone else committed at all); elsewhere every subscribed task is read again."""
        if self._scanned is None:
            self._dirty.update(self._subscribers)
            return
        try:
            since = await self._store.events_since(self._scanned)
        except StoreUnavailable:
            self._dirty.update(self._subscribers)
            return
        except Exception:
            _log.exception("looking for other processes' events failed")
            self._dirty.update(self._subscribers)
            return
        if since is not None:
            events, self._scanned = since
            self._hand_out(events)

    async def _read(self, tasks: set[str]) -> None:
        cursors = {
            task_id: min(s.cursor for s in subscribers)
            for task_id in tasks
            if (subscribers := self._subscribers.get(task_id))
        }
        self._hand_out(await self._store.events_after(cursors))

    def _hand_out(self, events: list[TaskEvent]) -> None:
        for event in events:
            for subscription in list(self._subscribers.get(event.task_id, ())):
                if not subscription.offer(event):
                    self._dirty.add(event.task_id)  # one before it is missing: read the task
                    self._wake.set()
                if subscription.ended is not None:
                    self.unsubscribe(subscription)


@attrs.frozen
class TaskStream:
    """What a streaming method answers: `first` (the task snapshot's JSON and its event number,
    when the stream starts one), then the task's events until one ends the stream."""

    hub: EventHub
    subscription: Subscription | None
    """`None`: the task had ended or asked for input at the snapshot; nothing follows it."""
    first: tuple[int, str] | None
    heartbeat_seconds: float
    release: Callable[[], None] = lambda: None
    """Gives back the caller's stream slot (`EventHub.reserve`); the edge calls it when the
    stream's response ends, however it ends."""
    generations: bool = False
    """Each event carries the generation its change gave the task (the A2A 1.1 draft)."""

    def close(self) -> None:
        """Release the caller's slot and the subscription (idempotent; for a stream never
        iterated, or cut off)."""
        self.release()
        if self.subscription is not None:
            self.hub.unsubscribe(self.subscription)

    async def events(self) -> AsyncGenerator[tuple[int, str] | None, None]:
        """`(number, StreamResponse JSON)` per event, `None` for a heartbeat; ends after an
        event that ends the stream, or when the subscription ends (dropped, server stopping)."""
        subscription = self.subscription
        _metrics.STREAMS_OPEN.inc()
        try:
            if self.first is not None:
                yield self.first
            if subscription is None:
                return
            while True:
                try:
                    event = await subscription.next(self.heartbeat_seconds)
                except _End as end:
                    _log.info("stream of task %s ended: %s", subscription.task_id, end)
                    return
                if event is None:
                    yield None
                    continue
                if event.created_ts:
                    _metrics.STREAM_DELAY.observe(max(0.0, time.time() - event.created_ts / 1e6))
                body = with_generation(event.body, event.seq) if self.generations else event.body
                yield event.seq, body
                if event.closes_stream:
                    return
        finally:
            _metrics.STREAMS_OPEN.dec()
            if subscription is not None:
                self.hub.unsubscribe(subscription)
