"""A fake gateway with real keys, for tests: the runtime's `LocalGateway` with a fresh key and
knobs to misbehave.

    async with FakeGateway() as gateway:
        token = gateway.token(tenant="alice", aud="http://127.0.0.1:8080/a2a")
        # send the token to the agent under test, then:
        assert gateway.jwks_fetches == 1

It counts how often its key set is fetched, so tests can prove that a refused token fetched
nothing, and can serve a broken key set, answer slowly or redirect, and fail pushes on purpose.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from looping_core.gateway import LocalGateway, ReceivedPush, mint_token
from looping_core.testing._keys import ed25519_private_jwk

__all__ = ["FakeGateway", "ReceivedPush", "make_gateway_token"]


make_gateway_token = mint_token
"""A gateway token signed with a private JWK: the runtime's `looping_core.gateway.mint_token`."""


class FakeGateway(LocalGateway):
    """A gateway for tests: a fresh Ed25519 key, its JWKS on 127.0.0.1 (a free port unless
    `port` is given), token minting, and push receivers that verify every push. Every push is
    kept, and one that fails verification is recorded with its `error` and answered as any
    other (a test looks at it), not refused as `looping gateway` does."""

    def __init__(
        self, *, kid: str = "gateway-key-1", host: str = "127.0.0.1", port: int = 0
    ) -> None:
        super().__init__(
            ed25519_private_jwk(kid), host=host, port=port, max_pushes=None,
            refuse_unverified=False,
        )  # fmt: skip
        self.jwks_fetches = 0
        self.jwks_body: bytes | None = None
        """Replace what the JWKS route serves (e.g. garbage), or `None` for the real key set."""
        self.jwks_status = 200
        self.jwks_delay = 0.0
        """Seconds the JWKS route waits before answering (for timeout tests)."""
        self.jwks_redirect: str | None = None
        """Answer the JWKS route with a 302 to this URL instead."""
        self.push_failures = 0
        """Answer this many more pushes with 503 before accepting them."""
        self.push_delay = 0.0
        """Seconds a push receiver waits before it reads a push and answers (a slow receiver);
        a push whose sender gave up meanwhile is still kept when the wait ends."""

    def _push_status(self) -> int:
        if self.push_failures > 0:
            self.push_failures -= 1
            return 503
        return 200

    async def _receive_push(self, request: web.Request) -> web.Response:
        if self.push_delay:
            await asyncio.sleep(self.push_delay)
        return await super()._receive_push(request)

    async def _serve_jwks(self, request: web.Request) -> web.Response:
        self.jwks_fetches += 1
        if self.jwks_delay:
            await asyncio.sleep(self.jwks_delay)
        if self.jwks_redirect is not None:
            raise web.HTTPFound(self.jwks_redirect)
        if self.jwks_body is None and self.jwks_status == 200:
            return await super()._serve_jwks(request)
        body = self.jwks_body if self.jwks_body is not None else b'{"keys": []}'
        return web.Response(body=body, status=self.jwks_status, content_type="application/json")
