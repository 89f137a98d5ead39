"""What `looping gateway`, `looping send` and `looping tasks` do: run the local gateway on the
origin a config trusts, and talk to the agent through it as a caller would.

`send` runs the gateway itself for as long as it waits (its JWKS and its push receiver, on the
trusted origin), unless a `looping gateway` already listens there: then it mints with the same
key (from the same state folder) and, having no receiver of its own, asks `GetTask` until the
task ends. Either way the answer is the task as the agent left it.
"""

from __future__ import annotations

import asyncio
import errno
import signal
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp
import attrs

from looping_core.config import Config
from looping_core.errors import LoopingError
from looping_core.gateway._console import ConsoleGateway, ConsoleTarget
from looping_core.gateway._gateway import JWKS_ROUTE, SETTLED_STATES, LocalGateway, user_message
from looping_core.gateway._grpc_client import call_over_grpc
from looping_core.gateway._state import gateway_key
from looping_core.gateway._tokens import mint_token

__all__ = [
    "AgentRefused",
    "GatewayError",
    "Target",
    "TurnSender",
    "call_agent",
    "run_gateway",
    "send_text",
]

_LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
STARTING_SECONDS = 10.0
"""How long a call waits for an agent that refuses connections (it is still starting)."""


class GatewayError(LoopingError):
    """The local gateway cannot do what was asked (no trusted loopback origin, a busy port)."""


class AgentRefused(LoopingError):
    """The agent answered with a JSON-RPC error; `check` names a refused token's check."""

    def __init__(self, code: int, message: str, check: str | None) -> None:
        self.code, self.check = code, check
        detail = f" (check: {check})" if check else ""
        super().__init__(f"the agent refused: {message} [{code}]{detail}")


@attrs.frozen
class Target:
    """Where the agent is, and where the gateway stands, as a config says."""

    endpoint: str
    agent_jwks_url: str
    origin: str
    host: str
    port: int
    rest_url: str = ""
    """The HTTP+JSON binding's URL (a REST token's audience)."""
    grpc_address: str = ""
    """The gRPC binding's `host:port` (a gRPC token's audience); empty: not served."""

    def audience(self, binding: str) -> str:
        """The URL (or address) a token for `binding` (`jsonrpc`, `rest`, `grpc`) is for."""
        return {"rest": self.rest_url, "grpc": self.grpc_address}.get(binding, self.endpoint)

    @classmethod
    def of(cls, config: Config) -> Target:
        for origin in config.security.gateway_origins:
            parts = urlsplit(origin)
            if parts.scheme == "http" and parts.hostname in _LOOPBACK and parts.port:
                return cls(
                    endpoint=config.server.endpoint_url,
                    agent_jwks_url=config.server.base_url + JWKS_ROUTE,
                    origin=origin,
                    host=parts.hostname,
                    port=parts.port,
                    rest_url=config.server.rest_url,
                    grpc_address=config.server.grpc_url if config.server.grpc_port else "",
                )
        raise GatewayError(
            f"{config.source}: [security] gateway_origins trusts no loopback origin, so a local "
            'gateway cannot stand in front of this agent; add one, such as "http://127.0.0.1:9000"'
        )


async def run_gateway(
    config: Config,
    state: Path,
    ready: asyncio.Event | None = None,
    *,
    console: bool = False,
    announce: Callable[[str], None] | None = None,
) -> None:
    """Serve the gateway on the config's trusted loopback origin until SIGINT or SIGTERM (or
    until canceled). The handlers are its own: a shell starts a background job with SIGINT
    ignored, and Python then never raises KeyboardInterrupt for it. `console`: serve the
    development console too; `announce` is told its URL (with its token) once it listens."""
    target = Target.of(config)
    key = gateway_key(state)
    where: dict[str, Any] = {
        "host": target.host, "port": target.port, "agent_jwks_url": target.agent_jwks_url
    }  # fmt: skip
    gateway = (
        ConsoleGateway(key, target=ConsoleTarget.of(config), **where)
        if console
        else LocalGateway(key, **where)
    )
    try:
        await gateway.start()
    except OSError as exc:
        raise _busy(target, exc) from None
    if isinstance(gateway, ConsoleGateway) and announce is not None:
        announce(gateway.console_url)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, stopping.set)
    try:
        if ready is not None:
            ready.set()
        await stopping.wait()
    finally:
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)
        await gateway.stop()


