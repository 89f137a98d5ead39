"""An approved tool call runs at most once, whatever dies around it: the server killed with
SIGKILL between the approval and the tool's end (embedded, SQLite), or the worker running it on
the job engine killed and the turn taken up by a second worker (PostgreSQL). The resumed turn
tells the model the call's outcome is unknown; the tool never runs twice (it counts its runs in
a file, across processes)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from looping_core.agent import ModelRequest
from looping_core.content import ToolResultMessage
from looping_core.modelserver import ModelServer
from looping_core.testing import (
    FakeGateway,
    FunctionModel,
    ModelReply,
    ToolCall,
    ed25519_private_jwk,
    tenant_toml,
)

from support.engine import Processes, engine_config
from support.ports import unused_port
from support.served import serve, start_worker, write_config

pytestmark = pytest.mark.slow  # processes of its own (see tests/conftest.py)

KEY = ed25519_private_jwk("agent-key-1")
UNKNOWN = "not run again: it began before a crash and its outcome is unknown"


def _payer(request: ModelRequest) -> ModelReply | str:
    results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
    if results:
        return " | ".join(r.text for r in results[-1].content)
    return ModelReply(tool_calls=(ToolCall("pay", {"amount": 250, "to": "bob"}),))


def _payer_toml(model_url: str) -> str:
    return tenant_toml("payer", "support.agents:PayingAgent") + (
        f'[tenants.payer.model]\nmodel = "m"\nbase_url = "{model_url}"\nmax_retries = 0\n'
    )


async def _call(gateway: FakeGateway, endpoint: str, method: str, **params: Any) -> Any:
    sent = {"tenant": "payer", **params}
    status, body = await gateway.call(endpoint, method, sent, tenant="payer")
    assert status == 200, body
    return body


async def _state(gateway: FakeGateway, endpoint: str, task_id: str, state: str) -> Any:
    for _ in range(1500):
        task = (await _call(gateway, endpoint, "GetTask", id=task_id))["result"]
        if task["status"]["state"] == state:
            return task
        await asyncio.sleep(0.02)
    raise AssertionError(f"never {state}: {task['status']}")


async def _approve_and_wait_for_the_payment(gateway: FakeGateway, endpoint: str, paid: Path) -> str:
    """Ask for a payment, approve it, and return once the tool began (it then holds)."""
    status, body = await gateway.send_turn(endpoint, tenant="payer", text="pay bob")
    assert status == 200, body
    task_id: str = body["result"]["task"]["id"]
    task = await _state(gateway, endpoint, task_id, "TASK_STATE_INPUT_REQUIRED")
    [pending] = task["status"]["message"]["parts"][0]["data"]["toolApprovals"]["pending"]
    decision = {"toolApprovals": {"decisions": [{"callId": pending["callId"], "approve": True}]}}
    status, body = await gateway.send_turn(
        endpoint, tenant="payer", text="yes", task_id=task_id, parts=[{"data": decision}]
    )
    assert status == 200, body
    async with asyncio.timeout(30):
        while not (paid.exists() and paid.read_text()):
            await asyncio.sleep(0.02)
    return task_id


async def test_a_server_killed_while_an_approved_call_runs_never_runs_it_again(
    tmp_path: Path, gateway: FakeGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    paid = tmp_path / "paid"
    monkeypatch.setenv("LPT_PAID_FILE", str(paid))
    port = unused_port()
    endpoint = f"http://127.0.0.1:{port}/a2a"
    gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
    async with ModelServer(FunctionModel(_payer)) as model:
        more = _payer_toml(model.base_url)
        config = write_config(tmp_path / "looping.toml", port, gateway, more=more)
        monkeypatch.setenv("LPT_PAY_HOLD_SECONDS", "60")  # the first server dies in the tool
        first = await serve(config, port, KEY)
        try:
            task_id = await _approve_and_wait_for_the_payment(gateway, endpoint, paid)
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=30)
        monkeypatch.delenv("LPT_PAY_HOLD_SECONDS")
        second = await serve(config, port, KEY)
        try:
            done = await _state(gateway, endpoint, task_id, "TASK_STATE_COMPLETED")
        finally:
            second.send_signal(signal.SIGINT)
            second.wait(timeout=30)
    assert done["artifacts"][0]["parts"] == [{"text": UNKNOWN}]
    assert len(paid.read_text().splitlines()) == 1  # the tool ran once


async def test_a_second_worker_taking_up_the_turn_never_runs_the_call_again(
    tmp_path: Path,
    gateway: FakeGateway,
    postgres_url: str,
    processes: Processes,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    paid = tmp_path / "paid"
    monkeypatch.setenv("LPT_PAID_FILE", str(paid))
    port = unused_port()
    endpoint = f"http://127.0.0.1:{port}/a2a"
    gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
    async with ModelServer(FunctionModel(_payer)) as model:
        edge = engine_config(tmp_path, "edge", port, gateway, postgres_url, runs=False)
        edge.write_text(edge.read_text() + _payer_toml(model.base_url))
        processes.add(await serve(edge, port, KEY))
        monkeypatch.setenv("LPT_PAY_HOLD_SECONDS", "60")  # the first worker dies in the tool
        first = processes.add(await start_worker(edge, KEY, tmp_path / "worker-a.log"))
        task_id = await _approve_and_wait_for_the_payment(gateway, endpoint, paid)
        monkeypatch.delenv("LPT_PAY_HOLD_SECONDS")
        second_log = tmp_path / "worker-b.log"
        processes.add(await start_worker(edge, KEY, second_log))
        os.kill(first.pid, signal.SIGKILL)
        done = await _state(gateway, endpoint, task_id, "TASK_STATE_COMPLETED")
    assert done["artifacts"][0]["parts"] == [{"text": UNKNOWN}]
    assert len(paid.read_text().splitlines()) == 1  # the tool ran once, on the first worker
    assert "resuming task" in second_log.read_text()
