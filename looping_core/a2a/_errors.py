"""The error table: every error the edge can answer with, its JSON-RPC code and its details.

Handlers raise an `RpcError` subclass; `error_object` turns it into the JSON-RPC error object
with the `google.rpc.ErrorInfo` (and, for invalid params, `google.rpc.BadRequest`) details of
A2A 1.0 §9.5. Nothing else decides a code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from looping_core.errors import LoopingError

__all__ = [
    "ERRORS",
    "RETRY_LATER",
    "ContentTypeNotSupported",
    "DailyBudgetSpent",
    "ErrorSpec",
    "ExtendedAgentCardNotConfigured",
    "ExtensionSupportRequired",
    "InternalError",
    "InvalidAgentResponse",
    "InvalidParams",
    "InvalidRequest",
    "MethodNotFound",
    "ParseError",
    "PayloadTooLarge",
    "PushNotificationNotSupported",
    "RateLimited",
    "RequestTimeout",
    "RpcError",
    "TaskGenerationMismatch",
    "TaskNotCancelable",
    "TaskNotFound",
    "TooManyStreams",
    "TooManyTurns",
    "Unauthenticated",
    "Unavailable",
    "UnsupportedMediaType",
    "UnsupportedOperation",
    "VersionNotSupported",
    "error_object",
    "rest_error",
]

A2A_DOMAIN = "a2a-protocol.org"
LOOPING_DOMAIN = "looping-core"
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"


class RpcError(LoopingError):
    """An error answered to the client. `message` replaces the table's standard message.

    `metadata` values are strings (ErrorInfo's map<string, string>); `violations` are
    `(field path, description)` pairs for invalid params.
    """

    def __init__(
        self,
        message: str | None = None,
        *,
        metadata: Mapping[str, str] | None = None,
        violations: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.message = message
        self.metadata = dict(metadata or {})
        self.violations = tuple(violations)
        super().__init__(message or type(self).__name__)


class ParseError(RpcError):
    """The body is not JSON."""


class InvalidRequest(RpcError):
    """Not a valid JSON-RPC 2.0 request (also: batches, which are not supported)."""


class MethodNotFound(RpcError):
    """No such method (v0.3 names such as `message/send` included)."""


class InvalidParams(RpcError):
    """Bad or missing params; `violations` name the fields."""


class InternalError(RpcError):
    """The server failed; the client learns nothing more."""


class TaskNotFound(RpcError):
    """No such task, or not the caller's: the two are indistinguishable on purpose."""


class TaskNotCancelable(RpcError):
    """The task is already in a terminal state."""


class PushNotificationNotSupported(RpcError):
    """The agent does not support push notifications."""


class UnsupportedOperation(RpcError):
    """The operation (or this use of it) is not supported."""


class ContentTypeNotSupported(RpcError):
    """A part's media type is not supported."""


class InvalidAgentResponse(RpcError):
    """The agent produced a response that violates the protocol."""


class ExtendedAgentCardNotConfigured(RpcError):
    """Extended cards are declared but this one is not configured."""


class ExtensionSupportRequired(RpcError):
    """A required extension was not activated by the client."""


class VersionNotSupported(RpcError):
    """The `A2A-Version` is not one this endpoint speaks."""


class TaskGenerationMismatch(RpcError):
    """A send's `ifGenerationMatch` is not the task's generation (A2A 1.1 draft, `-32010`)."""


class Unauthenticated(RpcError):
    """The gateway token is missing or failed a check (HTTP 401)."""


class Unavailable(RpcError):
    """The server cannot answer for now (its store is out of reach): try again after
    `Retry-After` seconds (HTTP 503 on the JSON bindings, `UNAVAILABLE` on gRPC)."""


class TooManyStreams(RpcError):
    """The caller holds `[streaming] max_streams_per_caller` streams already (HTTP 429)."""


class RateLimited(RpcError):
    """The caller, or its tenant, made more requests than `[limits]` allow per second: try
    again after `Retry-After` seconds (HTTP 429)."""


class TooManyTurns(RpcError):
    """The caller, or its tenant, has as many turns waiting or running as `[limits]` allow: try
    again after `Retry-After` seconds (HTTP 429)."""


class DailyBudgetSpent(RpcError):
    """The caller's turns have cost its daily budget (`[limits] caller_daily_cost`) today: try
    again after `Retry-After` seconds, at midnight UTC (HTTP 429)."""


RETRY_LATER = (RateLimited, TooManyTurns, DailyBudgetSpent)
"""The refusals that say when to try again (`retryAfterSeconds`: `Retry-After`, gRPC's
`RetryInfo`)."""


class PayloadTooLarge(RpcError):
    """The body exceeds `[server] max_body_bytes` (HTTP 413)."""


class RequestTimeout(RpcError):
    """The body did not arrive within `[server] body_timeout_seconds` (HTTP 408)."""


class UnsupportedMediaType(RpcError):
    """The Content-Type is not JSON (HTTP 415)."""


@attrs.frozen
class ErrorSpec:
    code: int
    reason: str
    message: str
    http_status: int = 200
    """JSON-RPC errors travel with HTTP 200, except where HTTP itself must say it (auth, size)."""
    domain: str = A2A_DOMAIN
    rest: tuple[int, str] = (400, "FAILED_PRECONDITION")
    """The HTTP+JSON binding's HTTP status and `google.rpc.Status` code (A2A 1.0.1 §5.4)."""


_INVALID = (400, "INVALID_ARGUMENT")

ERRORS: Mapping[type[RpcError], ErrorSpec] = {
    ParseError: ErrorSpec(-32700, "PARSE_ERROR", "Invalid JSON payload", rest=_INVALID),
    InvalidRequest: ErrorSpec(
        -32600, "INVALID_REQUEST", "Request payload validation error", rest=_INVALID
    ),
    MethodNotFound: ErrorSpec(
        -32601, "METHOD_NOT_FOUND", "Method not found", rest=(404, "NOT_FOUND")
    ),
    InvalidParams: ErrorSpec(-32602, "INVALID_PARAMS", "Invalid parameters", rest=_INVALID),
    InternalError: ErrorSpec(-32603, "INTERNAL", "Internal error", rest=(500, "INTERNAL")),
    TaskNotFound: ErrorSpec(-32001, "TASK_NOT_FOUND", "Task not found", rest=(404, "NOT_FOUND")),
    TaskNotCancelable: ErrorSpec(-32002, "TASK_NOT_CANCELABLE", "Task cannot be canceled"),
    PushNotificationNotSupported: ErrorSpec(
        -32003, "PUSH_NOTIFICATION_NOT_SUPPORTED", "Push notifications are not supported"
    ),
    UnsupportedOperation: ErrorSpec(-32004, "UNSUPPORTED_OPERATION", "Unsupported operation"),
    ContentTypeNotSupported: ErrorSpec(
        -32005, "CONTENT_TYPE_NOT_SUPPORTED", "Content type not supported", rest=_INVALID
    ),
    InvalidAgentResponse: ErrorSpec(
        -32006, "INVALID_AGENT_RESPONSE", "Invalid agent response", rest=(500, "INTERNAL")
    ),
    ExtendedAgentCardNotConfigured: ErrorSpec(
        -32007, "EXTENDED_AGENT_CARD_NOT_CONFIGURED", "Extended agent card not configured"
    ),
    ExtensionSupportRequired: ErrorSpec(
        -32008, "EXTENSION_SUPPORT_REQUIRED", "Extension support required"
    ),
    VersionNotSupported: ErrorSpec(-32009, "VERSION_NOT_SUPPORTED", "Version not supported"),
    # The A2A 1.1 draft's (branch dev-1.1): HTTP 409 and gRPC ABORTED.
    TaskGenerationMismatch: ErrorSpec(
        -32010, "TASK_GENERATION_MISMATCH", "Task generation mismatch", rest=(409, "ABORTED")
    ),
    # Not A2A errors: the transport's own refusals, in the implementation-defined -32000.
    Unauthenticated: ErrorSpec(
        -32000, "UNAUTHENTICATED", "Unauthenticated", http_status=401, domain=LOOPING_DOMAIN,
        rest=(401, "UNAUTHENTICATED"),
    ),
    Unavailable: ErrorSpec(
        -32000, "UNAVAILABLE", "The service is unavailable; try again shortly",
        http_status=503, domain=LOOPING_DOMAIN, rest=(503, "UNAVAILABLE"),
    ),
    TooManyStreams: ErrorSpec(
        -32000, "TOO_MANY_STREAMS", "Too many open streams", http_status=429,
        domain=LOOPING_DOMAIN, rest=(429, "RESOURCE_EXHAUSTED"),
    ),
    RateLimited: ErrorSpec(
        -32000, "RATE_LIMITED", "Too many requests; try again after Retry-After seconds",
        http_status=429, domain=LOOPING_DOMAIN, rest=(429, "RESOURCE_EXHAUSTED"),
    ),
    TooManyTurns: ErrorSpec(
        -32000, "TOO_MANY_TURNS", "Too many turns waiting or running; try again later",
        http_status=429, domain=LOOPING_DOMAIN, rest=(429, "RESOURCE_EXHAUSTED"),
    ),
    DailyBudgetSpent: ErrorSpec(
        -32000, "DAILY_BUDGET_SPENT", "The caller's daily budget is spent; try again tomorrow",
        http_status=429, domain=LOOPING_DOMAIN, rest=(429, "RESOURCE_EXHAUSTED"),
    ),
    PayloadTooLarge: ErrorSpec(
        -32600, "PAYLOAD_TOO_LARGE", "Request body too large", http_status=413,
        domain=LOOPING_DOMAIN, rest=(413, "INVALID_ARGUMENT"),
    ),
    RequestTimeout: ErrorSpec(
        -32600, "REQUEST_TIMEOUT", "Request body not received in time", http_status=408,
        domain=LOOPING_DOMAIN, rest=(408, "DEADLINE_EXCEEDED"),
    ),
    UnsupportedMediaType: ErrorSpec(
        -32600, "UNSUPPORTED_MEDIA_TYPE", "Content-Type must be application/json",
        http_status=415, domain=LOOPING_DOMAIN, rest=(415, "INVALID_ARGUMENT"),
    ),
}  # fmt: skip


def spec_of(error: RpcError) -> ErrorSpec:
    for cls in type(error).__mro__:
        if cls in ERRORS:
            return ERRORS[cls]
    return ERRORS[InternalError]


def rest_error(error: RpcError) -> tuple[int, dict[str, Any]]:
    """The HTTP+JSON binding's answer for `error`: its HTTP status and the `google.rpc.Status`
    body (§11.6), with the same details as the JSON-RPC error."""
    spec = spec_of(error)
    http_status, status = spec.rest
    document = error_object(error)
    body = {
        "error": {
            "code": http_status,
            "status": status,
            "message": document["message"],
            "details": document["data"],
        }
    }
    return http_status, body


def error_object(error: RpcError) -> dict[str, Any]:
    """The JSON-RPC `error` member for `error`."""
    spec = spec_of(error)
    details: list[dict[str, Any]] = [
        {
            "@type": ERROR_INFO,
            "reason": spec.reason,
            "domain": spec.domain,
            "metadata": error.metadata,
        }
    ]
    if error.violations:
        details.append(
            {
                "@type": BAD_REQUEST,
                "fieldViolations": [
                    {"field": field, "description": description}
                    for field, description in error.violations
                ],
            }
        )
    return {"code": spec.code, "message": error.message or spec.message, "data": details}
