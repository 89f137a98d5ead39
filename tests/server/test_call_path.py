"""The call path every binding shares takes what a binding read off the wire, not a request of
any transport: a token and a version as plain values, refused the same way whichever binding
read them, and the module imports no web server."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from looping_core.a2a import TokenPolicy
from looping_core.a2a.internal import Unauthenticated, VersionNotSupported
from looping_core.server.internal import authenticate, check_version

MODULE = Path(__file__).parents[2] / "looping_core" / "server" / "_call_path.py"
POLICY = TokenPolicy(endpoint="http://127.0.0.1:1/a2a", gateway_origins=["http://127.0.0.1:2"])


class NoFetch:
    """A key-set cache that fails the test if anything is fetched."""

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("nothing may be fetched")


class Services:
    jwks = NoFetch()


def test_the_call_path_imports_no_transport() -> None:
    imported = {
        node.module or ""
        for node in ast.walk(ast.parse(MODULE.read_text()))
        if isinstance(node, ast.ImportFrom)
    } | {
        alias.name
        for node in ast.walk(ast.parse(MODULE.read_text()))
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert not [name for name in imported if name.startswith(("aiohttp", "grpc"))]


@pytest.mark.parametrize("authorization", [None, "", "Basic abc", "Bearer ", "bearer"])
async def test_a_missing_token_is_refused_before_anything_is_fetched(
    authorization: str | None,
) -> None:
    with pytest.raises(Unauthenticated) as refused:
        await authenticate(
            authorization,
            peer="127.0.0.1",
            services=Services(),
            tenant="t",
            policy=POLICY,  # type: ignore[arg-type]
        )
    assert refused.value.metadata == {"check": "token-missing"}


async def test_a_token_from_an_unlisted_gateway_is_refused_with_no_fetch() -> None:
    from looping_core.testing import FakeGateway  # noqa: PLC0415 - a real key, never started

    async with FakeGateway() as unlisted:
        token = unlisted.token(tenant="t", aud=POLICY.endpoint)
    with pytest.raises(Unauthenticated) as refused:
        await authenticate(
            f"Bearer {token}",
            peer=None,
            services=Services(),
            tenant="t",
            policy=POLICY,  # type: ignore[arg-type]
        )
    assert refused.value.metadata == {"check": "jku-not-allowed"}


@pytest.mark.parametrize("version", [None, "0.3", "2.0", "x"])
def test_a_version_that_is_not_1_is_refused(version: str | None) -> None:
    with pytest.raises(VersionNotSupported) as refused:
        check_version(version)
    assert refused.value.metadata["requestedVersion"] == (version or "0.3")


@pytest.mark.parametrize("version", ["1.0", "1.1", " 1.0 "])
def test_a_1_x_version_passes(version: str) -> None:
    check_version(version)
