"""gRPC load for bench/send_message.py: `SendMessage` over the gRPC binding, from grpcio clients
in the benchmark process (no external gRPC load generator is installed here), the same for
looping-core and the official SDK's gRPC server, so their ratio is fair even though the load
shares the CPU with them.

Every call carries its own gateway token (when a pool is given) and a new messageId, as the
JSON-RPC load does.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import grpc
from a2a.types import a2a_pb2
from google.protobuf.json_format import ParseDict

CHANNELS = 4
"""HTTP/2 connections the clients share (each carries many calls at once)."""


def request_message(tenant: str | None, push: dict[str, object] | None, message_id: str) -> Any:
    """The SendMessageRequest the JSON-RPC load sends, as the proto message."""
    configuration: dict[str, object] = {"returnImmediately": True}
    if push:
        configuration["taskPushNotificationConfig"] = push
    params: dict[str, object] = {
        "message": {"messageId": message_id, "role": "ROLE_USER",
                    "parts": [{"text": "one two three"}]},
        "configuration": configuration,
    }  # fmt: skip
    if tenant:
        params["tenant"] = tenant
    return ParseDict(params, a2a_pb2.SendMessageRequest())


async def grpc_load(
    address: str,
    *,
    tenant: str | None,
    push: dict[str, object] | None,
    concurrency: int,
    seconds: int,
    tokens: Path | None,
) -> tuple[int, float, float, float, int, int]:
    """(requests, seconds, p50 ms, p99 ms, failed, tokens reused) of `concurrency` clients
    calling SendMessage at `address` for `seconds`."""
    pool = tokens.read_text().split() if tokens else []
    run_id, sent, failed, latencies = uuid.uuid4().hex, 0, 0, []
    channels = [grpc.aio.insecure_channel(address) for _ in range(min(CHANNELS, concurrency))]
    calls = [
        channel.unary_unary(
            "/lf.a2a.v1.A2AService/SendMessage",
            request_serializer=lambda message: message.SerializeToString(),
            response_deserializer=a2a_pb2.SendMessageResponse.FromString,
        )
        for channel in channels
    ]
    deadline = time.perf_counter() + seconds

    async def client(index: int) -> None:
        nonlocal sent, failed
        call = calls[index % len(calls)]
        while time.perf_counter() < deadline:
            sent += 1
            metadata = [("a2a-version", "1.0")]
            if pool:
                metadata.append(("authorization", f"Bearer {pool[(sent - 1) % len(pool)]}"))
            request = request_message(tenant, push, f"{run_id}-{sent}")
            started = time.perf_counter()
            try:
                answer = await call(request, metadata=tuple(metadata))
                failed += not answer.HasField("task")
            except grpc.aio.AioRpcError:
                failed += 1
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    try:
        await asyncio.gather(*(client(index) for index in range(concurrency)))
    finally:
        for channel in channels:
            await channel.close()
    elapsed = time.perf_counter() - started
    latencies.sort()
    p50, p99 = (latencies[min(len(latencies) - 1, int(len(latencies) * q))] for q in (0.5, 0.99))
    reused = max(0, len(latencies) - len(pool)) if pool else 0
    return len(latencies), elapsed, p50 * 1000, p99 * 1000, failed, reused


async def wait_ready(address: str) -> None:
    """Until something answers gRPC at `address` (any status but UNAVAILABLE)."""
    for _ in range(600):
        async with grpc.aio.insecure_channel(address) as channel:
            try:
                await channel.unary_unary("/lf.a2a.v1.A2AService/GetTask")(b"", timeout=1)
                return
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.UNAVAILABLE:
                    return
        await asyncio.sleep(0.05)
    raise SystemExit(f"nothing answers gRPC at {address}")
