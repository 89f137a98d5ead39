"""The gRPC binding (A2A 1.0 §10): `lf.a2a.v1.A2AService` on `[server] grpc_port`, beside the
HTTP edge, in every serving process (the `grpc` extra: grpcio).

One generic handler serves every method of the service from the one method table: the request
message is decoded into the params every binding parses, then the shared call path runs as for
JSON-RPC. The path of one call: the message (within `max_body_bytes`) → the gateway token from
the `authorization` metadata, verified for the request's `tenant` with the gRPC address as its
audience → `a2a-version` → the tenant → params → handler. Every refusal is a gRPC status with
`google.rpc.ErrorInfo` (and `BadRequest`) details; nothing a client sends is answered with a
traceback.

Streams (`SendStreamingMessage`, `SubscribeToTask`) send one `StreamResponse` per stored event.
gRPC has no per-message id, so the initial metadata says where the stream starts
(`looping-first-event-id`): the k-th message (from 0) is that event plus k. A client resumes with
the `last-event-id` metadata, as an SSE client does with the `Last-Event-ID` header.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import grpc
import grpc.aio
from aiohttp import web
from google.protobuf.descriptor import MethodDescriptor

from looping_core import _metrics, _tracing
from looping_core._logs import bind, current
from looping_core._random import uuid4
from looping_core.a2a import RpcError
from looping_core.a2a.internal import RpcCall, method_not_found
from looping_core.a2a.protobuf import SERVICE_NAME, service
from looping_core.config import Config
from looping_core.server._call_path import (
    DRAFT_VERSION,
    authenticate,
    call_method,
    check_served,
    check_version,
    no_tenant,
)
from looping_core.server._grpc_wire import (
    decode_request,
    encode_answer,
    encode_event,
    error_status,
    status_code_of,
)
from looping_core.server._listening import KEEPALIVE_TIMEOUT_SECONDS, SHUTDOWN_TIMEOUT_SECONDS
from looping_core.server._refusals import outcome_of, refusal_of
from looping_core.server._services import SERVICES, Services
from looping_core.server._streams import TaskStream, written_within

__all__ = ["FIRST_EVENT_ID", "LAST_EVENT_ID", "grpc_binding", "grpc_options"]

_log = logging.getLogger("looping_core.server")

FIRST_EVENT_ID = "looping-first-event-id"
"""A stream's initial metadata: the number of its first message's event."""
LAST_EVENT_ID = "last-event-id"
"""Request metadata: the last event a resuming client received."""
MAX_STREAMS_PER_CONNECTION = 100
"""Calls at once on one HTTP/2 connection (`SETTINGS_MAX_CONCURRENT_STREAMS`)."""
KEEPALIVE_PING_SECONDS = 60
"""A connection with calls open is pinged this often; one that does not answer within
`KEEPALIVE_ANSWER_SECONDS` is closed (a client gone without a word)."""
KEEPALIVE_ANSWER_SECONDS = 20


def grpc_options(config: Config, *, reuse_port: bool) -> list[tuple[str, int]]:
    """The server's limits, the HTTP edge's in gRPC's terms: the message size, the handshake
    deadline (the header deadline), idle connections. (The cap on calls at once is the
    server's `maximum_concurrent_rpcs`; grpcio's Python server does not enforce
    `grpc.max_allowed_incoming_connections`.)"""
    server = config.server
    return [
        ("grpc.max_receive_message_length", server.max_body_bytes),
        ("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION),
        ("grpc.server_handshake_timeout_ms", int(server.header_timeout_seconds * 1000)),
        ("grpc.max_connection_idle_ms", int(KEEPALIVE_TIMEOUT_SECONDS * 1000)),
        ("grpc.keepalive_time_ms", KEEPALIVE_PING_SECONDS * 1000),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_ANSWER_SECONDS * 1000),
        # Each process has the port to itself, except the workers of one server, which share
        # it (the kernel spreads connections over them, as for the HTTP edge).
        ("grpc.so_reuseport", 1 if reuse_port else 0),
    ]


def grpc_binding(
    config: Config, *, reuse_port: bool
) -> Callable[[web.Application], AsyncIterator[None]]:
    """The gRPC server for the app's lifetime (a cleanup context, after the services): it
    listens once the services are up and stops, its calls given the shutdown timeout, before
    they go."""

    async def binding(app: web.Application) -> AsyncIterator[None]:
        services = app[SERVICES]
        server = grpc.aio.server(
            options=grpc_options(config, reuse_port=reuse_port),
            # `[server] max_connections` bounds the calls at once (a stream is one): past it a
            # call is RESOURCE_EXHAUSTED before any handler runs.
            maximum_concurrent_rpcs=config.server.max_connections,
        )
        server.add_generic_rpc_handlers((_handler(services),))
        address = config.server.grpc_listen_address
        credentials = _tls(config)
        if credentials is None:
            server.add_insecure_port(address)
        else:
            server.add_secure_port(address, credentials)
        await server.start()
        _log.info(
            "serving gRPC on %s%s (pid %d)", address, " (TLS)" if credentials else "", os.getpid()
        )
        try:
            yield
        finally:
            if services.streams is not None:
                services.streams.end_streams("the server is stopping")
            await server.stop(SHUTDOWN_TIMEOUT_SECONDS)

    return binding


def _tls(config: Config) -> grpc.ServerCredentials | None:
    server = config.server
    if server.grpc_tls_certificate is None or server.grpc_tls_private_key is None:
        return None
    key = Path(server.grpc_tls_private_key).read_bytes()
    chain = Path(server.grpc_tls_certificate).read_bytes()
    return grpc.ssl_server_credentials([(key, chain)])


def _handler(services: Services) -> grpc.GenericRpcHandler:
    """Every method of `A2AService`, each answered through the method table (bytes in and
    out: the binding decodes, so a malformed message is the client's error, not INTERNAL)."""
    handlers: dict[str, grpc.RpcMethodHandler[bytes, bytes]] = {}
    for method in service().methods:
        if method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                functools.partial(_stream, services, method)
            )
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                functools.partial(_unary, services, method)
            )
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)


