"""Connections to MCP servers, on the official SDK: opened on first use, reused, opened again
after the server broke (a bounded number of times), closed when the server stops.

The SDK's streams belong to the task that opened them, so each connection is held open by a
task of its own, which closes it when told to (or when the loop cancels it at shutdown).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import httpx2  # the SDK's HTTP client (a dependency of `mcp` 2): headers and timeouts are ours
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from looping_core.contract import ToolError
from looping_core.mcp._config import McpServerConfig, resolved, shown, without_secrets
from looping_core.mcp._stdio import stdio_streams

__all__ = ["Connection", "Connections", "open_session"]

_log = logging.getLogger("looping_core.mcp")

RESTART_WINDOW_SECONDS = 600.0
CALL_ID_META = "looping/toolCallId"
"""The `_meta` key that carries the model's call id with each call (an idempotency key)."""

_BROKEN = (
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
    ConnectionError,
    httpx2.TransportError,
)


class _UrlsWithoutSecrets(logging.Filter):
    """The SDK's HTTP client logs every request's whole URL at INFO, user info and query (an
    `?api_key=`) included: above DEBUG, those are left out of the record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.DEBUG and isinstance(record.args, tuple):
            record.args = tuple(
                without_secrets(str(arg)) if isinstance(arg, httpx2.URL) else arg
                for arg in record.args
            )
        return True


_URLS_WITHOUT_SECRETS = _UrlsWithoutSecrets()


@contextlib.asynccontextmanager
async def open_session(
    name: str, server: McpServerConfig, environ: Mapping[str, str]
) -> AsyncIterator[ClientSession]:
    """A session with `server`, initialized; closed (its process group ended) on exit."""
    async with contextlib.AsyncExitStack() as stack:
        if server.command is not None:
            read, write = await stack.enter_async_context(stdio_streams(name, server, environ))
        else:
            assert server.url is not None  # checked with the config
            logging.getLogger("httpx2").addFilter(_URLS_WITHOUT_SECRETS)  # once: a set
            timeout = httpx2.Timeout(
                server.timeout_seconds, read=max(300.0, server.timeout_seconds)
            )
            client = await stack.enter_async_context(
                httpx2.AsyncClient(headers=resolved(server.headers, environ), timeout=timeout)
            )
            read, write = await stack.enter_async_context(
                streamable_http_client(server.url, http_client=client)
            )
        session = await stack.enter_async_context(ClientSession(read, write))
        await session.initialize()
        yield session


class Connection:
    """One session with one server, for every call that shares it."""

    def __init__(self, name: str, server: McpServerConfig, environ: Mapping[str, str]) -> None:
        self.name = name
        self._server = server
        self._environ = environ
        self._session: ClientSession | None = None
        self._owner: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self._opening = asyncio.Lock()
        self._restarts: collections.deque[float] = collections.deque()
        self._opened_before = False
        self._closed = False
        self.in_flight = 0
        """Calls holding this connection now (counted by `Connections.call`): one with any is
        never closed to make room for another caller's."""

    async def call(self, tool: str, arguments: Mapping[str, Any], call_id: str | None) -> Any:
        """Call `tool`; its `CallToolResult`. What the model should hear about a server that
        cannot answer is a `ToolError`; a call canceled (the turn was) cancels the request."""
        session = await self._ready()
        meta = {CALL_ID_META: call_id} if call_id else None
        try:
            async with asyncio.timeout(self._server.timeout_seconds):
                return await session.call_tool(tool, dict(arguments), meta=meta)  # type: ignore[arg-type]
        except TimeoutError:
            raise ToolError(
                f"the MCP server did not answer within {self._server.timeout_seconds:g} s"
            ) from None
        except MCPError as exc:
            if _connection_lost(exc):
                await self._broke(session, exc)
                raise ToolError("the MCP server's connection broke during the call") from None
            raise ToolError(f"the MCP server refused the call: {exc.error.message}") from None
        except _BROKEN as exc:
            await self._broke(session, exc)
            raise ToolError("the MCP server's connection broke during the call") from None

    async def _ready(self) -> ClientSession:
        async with self._opening:
            if self._closed:
                raise ToolError("the MCP server's connection is closed")
            if self._session is not None and self._owner is not None and not self._owner.done():
                return self._session
            if self._opened_before:
                self._count_restart()
            self._opened_before = True
            return await self._open()

    def _count_restart(self) -> None:
        now = time.monotonic()
        while self._restarts and now - self._restarts[0] > RESTART_WINDOW_SECONDS:
            self._restarts.popleft()
        if len(self._restarts) >= self._server.max_restarts:
            raise ToolError(
                f"the MCP server broke {len(self._restarts) + 1} times in ten minutes; it is "
                "not connected again until the agent restarts"
            )
        self._restarts.append(now)
        _log.warning("MCP server %s: connecting again after its connection broke", shown(self.name))

    async def _open(self) -> ClientSession:
        opened: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
        self._closing = asyncio.Event()
        self._owner = asyncio.create_task(self._hold(opened), name=f"mcp server {self.name}")
        within = self._server.connect_timeout_seconds
        try:
            async with asyncio.timeout(within):
                self._session = await asyncio.shield(opened)
        except TimeoutError:
            self._closing.set()
            raise ToolError(f"the MCP server did not connect within {within:g} s") from None
        except Exception as exc:
            _log.warning("MCP server %s could not be connected: %s", shown(self.name), exc)
            raise ToolError("the MCP server could not be connected") from None
        return self._session

    async def _hold(self, opened: asyncio.Future[ClientSession]) -> None:
        try:
            async with open_session(self.name, self._server, self._environ) as session:
                opened.set_result(session)
                await self._closing.wait()
        except BaseException as exc:
            if not opened.done():
                opened.set_exception(exc if isinstance(exc, Exception) else RuntimeError(exc))
            if not isinstance(exc, Exception):
                raise
            _log.debug("MCP server %s: its connection ended: %s", shown(self.name), exc)

    async def _broke(self, session: ClientSession, exc: BaseException) -> None:
        """Drop the session a call found broken, unless another call already replaced it."""
        async with self._opening:
            if self._session is not session:
                return
            _log.warning("MCP server %s: the connection broke: %s", shown(self.name), exc)
            await self._stop()

    async def _stop(self) -> None:
        self._session = None
        self._closing.set()
        owner, self._owner = self._owner, None
        if owner is not None and not owner.done():
            try:
                async with asyncio.timeout(5):
                    await asyncio.shield(owner)
            except TimeoutError:
                owner.cancel()
            except Exception:
                _log.debug("MCP server %s: closing raised", shown(self.name), exc_info=True)

    async def aclose(self) -> None:
        """Close the session (stop the server's process); later calls are refused."""
        async with self._opening:
            self._closed = True
            await self._stop()


