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
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import attrs

from looping_core.config import Config
from looping_core.errors import LoopingError
from looping_core.gateway._gateway import JWKS_ROUTE, SETTLED_STATES, LocalGateway, user_message
from looping_core.gateway._state import gateway_key
from looping_core.gateway._tokens import mint_token

__all__ = ["AgentRefused", "GatewayError", "Target", "call_agent", "run_gateway", "send_text"]

_LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}


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
                )
        raise GatewayError(
            f"{config.source}: [security] gateway_origins trusts no loopback origin, so a local "
            'gateway cannot stand in front of this agent; add one, such as "http://127.0.0.1:9000"'
        )


async def run_gateway(config: Config, state: Path, ready: asyncio.Event | None = None) -> None:
    """Serve the gateway on the config's trusted loopback origin until canceled."""
    target = Target.of(config)
    gateway = LocalGateway(
        gateway_key(state), host=target.host, port=target.port, agent_jwks_url=target.agent_jwks_url
    )
    try:
        await gateway.start()
    except OSError as exc:
        raise _busy(target, exc) from None
    try:
        if ready is not None:
            ready.set()
        await asyncio.Event().wait()
    finally:
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
) -> Any:
    """One JSON-RPC call with a token of the local gateway; the result, or `AgentRefused`."""
    target = Target.of(config)
    token = mint_token(
        gateway_key(state),
        jku=target.origin + JWKS_ROUTE,
        iss=target.origin,
        aud=target.endpoint,
        tenant=tenant,
        sub=subject,
    )
    envelope = {
        "jsonrpc": "2.0",
        "id": uuid.uuid4().hex,
        "method": method,
        "params": {"tenant": tenant, **params},
    }
    headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(target.endpoint, json=envelope, headers=headers) as response,
        ):
            body = await response.json(content_type=None)
    except (aiohttp.ClientError, ValueError) as exc:
        raise GatewayError(f"cannot reach the agent at {target.endpoint}: {exc}") from None
    if "error" in body:
        raise _refused(body["error"])
    return body["result"]


def _refused(error: Mapping[str, Any]) -> AgentRefused:
    check = None
    for detail in error.get("data") or []:
        if isinstance(detail, Mapping):
            check = (detail.get("metadata") or {}).get("check") or check
    return AgentRefused(int(error.get("code", 0)), str(error.get("message", "")), check)


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
) -> dict[str, Any]:
    """Send `text` as the gateway would and wait for the task to end or ask for input."""
    target = Target.of(config)
    key = gateway_key(state)
    gateway = LocalGateway(
        key, host=target.host, port=target.port, agent_jwks_url=target.agent_jwks_url
    )
    try:
        await gateway.start()
        receiving = True
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise _busy(target, exc) from None
        receiving = False  # a `looping gateway` serves the key set; we ask GetTask instead
    try:
        inbox = f"send-{uuid.uuid4().hex[:12]}"
        message = user_message(text, task_id=task_id, context_id=context_id)
        push = (
            gateway.push_config(inbox)
            if receiving
            else {"url": f"{target.origin}/push/{inbox}", "token": uuid.uuid4().hex}
        )
        params = {
            "message": message,
            "configuration": {"returnImmediately": True, "taskPushNotificationConfig": push},
        }
        result = await call_agent(config, state, tenant, "SendMessage", params, subject=subject)
        task: dict[str, Any] = result["task"]
        async with asyncio.timeout(timeout):
            if receiving:
                await _pushed(gateway, task["id"], inbox)
            # The task as the agent left it, with its history (a push carries none).
            return await _polled(config, state, tenant, task["id"], subject)
    except TimeoutError:
        raise GatewayError(f"no answer within {timeout:g} s") from None
    finally:
        if receiving:
            await gateway.stop()


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
    config: Config, state: Path, tenant: str, task_id: str, subject: str
) -> dict[str, Any]:
    while True:
        task: dict[str, Any] = await call_agent(
            config, state, tenant, "GetTask", {"id": task_id}, subject=subject
        )
        if task["status"]["state"] in SETTLED_STATES:
            return task
        await asyncio.sleep(0.2)