_access = logging.getLogger("looping_core.grpc.access")


@attrs.define
class _Call:
    """One call's record, for its span, its metrics and its access line."""

    method: str
    peer: str
    started: float = attrs.field(factory=time.perf_counter)
    error: RpcError | None = None

    @property
    def outcome(self) -> str:
        return "ok" if self.error is None else outcome_of(self.error)

    def done(self, access_log: bool) -> None:
        """Count it; with `[server] access_log`, one line: peer, method, status, latency."""
        seconds = time.perf_counter() - self.started
        _metrics.REQUESTS.inc(binding="grpc", method=self.method, outcome=self.outcome)
        _metrics.REQUEST_SECONDS.observe(seconds, binding="grpc", method=self.method)
        if access_log:
            status = "OK" if self.error is None else status_code_of(self.error).name
            fields = {"remote": self.peer, "method": self.method, "status": status,
                      "duration_ms": round(seconds * 1000, 2)}  # fmt: skip
            _access.info(
                '%s "gRPC %s" %s %.2fms', self.peer, self.method, status, seconds * 1000,
                extra=fields,
            )  # fmt: skip


@contextlib.contextmanager
def _observed(
    services: Services, method: MethodDescriptor, metadata: Mapping[str, str], peer: str
) -> Iterator[_Call]:
    """The call's log context, its span (a child of the caller's `traceparent`), its metrics
    and its access line; the block sets `error` when it refuses the call."""
    record = _Call(method.name, peer)
    bind(request_id=uuid4().hex, tenant=None, subject=None, task_id=None)
    with _tracing.span(f"a2a {method.name}", kind="server", carrier=metadata) as span:
        yield record
        if span.recording:
            facts = current()
            span.set(
                a2a__method=method.name,
                a2a__binding="grpc",
                rpc__system="grpc",
                rpc__service=SERVICE_NAME,
                rpc__method=method.name,
                looping__request_id=facts.get("request_id"),
                a2a__tenant=facts.get("tenant"),
                a2a__task_id=facts.get("task_id"),
            )
            if record.error is not None:
                span.fail(record.outcome)
    record.done(services.edge.config.server.access_log)


def _metadata(context: grpc.aio.ServicerContext[Any, Any]) -> dict[str, str]:
    """The call's metadata (text values; the first of a repeated key)."""
    found: dict[str, str] = {}
    for key, value in context.invocation_metadata() or ():
        if isinstance(value, str):
            found.setdefault(key.lower(), value)
    return found


def _in_version(
    services: Services, method: MethodDescriptor, metadata: Mapping[str, str]
) -> MethodDescriptor:
    """The method as the call's version has it: the A2A 1.1 draft's proto (task generations)
    for a call that asks for 1.1 while `[server] a2a_1_1_draft` is on, else 1.0's."""
    asked = metadata.get("a2a-version", "").strip()
    if asked == DRAFT_VERSION and services.edge.config.server.a2a_1_1_draft:
        return service(draft=True).methods_by_name[method.name]
    return method


