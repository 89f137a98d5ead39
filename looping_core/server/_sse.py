"""A task's events as server-sent events, for either binding: heartbeats, a client that stops
reading dropped, the stream ended when the caller's gateway token expires."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from aiohttp import web

from looping_core import _metrics
from looping_core.a2a import RpcError
from looping_core.a2a.internal import InternalError
from looping_core.server._refusals import unavailable
from looping_core.server._requests import answered
from looping_core.server._services import SERVICES
from looping_core.server._streams import TaskStream, written_within
from looping_core.store import internal as store

__all__ = ["TOKEN_EXPIRES", "write_stream"]

_log = logging.getLogger("looping_core.server")

TOKEN_EXPIRES: web.RequestKey[float] = web.RequestKey("looping_token_expires", float)
"""When the request's verified gateway token expires, plus the leeway (epoch seconds)."""


async def write_stream(
    request: web.Request,
    stream: TaskStream,
    frame: Callable[[str], str],
    failed: Callable[[RpcError], str],
) -> web.StreamResponse:
    """Server-sent events: each event's `StreamResponse` JSON in `frame` (a JSON-RPC response
    with the request's id, or bare for HTTP+JSON), its number as the SSE `id`; comments as
    heartbeats. Errors before this point were ordinary error bodies; the server failing after
    it is an `error` event holding `failed(error)`, and the stream ends (the client resumes it
    with `Last-Event-ID`)."""
    answer = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",  # proxies must not hold events back
        }
    )
    services = request.app[SERVICES]
    streaming = services.edge.config.streaming
    handler = asyncio.current_task()
    gone = False

    def client_gone() -> None:  # its connection closed: stop waiting for events for it
        nonlocal gone
        gone = True
        if handler is not None:
            handler.cancel()

    forget = services.guard.on_lost(request, client_gone)
    try:
        await answer.prepare(request)
        answered()
        async with (
            asyncio.timeout_at(_token_deadline(request)),
            contextlib.aclosing(stream.events()) as events,
        ):
            async for event in events:
                data = b": keep-alive\n\n"
                if event is not None:
                    data = f"id: {event[0]}\ndata: {frame(event[1])}\n\n".encode()
                if not await written_within(answer.write(data), streaming.write_timeout_seconds):
                    _log.info(
                        "stream client %s took no event for %g s; disconnected (dropped)",
                        request.remote, streaming.write_timeout_seconds,
                    )  # fmt: skip
                    _metrics.STREAM_DROPS.inc()
                    if request.transport is not None:
                        request.transport.abort()
                    return answer
    except asyncio.CancelledError:
        if not gone:
            raise  # the server is stopping
        if handler is not None:
            handler.uncancel()
        _log.info("stream client %s went away", request.remote)
        return answer
    except TimeoutError:  # its token expired: the client resumes with a new one
        _log.info("stream of %s ended: its gateway token expired", request.remote)
    except ConnectionError:  # aiohttp's ClientConnectionResetError is one
        _log.info("stream client %s went away", request.remote)
        return answer
    except store.StoreUnavailable:
        # The store logged the outage once; the client resumes with its Last-Event-ID.
        with contextlib.suppress(Exception):
            await answer.write(f"event: error\ndata: {failed(unavailable())}\n\n".encode())
    except Exception:
        _log.exception("stream of %s failed", request.path)
        with contextlib.suppress(Exception):
            await answer.write(f"event: error\ndata: {failed(InternalError())}\n\n".encode())
    finally:
        forget()
        stream.close()
    with contextlib.suppress(Exception):
        await answer.write_eof()
    return answer


def _token_deadline(request: web.Request) -> float | None:
    """The event loop's time at which the request's token runs out (`None`: no deadline)."""
    expires: float | None = request.get(TOKEN_EXPIRES)
    if expires is None:
        return None
    loop = asyncio.get_running_loop()
    return loop.time() + (expires - time.time())
