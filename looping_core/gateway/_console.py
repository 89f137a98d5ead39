"""The development console (`looping gateway --console`): a page on the local gateway's own
loopback port from which a developer talks to the agent and watches what it did.

The page is static (`console/`: HTML, one script, one style sheet; no build step). What it shows
comes from the agent only through the gateway, as any caller's would: the A2A methods with a
fresh gateway token per call, and the agent's inspection endpoint (`[server] inspection`) with a
token for that endpoint. The gateway adds only what it holds itself: the claims of the tokens it
minted, and the pushes it received with the result of verifying each.

The console's API answers only the page it served: every call must carry the console's token (a
random secret printed once, in the page's URL fragment, so it is sent to no server) in a header
a cross-site page cannot set without a preflight the console never grants, and name the
gateway's own origin as its `Host` (a rebound DNS name does not). The page's Content Security
Policy allows nothing but the gateway's origin.
"""

from __future__ import annotations

import base64
import hmac
import json
import secrets
import uuid
from collections.abc import Awaitable, Callable, Mapping
from importlib import resources
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp
import attrs
from aiohttp import web

from looping_core.a2a import CardSignatureError, verify_card
from looping_core.a2a.internal import read_unverified
from looping_core.config import Config
from looping_core.content import APPROVALS_KEY
from looping_core.gateway._gateway import LocalGateway, user_message

__all__ = ["CONSOLE_HEADER", "CONSOLE_PATH", "ConsoleGateway", "ConsoleTarget"]

CONSOLE_PATH = "/console"
CONSOLE_HEADER = "X-Looping-Console"
"""The header every call of the console's API carries its token in."""
_ASSETS = {"console.js": "text/javascript", "console.css": "text/css"}
_CALLS = frozenset({"GetTask", "ListTasks", "CancelTask"})
"""The A2A methods the page may call (and the two streams it opens: send and subscribe)."""
_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_MAX_FILE_BYTES = 4 * 1024 * 1024
_CLIENT_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=10, sock_read=None)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@attrs.frozen
class ConsoleTarget:
    """The agent the console talks to: its JSON-RPC endpoint (the tokens' audience), its
    inspection endpoint's URL, and the tenants to offer."""

    endpoint: str
    inspection_url: str
    tenants: tuple[str, ...]
    subject: str = "caller"
    """Who the console's caller is (the tokens' `sub`): the same as `looping send`'s."""

    @classmethod
    def of(cls, config: Config) -> ConsoleTarget:
        server = config.server
        return cls(
            endpoint=server.endpoint_url,
            inspection_url=server.inspection_url,
            tenants=tuple(config.tenants),
        )


