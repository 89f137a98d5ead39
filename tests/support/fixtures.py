"""Fixtures for the edge tests: running gateways, a running agent that trusts the first, and
processes a test starts."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

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
def processes() -> Iterator[Processes]:
    """Processes a test starts (`looping serve`, workers), stopped at its end."""
    running = Processes()
    yield running
    running.stop()
