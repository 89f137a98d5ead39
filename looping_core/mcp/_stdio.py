"""The stdio transport to an MCP server, bounded: core's own, in place of the SDK's.

A stdio server is a third-party program, so what it writes is hostile input. This transport:

- reads its stdout as bytes and splits lines itself, refusing a line over `max_message_bytes`
  before it is held whole (the SDK decodes and joins text as it comes, which for a 64 MB line
  costs tens of seconds of CPU on the event loop);
- treats a line that is not UTF-8, or one over the cap, as a broken connection: the read stream
  ends, calls in flight fail at once with "connection closed", and the next call connects
  again within `max_restarts` (one WARNING names the server; the SDK left such a connection
  dead, each later call waiting out its timeout);
- counts lines that are not JSON-RPC messages (a server printing its logs to stdout) and skips
  them, with one WARNING for the first and none after, never a traceback;
- runs the server in a process group of its own and, when the connection closes, ends that
  whole group (SIGTERM, then SIGKILL after a grace) even when the server itself exited: a helper
  process the server started never outlives the connection.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import anyio.abc
import mcp_types  # the SDK's own message types (a dependency of `mcp` 2)
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage

from looping_core.mcp._config import McpServerConfig, resolved, shown

__all__ = ["stdio_streams"]

_log = logging.getLogger("looping_core.mcp")

STDIN_CLOSE_GRACE_SECONDS = 1.0
"""How long the server may take to exit by itself once its stdin is closed."""
TERMINATE_GRACE_SECONDS = 2.0
"""How long its process group may take to exit after SIGTERM, before SIGKILL."""
_POLL_SECONDS = 0.02
_READ_CHUNK = 65536


class _ReaderFailure(Exception):
    """What the server wrote cannot be read: the connection is over."""


@contextlib.asynccontextmanager
async def stdio_streams(
    name: str, server: McpServerConfig, environ: Mapping[str, str]
) -> AsyncIterator[tuple[Any, Any]]:
    """Start `server`'s command and yield the (read, write) streams a `ClientSession` takes;
    on exit, stop the server and everything it started."""
    assert server.command is not None  # checked with the config
    command = server.command
    if os.sep in command and not os.path.isabs(command):
        command = os.path.join(server.cwd, command)  # a path: from its folder, not from ours
    process = await anyio.open_process(
        [command, *server.args],
        env=get_default_environment() | resolved(server.env, environ),
        cwd=server.cwd,
        stderr=sys.stderr,
        start_new_session=True,  # a process group of its own, ended whole on close
    )
    read_send, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_receive = anyio.create_memory_object_stream[SessionMessage](0)
    reader = _Reader(name, server.max_message_bytes)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(reader.run, process, read_send)
            tasks.start_soon(_write, process, write_receive, read_send)
            try:
                yield read_stream, write_stream
            finally:
                with anyio.CancelScope(shield=True):  # bounded: every wait below has a limit
                    read_stream.close()
                    write_stream.close()
                    await _stop(process)
                tasks.cancel_scope.cancel()
    finally:
        if reader.skipped:
            _log.info("MCP server %s: %d lines on stdout were not JSON-RPC", shown(name),
                      reader.skipped)  # fmt: skip


class _Reader:
    """Turns the server's stdout into messages; ends the read stream on a failure."""

    def __init__(self, name: str, limit: int) -> None:
        self._name = name
        self._limit = limit
        self.skipped = 0

    async def run(self, process: anyio.abc.Process, send: Any) -> None:
        assert process.stdout is not None
        buffer = bytearray()
        try:
            async with send:
                while True:
                    try:
                        chunk = await process.stdout.receive(_READ_CHUNK)
                    except (anyio.EndOfStream, anyio.ClosedResourceError, OSError):
                        return
                    searched = len(buffer)
                    buffer += chunk
                    while (end := buffer.find(b"\n", searched)) >= 0:
                        message = self._message(bytes(buffer[:end]))
                        del buffer[: end + 1]
                        searched = 0
                        if message is not None:
                            await send.send(message)
                    if len(buffer) > self._limit:
                        raise _ReaderFailure(f"it sent a message over {self._limit} bytes")
        except _ReaderFailure as failure:
            _log.warning(
                "MCP server %s: %s; its connection is closed, and opened again at the next call",
                shown(self._name),
                failure,
            )
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return  # the session is gone: the connection is closing

    def _message(self, line: bytes) -> SessionMessage | None:
        if len(line) > self._limit:
            raise _ReaderFailure(f"it sent a message over {self._limit} bytes")
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            raise _ReaderFailure("it wrote bytes that are not UTF-8 to stdout") from None
        if not text.strip():
            return None
        try:
            return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(text))
        except ValueError:  # pydantic's ValidationError: not a JSON-RPC message
            self.skipped += 1
            if self.skipped == 1:
                _log.warning(
                    "MCP server %s wrote a line to stdout that is not a JSON-RPC message; it "
                    "is skipped, as are any later ones (a server should log to stderr)",
                    shown(self._name),
                )
            return None


async def _write(process: anyio.abc.Process, receive: Any, read_send: Any) -> None:
    assert process.stdin is not None
    try:
        async with receive:
            async for message in receive:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await process.stdin.send((data + "\n").encode("utf-8"))
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        # The server stopped reading: end the read stream too, so calls fail at once.
        await read_send.aclose()


async def _stop(process: anyio.abc.Process) -> None:
    """Close stdin, give the server a moment, then end its whole process group."""
    assert process.stdin is not None
    assert process.stdout is not None
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()
    await _exited(lambda: process.returncode is not None, STDIN_CLOSE_GRACE_SECONDS)
    group = process.pid  # start_new_session: the server leads its own group
    if _signal_group(group, signal.SIGTERM) and not await _exited(
        lambda: not _signal_group(group, 0), TERMINATE_GRACE_SECONDS
    ):
        _signal_group(group, signal.SIGKILL)
    await _exited(lambda: process.returncode is not None, TERMINATE_GRACE_SECONDS)
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdout.aclose()
    with anyio.move_on_after(TERMINATE_GRACE_SECONDS), contextlib.suppress(OSError):
        await process.aclose()


def _signal_group(group: int, signal_number: int) -> bool:
    """Send a signal to a process group; whether any process was there to get it."""
    try:
        os.killpg(group, signal_number)
    except (ProcessLookupError, PermissionError):
        return False
    return True


async def _exited(done: Any, within: float) -> bool:
    deadline = anyio.current_time() + within
    while not done():
        if anyio.current_time() >= deadline:
            return False
        await anyio.sleep(_POLL_SECONDS)
    return True