async def _answer(
    services: Services,
    method: MethodDescriptor,
    raw: bytes,
    context: grpc.aio.ServicerContext[Any, Any],
    metadata: Mapping[str, str],
) -> tuple[float, Any]:
    """The shared call path for one call: when the caller's token stops counting, and the
    handler's answer."""
    params = decode_request(method, raw)
    given = params.get("tenant")
    tenant = given if isinstance(given, str) and given else None
    edge = services.edge
    caller = await authenticate(
        metadata.get("authorization"),
        peer=context.peer(),
        services=services,
        tenant=tenant,
        policy=edge.policies["grpc"],
    )
    version = check_version(metadata.get("a2a-version"), draft_1_1=edge.config.server.a2a_1_1_draft)
    if tenant is None:
        raise no_tenant("tenant")
    handler = services.methods.get(method.name)
    if handler is None:
        raise method_not_found(method.name)
    check_served(services, tenant, "tenant")
    call = RpcCall(id=None, method=method.name, params=params)
    result = await call_method(
        services, caller.identity, call, handler,
        last_event_id=metadata.get(LAST_EVENT_ID), version=version,
    )  # fmt: skip
    return caller.expires, result


async def _unary(
    services: Services,
    method: MethodDescriptor,
    raw: bytes,
    context: grpc.aio.ServicerContext[Any, Any],
) -> bytes:
    """A call with one answer."""
    metadata = _metadata(context)
    method = _in_version(services, method, metadata)
    answer = b""
    with _observed(services, method, metadata, context.peer()) as record:
        try:
            _, result = await _answer(services, method, raw, context, metadata)
            answer = encode_answer(method, result)
        except Exception as exc:
            record.error = refusal_of(exc, method.full_name)
    if record.error is not None:
        await context.abort_with_status(error_status(record.error))
    return answer


async def _stream(
    services: Services,
    method: MethodDescriptor,
    raw: bytes,
    context: grpc.aio.ServicerContext[Any, Any],
) -> None:
    """A call answered with a stream of the task's events (its span, metrics and access line
    cover its start, as on the HTTP edge)."""
    metadata = _metadata(context)
    method = _in_version(services, method, metadata)
    with _observed(services, method, metadata, context.peer()) as record:
        try:
            expires, stream = await _answer(services, method, raw, context, metadata)
        except Exception as exc:
            record.error = refusal_of(exc, method.full_name)
    if record.error is not None:
        await context.abort_with_status(error_status(record.error))
    assert isinstance(stream, TaskStream)
    await _send(services, method, stream, expires, context)


async def _send(
    services: Services,
    method: MethodDescriptor,
    stream: TaskStream,
    expires: float,
    context: grpc.aio.ServicerContext[Any, Any],
) -> None:
    """Send the stream's events until it ends, the client goes, the caller's token expires
    (the stream ends; the client resumes with a new one), or the client takes none for
    `write_timeout_seconds` (cut: the caller's stream slot is free again)."""
    write_timeout = services.edge.config.streaming.write_timeout_seconds
    first = stream.first[0] if stream.first is not None else None
    if first is None and stream.subscription is not None:
        first = stream.subscription.cursor + 1
    failure: RpcError | None = None
    cut = False
    try:
        await context.send_initial_metadata(((FIRST_EVENT_ID, str(first or 0)),))
        deadline = asyncio.get_running_loop().time() + (expires - time.time())
        async with (
            asyncio.timeout_at(deadline),
            contextlib.aclosing(stream.events()) as events,
        ):
            async for event in events:
                if event is None:  # a heartbeat: HTTP/2 pings keep gRPC connections alive
                    continue
                message = encode_event(method, event[1])
                if not await written_within(context.write(message), write_timeout):
                    _log.info(
                        "gRPC stream client %s took no event for %g s; cut",
                        context.peer(), write_timeout,
                    )  # fmt: skip
                    _metrics.STREAM_DROPS.inc()
                    cut = True
                    break
    except TimeoutError:
        _log.info("gRPC stream of %s ended: its gateway token expired", context.peer())
    except Exception as exc:  # the store went away mid-stream; the client resumes
        failure = refusal_of(exc, method.full_name)
    finally:
        stream.close()
    if failure is not None:
        await context.abort_with_status(error_status(failure))
    if cut:
        await _cut(context, write_timeout)


async def _cut(context: grpc.aio.ServicerContext[Any, Any], write_timeout: float) -> None:
    """End a stream whose client stopped reading. Its status goes out behind the events it did
    not read (HTTP/2 flow control), so it is queued, waited for no longer than an event was,
    and the call then ends here as canceled: the client gets the status if it reads on, and
    nothing of the call is held meanwhile (neither this coroutine nor a status send of
    grpcio's, which would block and log an error when the client goes)."""
    try:
        async with asyncio.timeout(write_timeout):
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"The client took no event for {write_timeout:g} s ([streaming] "
                "write_timeout_seconds); resume the stream with last-event-id",
            )
    except grpc.aio.AbortError:
        raise  # the status went out: the call ended as aborted
    except Exception:
        pass  # still queued behind the unread events (TimeoutError), or the client went
    raise asyncio.CancelledError
