"""Connection limits aiohttp's server lacks: a deadline for request headers and a cap on open
connections per process, so slow or idle clients cannot hold the server's sockets forever.

`ConnectionGuard.protocol_factory` wraps aiohttp's protocol factory (`web.Server`): each
connection's protocol is proxied, counted, and timed from the moment it opens, and again from the
first byte of each later request on it, until aiohttp hands the request to the application (the
guard's middleware says so). A connection whose headers are not complete by then is closed; one
sweep, scheduled for the earliest deadline, finds them (no timer per request). One past
`max_connections` is answered `503` and closed before aiohttp sees it, unless it is a health
probe: beyond the cap, up to `PROBE_HEADROOM` connections are held until their first bytes say
what they ask, and `GET /healthz` or `/readyz` is let through (an orchestrator must see a full
server as busy, not dead); anything else gets the 503. Bodies have their own deadline in the
edge (`[server] body_timeout_seconds`), which reads them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import attrs
from aiohttp import web

__all__ = ["ConnectionGuard", "ConnectionLimits"]

_log = logging.getLogger("looping_core.server._connections")

_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n"
    b"Retry-After: 1\r\n\r\n"
)
_WARN_EVERY_SECONDS = 10.0
PROBE_HEADROOM = 8
"""Connections beyond `max_connections` held to see whether they are health probes."""
_PROBES = (b"GET /healthz ", b"GET /readyz ", b"GET /healthz?", b"GET /readyz?")
_PROBE_BYTES = max(len(p) for p in _PROBES)


@attrs.frozen
class ConnectionLimits:
    header_timeout: float
    max_connections: int


class ConnectionGuard:
    """Counts and times the connections of one server process."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self._connections: dict[asyncio.BaseProtocol, _GuardedConnection] = {}
        self._awaiting_headers: dict[_GuardedConnection, float] = {}
        """Connections whose request headers are incomplete, and their deadlines."""
        self._sweep: asyncio.TimerHandle | None = None
        self._refused = 0
        self._warned_at = -float("inf")
        self._probing = 0
        """Connections past the cap whose first bytes are awaited (health probes, maybe)."""

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    def protocol_factory(
        self, factory: Callable[[], asyncio.BaseProtocol]
    ) -> Callable[[], asyncio.Protocol]:
        """What `loop.create_server` takes: `factory`'s protocols, guarded."""
        return lambda: _GuardedConnection(self, factory)

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Marks the request's headers as complete while the application handles it."""
        connection = self._connections.get(request.protocol)
        if connection is not None:
            connection.entered_app()
        try:
            return await handler(request)
        finally:
            if connection is not None:
                connection.left_app()

    def _admit(self, connection: _GuardedConnection, inner: asyncio.BaseProtocol) -> None:
        self._connections[inner] = connection

    def _is_full(self) -> bool:
        if len(self._connections) < self.limits.max_connections:
            return False
        self._refused += 1
        now = time.monotonic()
        if now - self._warned_at >= _WARN_EVERY_SECONDS:
            _log.warning(
                "%d open connections (max_connections); refused %d new ones with 503",
                len(self._connections), self._refused,
            )  # fmt: skip
            self._warned_at, self._refused = now, 0
        return True

    def on_lost(self, request: web.BaseRequest, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback` when the request's connection closes (a stream's client went away:
        nothing else tells a handler that waits for events rather than writing); returns what
        forgets it (the connection may carry later requests)."""
        connection = self._connections.get(request.protocol)
        if connection is None:
            return lambda: None
        connection.lost_callbacks.append(callback)
        return lambda: _discard(connection.lost_callbacks, callback)

    def _may_probe(self) -> bool:
        return self._probing < PROBE_HEADROOM

    def _release(self, inner: asyncio.BaseProtocol) -> None:
        connection = self._connections.pop(inner, None)
        if connection is not None:
            self._awaiting_headers.pop(connection, None)

    def _await_headers(self, connection: _GuardedConnection) -> None:
        loop = asyncio.get_running_loop()
        self._awaiting_headers[connection] = loop.time() + self.limits.header_timeout
        if self._sweep is None:
            self._sweep = loop.call_later(self.limits.header_timeout, self._close_late)

    def _headers_arrived(self, connection: _GuardedConnection) -> None:
        self._awaiting_headers.pop(connection, None)

    def _close_late(self) -> None:
        """Close the connections past their header deadline; come back at the next one."""
        self._sweep = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        late = [c for c, deadline in self._awaiting_headers.items() if deadline <= now]
        for connection in late:
            del self._awaiting_headers[connection]
            connection.close_for_slowness()
        if self._awaiting_headers:
            earliest = min(self._awaiting_headers.values())
            self._sweep = loop.call_at(max(earliest, now + 0.01), self._close_late)


def _discard(callbacks: list[Callable[[], None]], callback: Callable[[], None]) -> None:
    if callback in callbacks:
        callbacks.remove(callback)


class _GuardedConnection(asyncio.Protocol):
    """A proxy for one aiohttp protocol: forwards every transport event, and tells the guard
    when it waits for request headers (from its first byte) and when they have arrived."""

    def __init__(self, guard: ConnectionGuard, factory: Callable[[], asyncio.BaseProtocol]):
        self._guard = guard
        self._factory = factory
        self._inner: Any = None
        self._transport: asyncio.Transport | None = None
        self._idle = False
        self._probe: bytes | None = None
        """Past the cap: the first bytes so far, until they say whether this is a probe."""
        self.lost_callbacks: list[Callable[[], None]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        if self._guard._is_full():
            if not self._guard._may_probe():
                self._refuse()
                return
            self._probe = b""
            self._guard._probing += 1
            self._guard._await_headers(self)  # a silent one is closed at the header deadline
            return
        self._open()

    def _open(self) -> None:
        assert self._transport is not None
        self._inner = self._factory()
        self._guard._admit(self, self._inner)
        self._inner.connection_made(self._transport)
        self._guard._await_headers(self)

    def _refuse(self) -> None:
        assert self._transport is not None
        self._transport.write(_BUSY)
        self._transport.close()

    def _end_probe(self) -> None:
        if self._probe is not None:
            self._probe = None
            self._guard._probing -= 1
            self._guard._headers_arrived(self)

    def _probed(self, data: bytes) -> None:
        """Past the cap: let a health probe in, refuse anything else, once the bytes say."""
        assert self._probe is not None
        seen = self._probe + data
        if any(seen.startswith(probe) for probe in _PROBES):
            self._end_probe()
            self._open()
            self._inner.data_received(seen)
        elif len(seen) >= _PROBE_BYTES or not any(p.startswith(seen) for p in _PROBES):
            self._end_probe()
            self._refuse()
        else:
            self._probe = seen

    def data_received(self, data: bytes) -> None:
        if self._probe is not None:
            self._probed(data)
            return
        if self._inner is None:
            return
        if self._idle:  # the first byte of the next request
            self._idle = False
            self._guard._await_headers(self)
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        self._end_probe()
        if self._inner is not None:
            self._guard._release(self._inner)
            self._inner.connection_lost(exc)
        callbacks, self.lost_callbacks = self.lost_callbacks, []
        for callback in callbacks:
            callback()

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def entered_app(self) -> None:
        self._guard._headers_arrived(self)

    def left_app(self) -> None:
        self._idle = True  # idle connections are aiohttp's keep-alive timeout's

    def close_for_slowness(self) -> None:
        if self._probe is not None:  # past the cap, and silent: it hears why
            self._end_probe()
            self._refuse()
            return
        if self._transport is not None:
            peer = self._transport.get_extra_info("peername")
            _log.info("closing connection from %s: no complete request headers in time", peer)
            self._transport.close()
