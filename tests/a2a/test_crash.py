"""A server killed with SIGKILL mid-turn and restarted: the task still ends, its push arrives."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from aiohttp.test_utils import unused_port

from looping_core.testing import FakeGateway, ed25519_private_jwk

from served import serve, wait_for, write_config


@pytest.mark.parametrize(
    ("on_restart", "final_state"),
    [("resume", "TASK_STATE_COMPLETED"), ("fail", "TASK_STATE_FAILED")],
)
async def test_sigkill_mid_turn_then_restart(
    tmp_path: Path, gateway: FakeGateway, on_restart: str, final_state: str
) -> None:
    port = unused_port()
    config = write_config(tmp_path / "looping.toml", port, gateway, on_restart=on_restart)
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
