"""The HTTP+JSON binding (A2A 1.0 §11): the same methods as JSON-RPC, as routes.

`{rest_path}/{tenant}/message:send` and the rest of the table below. A route names a method of
the one method table and says where its params come from (the body, the path, the query); the
params are then parsed and handled exactly as a JSON-RPC call's. The path of one request:
content type (for a body) → body size → the tenant (the first path segment) → the gateway token,
verified for that tenant with this binding's URL as its audience → `A2A-Version` → the route →
params → handler. Errors are `google.rpc.Status` bodies with the HTTP status of the one error
table; streams are server-sent events with a bare `StreamResponse` per event.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote

import attrs
from aiohttp import web

from looping_core.a2a import RpcError
from looping_core.a2a.internal import (
    InvalidParams,
    RpcCall,
    UnsupportedMediaType,
    method_not_found,
    parse_body,
    rest_error,
)
from looping_core.server._answers import wire_result
from looping_core.server._call_path import call_method, check_served, check_version
from looping_core.server._calls import JSON_TYPES, authenticate_request, read_body
from looping_core.server._refusals import answer_or_refuse, error_headers, outcome_of
from looping_core.server._requests import Observed, observed
from looping_core.server._services import SERVICES
from looping_core.server._sse import write_stream
from looping_core.server._streams import TaskStream

__all__ = ["ROUTES", "handle_rest"]

_log = logging.getLogger("looping_core.server")

A2A_JSON = "application/a2a+json"
_TENANT = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


def _integer(value: str) -> int | str:
    return int(value) if re.fullmatch(r"-?\d{1,18}", value) else value  # else: named as wrong


def _boolean(value: str) -> bool | str:
    return {"true": True, "false": False}.get(value, value)


_QUERY: Mapping[str, Callable[[str], Any]] = {
    "historyLength": _integer,
    "pageSize": _integer,
    "pageToken": str,
    "contextId": str,
    "status": str,
    "statusTimestampAfter": str,
    "includeArtifacts": _boolean,
    "currentGeneration": str,  # the A2A 1.1 draft's (an int64: ProtoJSON reads its text)
}
"""Query parameters (§11.5) and how each becomes its JSON value; others are ignored."""


@attrs.frozen
class Route:
    """One route: the HTTP methods, the path after the tenant (named groups become params),
    the A2A method, and whether its params come from a JSON body or the query string."""

    verbs: frozenset[str]
    pattern: re.Pattern[str]
    method: str
    body: bool = False


def _route(verbs: str, path: str, method: str, *, body: bool = False) -> Route:
    pieces = re.split(r"\{(\w+)\}", path)  # literal, name, literal, ...
    regex = "".join(
        re.escape(piece) if index % 2 == 0 else f"(?P<{piece}>[^/]+?)"
        for index, piece in enumerate(pieces)
    )
    return Route(frozenset(verbs.split()), re.compile(f"^{regex}$"), method, body)


ROUTES: tuple[Route, ...] = (
    _route("POST", "/message:send", "SendMessage", body=True),
    _route("POST", "/message:stream", "SendStreamingMessage", body=True),
    _route("GET", "/tasks", "ListTasks"),
    _route("POST", "/tasks/{id}:cancel", "CancelTask", body=True),
    # §11.3.2 says POST, the proto's annotation GET: both are accepted.
    _route("GET POST", "/tasks/{id}:subscribe", "SubscribeToTask"),
    _route("GET", "/tasks/{id}", "GetTask"),
    _route(
        "POST", "/tasks/{taskId}/pushNotificationConfigs", "CreateTaskPushNotificationConfig",
        body=True,
    ),
    _route("GET", "/tasks/{taskId}/pushNotificationConfigs", "ListTaskPushNotificationConfigs"),
    _route(
        "GET", "/tasks/{taskId}/pushNotificationConfigs/{id}", "GetTaskPushNotificationConfig"
    ),
    _route(
        "DELETE", "/tasks/{taskId}/pushNotificationConfigs/{id}",
        "DeleteTaskPushNotificationConfig",
    ),
    _route("GET", "/extendedAgentCard", "GetExtendedAgentCard"),
)  # fmt: skip


async def handle_rest(request: web.Request) -> web.StreamResponse:
    """Every request under `[server] rest_path`."""
    record = observed("rest")
    return await answer_or_refuse(
        request, record, lambda: _answer(request, record), lambda error: _error(error, record)
    )


async def _answer(request: web.Request, record: Observed) -> web.StreamResponse:
    services = request.app[SERVICES]
    edge = services.edge
    body: dict[str, Any] = {}
    if request.method in ("POST", "PUT", "PATCH") and request.can_read_body:
        if request.content_type not in JSON_TYPES:
            raise UnsupportedMediaType(
                "Content-Type must be application/a2a+json or application/json"
            )
        raw = await read_body(request, services)
        body = parse_body(raw) if raw.strip() else {}
    # The path as sent (still percent-encoded), after `rest_path`: `/{tenant}/...`.
    tail = request.rel_url.raw_path[len(edge.config.server.rest_path) :]
    tenant, _, rest = tail.removeprefix("/").partition("/")
    named = bool(_TENANT.match(tenant))
    # Authenticate first (§7.4): before the token only the body's JSON and the path's first
    # segment are read, which needs no trust.
    identity = await authenticate_request(
        request, services, tenant if named else None, edge.policies["http+json"]
    )
    version = check_version(
        request.headers.get("A2A-Version") or request.query.get("A2A-Version"),
        draft_1_1=edge.config.server.a2a_1_1_draft,
    )
    if not named:
        raise InvalidParams(
            "The tenant goes first in the path: this endpoint serves several agents and has no "
            f"default ({edge.config.server.rest_path}/{{tenant}}/message:send)",
            violations=[("tenant", "required path segment missing")],
        )
    route, path_params = _match(request.method, "/" + rest)
    record.method = route.method
    check_served(services, tenant, "tenant")
    params: dict[str, Any] = dict(body) if route.body else _query(request)
    params.update(path_params)
    params["tenant"] = tenant  # the path's, never the body's (§11)
    call = RpcCall(id=None, method=route.method, params=params)
    result = await call_method(
        services, identity, call, services.methods[route.method],
        last_event_id=request.headers.get("Last-Event-ID"), version=version,
    )  # fmt: skip
    if isinstance(result, TaskStream):
        return await write_stream(
            request, result, lambda event: event, lambda error: json.dumps(rest_error(error)[1])
        )
    return web.Response(body=json.dumps(wire_result(result)).encode(), content_type=A2A_JSON)


def _query(request: web.Request) -> dict[str, Any]:
    return {name: _QUERY[name](value) for name, value in request.query.items() if name in _QUERY}


def _match(verb: str, path: str) -> tuple[Route, dict[str, str]]:
    """The route for `verb path` and its path params (percent-decoded)."""
    other_verbs = False
    for route in ROUTES:
        found = route.pattern.match(path)
        if found is None:
            continue
        if verb in route.verbs:
            return route, {name: unquote(value) for name, value in found.groupdict().items()}
        other_verbs = True
    hint = " (that path takes another HTTP method)" if other_verbs else ""
    raise method_not_found(f"{verb} {unquote(path)}{hint}")


def _error(error: RpcError, record: Observed) -> web.Response:
    record.outcome = outcome_of(error)
    status, body = rest_error(error)
    return web.Response(
        body=json.dumps(body).encode(),
        status=status,
        content_type="application/json",
        headers=error_headers(error) or None,
    )
