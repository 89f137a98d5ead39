"""A local gateway: what stands in front of an agent on one machine, with no bypass of any check.

It has its own Ed25519 key and serves the public half as its JWKS on a loopback port; it mints
gateway tokens the way a real gateway does (`jku` its key set, `iss` its origin, `aud` the
agent's endpoint, `tenant`, `sub`); it sends turns as a gateway does (a fresh token, A2A-Version
1.0, `SendMessage` with an inline push config aimed back at itself); and it receives pushes,
verifying each one's signature against the agent's JWKS before it counts: one that fails is
answered 401 (`refuse_unverified`), and only the latest `max_pushes` are kept.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import aiohttp
import attrs
from aiohttp import web

from looping_core.a2a import SigningKey, verify_push
from looping_core.content import APPROVALS_KEY
from looping_core.gateway._local import LocalServer
from looping_core.gateway._tokens import mint_token

__all__ = [
    "JWKS_ROUTE",
    "SETTLED_STATES",
    "LocalGateway",
    "ReceivedPush",
    "pending_calls",
    "user_message",
]

JWKS_ROUTE = "/.well-known/jwks.json"


@attrs.frozen
class ReceivedPush:
    """One push notification as the gateway received it, and its verification."""

    inbox: str
    headers: Mapping[str, str]
    body: bytes
    claims: Mapping[str, Any] | None
    """The verified signature claims, or `None` when verification failed (see `error`)."""
    error: str | None
    status: int
    """What the gateway answered."""

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def task_id(self) -> str | None:
        """The task the push is about (a task, a status or an artifact update), if its body
        names one."""
        try:
            body = self.json
        except ValueError:
            return None
        if not isinstance(body, dict):
            return None
        for kind, key in (("task", "id"), ("statusUpdate", "taskId"), ("artifactUpdate", "taskId")):
            event = body.get(kind)
            if isinstance(event, dict) and isinstance(event.get(key), str):
                return str(event[key])
        return None


SETTLED_STATES = frozenset(
    {
        "TASK_STATE_COMPLETED",
        "TASK_STATE_FAILED",
        "TASK_STATE_CANCELED",
        "TASK_STATE_REJECTED",
        "TASK_STATE_INPUT_REQUIRED",
        "TASK_STATE_AUTH_REQUIRED",
    }
)
"""The states a caller waits for: the task ended, or it asks for input or authorization."""


def user_message(
    text: str,
    *,
    message_id: str | None = None,
    task_id: str | None = None,
    context_id: str | None = None,
    parts: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A caller's text message in A2A's JSON form (a fresh messageId unless given); `parts`
    (A2A parts as JSON: data, files) follow the text (no text part when `text` is empty)."""
    message: dict[str, Any] = {
        "messageId": message_id or str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": [*([{"text": text}] if text else []), *(dict(part) for part in parts)],
    }
    if task_id:
        message["taskId"] = task_id
    if context_id:
        message["contextId"] = context_id
    return message


