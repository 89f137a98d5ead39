"""The edge's HTTP handlers: JWKS, the signed stub card, and the JSON-RPC endpoint.

The path of one call (`POST /a2a`): content type → body size → JSON-RPC envelope → method →
`A2A-Version` → `params.tenant` (required; there is no default agent) → gateway token, verified
for that tenant → only then is the tenant looked up and the method's params parsed and handled.
Every failure is a JSON-RPC error from the error table; nothing a client sends produces a 500 or a
traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import email.utils
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
from aiohttp import web

from looping_core import _metrics, _tracing, store
from looping_core._logs import bind
from looping_core.a2a import (
    PushSigner,
    RpcError,
    SigningKey,
    TokenPolicy,
    TokenRejected,
    Unavailable,
    load_signing_key,
    verify_gateway_token,
)
from looping_core.a2a._card import SignedCard, build_stub_card, build_tenant_card, sign_card
from looping_core.a2a._errors import (
    InternalError,
    InvalidParams,
    PayloadTooLarge,
    RequestTimeout,
    TaskNotCancelable,
    TaskNotFound,
    Unauthenticated,
    UnsupportedMediaType,
    UnsupportedOperation,
    VersionNotSupported,
    error_object,
    spec_of,
)
from looping_core.a2a._grammar import id_problem
from looping_core.a2a._jose import read_unverified
from looping_core.a2a._jsonrpc import (
    EnvelopeError,
    Method,
    RpcCall,
    RpcId,
    method_not_found,
    parse_envelope,
    parse_params,
    response,
)
from looping_core.a2a._keys import jwks_document
from looping_core.config import Config
from looping_core.contract import Identity
from looping_core.server._requests import Observed, answered, observed
from looping_core.server._services import SERVICES, Services
from looping_core.server._streams import TaskStream

__all__ = [
    "JSON_TYPES",
    "CallContext",
    "ClientGone",
    "Edge",
    "answer_or_refuse",
    "authenticate",
    "build_edge",
    "call_method",
    "check_version",
    "error_headers",
    "handle_agent_card",
    "handle_jwks",
    "handle_rpc",
    "push_signer",
    "read_body",
    "rpc_error_of",
    "unavailable",
    "write_stream",
]

_log = logging.getLogger("looping_core.server")

JWKS_PATH = "/.well-known/jwks.json"
CARD_PATH = "/.well-known/agent-card.json"
CACHE_CONTROL = "public, max-age=300"
SUPPORTED_MAJOR = "1"
JSON_TYPES = ("application/json", "application/a2a+json")
RETRY_AFTER_SECONDS = 2
"""What `Retry-After` says while the store is out of reach: about how long a restart takes."""


@attrs.frozen
class Edge:
    """What the edge serves and checks, built once at startup from the config and the key."""

    config: Config
    signing_key: SigningKey
    jwks_body: bytes
    stub: SignedCard
    tenant_cards: Mapping[str, SignedCard]
    policy: TokenPolicy
    """Tokens for the JSON-RPC binding: their `aud` is its endpoint."""
    rest_policy: TokenPolicy
    """Tokens for the HTTP+JSON binding: their `aud` is its URL (a token is for one binding)."""
    modified: datetime.datetime = attrs.field(
        factory=lambda: datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    )
    """When what the edge serves last changed: the config file's time (the same for every
    worker), for `Last-Modified`."""

    @property
    def jwks_etag(self) -> str:
        return '"' + hashlib.sha256(self.jwks_body).hexdigest()[:32] + '"'


@attrs.frozen
class CallContext:
    """What a method handler gets besides its params: the services and the verified caller."""

    services: Services
    identity: Identity
    last_event_id: str | None = None
    """The `Last-Event-ID` header of a client resuming a stream."""


def _config_time(config: Config) -> datetime.datetime:
    """The config file's modification time (whole seconds, UTC), or now without a file."""
    try:
        stamp = Path(config.source).stat().st_mtime
    except OSError:
        return datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    return datetime.datetime.fromtimestamp(int(stamp), datetime.UTC)


