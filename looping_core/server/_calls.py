"""The JSON-RPC binding's call path (`POST /a2a`), and the steps the HTTP+JSON binding shares.

The path of one call: content type → body size → JSON-RPC envelope → method → `A2A-Version` →
`params.tenant` (required; there is no default agent) → gateway token, verified for that tenant
→ only then is the tenant looked up and the method's params parsed and handled. Every failure is
a JSON-RPC error from the error table; nothing a client sends produces a 500 or a traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import Any

import attrs
from aiohttp import web

from looping_core import _metrics, _tracing
from looping_core._logs import bind
from looping_core.a2a import RpcError, TokenPolicy, TokenRejected
from looping_core.a2a.internal import (
    EnvelopeError,
    InvalidParams,
    Method,
    PayloadTooLarge,
    RequestTimeout,
    RpcCall,
    RpcId,
    Unauthenticated,
    UnsupportedMediaType,
    VersionNotSupported,
    check_gateway_token,
    error_object,
    id_problem,
    method_not_found,
    parse_envelope,
    parse_params,
    response,
    spec_of,
)
from looping_core.contract import Identity
from looping_core.server._refusals import ClientGone, answer_or_refuse, error_headers, outcome_of
from looping_core.server._requests import Observed, observed
from looping_core.server._services import SERVICES, Services
from looping_core.server._sse import TOKEN_EXPIRES, write_stream
from looping_core.server._streams import TaskStream

__all__ = [
    "JSON_TYPES",
    "CallContext",
    "authenticate",
    "call_method",
    "check_version",
    "handle_rpc",
    "read_body",
]

_log = logging.getLogger("looping_core.server")

SUPPORTED_MAJOR = "1"
JSON_TYPES = ("application/json", "application/a2a+json")


@attrs.frozen
class CallContext:
    """What a method handler gets besides its params: the services and the verified caller."""

    services: Services
    identity: Identity
    last_event_id: str | None = None
    """The `Last-Event-ID` header of a client resuming a stream."""


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
        return _json_response(response(request_id, result=result))

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
    tenant = call.params.get("tenant")
    named = isinstance(tenant, str) and bool(tenant)
    identity = await authenticate(request, services, tenant if named else None, edge.policy)
    check_version(request)
    if not named:
        raise InvalidParams(
            "params.tenant is required: this endpoint serves several agents and has no default",
            violations=[("params.tenant", "required field missing")],
        )
    if method is None:
        raise method_not_found(call.method)
    if tenant not in edge.tenant_cards:
        raise InvalidParams(
            "params.tenant: no such agent here",
            violations=[("params.tenant", "not an agent served here")],
        )
    return await call_method(request, services, identity, call, method)


async def call_method(
    request: web.Request, services: Services, identity: Identity, call: RpcCall, method: Method
) -> Any:
    """Count the call against the caller's rates, parse its params into the method's type and
    run its handler (both bindings)."""
    services.limits.check_rate(identity)
    params = parse_params(call, method)
    task_id = _task_named(params)
    if task_id:
        bind(task_id=task_id)
    context = CallContext(
        services=services,
        identity=identity,
        last_event_id=request.headers.get("Last-Event-ID"),
    )
    return await method.handler(context, params)


def _task_named(params: Any) -> str | None:
    """The task a call is about, when its params name one (`id` is a task's only where there
    is no `taskId`: a push config's `id` is the config's)."""
    for name in ("task_id", "id"):
        value = getattr(params, name, None)
        if isinstance(value, str):
            return value if id_problem(value, required=True) is None else None
    return None


def check_version(request: web.Request) -> None:
    version = request.headers.get("A2A-Version") or request.query.get("A2A-Version") or "0.3"
    major, _, _ = version.strip().partition(".")
    if major != SUPPORTED_MAJOR:
        raise VersionNotSupported(
            f"A2A version '{version}' is not supported; this endpoint speaks 1.0 "
            "(send the header A2A-Version: 1.0)",
            metadata={"requestedVersion": version, "supportedVersions": "1.0"},
        )


async def authenticate(
    request: web.Request, services: Services, tenant: str | None, policy: TokenPolicy
) -> Identity:
    """The verified caller (`policy`: the binding's, whose URL is the token's audience).
    Without a `tenant` in the request, every check but the tenant's is made (against the tenant
    the token names), so the request is still refused or authenticated before anything else is
    answered."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        _log.warning("gateway token rejected: check=token-missing remote=%s", request.remote)
        _metrics.TOKEN_REFUSALS.inc(check="token-missing")
        raise Unauthenticated(
            "A gateway token is required (Authorization: Bearer <token>)",
            metadata={"check": "token-missing"},
        )
    try:
        # A refusal leaves the span as its exception: the check's name and reason, no token.
        with _tracing.span("verify gateway token"):
            verified = await check_gateway_token(
                token.strip(), tenant=tenant, policy=policy, jwks=services.jwks
            )
    except TokenRejected as exc:
        _metrics.TOKEN_REFUSALS.inc(check=exc.check)
        # Nothing of the request is trusted yet: the line says which check failed and who
        # asked, never a value the caller chose (a tenant, a key URL: they could forge lines
        # or fill the log). The reason is in the trace (the span's exception).
        _log.warning("gateway token rejected: check=%s remote=%s", exc.check, request.remote)
        raise Unauthenticated(
            f"Gateway token rejected: {exc.check}", metadata={"check": exc.check}
        ) from None
    identity = verified.identity
    bind(tenant=identity.tenant, subject=identity.subject)  # this request's log lines say so
    request[TOKEN_EXPIRES] = verified.expires + policy.leeway_seconds
    return identity


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