def _busy(target: Target, exc: OSError) -> GatewayError:
    if exc.errno == errno.EADDRINUSE:
        return GatewayError(f"{target.origin} is in use (is a `looping gateway` running already?)")
    return GatewayError(f"cannot listen on {target.origin}: {exc.strerror}")


async def call_agent(
    config: Config,
    state: Path,
    tenant: str,
    method: str,
    params: Mapping[str, Any],
    *,
    subject: str = "caller",
    binding: str = "jsonrpc",
    starting_seconds: float = STARTING_SECONDS,
) -> Any:
    """One call with a token of the local gateway, on `binding` (`jsonrpc`, `rest`: the
    HTTP+JSON binding, or `grpc`); the result, or `AgentRefused`. An agent that does not answer
    yet (still starting) is tried again for `starting_seconds`."""
    target = Target.of(config)
    if binding == "grpc" and not target.grpc_address:
        raise GatewayError(
            f"{config.source}: this agent serves no gRPC; set [server] grpc_port to serve it"
        )
    token = mint_token(
        gateway_key(state),
        jku=target.origin + JWKS_ROUTE,
        iss=target.origin,
        aud=target.audience(binding),
        tenant=tenant,
        sub=subject,
    )
    headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}
    if binding == "grpc":
        params = {"tenant": tenant, **params}
        answer, refusal = await call_over_grpc(
            target.grpc_address, method, params, headers, starting_seconds
        )
        if refusal is not None:
            raise AgentRefused(*refusal)
        return answer
    if binding == "rest":
        verb, url, body = _rest_request(target, tenant, method, params)
    else:
        verb, url = "POST", target.endpoint
        body = {
            "jsonrpc": "2.0",
            "id": uuid.uuid4().hex,
            "method": method,
            "params": {"tenant": tenant, **params},
        }
    answer = await _exchange(verb, url, body, headers, starting_seconds)
    if binding == "rest":
        if isinstance(answer, Mapping) and isinstance(answer.get("error"), Mapping):
            raise _refused_rest(answer["error"])
        return answer
    if "error" in answer:
        raise _refused(answer["error"])
    return answer["result"]


_REST_ROUTES = {
    "SendMessage": ("POST", "/message:send"),
    "GetTask": ("GET", "/tasks/{id}"),
    "ListTasks": ("GET", "/tasks"),
    "CancelTask": ("POST", "/tasks/{id}:cancel"),
}


def _rest_request(
    target: Target, tenant: str, method: str, params: Mapping[str, Any]
) -> tuple[str, str, Any]:
    """The HTTP+JSON binding's request for `method`: its verb, URL (the tenant first in the
    path) and body (`None` for a GET, whose params go in the query)."""
    if method not in _REST_ROUTES:
        raise GatewayError(f"{method} is not one the local gateway sends over HTTP+JSON")
    verb, template = _REST_ROUTES[method]
    rest = dict(params)
    path = template
    if "{id}" in template:
        path = template.replace("{id}", quote(str(rest.pop("id", "")), safe=""))
    url = f"{target.rest_url}/{quote(tenant, safe='')}{path}"
    if verb == "GET":
        query = "&".join(f"{quote(k)}={quote(str(v))}" for k, v in rest.items())
        return verb, url + (f"?{query}" if query else ""), None
    return verb, url, rest


async def _exchange(
    verb: str, url: str, body: Any, headers: Mapping[str, str], starting_seconds: float
) -> Any:
    """Send one request; an agent that refuses connections (still starting) is tried again,
    every 0.1 s and then less often, for `starting_seconds`."""
    deadline = asyncio.get_running_loop().time() + starting_seconds
    delay = 0.1
    while True:
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.request(verb, url, json=body, headers=headers) as response,
            ):
                return await response.json(content_type=None)
        except aiohttp.ClientConnectorError as exc:
            if asyncio.get_running_loop().time() + delay > deadline:
                raise GatewayError(f"cannot reach the agent at {url}: {exc}") from None
        except (aiohttp.ClientError, ValueError) as exc:
            raise GatewayError(f"cannot reach the agent at {url}: {exc}") from None
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)


def _refused_rest(error: Mapping[str, Any]) -> AgentRefused:
    """The HTTP+JSON binding's `google.rpc.Status` error as `AgentRefused`."""
    return _refused(error, details="details")


