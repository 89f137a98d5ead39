"""A fake gateway with real keys: a real aiohttp server on 127.0.0.1 that serves its JWKS.

    async with FakeGateway() as gateway:
        token = gateway.token(tenant="alice", aud="http://127.0.0.1:8080/a2a")
        # send the token to the agent under test, then:
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
from typing import Any

import aiohttp
import attrs
from aiohttp import web

from looping_core.a2a import SigningKey, verify_push
from looping_core.a2a._jose import SIGNING_ALGORITHM, sign_compact
from looping_core.testing._keys import ed25519_private_jwk
from looping_core.testing._local import LocalServer

__all__ = ["FakeGateway", "ReceivedPush", "make_gateway_token"]

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


@attrs.frozen
class ReceivedPush:
    """One push notification as the fake gateway received it, and its verification."""

    inbox: str
    headers: Mapping[str, str]
    body: bytes
    claims: Mapping[str, Any] | None
    """The verified signature claims, or `None` when verification failed (see `error`)."""
    error: str | None
    status: int
    """What the gateway answered (503 while `push_failures` lasts)."""

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class FakeGateway(LocalServer):
    """A gateway for tests: real Ed25519 key, real JWKS server on 127.0.0.1, token minting, and
    push receivers that verify every push against the agent's JWKS."""

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
        self.agent_jwks_url: str | None = None
        """The agent's JWKS; pushes are verified against it (set it before pushes arrive)."""
        self.verify_pushes = True
        """Verify every push (fetching the agent's JWKS each time); benchmarks turn it off."""
        self.push_failures = 0
        """Answer this many more pushes with 503 before accepting them."""
        self.pushes: list[ReceivedPush] = []
        self.push_token = "push-token-" + uuid.uuid4().hex
        self.push_credentials = "push-credentials-" + uuid.uuid4().hex
        self._push_arrived = asyncio.Condition()
        super().__init__()

    @property
    def origin(self) -> str:
        return self._origin

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

    def push_url(self, inbox: str = "inbox") -> str:
        return f"{self.origin}/push/{inbox}"

    def push_config(self, inbox: str = "inbox") -> dict[str, Any]:
        """An inline `taskPushNotificationConfig` aimed at one of this gateway's inboxes."""
        return {
            "url": self.push_url(inbox),
            "token": self.push_token,
            "authentication": {"scheme": "Bearer", "credentials": self.push_credentials},
        }

    async def send_turn(
        self,
        endpoint: str,
        *,
        tenant: str,
        text: str,
        message_id: str | None = None,
        task_id: str | None = None,
        context_id: str | None = None,
        inbox: str | None = "inbox",
        return_immediately: bool = True,
        subject: str = "caller",
    ) -> tuple[int, Any]:
        """Send one turn the way the gateway does: a fresh token, A2A-Version 1.0, a
        `SendMessage` with an inline push config aimed back at this gateway."""
        message: dict[str, Any] = {
            "messageId": message_id or str(uuid.uuid4()),
            "role": "ROLE_USER",
            "parts": [{"text": text}],
        }
        if task_id:
            message["taskId"] = task_id
        if context_id:
            message["contextId"] = context_id
        configuration: dict[str, Any] = {"returnImmediately": return_immediately}
        if inbox is not None:
            configuration["taskPushNotificationConfig"] = self.push_config(inbox)
        params = {"tenant": tenant, "message": message, "configuration": configuration}
        return await self.call(endpoint, "SendMessage", params, tenant=tenant, subject=subject)

    async def call(
        self,
        endpoint: str,
        method: str,
        params: Mapping[str, Any],
        *,
        tenant: str,
        subject: str = "caller",
    ) -> tuple[int, Any]:
        """One JSON-RPC call to the agent with a fresh gateway token for `tenant`."""
        token = self.token(tenant=tenant, aud=endpoint, sub=subject)
        envelope = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}
        headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}
        async with (
            aiohttp.ClientSession() as session,
            session.post(endpoint, json=envelope, headers=headers) as response,
        ):
            return response.status, await response.json()

    async def wait_for_pushes(self, count: int, timeout: float = 10.0) -> list[ReceivedPush]:
        """Wait until `count` pushes were accepted (2xx); return them."""

        def accepted() -> list[ReceivedPush]:
            return [push for push in self.pushes if 200 <= push.status < 300]

        async with asyncio.timeout(timeout), self._push_arrived:
            await self._push_arrived.wait_for(lambda: len(accepted()) >= count)
        return accepted()

    async def _receive_push(self, request: web.Request) -> web.Response:
        body = await request.read()
        inbox = request.match_info["inbox"]
        claims: Mapping[str, Any] | None = None
        error: str | None = None
        if self.verify_pushes:
            try:
                claims = await self._verify(request, body, inbox)
            except Exception as exc:
                error = str(exc)
        status = 200
        if self.push_failures > 0:
            self.push_failures -= 1
            status = 503
        async with self._push_arrived:
            self.pushes.append(
                ReceivedPush(inbox, dict(request.headers), body, claims, error, status)
            )
            self._push_arrived.notify_all()
        return web.Response(status=status)

    async def _verify(self, request: web.Request, body: bytes, inbox: str) -> Mapping[str, Any]:
        if self.agent_jwks_url is None:
            raise RuntimeError("set agent_jwks_url to verify pushes")
        if request.headers.get("Authorization") != f"Bearer {self.push_credentials}":
            raise RuntimeError("wrong Authorization")
        if request.headers.get("X-A2A-Notification-Token") != self.push_token:
            raise RuntimeError("wrong notification token")
        timeout = aiohttp.ClientTimeout(total=5)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(self.agent_jwks_url) as response,
        ):
            jwks = await response.json()
        return verify_push(request.headers, body, jwks, audience=self.push_url(inbox))

    def _routes(self, app: web.Application) -> None:
        app.router.add_get("/.well-known/jwks.json", self._serve_jwks)
        app.router.add_post("/push/{inbox}", self._receive_push)

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
