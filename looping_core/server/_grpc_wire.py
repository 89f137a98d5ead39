"""The gRPC binding's wire form: a request's protobuf message in as the ProtoJSON params every
binding parses, a handler's answer out as its protobuf message, an error as a gRPC status with
`google.rpc` details.

Going through ProtoJSON keeps one parser and one encoder for all three bindings (their checks,
their field paths in errors, a signed card's exact content): protobuf's own JSON mapping is the
bridge, and the proto has no field whose JSON form loses anything (no 64-bit integers, no
floating point outside `Struct` values, whose numbers are doubles in every binding).
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import any_pb2, json_format, message_factory
from google.protobuf.descriptor import Descriptor, MethodDescriptor
from google.protobuf.message import DecodeError, Message
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from looping_core.a2a import RpcError, Unavailable
from looping_core.a2a.internal import RETRY_LATER, InvalidRequest, spec_of
from looping_core.server._answers import wire_result
from looping_core.server._refusals import RETRY_AFTER_SECONDS

__all__ = ["decode_request", "encode_answer", "encode_event", "error_status", "status_code_of"]


def decode_request(method: MethodDescriptor, raw: bytes) -> dict[str, Any]:
    """The request's params as ProtoJSON (what a JSON-RPC call's `params` would be)."""
    request = _class_of(method.input_type)()
    try:
        request.ParseFromString(raw)
    except DecodeError:
        raise InvalidRequest(
            f"The request is not a {method.input_type.full_name} message"
        ) from None
    params = json_format.MessageToDict(request)
    return _whole_numbers(params)  # type: ignore[no-any-return]


def _class_of(descriptor: Descriptor) -> type[Message]:
    """The message class of a descriptor of either proto (each has its own pool)."""
    cls: Any = message_factory.GetMessageClass(descriptor)
    return cls  # type: ignore[no-any-return]


def _whole_numbers(value: Any) -> Any:
    """A `Struct` value's number as the JSON bindings would have it: protobuf keeps every one
    as a double (`3.0`), JSON keeps `3` as written; whole ones become integers again."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {key: _whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(item) for item in value]
    return value


def encode_answer(method: MethodDescriptor, value: Any) -> bytes:
    """A handler's answer as the method's response message (serialized)."""
    message = _class_of(method.output_type)()
    json_format.ParseDict(wire_result(value), message)
    return message.SerializeToString()


def encode_event(method: MethodDescriptor, body: str) -> bytes:
    """A stored event (a `StreamResponse`'s JSON) as the message `method`'s stream sends."""
    message = _class_of(method.output_type)()
    json_format.Parse(body, message)
    return message.SerializeToString()


def status_code_of(error: RpcError) -> grpc.StatusCode:
    """The gRPC status of `error` (A2A 1.0.1 §5.4; the transport's own refusals alike)."""
    return grpc.StatusCode[spec_of(error).rest[1]]


def error_status(error: RpcError) -> grpc.Status:
    """`error` as a gRPC status: its code, its message, and as details (`grpc-status-details-bin`)
    the same `ErrorInfo` and `BadRequest` the other bindings give, plus a `RetryInfo` where a
    retry is worth it (the other bindings' `Retry-After`)."""
    spec = spec_of(error)
    code = status_code_of(error)
    details: list[Message] = [
        error_details_pb2.ErrorInfo(
            reason=spec.reason, domain=spec.domain, metadata=dict(error.metadata)
        )
    ]
    if error.violations:
        details.append(
            error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(field=field, description=problem)
                    for field, problem in error.violations
                ]
            )
        )
    retry = _retry_after(error)
    if retry is not None:
        info = error_details_pb2.RetryInfo()
        info.retry_delay.FromSeconds(retry)
        details.append(info)
    packed = []
    for detail in details:
        envelope = any_pb2.Any()
        envelope.Pack(detail)
        packed.append(envelope)
    status = status_pb2.Status(
        code=code.value[0], message=error.message or spec.message, details=packed
    )
    grpc_status: grpc.Status = rpc_status.to_status(status)
    return grpc_status


def _retry_after(error: RpcError) -> int | None:
    if isinstance(error, Unavailable):
        return RETRY_AFTER_SECONDS
    if isinstance(error, RETRY_LATER):
        return int(error.metadata["retryAfterSeconds"])
    return None
