"""Fixtures for the edge tests: running gateways, a running agent that trusts the first (one
serving gRPC too), spans collected in memory, and processes a test starts."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from looping_core.testing import FakeGateway

from support.engine import Processes
from support.serving import RunningAgent, start_agent


@pytest.fixture
async def gateway() -> AsyncIterator[FakeGateway]:
    async with FakeGateway() as running:
        yield running


@pytest.fixture
async def other_gateway() -> AsyncIterator[FakeGateway]:
    """A second gateway, on another port (another origin)."""
    async with FakeGateway(kid="other-key") as running:
        yield running


@pytest.fixture
async def agent(gateway: FakeGateway) -> AsyncIterator[RunningAgent]:
    running, runner = await start_agent([gateway.origin])
    yield running
    await running.session.close()
    await runner.cleanup()


@pytest.fixture
async def grpc_agent(gateway: FakeGateway) -> AsyncIterator[RunningAgent]:
    """The edge tests' agent, serving the gRPC binding too."""
    running, runner = await start_agent([gateway.origin], grpc=True)
    yield running
    await running.session.close()
    await runner.cleanup()


@pytest.fixture
def spans() -> Iterator[Any]:
    """The spans core records during the test, collected in memory by the OpenTelemetry SDK
    (an `InMemorySpanExporter`); core is given that provider for the test only, so no global
    provider is set for the rest of the suite."""
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415 - the otel extra
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: PLC0415
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: PLC0415
        InMemorySpanExporter,
    )

    from looping_core import _tracing  # noqa: PLC0415

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _tracing.use_tracer_provider(provider)
    try:
        yield exporter
    finally:
        _tracing.use_tracer_provider(None)
        provider.shutdown()


@pytest.fixture
def processes() -> Iterator[Processes]:
    """Processes a test starts (`looping serve`, workers), stopped at its end."""
    running = Processes()
    yield running
    running.stop()
