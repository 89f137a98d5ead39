"""Which request a log line belongs to: a request id for every request (the client's
`X-Request-Id` when it is a sane one, else a new one), echoed in the response; and the access
log, one line per request with its status and latency."""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from looping_core._logs import bind

__all__ = ["REQUEST_ID_HEADER", "AccessLogger", "request_ids"]

REQUEST_ID_HEADER = "X-Request-Id"
_SANE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


@web.middleware
async def request_ids(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    given = request.headers.get(REQUEST_ID_HEADER, "")
    request_id = given if _SANE.match(given) else uuid.uuid4().hex
    bind(request_id=request_id, tenant=None, subject=None, task_id=None)
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        exc.headers[REQUEST_ID_HEADER] = request_id
        raise
    if not response.prepared:
        response.headers[REQUEST_ID_HEADER] = request_id
    return response


class AccessLogger(AbstractAccessLogger):
    """`remote "METHOD path" status bytes latency`, with the same fields as `extra` (for JSON)."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        fields = {
            "remote": request.remote,
            "method": request.method,
            "path": request.path,
            "status": response.status,
            "bytes": response.body_length,
            "duration_ms": round(time * 1000, 2),
        }
        self.logger.info(
            '%s "%s %s" %d %d %.2fms',
            request.remote, request.method, request.path, response.status, response.body_length,
            time * 1000, extra=fields,
        )  # fmt: skip
