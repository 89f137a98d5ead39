"""What the server's binding suites share: one test per binding (JSON-RPC, HTTP+JSON, gRPC)."""

from __future__ import annotations

import pytest

from support.bindings import BINDINGS


@pytest.fixture(params=sorted(BINDINGS))
def binding_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name
