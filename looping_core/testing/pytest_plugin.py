"""pytest plugin of looping-core (entry point `pytest11`). Fixtures only; none is autouse.

- `plugin_validator`: the host's startup validation, for a plugin's own suite;
- `fake_gateway`: a running `FakeGateway`;
- `agent_harness`: a factory of started `AgentHarness`es, stopped after the test;
- `cassette`: the test's HTTP cassette (`cassettes/<module>/<test>.yaml`), replayed, or recorded
  with `LOOPING_RECORD=1`.

The async fixtures need pytest-asyncio (`pip install 'looping-core[test]'`); without it they still
exist and fail with that instruction instead of a missing-fixture error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

from looping_core.testing._cassettes import cassette as _cassette
from looping_core.testing._gateway import FakeGateway
from looping_core.testing._harness import AgentHarness
from looping_core.testing._validation import PluginValidator

__all__ = ["agent_harness", "cassette", "fake_gateway", "plugin_validator"]

_NEEDS_ASYNCIO = (
    "the {name} fixture is async and needs pytest-asyncio: pip install pytest-asyncio "
    "(or looping-core[test])"
)

MakeHarness = Callable[..., Awaitable[AgentHarness]]


@pytest.fixture
def cassette(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The test's HTTP cassette, `cassettes/<module>/<test>.yaml` beside its file: replayed,
    or recorded with `LOOPING_RECORD=1`."""
    module = request.path.stem
    name = request.node.name.replace("/", "_")
    path = request.path.parent / "cassettes" / module / f"{name}.yaml"
    with _cassette(path) as tape:
        yield tape


@pytest.fixture
def plugin_validator() -> PluginValidator:
    """Validate a plugin as the host would at startup, with an empty environment.

    Use `PluginValidator(environ={...})` directly to provide secrets.
    """
    return PluginValidator()


_pytest_asyncio: Any
try:
    import pytest_asyncio as _pytest_asyncio
except ImportError:  # pragma: no cover - exercised by a test that hides pytest-asyncio
    _pytest_asyncio = None


def _async_fixture(function: Any) -> Any:
    """`pytest_asyncio.fixture`, or, without pytest-asyncio, a fixture of the same name that
    fails saying what to install."""
    if _pytest_asyncio is not None:
        return _pytest_asyncio.fixture(function)

    @pytest.fixture(name=function.__name__)
    def missing() -> Any:
        pytest.fail(_NEEDS_ASYNCIO.format(name=function.__name__), pytrace=False)

    missing.__doc__ = function.__doc__
    return missing


@_async_fixture
async def fake_gateway() -> AsyncIterator[FakeGateway]:
    """A running `FakeGateway` on 127.0.0.1 (real key, real JWKS server)."""
    async with FakeGateway() as gateway:
        yield gateway


@_async_fixture
async def agent_harness() -> AsyncIterator[MakeHarness]:
    """`await agent_harness("module:Agent", model=..., plugins=[...])`: a started
    `AgentHarness`; every one made is stopped after the test."""
    started: list[AgentHarness] = []

    async def make(agent: str, **options: Any) -> AgentHarness:
        harness = AgentHarness(agent, **options)
        await harness.start()
        started.append(harness)
        return harness

    yield make
    for harness in started:
        await harness.stop()
