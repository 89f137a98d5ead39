"""The one ladder from what went wrong to what a client of either binding gets, and the HTTP
headers an error needs (`answer_or_refuse`, `error_headers`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from looping_core.a2a import RpcError, Unavailable
from looping_core.a2a.internal import (
    RETRY_LATER,
    InternalError,
    InvalidParams,
    RequestTimeout,
    TaskGenerationMismatch,
    TaskNotCancelable,
    TaskNotFound,
    Unauthenticated,
    UnsupportedOperation,
    spec_of,
)
from looping_core.server._limits import budget_spent, too_many_turns
from looping_core.server._requests import Observed
from looping_core.store import internal as store

__all__ = [
    "RETRY_AFTER_SECONDS",
    "ClientGone",
    "answer_or_refuse",
    "error_headers",
    "outcome_of",
    "refusal_of",
    "rpc_error_of",
    "unavailable",
]

_log = logging.getLogger("looping_core.server")

RETRY_AFTER_SECONDS = 2
"""What `Retry-After` says while the store is out of reach: about how long a restart takes."""


class ClientGone(Exception):
    """The client closed the connection before its body arrived: a client event, no error."""


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
    except ClientGone:
        _log.info("client %s disconnected while sending its request", request.remote)
        record.outcome = "client_gone"
        return web.Response(status=400)  # nobody reads it
    except Exception as exc:
        return refuse(refusal_of(exc, request.path))


def refusal_of(exc: Exception, answering: str) -> RpcError:
    """What a client of any binding hears for `exc`, raised while `answering` (a path, a gRPC
    method): a protocol error as itself, a store's refusal as its protocol error, an outage as
    UNAVAILABLE, anything else as an internal error (logged here, never shown). Call it from
    the `except` block, so the log line has the traceback."""
    if isinstance(exc, RpcError):
        return exc
    if isinstance(exc, store.StoreRefusal):
        return rpc_error_of(exc)
    if isinstance(exc, store.StoreUnavailable):
        return unavailable()
    _log.exception("internal error answering %s", answering)
    return InternalError()


_STORE_REFUSALS: Mapping[type[store.StoreRefusal], Callable[[Any], RpcError]] = {
    store.PushConfigNotFound: lambda e: TaskNotFound(
        "Push notification config not found", metadata={"taskId": e.task_id}
    ),
    store.TaskNotFound: lambda e: TaskNotFound(metadata={"taskId": e.task_id}),
    store.TaskNotCancelable: lambda e: TaskNotCancelable(metadata={"taskId": e.task_id}),
    store.TurnRefused: lambda e: UnsupportedOperation(str(e)),
    store.TooManyTurns: too_many_turns,
    store.BudgetSpent: budget_spent,
    store.ApprovalRefused: lambda e: InvalidParams(
        f"params.message: {e}", violations=[("params.message", str(e))]
    ),
    store.GenerationMismatch: lambda e: TaskGenerationMismatch(
        f"The task is at generation {e.generation}, not the one ifGenerationMatch names; read "
        "it again (GetTask) and decide again",
        metadata={"taskId": e.task_id, "generation": str(e.generation)},
    ),
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


def error_headers(error: RpcError) -> dict[str, str]:
    """HTTP headers an error needs in either binding: the bearer challenge of a refused token,
    closing a connection whose body came too slowly, and when to try again."""
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
    if isinstance(error, RETRY_LATER):
        headers["Retry-After"] = error.metadata["retryAfterSeconds"]
    return headers


def outcome_of(error: RpcError) -> str:
    """The error's reason as a metric label: `task_not_found`."""
    return spec_of(error).reason.lower()
