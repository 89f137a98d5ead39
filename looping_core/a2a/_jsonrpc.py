"""The JSON-RPC 2.0 envelope and the method table.

`parse_envelope` turns a body into an `RpcCall` or raises an `RpcError` carrying the request id
when one could be read. `METHODS` maps each method name to its params type and handler; a method
is dispatched only through it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs

from looping_core.a2a._errors import (
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    ParseError,
    RpcError,
)
from looping_core.a2a._grammar import MAX_SAFE_INTEGER, is_well_formed, json_problem
from looping_core.a2a._protojson import WireError, from_wire

__all__ = [
    "Method",
    "RpcCall",
    "RpcId",
    "method_not_found",
    "parse_envelope",
    "parse_params",
    "response",
]

RpcId = str | int | None

V03_METHODS = frozenset(
    {
        "message/send",
        "message/stream",
        "tasks/get",
        "tasks/list",
        "tasks/cancel",
        "tasks/resubscribe",
        "tasks/pushNotificationConfig/set",
        "tasks/pushNotificationConfig/get",
        "tasks/pushNotificationConfig/list",
        "tasks/pushNotificationConfig/delete",
        "agent/getAuthenticatedExtendedCard",
    }
)


@attrs.frozen
class Method:
    """One row of the method table: how to parse params and what handles them."""

    params_type: type[Any]
    handler: Callable[[Any, Any], Awaitable[Any]]
    """`handler(context, params)` returns a typed A2A value (a `Task`, a response type, a
    `SignedCard`; `None` for an empty result) or a stream: each binding encodes it."""


@attrs.frozen
class RpcCall:
    id: RpcId
    method: str
    params: Mapping[str, Any]


class EnvelopeError(Exception):
    """An `RpcError` and the request id it answers (`None` when none could be read)."""

    def __init__(self, error: RpcError, request_id: RpcId = None) -> None:
        self.error = error
        self.request_id = request_id
        super().__init__(str(error))


def parse_envelope(body: bytes, methods: Mapping[str, Method]) -> tuple[RpcCall, Method | None]:
    """Parse and check a JSON-RPC request; its method from the table, or `None` for a name the
    table lacks (the caller answers `method_not_found` once it has authenticated the request:
    an unauthenticated caller learns nothing, not even which methods exist)."""
    try:
        document = json.loads(body, parse_constant=_refuse_constant)
    except RecursionError:
        raise EnvelopeError(InvalidRequest("The request is nested too deeply")) from None
    except (ValueError, UnicodeDecodeError) as exc:
        message = str(exc) if isinstance(exc, _NotJson) else None
        raise EnvelopeError(ParseError(message)) from None
    if isinstance(document, list):
        raise EnvelopeError(InvalidRequest("Batch requests are not supported"))
    if not isinstance(document, dict):
        raise EnvelopeError(InvalidRequest("The request must be a JSON object"))
    request_id = document.get("id")
    if not _is_valid_id(request_id):
        raise EnvelopeError(
            InvalidRequest("id must be a string of well-formed Unicode, a safe integer or null")
        )
    problem = json_problem(document)
    if problem is not None:
        field, description = problem
        if field == "params" or field.startswith(("params.", "params[")):
            error: RpcError = InvalidParams(
                f"Invalid parameters: {field}: {description}", violations=[problem]
            )
        else:
            error = InvalidRequest(f"{field or 'the request'}: {description}")
        raise EnvelopeError(error, request_id)
    if document.get("jsonrpc") != "2.0":
        raise EnvelopeError(InvalidRequest('jsonrpc must be "2.0"'), request_id)
    method_name = document.get("method")
    if not isinstance(method_name, str) or not method_name:
        raise EnvelopeError(InvalidRequest("method must be a non-empty string"), request_id)
    params = document.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise EnvelopeError(
            InvalidParams(
                "params must be an object", violations=[("params", "expected an object")]
            ),
            request_id,
        )
    return RpcCall(id=request_id, method=method_name, params=params), methods.get(method_name)


def parse_body(body: bytes) -> dict[str, Any]:
    """An HTTP+JSON request body: a JSON object held to the same grammar as JSON-RPC params
    (depth, Unicode, numbers); `ParseError` or `InvalidParams` naming the field otherwise."""
    try:
        document = json.loads(body, parse_constant=_refuse_constant)
    except RecursionError:
        raise InvalidRequest("The request is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ParseError(str(exc) if isinstance(exc, _NotJson) else None) from None
    if not isinstance(document, dict):
        raise InvalidParams(
            "The request body must be a JSON object", violations=[("body", "expected an object")]
        )
    problem = json_problem(document)
    if problem is not None:
        field, description = problem
        raise InvalidParams(f"Invalid parameters: {field}: {description}", violations=[problem])
    return document


def method_not_found(name: str) -> MethodNotFound:
    """The error for a method the table lacks, with a hint for A2A 0.3 names."""
    hint = (
        " (that is an A2A 0.3 name; A2A 1.0 methods are PascalCase, e.g. SendMessage)"
        if name in V03_METHODS
        else ""
    )
    return MethodNotFound(f"Method not found: {name}{hint}")


class _NotJson(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NotJson(f"Invalid JSON payload: {name} is not a JSON number")


def _is_valid_id(request_id: object) -> bool:
    if isinstance(request_id, str):
        return is_well_formed(request_id)
    if isinstance(request_id, bool):
        return False
    if isinstance(request_id, int):
        return abs(request_id) <= MAX_SAFE_INTEGER
    return request_id is None


def parse_params(call: RpcCall, method: Method) -> Any:
    """Structure `params` into the method's type; `InvalidParams` naming every bad field."""
    try:
        return from_wire(dict(call.params), method.params_type)
    except WireError as exc:
        violations = [
            (f"params.{path}" if path else "params", message) for path, message in exc.problems
        ]
        summary = "; ".join(f"{field}: {message}" for field, message in violations)
        raise InvalidParams(f"Invalid parameters: {summary}", violations=violations) from None


def response(
    request_id: RpcId, *, result: Any = None, error: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A JSON-RPC response object with either `result` or `error`."""
    if error is not None:
        return {"jsonrpc": "2.0", "id": request_id, "error": dict(error)}
    return {"jsonrpc": "2.0", "id": request_id, "result": result}
