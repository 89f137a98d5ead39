"""pytest plugin of looping-core (entry point `pytest11`). Fixtures only; none is autouse."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from looping_core.testing._gateway import FakeGateway
from looping_core.testing._validation import PluginValidator

__all__ = ["fake_gateway", "plugin_validator"]


@pytest.fixture
def plugin_validator() -> PluginValidator:
    """Validate a plugin as the host would at startup, with an empty environment.

    Use `PluginValidator(environ={...})` directly to provide secrets.
    """
    return PluginValidator()


try:
    import pytest_asyncio
except ImportError:  # pragma: no cover - async fixtures need pytest-asyncio (the test extra)
    pass
else:

    @pytest_asyncio.fixture
    async def fake_gateway() -> AsyncIterator[FakeGateway]:
        """A running `FakeGateway` on 127.0.0.1 (real key, real JWKS server)."""
        async with FakeGateway() as gateway:
            yield gateway