def _refused(error: Mapping[str, Any], details: str = "data") -> AgentRefused:
    """A JSON-RPC error (its details in `data`) as `AgentRefused`, with the token check the
    agent named, if any."""
    check = None
    for detail in error.get(details) or []:
        if isinstance(detail, Mapping):
            check = (detail.get("metadata") or {}).get("check") or check
    return AgentRefused(int(error.get("code", 0)), str(error.get("message", "")), check)


class TurnSender:
    """Sends turns as the gateway would (`async with`): the local gateway that receives their
    pushes is started once for all of them, so many turns may be waited for at once. When a
    `looping gateway` holds its port already, that one takes the pushes (same key, same push
    credentials) and each answer is read back with `GetTask`."""

    def __init__(self, config: Config, state: Path, *, binding: str = "jsonrpc") -> None:
        self._config = config
        self._state = state
        self._binding = binding
        self._target = Target.of(config)
        self._gateway = LocalGateway(
            gateway_key(state),
            host=self._target.host,
            port=self._target.port,
            agent_jwks_url=self._target.agent_jwks_url,
        )
        self._receiving = False

    async def __aenter__(self) -> TurnSender:
        try:
            await self._gateway.start()
            self._receiving = True
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise _busy(self._target, exc) from None
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._receiving:
            await self._gateway.stop()

    async def send(
        self,
        tenant: str,
        text: str,
        *,
        task_id: str | None = None,
        context_id: str | None = None,
        subject: str = "caller",
        timeout: float = 120.0,
        parts: Sequence[Mapping[str, Any]] = (),
    ) -> dict[str, Any]:
        """Send `text` (and `parts`: data, files, decisions) and wait for the task to end or ask
        for input; the task as the agent left it, with its history."""
        config, state, binding = self._config, self._state, self._binding
        inbox = f"send-{uuid.uuid4().hex[:12]}"
        message = user_message(text, task_id=task_id, context_id=context_id, parts=parts)
        push = self._gateway.push_config(inbox)
        params = {
            "message": message,
            "configuration": {"returnImmediately": True, "taskPushNotificationConfig": push},
        }
        result = await call_agent(
            config, state, tenant, "SendMessage", params, subject=subject, binding=binding
        )
        task: dict[str, Any] = result["task"]
        try:
            async with asyncio.timeout(timeout):
                if self._receiving:
                    await _pushed(self._gateway, task["id"], inbox)
                # A push carries no history: the task is read back.
                return await _polled(
                    config, state, tenant, task["id"], subject=subject, binding=binding
                )
        except TimeoutError:
            raise GatewayError(f"no answer within {timeout:g} s") from None


async def send_text(
    config: Config,
    state: Path,
    tenant: str,
    text: str,
    *,
    task_id: str | None = None,
    context_id: str | None = None,
    subject: str = "caller",
    timeout: float = 120.0,
    binding: str = "jsonrpc",
    parts: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Send `text` (and `parts`: data, files) as the gateway would (on `binding`) and wait for
    the task to end or ask for input."""
    async with TurnSender(config, state, binding=binding) as sender:
        return await sender.send(
            tenant, text, task_id=task_id, context_id=context_id, subject=subject,
            timeout=timeout, parts=parts,
        )  # fmt: skip


async def _pushed(gateway: LocalGateway, task_id: str, inbox: str) -> dict[str, Any]:
    """The first verified push of the task in a settled state (a push that fails verification
    is an error: something else answered in the agent's name)."""
    seen = 0
    while True:
        pushes = await gateway.wait_for_pushes(seen + 1, timeout=3600)
        for push in pushes[seen:]:
            if push.inbox != inbox:
                continue
            if push.error is not None:
                raise GatewayError(f"a push failed verification: {push.error}")
            task: dict[str, Any] = push.json["task"]
            if task["id"] == task_id and task["status"]["state"] in SETTLED_STATES:
                return task
        seen = len(pushes)


async def _polled(
    config: Config, state: Path, tenant: str, task_id: str, *, subject: str, binding: str
) -> dict[str, Any]:
    while True:
        task: dict[str, Any] = await call_agent(
            config, state, tenant, "GetTask", {"id": task_id}, subject=subject, binding=binding
        )
        if task["status"]["state"] in SETTLED_STATES:
            return task
        await asyncio.sleep(0.2)
