"""An OTLP/HTTP trace receiver on 127.0.0.1 for the tests of a served process's spans: a plain
HTTP server decoding each export's protobuf."""

from __future__ import annotations

import contextlib
import gzip
from collections.abc import AsyncIterator

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


@contextlib.asynccontextmanager
async def otlp_receiver() -> AsyncIterator[tuple[str, list[ExportTraceServiceRequest]]]:
    """Its `traces_endpoint` URL, and the exports it received (filled as they arrive)."""
    received: list[ExportTraceServiceRequest] = []

    async def collect(request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        message = ExportTraceServiceRequest()
        message.ParseFromString(body)
        received.append(message)
        return web.Response(body=b"", content_type="application/x-protobuf")

    collector = web.Application()
    collector.router.add_post("/v1/traces", collect)
    runner = web.AppRunner(collector)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1/traces", received
    finally:
        await runner.cleanup()