def _connection_lost(exc: MCPError) -> bool:
    message = exc.error.message.lower()
    return "connection closed" in message or "connection lost" in message


class Connections:
    """The connections of one server: one shared, or one per caller (`per_caller`), the least
    recently used idle one closed past `max_caller_connections`. A connection with a call in
    flight is never closed to make room: while every one is busy, a new caller's connection
    opens beyond the limit, and the idle ones past it close as callers arrive."""

    def __init__(self, name: str, server: McpServerConfig, environ: Mapping[str, str]) -> None:
        self._name = name
        self._server = server
        self._environ = environ
        self._open: collections.OrderedDict[str, Connection] = collections.OrderedDict()
        self._closed = False

    async def call(
        self, caller: str, tool: str, arguments: Mapping[str, Any], call_id: str | None
    ) -> Any:
        """Call `tool` on `caller`'s connection (the shared one unless `per_caller`)."""
        if self._closed:
            raise ToolError("the MCP server's connections are closed (the agent is stopping)")
        key = caller if self._server.per_caller else ""
        connection = self._open.get(key)
        if connection is None:
            connection = Connection(self._name, self._server, self._environ)
            self._open[key] = connection
        self._open.move_to_end(key)
        connection.in_flight += 1  # held from here: never the one closed to make room
        try:
            await self._make_room()
            return await connection.call(tool, arguments, call_id)
        finally:
            connection.in_flight -= 1

    async def _make_room(self) -> None:
        over = len(self._open) - self._server.max_caller_connections
        if over <= 0:
            return
        idle = [key for key, each in self._open.items() if each.in_flight == 0][:over]
        closing = [self._open.pop(key) for key in idle]
        await asyncio.gather(*(connection.aclose() for connection in closing))

    async def aclose(self) -> None:
        self._closed = True
        connections = list(self._open.values())
        self._open.clear()
        await asyncio.gather(*(connection.aclose() for connection in connections))
