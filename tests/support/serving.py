"""The edge tests' agent: their tenants served on 127.0.0.1 through the agent harness, and raw
requests to it."""

from __future__ import annotations

import contextlib
import io
import json
import sqlite3
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import attrs
from aiohttp import web

from looping_core.config import Config
from looping_core.gateway.internal import LocalGateway
from looping_core.server.internal import Listener
from looping_core.testing import AgentHarness, ed25519_private_jwk

TENANTS = """
[tenants.alice]
agent = "support.agents:EchoAgent"
[tenants.alice.card]
name = "Alice"
description = "Keeps Alice's notes."
version = "1.2.0"
skills = [{ id = "notes", name = "Notes", description = "Keeps notes.", tags = ["notes"] }]

[tenants.bob]
agent = "support.agents:HoldingAgent"
[tenants.bob.card]
name = "Bob"
description = "Answers for Bob."
skills = [{ id = "answer", name = "Answer", description = "Answers.", tags = ["qa"] }]

[tenants.sdk]
agent = "support.agents:EchoAgent"
allow_configless = true
max_wait_seconds = 10
[tenants.sdk.card]
name = "Configless"
description = "Accepts clients without a push config."
skills = [{ id = "echo", name = "Echo", description = "Echoes.", tags = ["echo"] }]
"""
"""The edge tests' tenants: alice (echoes, asks, refuses, raises), bob (holds turns until told),
sdk (takes clients without a push config)."""

STEPS = """
[tenants.steps]
agent = "support.agents:ProgressAgent"
[tenants.steps.card]
name = "Steps"
description = "Says what it does."
skills = [{ id = "s", name = "S", description = "Steps.", tags = ["s"] }]
"""
"""A tenant that streams its steps (`steps:<key>`: see `ProgressAgent`)."""

FLOOD = """
[tenants.flood]
agent = "support.agents:FloodAgent"
[tenants.flood.card]
name = "Flood"
description = "Streams a lot."
skills = [{ id = "f", name = "F", description = "Floods.", tags = ["f"] }]
"""
"""A tenant that streams more than any socket buffers (`flood:<key>`: see `FloodAgent`)."""

STREAM_LIMITS = """
[streaming]
write_timeout_seconds = 0.5
coalesce_seconds = 0
buffer_events = 1000
max_streams_per_caller = 2
"""
"""A short write deadline and a cap of two streams per caller, for the stream limits' tests."""

UNLIMITED = """
[limits]
caller_turns = 0
tenant_turns = 0
caller_requests_per_second = 0
tenant_requests_per_second = 0
"""
"""For tests that send more at once, or poll faster, than `[limits]` allows a caller on purpose
(fifty duplicates together, a state polled every 20 ms): the limits have tests of their own."""


@attrs.define
class RunningAgent:
    """The agent under test, reachable over real HTTP."""

    config: Config
    signing_jwk: dict[str, Any]
    session: aiohttp.ClientSession
    app: web.Application

    @property
    def base_url(self) -> str:
        return self.config.server.base_url

    @property
    def endpoint(self) -> str:
        return self.config.server.endpoint_url

    async def post(
        self,
        body: bytes | str | Mapping[str, Any],
        *,
        token: str | None = None,
        headers: Mapping[str, str] | None = None,
        version: str | None = "1.0",
        query: str = "",
    ) -> tuple[int, Mapping[str, str], Any]:
        """POST to the endpoint; returns status, headers and the JSON body."""
        sent = {"Content-Type": "application/json"}
        if version is not None:
            sent["A2A-Version"] = version
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        sent.update(headers or {})
        data = body if isinstance(body, bytes | str) else json.dumps(body)
        if len(data) > 65536:
            data = io.BytesIO(data.encode() if isinstance(data, str) else data)
        async with self.session.post(self.endpoint + query, data=data, headers=sent) as response:
            text = await response.text()
            return response.status, response.headers.copy(), json.loads(text) if text else None

    async def rpc(
        self, method: str, params: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> tuple[int, Mapping[str, str], Any]:
        envelope: dict[str, Any] = {"jsonrpc": "2.0", "id": 7, "method": method}
        if params is not None:
            envelope["params"] = params
        return await self.post(envelope, **kwargs)


async def start_agent(
    gateway_origins: list[str],
    *,
    store_url: str | None = None,
    extra: str = "",
    server: str = "",
    signing_jwk: dict[str, Any] | None = None,
    grpc: bool = False,
) -> tuple[RunningAgent, Listener]:
    """Serve the edge tests' tenants through the agent harness, trusting `gateway_origins`;
    `store_url` picks the store (the same one again: a restart; by default a new SQLite file),
    `extra` adds TOML, `server` adds lines to `[server]`; `grpc` serves the gRPC binding too."""
    harness = AgentHarness(
        None,
        config=extra + TENANTS,
        server=server,
        store_url=store_url,
        gateway_origins=gateway_origins,
        signing_jwk=signing_jwk or ed25519_private_jwk("agent-key-1"),
        grpc=grpc,
    )
    await harness.start()
    assert harness.config is not None
    assert harness.app is not None
    running = RunningAgent(
        harness.config, harness.signing_jwk, aiohttp.ClientSession(), harness.app
    )
    return running, harness.listener


@contextlib.asynccontextmanager
async def serving(
    gateway: LocalGateway,
    *,
    extra: str = "",
    store_url: str | None = None,
    server: str = "",
    grpc: bool = False,
) -> AsyncIterator[RunningAgent]:
    """`start_agent` behind `gateway` (which then trusts the agent's JWKS), stopped at the end;
    `grpc` serves the gRPC binding too."""
    agent, listener = await start_agent(
        [gateway.origin], store_url=store_url, extra=extra, server=server, grpc=grpc
    )
    gateway.agent_jwks_url = agent.base_url + "/.well-known/jwks.json"
    try:
        yield agent
    finally:
        await agent.session.close()
        await listener.cleanup()


def keeper(base_url: str, agent: str = "support.agents:NotesAgent", model: bool = True) -> str:
    """TOML for tenant `keeper`: a LoopingAgent with the example notes tools, its model at
    `base_url` (without `model`: no model table)."""
    text = f"""
[plugins]
enabled = ["example-notes"]

[tenants.keeper]
agent = "{agent}"
plugins = ["example-notes"]
[tenants.keeper.card]
name = "Keeper"
description = "Keeps notes."
skills = [{{ id = "notes", name = "Notes", description = "Keeps notes.", tags = ["notes"] }}]
"""
    if model:
        text += f'[tenants.keeper.model]\nmodel = "m"\nbase_url = "{base_url}"\nmax_retries = 0\n'
    return text


def rows(agent: RunningAgent, table: str) -> int:
    path = agent.config.store.url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as connection:
        count: int = connection.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    return count