class ConsoleRefused(Exception):
    """A console API call the gateway will not make (its status and why)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ConsoleGateway(LocalGateway):
    """A local gateway that also serves the console, for `target` (set before the page is
    used; a test sets it once the agent listens)."""

    max_body_bytes = _MAX_FILE_BYTES * 4 // 3 + 65536
    """A file at the limit, as base64 in JSON, with the rest of the message."""

    def __init__(
        self, private_jwk: Mapping[str, Any], *, target: ConsoleTarget | None = None, **kwargs: Any
    ) -> None:
        super().__init__(private_jwk, **kwargs)
        self.target = target
        self.console_token = secrets.token_urlsafe(24)

    @property
    def console_url(self) -> str:
        """The page, with the console's token in the fragment (never sent to a server)."""
        return f"{self.origin}{CONSOLE_PATH}/#token={self.console_token}"

    def _routes(self, app: web.Application) -> None:
        super()._routes(app)
        app.router.add_get(CONSOLE_PATH, self._to_page)
        app.router.add_get(CONSOLE_PATH + "/", self._page)
        app.router.add_get(CONSOLE_PATH + "/{name}", self._asset)
        api = CONSOLE_PATH + "/api/"
        app.router.add_get(api + "agents", self._guarded(self._agents))
        app.router.add_post(api + "send", self._guarded(self._send))
        app.router.add_post(api + "subscribe", self._guarded(self._subscribe))
        app.router.add_post(api + "call", self._guarded(self._call))
        app.router.add_get(api + "inspect", self._guarded(self._inspect))

    # The page

    async def _to_page(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(CONSOLE_PATH + "/")

    async def _page(self, request: web.Request) -> web.Response:
        return self._file("index.html", "text/html")

    async def _asset(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in _ASSETS:
            raise web.HTTPNotFound()
        return self._file(name, _ASSETS[name])

    @staticmethod
    def _file(name: str, content_type: str) -> web.Response:
        body = resources.files("looping_core.gateway").joinpath("console", name).read_bytes()
        headers = {
            "Content-Security-Policy": _POLICY,
            "X-Content-Type-Options": "nosniff",
            "Cache-Control": "no-store",
            "Referrer-Policy": "no-referrer",
        }
        return web.Response(body=body, content_type=content_type, headers=headers)

    # The API's guard

    def _guarded(self, handler: Handler) -> Handler:
        async def guarded(request: web.Request) -> web.StreamResponse:
            try:
                self._check_caller(request)
                if self.target is None:
                    raise ConsoleRefused(503, "the console has no agent to talk to yet")
                return await handler(request)
            except ConsoleRefused as exc:
                return web.json_response({"error": str(exc)}, status=exc.status)
            except (aiohttp.ClientError, TimeoutError) as exc:
                # The agent is down or not listening yet: the page says so (a stream that had
                # begun just ends; its events so far stay on the page).
                endpoint = self.target.endpoint if self.target else "the agent"
                reason = str(exc) or type(exc).__name__
                return web.json_response(
                    {"error": f"the agent at {endpoint} does not answer: {reason}"}, status=502
                )

        return guarded

    def _check_caller(self, request: web.Request) -> None:
        if request.host != urlsplit(self.origin).netloc:
            raise ConsoleRefused(403, "the console answers its own origin only")
        sent = request.headers.get(CONSOLE_HEADER, "")
        if not hmac.compare_digest(sent.encode(), self.console_token.encode()):
            raise ConsoleRefused(403, f"the console's token is missing or wrong ({CONSOLE_HEADER})")
        if request.method == "POST" and request.content_type != "application/json":
            raise ConsoleRefused(415, "send JSON (Content-Type: application/json)")

    # The API

    async def _agents(self, request: web.Request) -> web.Response:
        """Each tenant's signed card (GetExtendedAgentCard) and whether its signature verifies
        against the agent's key set, fetched now."""
        target = self._target
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            jwks = await _get_json(session, self.agent_jwks_url or "")
            agents: list[dict[str, Any]] = []
            for tenant in target.tenants:
                status, answer = await self.call(
                    target.endpoint, "GetExtendedAgentCard", {"tenant": tenant},
                    tenant=tenant, subject=target.subject,
                )  # fmt: skip
                card = answer.get("result") if isinstance(answer, Mapping) else None
                if not isinstance(card, Mapping):
                    agents.append({"tenant": tenant, "error": _error_text(status, answer)})
                    continue
                agents.append({"tenant": tenant, "card": card, "signature": _verified(card, jwks)})
        return web.json_response(
            {"endpoint": target.endpoint, "subject": target.subject, "agents": agents}
        )

    async def _send(self, request: web.Request) -> web.StreamResponse:
        """SendStreamingMessage with the gateway's push config; the agent's stream, as it comes,
        after an event naming the claims of the token it was sent with."""
        body = await _json_body(request)
        tenant = self._tenant(body)
        text = body.get("text", "")
        decisions = _decisions_part(body.get("decisions"))
        if not isinstance(text, str) or not (text.strip() or decisions):
            raise ConsoleRefused(400, "write a message to send")
        task_id = _optional_id(body, "taskId")
        if decisions and task_id is None:
            raise ConsoleRefused(400, "decisions answer a task: name it (taskId)")
        message = user_message(
            text,
            task_id=task_id,
            context_id=_optional_id(body, "contextId"),
            parts=decisions + _file_parts(body.get("file")),
        )
        params = {
            "tenant": tenant,
            "message": message,
            "configuration": {"taskPushNotificationConfig": self.push_config()},
        }
        return await self._stream(request, tenant, "SendStreamingMessage", params, None)

    async def _subscribe(self, request: web.Request) -> web.StreamResponse:
        """SubscribeToTask, resumed after `lastEventId` when given (the stream's cursor)."""
        body = await _json_body(request)
        tenant = self._tenant(body)
        task_id = _optional_id(body, "taskId")
        if task_id is None:
            raise ConsoleRefused(400, "name the task to follow (taskId)")
        cursor = _event_id(body.get("lastEventId"))
        headers = {"Last-Event-ID": cursor} if cursor is not None else None
        params = {"tenant": tenant, "id": task_id}
        return await self._stream(request, tenant, "SubscribeToTask", params, headers)

    async def _call(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        tenant = self._tenant(body)
        method, params = body.get("method"), body.get("params", {})
        if method not in _CALLS:
            raise ConsoleRefused(400, f"the console calls only {', '.join(sorted(_CALLS))}")
        if not isinstance(params, dict):
            raise ConsoleRefused(400, "params must be an object")
        status, answer = await self.call(
            self._target.endpoint, str(method), {**params, "tenant": tenant},
            tenant=tenant, subject=self._target.subject,
        )  # fmt: skip
        return web.json_response(answer, status=200 if status < 500 else 502)

    async def _inspect(self, request: web.Request) -> web.Response:
        """The agent's inspection of one task, with the pushes this gateway received for it and
        the claims of the token the inspection was read with."""
        tenant = self._tenant(dict(request.query))
        task_id = request.query.get("task", "")
        if not task_id:
            raise ConsoleRefused(400, "name the task (task=...)")
        target = self._target
        token = self.token(tenant=tenant, aud=target.inspection_url, sub=target.subject)
        url = f"{target.inspection_url}/{_quoted(tenant)}/tasks/{_quoted(task_id)}"
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
            session.get(url, headers={"Authorization": f"Bearer {token}"}) as response,
        ):
            status, text = response.status, await response.text()
        try:
            answer = json.loads(text)
        except ValueError:
            answer = None
        if not isinstance(answer, Mapping):
            missing = "the agent serves no inspection endpoint: set [server] inspection = true"
            reason = missing if status == 404 else f"the agent answered HTTP {status}"
            answer = {"error": {"message": reason}}
        received = [
            {
                "inbox": push.inbox,
                "status": push.status,
                "verified": push.claims is not None,
                "claims": push.claims,
                "error": push.error,
                "body": push.json if push.body else None,
            }
            for push in self.pushes
            if push.task_id == task_id
        ]
        document = {
            "inspection": answer,
            "status": status,
            "received": received,
            "tokenClaims": _claims_of(token),
        }
        return web.json_response(document)

    # Helpers

    @property
    def _target(self) -> ConsoleTarget:
        assert self.target is not None  # the guard refused the call otherwise
        return self.target

    def _tenant(self, body: Mapping[str, Any]) -> str:
        tenant = body.get("tenant")
        if tenant not in self._target.tenants:
            raise ConsoleRefused(400, "choose one of the agent's tenants")
        return str(tenant)

    async def _stream(
        self,
        request: web.Request,
        tenant: str,
        method: str,
        params: Mapping[str, Any],
        headers: Mapping[str, str] | None,
    ) -> web.StreamResponse:
        target = self._target
        token = self.token(tenant=tenant, aud=target.endpoint, sub=target.subject)
        envelope = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}
        sent = {
            **(headers or {}),
            "Authorization": f"Bearer {token}",
            "A2A-Version": "1.0",
            "Accept": "text/event-stream",
        }
        async with (
            aiohttp.ClientSession(timeout=_CLIENT_TIMEOUT) as session,
            session.post(target.endpoint, json=envelope, headers=sent) as upstream,
        ):
            if upstream.content_type != "text/event-stream":
                body = await upstream.read()
                return web.Response(body=body, status=200, content_type="application/json")
            # `no-cache`, not `no-store`: Chromium reports a no-store stream read to its end
            # as aborted (microsoft/playwright#42742); a POST's answer is never reused anyway.
            response = web.StreamResponse(
                headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
            )
            await response.prepare(request)
            claims = json.dumps(_claims_of(token))
            await response.write(f"event: token\ndata: {claims}\n\n".encode())
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response


def _quoted(value: str) -> str:
    return quote(value, safe="")


def _claims_of(token: str) -> dict[str, Any]:
    """The claims of a token this gateway minted (its own: nothing to verify)."""
    _, claims = read_unverified(token)
    return claims


def _verified(card: Mapping[str, Any], jwks: Any) -> dict[str, Any]:
    if not isinstance(jwks, Mapping):
        return {"verified": False, "error": "the agent's key set could not be fetched"}
    try:
        header = verify_card(card, jwks)
    except CardSignatureError as exc:
        return {"verified": False, "error": str(exc)}
    return {"verified": True, "kid": header.get("kid"), "jku": header.get("jku")}


async def _get_json(session: aiohttp.ClientSession, url: str) -> Any:
    try:
        async with session.get(url) as response:
            return await response.json(content_type=None)
    except (aiohttp.ClientError, ValueError):
        return None


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        raise ConsoleRefused(400, "the body is not JSON") from None
    if not isinstance(body, dict):
        raise ConsoleRefused(400, "the body must be a JSON object")
    return body


def _optional_id(body: Mapping[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise ConsoleRefused(400, f"{key} must be a string")
    return value


def _decisions_part(decisions: Any) -> list[dict[str, Any]]:
    """The page's decisions on the calls a task waits for, as the data part that answers it
    (the agent checks each decision; here only the shape the page sends)."""
    if decisions is None:
        return []
    if not isinstance(decisions, list) or not all(isinstance(d, Mapping) for d in decisions):
        raise ConsoleRefused(400, "decisions must be a list of {callId, approve, reason}")
    return [{"data": {APPROVALS_KEY: {"decisions": [dict(d) for d in decisions]}}}]


def _file_parts(file: Any) -> list[dict[str, Any]]:
    """A file the page attached: one part with its bytes (base64, as A2A's JSON carries them)."""
    if file is None:
        return []
    if not isinstance(file, Mapping) or not isinstance(file.get("data"), str):
        raise ConsoleRefused(400, "file must be {name, mediaType, data (base64)}")
    try:
        size = len(base64.b64decode(file["data"], validate=True))
    except ValueError:
        raise ConsoleRefused(400, "file data is not base64") from None
    if size > _MAX_FILE_BYTES:
        raise ConsoleRefused(413, f"the file is larger than {_MAX_FILE_BYTES // 1048576} MiB")
    part: dict[str, Any] = {"raw": file["data"]}
    if isinstance(file.get("mediaType"), str) and file["mediaType"]:
        part["mediaType"] = file["mediaType"]
    if isinstance(file.get("name"), str) and file["name"]:
        part["filename"] = file["name"]
    return [part]


def _error_text(status: int, answer: Any) -> str:
    if isinstance(answer, Mapping) and isinstance(answer.get("error"), Mapping):
        return str(answer["error"].get("message", "refused"))
    return f"HTTP {status}"


def _event_id(cursor: Any) -> str | None:
    """A stream's cursor as the page sends it: an event number (digits), or nothing. Anything
    else (a CR or LF would split the header) is the page's mistake, refused with 400."""
    if cursor is None or cursor == "":
        return None
    text = str(cursor) if isinstance(cursor, int) and not isinstance(cursor, bool) else cursor
    if not isinstance(text, str) or not text.isascii() or not text.isdigit() or len(text) > 18:
        raise ConsoleRefused(400, "lastEventId must be an event number (digits only)")
    return text