def build_edge(
    config: Config, environ: Mapping[str, str] | None = None, today: datetime.date | None = None
) -> Edge:
    """Load the signing key and sign every card; raises `SigningKeyError` with a clear message."""
    key = load_signing_key(config.security.signing_key, environ)
    day = today or datetime.datetime.now(datetime.UTC).date()
    jwks_url = config.server.base_url + JWKS_PATH
    return Edge(
        modified=_config_time(config),
        config=config,
        signing_key=key,
        jwks_body=json.dumps(jwks_document(key, config.security.retired_keys, day)).encode(),
        stub=sign_card(build_stub_card(config), key, jwks_url),
        tenant_cards={
            tenant_id: sign_card(build_tenant_card(config, tenant_id, tenant), key, jwks_url)
            for tenant_id, tenant in config.tenants.items()
        },
        policy=TokenPolicy(
            endpoint=config.server.endpoint_url,
            gateway_origins=config.security.gateway_origins,
            leeway_seconds=config.security.token_leeway_seconds,
            max_lifetime_seconds=config.security.max_token_lifetime_seconds,
        ),
        rest_policy=TokenPolicy(
            endpoint=config.server.rest_url,
            gateway_origins=config.security.gateway_origins,
            leeway_seconds=config.security.token_leeway_seconds,
            max_lifetime_seconds=config.security.max_token_lifetime_seconds,
        ),
    )


def push_signer(config: Config, key: SigningKey) -> PushSigner:
    """What signs this agent's pushes: its key, its key set's URL, its origin as issuer."""
    return PushSigner(
        key=key, jwks_url=config.server.base_url + JWKS_PATH, issuer=config.server.base_url
    )


async def handle_jwks(request: web.Request) -> web.Response:
    edge = request.app[SERVICES].edge
    return _cached(request, edge.jwks_body, edge.jwks_etag, edge.modified)


async def handle_agent_card(request: web.Request) -> web.Response:
    edge = request.app[SERVICES].edge
    return _cached(request, edge.stub.body, edge.stub.etag, edge.modified)


def _cached(
    request: web.Request, body: bytes, etag: str, modified: datetime.datetime
) -> web.Response:
    """`body` with its validators (`ETag`, `Last-Modified`); 304 when the client's copy is
    current (`If-None-Match` decides when sent, else `If-Modified-Since`)."""
    headers = {
        "ETag": etag,
        "Last-Modified": email.utils.format_datetime(modified, usegmt=True),
        "Cache-Control": CACHE_CONTROL,
    }
    matches = request.headers.get("If-None-Match")
    if matches is not None:
        if etag in _etags(matches):
            return web.Response(status=304, headers=headers)
    elif _not_modified_since(request.headers.get("If-Modified-Since"), modified):
        return web.Response(status=304, headers=headers)
    return web.Response(body=body, content_type="application/json", headers=headers)


def _not_modified_since(header: str | None, modified: datetime.datetime) -> bool:
    if not header:
        return False
    try:
        since = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return False  # an unreadable date is ignored, as RFC 9110 says
    if since.tzinfo is None:
        return False
    return modified <= since


def _etags(header: str) -> set[str]:
    tags = {tag.strip().removeprefix("W/") for tag in header.split(",")}
    return tags | ({"*"} if "*" in tags else set())


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


async def answer_or_refuse(
    request: web.Request,
    record: Observed,
    work: Callable[[], Awaitable[web.StreamResponse]],
    refuse: Callable[[RpcError], web.StreamResponse],
) -> web.StreamResponse:
    """The one ladder from what went wrong to what a client of either binding gets: a protocol
    error as itself, a store's refusal as its protocol error, an outage as UNAVAILABLE, a
    client gone as nothing, and anything else as an internal error (logged, never shown)."""
    try:
        return await work()
    except RpcError as exc:
        return refuse(exc)
    except store.StoreRefusal as exc:
        return refuse(rpc_error_of(exc))
    except store.StoreUnavailable:
        return refuse(unavailable())
    except ClientGone:
        _log.info("client %s disconnected while sending its request", request.remote)
        record.outcome = "client_gone"
        return web.Response(status=400)  # nobody reads it
    except Exception:
        _log.exception("internal error answering %s", request.path)
        return refuse(InternalError())


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
                if not await _written(answer, data, streaming.write_timeout_seconds):
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


async def _written(answer: web.StreamResponse, data: bytes, timeout: float) -> bool:
    """Write `data`; `False` when the client took none of it within `timeout` (its socket
    buffers full: it stopped reading)."""
    try:
        async with asyncio.timeout(timeout):
            await answer.write(data)
    except TimeoutError:
        return False
    return True


TOKEN_EXPIRES: web.RequestKey[float] = web.RequestKey("looping_token_expires", float)
"""When the request's verified gateway token expires, plus the leeway (epoch seconds)."""


