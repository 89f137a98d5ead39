"""The JSON-RPC binding (`POST /a2a`): its wire form in and out of the shared call path
(`_call_path`), and reading a request body within its limits (the HTTP+JSON binding's too).

The path of one call: content type → body size → JSON-RPC envelope → method → gateway token,
verified for `params.tenant` → `A2A-Version` → `params.tenant` (required; there is no default
agent) → only then is the tenant looked up and the method's params parsed and handled. Every
failure is a JSON-RPC error from the error table; nothing a client sends produces a 500 or a
traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from looping_core.a2a import RpcError, TokenPolicy
from looping_core.a2a.internal import (
    EnvelopeError,
    Method,
    PayloadTooLarge,
    RequestTimeout,
    RpcCall,
    RpcId,
    UnsupportedMediaType,
    error_object,
    method_not_found,
    parse_envelope,
    response,
    spec_of,
)
from looping_core.contract import Identity
from looping_core.server._answers import wire_result
from looping_core.server._call_path import (
    authenticate,
    call_method,
    check_served,
    check_version,
    no_tenant,
)
from looping_core.server._refusals import ClientGone, answer_or_refuse, error_headers, outcome_of
from looping_core.server._requests import Observed, observed
from looping_core.server._services import SERVICES, Services
from looping_core.server._sse import TOKEN_EXPIRES, write_stream
from looping_core.server._streams import TaskStream

__all__ = ["JSON_TYPES", "authenticate_request", "handle_rpc", "read_body"]

_log = logging.getLogger("looping_core.server")

JSON_TYPES = ("application/json", "application/a2a+json")


async def handle_rpc(request: web.Request) -> web.StreamResponse:
    record = observed("jsonrpc")
    request_id: RpcId = None

    async def work() -> web.StreamResponse:
        nonlocal request_id
        services = request.app[SERVICES]
        if request.content_type not in JSON_TYPES:
            raise UnsupportedMediaType()
        try:
            call, method = parse_envelope(await read_body(request, services), services.methods)
        except EnvelopeError as exc:  # its own id: the one the envelope had, if any
            return _error_response(exc.error, exc.request_id, record)
        request_id = call.id
        if method is not None:  # a name from the table: a client cannot invent label values
            record.method = call.method
        result = await _dispatch(request, services, call, method)
        if isinstance(result, TaskStream):
            envelope = '{"jsonrpc":"2.0","id":' + json.dumps(request_id) + ',"result":'
            return await write_stream(
                request,
                result,
                lambda body: f"{envelope}{body}}}",
                lambda error: json.dumps(response(request_id, error=error_object(error))),
            )
        return _json_response(response(request_id, result=wire_result(result)))

    return await answer_or_refuse(
        request, record, work, lambda error: _error_response(error, request_id, record)
    )


async def read_body(request: web.Request, services: Services) -> bytes:
    """The request body, within `[server] max_body_bytes` and `body_timeout_seconds`."""
    server = services.edge.config.server
    try:
        if request.content.is_eof():  # the usual case: the whole body came with the headers
            return await request.read()
        async with asyncio.timeout(server.body_timeout_seconds):
            return await request.read()
    except TimeoutError:
        _log.info("client %s sent its request body too slowly; refused", request.remote)
        raise RequestTimeout(
            f"The request body did not arrive within {server.body_timeout_seconds:g} seconds"
        ) from None
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge(f"Request body larger than {server.max_body_bytes} bytes") from None
    except ConnectionError:
        raise ClientGone() from None


async def _dispatch(
    request: web.Request, services: Services, call: RpcCall, method: Method | None
) -> Any:
    """Authenticate first (§7.4: nothing of the request is looked at before the token is
    verified, beyond the envelope), then the version, the tenant, the method and its params."""
    edge = services.edge
    given = call.params.get("tenant")
    tenant = given if isinstance(given, str) and given else None
    identity = await authenticate_request(request, services, tenant, edge.policies["jsonrpc"])
    version = check_version(
        request.headers.get("A2A-Version") or request.query.get("A2A-Version"),
        draft_1_1=edge.config.server.a2a_1_1_draft,
    )
    if tenant is None:
        raise no_tenant("params.tenant")
    if method is None:
        raise method_not_found(call.method)
    check_served(services, tenant, "params.tenant")
    return await call_method(
        services, identity, call, method,
        last_event_id=request.headers.get("Last-Event-ID"), version=version,
    )  # fmt: skip


async def authenticate_request(
    request: web.Request, services: Services, tenant: str | None, policy: TokenPolicy
) -> Identity:
    """`authenticate` with what an HTTP request carries; the token's end is kept on the
    request, for a stream it opens."""
    caller = await authenticate(
        request.headers.get("Authorization"),
        peer=request.remote,
        services=services,
        tenant=tenant,
        policy=policy,
    )
    request[TOKEN_EXPIRES] = caller.expires
    return caller.identity


def _json_response(document: Mapping[str, Any], status: int = 200, **headers: str) -> web.Response:
    return web.Response(
        body=json.dumps(document).encode(),
        status=status,
        content_type="application/json",
        headers=headers or None,
    )


def _error_response(error: RpcError, request_id: RpcId, record: Observed) -> web.Response:
    record.outcome = outcome_of(error)
    document = response(request_id, error=error_object(error))
    return _json_response(document, status=spec_of(error).http_status, **error_headers(error))
