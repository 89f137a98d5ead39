"""The local gateway's calls over the gRPC binding (`looping send/tasks --binding grpc`): the
params, as ProtoJSON, in the method's request message; the answer back as ProtoJSON, or the
agent's refusal with the token check it named (the `google.rpc` details of its status)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from looping_core.errors import LoopingError

__all__ = ["GRPC_EXTRA_MISSING", "call_over_grpc"]

GRPC_EXTRA_MISSING = (
    "--binding grpc needs grpcio; install the grpc extra: pip install 'looping-core[grpc]'"
)


async def call_over_grpc(
    address: str,
    method: str,
    params: Mapping[str, Any],
    metadata: Mapping[str, str],
    starting_seconds: float,
) -> tuple[Any, tuple[int, str, str | None] | None]:
    """Call `method` at `address` (`host:port`): `(answer, None)`, or `(None, (code, message,
    check))` when the agent refused. An agent that is not listening yet is tried again, every
    0.1 s and then less often, for `starting_seconds`."""
    try:
        import grpc  # noqa: PLC0415 - the grpc extra
        from google.protobuf import json_format  # noqa: PLC0415
        from google.rpc import error_details_pb2, status_pb2  # noqa: PLC0415

        from looping_core.a2a.protobuf import SERVICE_NAME, message_class, service  # noqa: PLC0415
    except ImportError:
        raise LoopingError(GRPC_EXTRA_MISSING) from None
    found = service().methods_by_name.get(method)
    if found is None:
        raise LoopingError(f"{method} is not a method of {SERVICE_NAME}")
    request = message_class(found.input_type.full_name)()
    json_format.ParseDict(dict(params), request)
    answer_class = message_class(found.output_type.full_name)
    sent = tuple((key.lower(), value) for key, value in metadata.items())
    deadline = asyncio.get_running_loop().time() + starting_seconds
    delay = 0.1
    while True:
        async with grpc.aio.insecure_channel(address) as channel:
            call: Any = channel.unary_unary(
                f"/{SERVICE_NAME}/{method}",
                request_serializer=lambda message: message.SerializeToString(),
                response_deserializer=answer_class.FromString,
            )
            try:
                answer = await call(request, metadata=sent)
                return json_format.MessageToDict(answer), None
            except grpc.aio.AioRpcError as exc:
                late = asyncio.get_running_loop().time() + delay > deadline
                if exc.code() != grpc.StatusCode.UNAVAILABLE or late:
                    check = None
                    for key, value in exc.trailing_metadata() or ():
                        if key == "grpc-status-details-bin" and isinstance(value, bytes):
                            for detail in status_pb2.Status.FromString(value).details:
                                info = error_details_pb2.ErrorInfo()
                                if detail.Unpack(info):
                                    check = info.metadata.get("check") or check
                    return None, (exc.code().value[0], exc.details() or "", check)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)
