"""The agent harness: an agent served in-process behind a fake gateway, a turn sent the way the
gateway sends it, and its result taken from the verified push.

    async with AgentHarness("my_agents:NotesAgent", model=ScriptedModel.says("Noted.")) as h:
        task = await h.send("remember milk")           # the accepted task, as the gateway gets it
        done = await h.result(task)                     # the task from its verified push
        assert done["artifacts"][0]["parts"] == [{"text": "Noted."}]

Everything is real but the model: the agent's key and JWKS, the gateway's key and tokens, the
edge's checks, the store (a fresh SQLite file, removed when the harness stops, unless `store_url`
says otherwise), the runner and the signed push. The config is built in code; `config` adds TOML
(plugins, settings, other tenants).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import unused_port

from looping_core.agent import ChatModel
from looping_core.config import Config, parse_config
from looping_core.content import APPROVALS_KEY
from looping_core.evals import Case, CaseResult, Dataset, Grader, run_case
from looping_core.gateway.internal import SETTLED_STATES, Startable, pending_calls
from looping_core.server.internal import Listener, create_app, listen
from looping_core.testing._evals import EvalSendFailed
from looping_core.testing._gateway import FakeGateway
from looping_core.testing._keys import ed25519_private_jwk

__all__ = ["AgentHarness", "config_toml", "tenant_toml"]

_KEY_VARIABLE = "LOOPING_HARNESS_SIGNING_KEY"


def config_toml(
    *,
    port: int,
    gateway_origins: Sequence[str],
    signing_key_env: str,
    store_url: str,
    server: str = "",
    extra: str = "",
) -> str:
    """A whole `looping.toml` for an agent under test on 127.0.0.1:`port`: the server (plus
    `server` lines), the trusted gateways, the key's environment variable, the store, then
    `extra` (tenants, plugins, runner and push settings). What the harness serves in-process,
    and what tests that run `looping serve` as a process write to a file."""
    return f"""
[server]
host = "127.0.0.1"
port = {port}
{server}
[security]
signing_key = "env:{signing_key_env}"
gateway_origins = {json.dumps(list(gateway_origins))}
[store]
url = "{store_url}"
{extra}"""


def tenant_toml(tenant: str, agent: str, settings: str = "") -> str:
    """A `[tenants.<tenant>]` table serving `agent` (`"module:Class"`) with a test card;
    `settings` adds keys to the table."""
    return f"""
