"""A server killed with SIGKILL mid-turn and restarted: the task still ends, its push arrives."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import unused_port

from looping_core.testing import FakeGateway, ed25519_private_jwk

HERE = Path(__file__).parent


def write_config(path: Path, port: int, gateway: FakeGateway, on_restart: str) -> Path:
    path.write_text(
        f"""
[server]
port = {port}
[security]
signing_key = "env:LPT_CRASH_KEY"
gateway_origins = ["{gateway.origin}"]
[store]
url = "sqlite:///{path.parent / "looping.db"}"
[runner]
on_restart = "{on_restart}"
restart_message = "Restarted; please send the request again."
[push]
backoff_seconds = 0.05
backoff_max_seconds = 0.2
[tenants.bob]
agent = "a2a_agents:HoldingAgent"
[tenants.bob.card]
name = "Bob"
description = "Holds turns until told."
skills = [{{ id = "hold", name = "Hold", description = "Holds.", tags = ["hold"] }}]
"""
    )
    return path


async def serve(config: Path, port: int, key: dict[str, str]) -> subprocess.Popen[bytes]:
    environment = dict(os.environ, LPT_CRASH_KEY=json.dumps(key), PYTHONPATH=str(HERE))
    script = str(Path(sys.executable).with_name("looping"))
    log = config.parent / "server.log"
    with log.open("ab") as output:
        process = subprocess.Popen(
            [script, "serve", "--config", str(config)],
            env=environment,
            stdout=output,
            stderr=output,
        )
    async with aiohttp.ClientSession() as session:
        for _ in range(300):
            if process.poll() is not None:
                raise AssertionError(log.read_text())
            try:
                async with session.get(
                    f"http://127.0.0.1:{port}/.well-known/jwks.json"
                ) as response:
                    if response.status == 200:
                        return process
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    process.kill()
    raise AssertionError("the server did not start")


async def wait_for(path: Path) -> None:
    for _ in range(600):
        if path.exists():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{path} never appeared")


@pytest.mark.parametrize(
    ("on_restart", "final_state"),
    [("resume", "TASK_STATE_COMPLETED"), ("fail", "TASK_STATE_FAILED")],
)
async def test_sigkill_mid_turn_then_restart(
    tmp_path: Path, gateway: FakeGateway, on_restart: str, final_state: str
) -> None:
    port = unused_port()
    config = write_config(tmp_path / "looping.toml", port, gateway, on_restart)
    key = ed25519_private_jwk("agent-key-1")
    endpoint = f"http://127.0.0.1:{port}/a2a"
    gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
    release = tmp_path / "release"

    first = await serve(config, port, key)
    try:
        status, body = await gateway.send_turn(endpoint, tenant="bob", text=f"file:{release}")
        assert status == 200, body
        task_id = body["result"]["task"]["id"]
        await wait_for(Path(f"{release}.started"))  # the turn is running
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    assert gateway.pushes == []

    release.touch()  # a resumed turn finishes at once
    second = await serve(config, port, key)
    try:
        [push] = await gateway.wait_for_pushes(1, timeout=30)
        assert push.error is None, push.error
        assert push.json["task"]["id"] == task_id
        assert push.json["task"]["status"]["state"] == final_state
        _, got = await gateway.call(
            endpoint, "GetTask", {"tenant": "bob", "id": task_id}, tenant="bob"
        )
        task = got["result"]
        assert task["status"]["state"] == final_state
        if on_restart == "fail":
            assert task["status"]["message"]["parts"] == [
                {"text": "Restarted; please send the request again."}
            ]
            assert task["status"]["message"]["metadata"] == {"reason": "INTERRUPTED_BY_RESTART"}
        else:
            assert task["artifacts"][0]["name"] == "held"
    finally:
        second.send_signal(signal.SIGINT)
        second.wait(timeout=30)
