"""What every request leaves behind: a request id for its log lines (the client's
`X-Request-Id` when it is a sane one, else a new one), echoed in the response; a span (its parent
from the gateway's `traceparent`); the request metrics; and one access log line with its status
and latency."""

from __future__ import annotations

import contextvars
import re
import time
from collections.abc import Awaitable, Callable

import attrs
from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from looping_core import _metrics, _tracing
from looping_core._logs import bind, current
from looping_core._random import uuid4

__all__ = ["REQUEST_ID_HEADER", "AccessLogger", "Observed", "answered", "observed", "request_ids"]

REQUEST_ID_HEADER = "X-Request-Id"
_SANE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_OBSERVED: contextvars.ContextVar[Observed | None] = contextvars.ContextVar(
    "looping_observed", default=None
)
"""The A2A call this request is (set by the middleware; the handler runs in its context)."""
_UNOBSERVED_PATHS = frozenset({"/healthz", "/readyz"})
"""Probes, every second or so: no span or metric for them (the access log still has them)."""


@attrs.define
class Observed:
    """What the handler learns about an A2A call, for its span and metrics."""

    binding: str | None = None
    """`jsonrpc` or `rest`; `None` for what is not an A2A call (the card, the key set)."""
    method: str = "unknown"
    outcome: str = "ok"
    """`ok`, or the reason of the error answered (`task_not_found`...)."""
    answered_at: float | None = None
    """When a stream's first bytes went out (its duration is up to there)."""


def observed(binding: str) -> Observed:
    """The record of this A2A call (a stand-in when the middleware is not installed)."""
    record = _OBSERVED.get() or Observed()
    record.binding = binding
    return record


def answered() -> None:
    """A stream's first bytes went out: its call's duration ends here."""
    record = _OBSERVED.get()
    if record is not None:
        record.answered_at = time.perf_counter()


@web.middleware
async def request_ids(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    given = request.headers.get(REQUEST_ID_HEADER, "")
    request_id = given if _SANE.match(given) else uuid4().hex
    bind(request_id=request_id, tenant=None, subject=None, task_id=None)
    try:
        if request.path in _UNOBSERVED_PATHS:
            response = await handler(request)
        else:
            response = await _observe(request, handler)
    except web.HTTPException as exc:
        exc.headers[REQUEST_ID_HEADER] = request_id
        raise
    if not response.prepared:
        response.headers[REQUEST_ID_HEADER] = request_id
    return response


async def _observe(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    record = Observed()
    _OBSERVED.set(record)
    started = time.perf_counter()
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else "unmatched"
    with _tracing.span(f"{request.method} {route}", kind="server", carrier=request.headers) as span:
        response = await handler(request)
        if span.recording:
            facts = current()
            span.set(
                http__request__method=request.method,
                http__route=route,
                http__response__status_code=response.status,
                looping__request_id=facts.get("request_id"),
                a2a__tenant=facts.get("tenant"),
                a2a__task_id=facts.get("task_id"),
            )
            if record.binding is not None:
                span.rename(f"a2a {record.method}")
                span.set(a2a__method=record.method, a2a__binding=record.binding)
                if record.outcome != "ok":
                    span.fail(record.outcome)
        if record.binding is not None:
            ended = record.answered_at or time.perf_counter()
            binding, method = record.binding, record.method
            _metrics.REQUESTS.inc(binding=binding, method=method, outcome=record.outcome)
            _metrics.REQUEST_SECONDS.observe(ended - started, binding=binding, method=method)
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
