"""A fake gateway with real keys: a real aiohttp server on 127.0.0.1 that serves its JWKS.

    async with FakeGateway() as gateway:
        token = gateway.token(tenant="alice", aud="http://127.0.0.1:8080/a2a")
        ...
        assert gateway.jwks_fetches == 1

It mints gateway tokens the way a real gateway does (EdDSA, `jku` = its JWKS URL, `iss` = its
origin, `aud` = the agent's endpoint, `tenant`, `sub`), and counts how often its key set is
fetched so tests can prove that a refused token fetched nothing.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from aiohttp import web

from looping_core.a2a._jose import SIGNING_ALGORITHM, sign_compact
from looping_core.a2a.keys import SigningKey
from looping_core.testing.keys import ed25519_private_jwk

__all__ = ["FakeGateway", "make_gateway_token"]

_DELETE = object()


def make_gateway_token(
    private_jwk: Mapping[str, Any],
    *,
    jku: str | None,
    iss: str,
    aud: str | list[str],
    tenant: str | None,
    sub: str | None = "caller",
    lifetime: int = 300,
    now: float | None = None,
    algorithm: str = SIGNING_ALGORITHM,
    header: Mapping[str, Any] | None = None,
    claims: Mapping[str, Any] | None = None,
) -> str:
    """A gateway token signed with `private_jwk`.

    `None` for `jku`, `tenant` or `sub` leaves that member out; `header` and `claims` add or
    override members (a value of `None` removes one), for tests that need a bad token.
    """
    key = SigningKey.from_jwk(private_jwk)
    issued = int(time.time() if now is None else now)
    protected: dict[str, Any] = {"typ": "JWT", "kid": key.kid, "jku": jku}
    payload: dict[str, Any] = {
        "iss": iss,
        "sub": sub,
        "aud": aud,
        "tenant": tenant,
        "iat": issued,
        "nbf": issued,
        "exp": issued + lifetime,
        "jti": uuid.uuid4().hex,
    }
    protected.update(header or {})
    payload.update(claims or {})
    protected = {k: v for k, v in protected.items() if v is not None}
    payload = {k: v for k, v in payload.items() if v is not None}
    body = json.dumps(payload, separators=(",", ":")).encode()
    return sign_compact(protected, body, key.key, algorithm)


class FakeGateway:
    """A gateway for tests: real Ed25519 key, real JWKS server on 127.0.0.1, token minting."""

    def __init__(self, *, kid: str = "gateway-key-1", host: str = "127.0.0.1") -> None:
        self.private_jwk = ed25519_private_jwk(kid)
        self.public_jwk = SigningKey.from_jwk(self.private_jwk).public_jwk
        self.host = host
        self.jwks_fetches = 0
        self.jwks_body: bytes | None = None
        """Replace what the JWKS route serves (e.g. garbage), or `None` for the real key set."""
        self.jwks_status = 200
        self.jwks_delay = 0.0
        """Seconds the JWKS route waits before answering (for timeout tests)."""
        self.jwks_redirect: str | None = None
        """Answer the JWKS route with a 302 to this URL instead."""
        self._runner: web.AppRunner | None = None
        self._port = 0

    @property
    def origin(self) -> str:
        if self._runner is None:
            raise RuntimeError("the fake gateway is not started")
        return f"http://{self.host}:{self._port}"

    @property
    def jwks_url(self) -> str:
        return f"{self.origin}/.well-known/jwks.json"

    def token(
        self, *, tenant: str | None, aud: str | list[str], sub: str | None = "caller", **kwargs: Any
    ) -> str:
        """A token as this gateway issues it; keyword arguments go to `make_gateway_token`."""
        options: dict[str, Any] = {"jku": self.jwks_url, "iss": self.origin}
        options.update(kwargs)
        return make_gateway_token(self.private_jwk, aud=aud, tenant=tenant, sub=sub, **options)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/.well-known/jwks.json", self._serve_jwks)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, 0).start()
        self._port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeGateway:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _serve_jwks(self, request: web.Request) -> web.Response:
        self.jwks_fetches += 1
        if self.jwks_delay:
            await asyncio.sleep(self.jwks_delay)
        if self.jwks_redirect is not None:
            raise web.HTTPFound(self.jwks_redirect)
        body = self.jwks_body
        if body is None:
            body = json.dumps({"keys": [self.public_jwk]}).encode()
        return web.Response(body=body, status=self.jwks_status, content_type="application/json")