def _token_deadline(request: web.Request) -> float | None:
    """The event loop's time at which the request's token runs out (`None`: no deadline)."""
    expires: float | None = request.get(TOKEN_EXPIRES)
    if expires is None:
        return None
    loop = asyncio.get_running_loop()
    return loop.time() + (expires - time.time())


class ClientGone(Exception):
    """The client closed the connection before its body arrived: a client event, no error."""


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
    """Parse the call's params into the method's type and run its handler (both bindings)."""
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
            identity = await verify_gateway_token(
                token.strip(),
                tenant=tenant if tenant is not None else _claimed_tenant(token.strip()),
                policy=policy,
                jwks=services.jwks,
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
    bind(tenant=identity.tenant, subject=identity.subject)  # this request's log lines say so
    expires = read_unverified(token.strip())[1].get("exp")  # verified just now
    if isinstance(expires, int | float) and not isinstance(expires, bool):
        request[TOKEN_EXPIRES] = float(expires) + policy.leeway_seconds
    return identity


def _claimed_tenant(token: str) -> str:
    """The tenant a token claims, unverified (the verification that follows checks it)."""
    try:
        _, claims = read_unverified(token)
    except ValueError:
        return ""  # malformed: the verification names it
    tenant = claims.get("tenant")
    return tenant if isinstance(tenant, str) else ""


_STORE_REFUSALS: Mapping[type[store.StoreRefusal], Callable[[Any], RpcError]] = {
    store.PushConfigNotFound: lambda e: TaskNotFound(
        "Push notification config not found", metadata={"taskId": e.task_id}
    ),
    store.TaskNotFound: lambda e: TaskNotFound(metadata={"taskId": e.task_id}),
    store.TaskNotCancelable: lambda e: TaskNotCancelable(metadata={"taskId": e.task_id}),
    store.TurnRefused: lambda e: UnsupportedOperation(str(e)),
    store.ContextMismatch: lambda e: InvalidParams(
        "params.message.contextId does not match the task's context",
        violations=[("params.message.contextId", "does not match the task's contextId")],
    ),
    store.InvalidPageToken: lambda e: InvalidParams(
        "params.pageToken is not a token this server issued",
        violations=[("params.pageToken", "not a valid page token")],
    ),
}
"""What the store refuses, as the client hears it (the store knows no wire paths or codes)."""


def unavailable() -> Unavailable:
    """What a caller hears while the store is out of reach: retriable (HTTP 503, `Retry-After`),
    logged once per outage by the store rather than once per request."""
    return Unavailable(
        "The agent's store is unavailable for the moment; try again shortly",
        metadata={"retryAfterSeconds": str(RETRY_AFTER_SECONDS)},
    )


def rpc_error_of(refusal: store.StoreRefusal) -> RpcError:
    """The JSON-RPC error for a store refusal: the most specific row of `_STORE_REFUSALS`."""
    for cls in type(refusal).__mro__:
        if cls in _STORE_REFUSALS:
            return _STORE_REFUSALS[cls](refusal)
    return InternalError()


def _json_response(document: Mapping[str, Any], status: int = 200, **headers: str) -> web.Response:
    return web.Response(
        body=json.dumps(document).encode(),
        status=status,
        content_type="application/json",
        headers=headers or None,
    )


def error_headers(error: RpcError) -> dict[str, str]:
    """HTTP headers an error needs in either binding: the bearer challenge of a refused token,
    and closing a connection whose body came too slowly."""
    headers = {}
    if isinstance(error, Unauthenticated):
        check = error.metadata.get("check", "token-missing")
        challenge = 'Bearer realm="a2a"'
        if check != "token-missing":
            challenge += f', error="invalid_token", error_description="{check}"'
        headers["WWW-Authenticate"] = challenge
    if isinstance(error, RequestTimeout):
        headers["Connection"] = "close"  # the rest of the body is not worth waiting for
    if isinstance(error, Unavailable):
        headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return headers


def outcome_of(error: RpcError) -> str:
    """The error's reason as a metric label: `task_not_found`."""
    return spec_of(error).reason.lower()


def _error_response(error: RpcError, request_id: RpcId, record: Observed) -> web.Response:
    record.outcome = outcome_of(error)
    document = response(request_id, error=error_object(error))
    return _json_response(document, status=spec_of(error).http_status, **error_headers(error))