[tenants.{tenant}]
agent = "{agent}"
{settings}
[tenants.{tenant}.card]
name = "Agent under test"
description = "The agent a test drives."
skills = [{{ id = "test", name = "Test", description = "Tested.", tags = ["test"] }}]
"""


class AgentHarness(Startable):
    """One agent (tenant `tenant`) served on 127.0.0.1 behind a `FakeGateway`."""

    def __init__(
        self,
        agent: str | None,
        *,
        tenant: str = "agent",
        model: ChatModel | Sequence[ChatModel] | None = None,
        plugins: Sequence[str] = (),
        config: str = "",
        store_url: str | None = None,
        server: str = "",
        gateway: FakeGateway | None = None,
        gateway_origins: Sequence[str] | None = None,
        signing_jwk: Mapping[str, Any] | None = None,
        grpc: bool = False,
    ) -> None:
        """`agent` is `"module:Class"`, served as tenant `tenant` (`None`: the tenants are all
        in `config`); `model` (or models, the first then its fallbacks) replaces
        `[tenants.<tenant>.model]`; `plugins` are enabled; `config` adds TOML and `server` lines
        of `[server]`. The harness starts its own `FakeGateway` unless given one, or given the
        `gateway_origins` to trust instead (then it sends nothing itself). `grpc` serves the
        gRPC binding too, on a port of its own (`grpc_address`; the `grpc` extra)."""
        self.agent = agent
        self.tenant = tenant
        self.models: tuple[ChatModel, ...] = (
            () if model is None else tuple(model) if isinstance(model, Sequence) else (model,)
        )
        self.plugins = tuple(plugins)
        self.extra = config
        self.server_lines = server
        self.store_url = store_url
        self._own_gateway = gateway is None and gateway_origins is None
        self._gateway = FakeGateway() if self._own_gateway else gateway
        self._origins = tuple(gateway_origins) if gateway_origins is not None else None
        self.signing_jwk = dict(signing_jwk or ed25519_private_jwk("agent-key"))
        self.port = 0
        self.grpc_port = 0
        self._grpc = grpc
        self.config: Config | None = None
        self.app: web.Application | None = None
        self._listener: Listener | None = None
        self._taken: set[int] = set()
        self._own_folder: Path | None = None
        """The temporary folder of the store it made itself (removed when it stops)."""

    @property
    def gateway(self) -> FakeGateway:
        if self._gateway is None:
            raise RuntimeError("this harness trusts given gateway origins and has no gateway")
        return self._gateway

    @property
    def listener(self) -> Listener:
        if self._listener is None:
            raise RuntimeError("the harness is not started")
        return self._listener

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def grpc_address(self) -> str:
        """Where the gRPC binding listens (`host:port`; the audience of tokens for it)."""
        if not self.grpc_port:
            raise RuntimeError("this harness serves no gRPC: make it with grpc=True")
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def endpoint(self) -> str:
        return self.base_url + "/a2a"

    def _toml(self) -> str:
        store_url = self.store_url
        if store_url is None:
            self._own_folder = Path(tempfile.mkdtemp(prefix="looping-harness-"))
            store_url = f"sqlite:///{self._own_folder / 'looping.db'}"
        origins = self._origins if self._origins is not None else (self.gateway.origin,)
        extra = ""
        if "[push]" not in self.extra:  # quick retries, unless the test sets its own
            extra += "[push]\nbackoff_seconds = 0.05\nbackoff_max_seconds = 0.2\n"
        if self.plugins:
            extra += f"[plugins]\nenabled = {json.dumps(list(self.plugins))}\n"
        if self.agent is not None:
            extra += tenant_toml(self.tenant, self.agent)
        return config_toml(
            port=self.port,
            gateway_origins=origins,
            signing_key_env=_KEY_VARIABLE,
            store_url=store_url,
            server=self.server_lines
            + (f"\ngrpc_port = {self.grpc_port}\n" if self.grpc_port else ""),
            extra=extra + self.extra,
        )

    async def start(self) -> None:
        if self._own_gateway:
            await self.gateway.start()
        self.port = unused_port()
        if self._grpc:
            # Neither port is bound yet, so the kernel may offer the same one twice.
            self.grpc_port = unused_port()
            while self.grpc_port == self.port:
                self.grpc_port = unused_port()
        self.config = parse_config(self._toml(), source="<harness>")
        environ = {_KEY_VARIABLE: json.dumps(self.signing_jwk)}
        models = {self.tenant: self.models} if self.models else None
        self.app = create_app(self.config, environ=environ, models=models)
        self._listener = await listen(self.app, "127.0.0.1", self.port, shutdown_timeout=5)
        if self._gateway is not None:
            self._gateway.agent_jwks_url = self.base_url + "/.well-known/jwks.json"

    async def stop(self) -> None:
        if self._listener is not None:
            await self._listener.cleanup()
            self._listener = None
        if self._own_gateway:
            await self.gateway.stop()
        if self._own_folder is not None:  # its store, made for this run: nothing keeps it
            shutil.rmtree(self._own_folder, ignore_errors=True)
            self._own_folder = None

    async def send(self, text: str, **kwargs: Any) -> dict[str, Any]:
        """Send a turn as the gateway does; the accepted task. Keyword arguments go to
        `FakeGateway.send_turn` (`task_id`, `context_id`, `subject`, ...). A JSON-RPC error is an
        `AssertionError` showing it."""
        status, body = await self.gateway.send_turn(
            self.endpoint, tenant=self.tenant, text=text, **kwargs
        )
        if status != 200 or "result" not in body:
            raise AssertionError(f"the agent refused the turn (HTTP {status}): {body}")
        task: dict[str, Any] = body["result"]["task"]
        return task

    async def result(self, task: Mapping[str, Any], timeout: float = 10.0) -> dict[str, Any]:
        """The task as its verified push reports it once it ended or asks for input."""
        seen = 0
        while True:
            pushes = await self.gateway.wait_for_pushes(seen + 1, timeout=timeout)
            for index, push in enumerate(pushes):
                if index in self._taken:
                    continue
                if push.error is not None:
                    raise AssertionError(f"a push failed verification: {push.error}")
                pushed: dict[str, Any] = push.json["task"]
                if pushed["id"] == task["id"] and pushed["status"]["state"] in SETTLED_STATES:
                    self._taken.add(index)  # each push is one result, given once
                    return pushed
            seen = len(pushes)

    @staticmethod
    def pending(task: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The tool calls a task (as `result` gave it) waits for the caller to approve: each
        with its `callId`, `tool` and `arguments`; none unless it waits."""
        return pending_calls(task)

    async def approve(
        self, task: Mapping[str, Any], *call_ids: str, deny: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """Answer a task that waits for approvals: approve `call_ids` (none given: every call
        not in `deny`) and deny those `deny` names, each with its reason; the task accepted.
        Every call it waits for must be decided (the agent refuses an answer that leaves one
        out: an `AssertionError` showing it)."""
        denied = dict(deny or {})
        waiting = [call["callId"] for call in self.pending(task)]
        approved = list(call_ids) or [c for c in waiting if c not in denied]
        decisions: list[dict[str, Any]] = [{"callId": c, "approve": True} for c in approved]
        decisions += [
            {"callId": c, "approve": False, **({"reason": r} if r else {})}
            for c, r in denied.items()
        ]
        part = {"data": {APPROVALS_KEY: {"decisions": decisions}}}
        return await self.send("", task_id=task["id"], parts=[part])

    async def deny(
        self, task: Mapping[str, Any], *call_ids: str, reason: str = ""
    ) -> dict[str, Any]:
        """Deny `call_ids` (none given: every call the task waits for), with `reason`."""
        denied = list(call_ids) or [call["callId"] for call in self.pending(task)]
        return await self.approve(task, deny=dict.fromkeys(denied, reason))

    async def eval(
        self,
        dataset: Dataset,
        case: Case,
        *,
        run: int = 1,
        judge: Sequence[ChatModel] = (),
        timeout: float = 30.0,
    ) -> CaseResult:
        """Run one case of an eval dataset against the agent, its turns sent as the gateway
        does (to the case's tenant); `judge`: the models that grade its rubrics."""
        grader = Grader(dataset.judge, judge) if dataset.judge is not None and judge else None

        async def send(
            tenant: str,
            text: str,
            *,
            subject: str,
            task_id: str | None,
            context_id: str | None,
            parts: Sequence[Mapping[str, Any]],
        ) -> Mapping[str, Any]:
            status, body = await self.gateway.send_turn(
                self.endpoint, tenant=tenant, text=text, subject=subject, task_id=task_id,
                context_id=context_id, parts=parts,
            )  # fmt: skip
            if status != 200 or "result" not in body:
                raise EvalSendFailed(f"the agent refused the turn (HTTP {status}): {body}")
            return await self.result(body["result"]["task"], timeout=timeout)

        return await run_case(dataset, case, send, run=run, grader=grader)

    async def call(self, method: str, params: Mapping[str, Any]) -> Any:
        """Any other JSON-RPC method, with a gateway token: the response body."""
        _, body = await self.gateway.call(
            self.endpoint, method, {"tenant": self.tenant, **params}, tenant=self.tenant
        )
        return body