def pending_calls(task: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The tool calls a task (ProtoJSON) waits for the caller to decide on: each with its
    `callId`, `tool` and `arguments`; none unless it asks for them."""
    status = task.get("status") or {}
    if status.get("state") != "TASK_STATE_INPUT_REQUIRED":
        return []
    for part in (status.get("message") or {}).get("parts", []):
        data = part.get("data")
        if isinstance(data, dict) and isinstance(data.get(APPROVALS_KEY), dict):
            pending = data[APPROVALS_KEY].get("pending")
            if isinstance(pending, list):
                return [call for call in pending if isinstance(call, dict)]
    return []


def _derived(private_jwk: Mapping[str, Any], purpose: str) -> str:
    """A secret of the gateway's own for `purpose`, derived from its private key (one way: it
    gives nothing of the key away)."""
    key = json.dumps(private_jwk, sort_keys=True).encode()
    return hmac.new(key, purpose.encode(), hashlib.sha256).hexdigest()[:32]


class LocalGateway(LocalServer):
    """A gateway on `host:port` (a free port when 0) with `private_jwk` as its key."""

    def __init__(
        self,
        private_jwk: Mapping[str, Any],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        agent_jwks_url: str | None = None,
        max_pushes: int | None = 100,
        refuse_unverified: bool = True,
    ) -> None:
        """`max_pushes`: how many received pushes `pushes` keeps (the latest; `None`: all).
        `refuse_unverified`: answer a push that fails verification 401, as a real gateway
        does, instead of recording it with its error and answering as usual (tests)."""
        self.private_jwk = dict(private_jwk)
        self.max_pushes = max_pushes
        self.refuse_unverified = refuse_unverified
        self.public_jwk = SigningKey.from_jwk(self.private_jwk).public_jwk
        self.host = host
        self.agent_jwks_url = agent_jwks_url
        """The agent's JWKS; pushes are verified against it (set it before pushes arrive)."""
        self.verify_pushes = True
        self.pushes: list[ReceivedPush] = []
        # The same in every process that holds this gateway's key: a `looping send` beside a
        # standing `looping gateway` gives the agent credentials the standing one accepts.
        self.push_token = "push-token-" + _derived(self.private_jwk, "push token")
        self.push_credentials = "push-credentials-" + _derived(self.private_jwk, "push credentials")
        self._push_arrived = asyncio.Condition()
        super().__init__(port)

    @property
    def origin(self) -> str:
        return self._origin

    @property
    def jwks_url(self) -> str:
        return f"{self.origin}{JWKS_ROUTE}"

    def token(
        self, *, tenant: str | None, aud: str | list[str], sub: str | None = "caller", **kwargs: Any
    ) -> str:
        """A token as this gateway issues it; keyword arguments go to `mint_token`."""
        options: dict[str, Any] = {"jku": self.jwks_url, "iss": self.origin}
        options.update(kwargs)
        return mint_token(self.private_jwk, aud=aud, tenant=tenant, sub=sub, **options)

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
        parts: Sequence[Mapping[str, Any]] = (),
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, Any]:
        """Send one turn the way a gateway does: a fresh token, A2A-Version 1.0, a
        `SendMessage` with an inline push config aimed back at this gateway. `parts` follow the
        text (see `user_message`); `headers` are added (a `traceparent`, say)."""
        message = user_message(
            text, message_id=message_id, task_id=task_id, context_id=context_id, parts=parts
        )
        configuration: dict[str, Any] = {"returnImmediately": return_immediately}
        if inbox is not None:
            configuration["taskPushNotificationConfig"] = self.push_config(inbox)
        params = {"tenant": tenant, "message": message, "configuration": configuration}
        return await self.call(
            endpoint, "SendMessage", params, tenant=tenant, subject=subject, headers=headers
        )

    async def call(
        self,
        endpoint: str,
        method: str,
        params: Mapping[str, Any],
        *,
        tenant: str,
        subject: str = "caller",
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, Any]:
        """One JSON-RPC call to the agent with a fresh gateway token for `tenant` (and
        `headers` added)."""
        token = self.token(tenant=tenant, aud=endpoint, sub=subject)
        envelope = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}
        sent = {**(headers or {}), "Authorization": f"Bearer {token}", "A2A-Version": "1.0"}
        async with (
            aiohttp.ClientSession() as session,
            session.post(endpoint, json=envelope, headers=sent) as response,
        ):
            if response.content_type != "application/json":
                return response.status, {"error": {"message": await response.text()}}
            return response.status, await response.json()

    async def wait_for_pushes(self, count: int, timeout: float = 10.0) -> list[ReceivedPush]:
        """Wait until `count` pushes were accepted (2xx); return them."""

        def accepted() -> list[ReceivedPush]:
            return [push for push in self.pushes if 200 <= push.status < 300]

        async with asyncio.timeout(timeout), self._push_arrived:
            await self._push_arrived.wait_for(lambda: len(accepted()) >= count)
        return accepted()

    async def wait_for_pushes_of(
        self, task_ids: Iterable[str], timeout: float = 10.0
    ) -> dict[str, list[ReceivedPush]]:
        """Wait until a push of every task in `task_ids` was accepted (2xx); return each task's
        accepted pushes in the order they came. Pushes are delivered at least once, so a task
        may have two (the same `jti`): counting pushes is not counting tasks."""
        wanted = set(task_ids)

        def accepted() -> dict[str, list[ReceivedPush]]:
            found: dict[str, list[ReceivedPush]] = {}
            for push in self.pushes:
                task_id = push.task_id
                if 200 <= push.status < 300 and task_id in wanted:
                    found.setdefault(task_id, []).append(push)
            return found

        async with asyncio.timeout(timeout), self._push_arrived:
            await self._push_arrived.wait_for(lambda: len(accepted()) == len(wanted))
        return accepted()

    def _push_status(self) -> int:
        """What to answer a push with (a test gateway may fail some on purpose)."""
        return 200

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
        refused = error is not None and self.refuse_unverified
        status = 401 if refused else self._push_status()
        async with self._push_arrived:
            kept = b"" if refused else body  # a refused push's body is nobody's business
            self.pushes.append(
                ReceivedPush(inbox, dict(request.headers), kept, claims, error, status)
            )
            if self.max_pushes is not None and len(self.pushes) > self.max_pushes:
                del self.pushes[: len(self.pushes) - self.max_pushes]
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
        app.router.add_get(JWKS_ROUTE, self._serve_jwks)
        app.router.add_post("/push/{inbox}", self._receive_push)

    async def _serve_jwks(self, request: web.Request) -> web.Response:
        body = json.dumps({"keys": [self.public_jwk]}).encode()
        return web.Response(body=body, content_type="application/json")
