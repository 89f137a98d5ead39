"""A server killed with SIGKILL mid-turn and restarted: the task still ends, its push arrives."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
from pathlib import Path

import pytest

from looping_core.testing import FakeGateway, FakeModelServer, Reply, ed25519_private_jwk

from support.ports import unused_port
from support.served import serve, wait_for, write_config
from support.serving import keeper

pytestmark = pytest.mark.slow  # processes of its own (see tests/conftest.py)


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


async def test_sigkill_after_a_stored_tool_result_does_not_run_the_tool_twice(
    tmp_path: Path, gateway: FakeGateway
) -> None:
    """The loop stores the tool's result, then the server dies during the next model call; the
    resumed turn asks the model again from the stored steps and the tool is not run again."""
    port = unused_port()
    async with FakeModelServer() as model_server:
        config = write_config(tmp_path / "looping.toml", port, gateway)
        with config.open("a") as extra:
            extra.write(keeper(model_server.base_url))
        key = ed25519_private_jwk("agent-key-1")
        endpoint = f"http://127.0.0.1:{port}/a2a"
        gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
        model_server.replies += [
            Reply.tool_calls(("c1", "add_note", {"text": "milk"})),
            Reply.slow(5),  # the server dies while it waits for this one
            Reply.text("Noted."),
        ]
        first = await serve(config, port, key)
        try:
            status, body = await gateway.send_turn(endpoint, tenant="keeper", text="note milk")
            assert status == 200, body
            task_id = body["result"]["task"]["id"]
            for _ in range(500):
                if len(model_server.requests) == 2:  # asked only once the result was stored
                    break
                await asyncio.sleep(0.01)
            assert len(model_server.requests) == 2
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=30)

        second = await serve(config, port, key)
        try:
            [push] = await gateway.wait_for_pushes(1, timeout=30)
            assert push.error is None, push.error
            task = push.json["task"]
            assert (task["id"], task["status"]["state"]) == (task_id, "TASK_STATE_COMPLETED")
            assert task["artifacts"][0]["parts"] == [{"text": "Noted."}]
        finally:
            second.send_signal(signal.SIGINT)
            second.wait(timeout=30)
        resumed = model_server.requests[2]["messages"]
        assert [m["role"] for m in resumed] == ["system", "user", "assistant", "tool"]
        assert resumed == model_server.requests[1]["messages"]  # the same steps, from the store
    with sqlite3.connect(tmp_path / "looping.db") as store:
        notes = store.execute("SELECT text FROM example_notes").fetchall()
    assert notes == [("milk",)]  # the tool ran once


async def test_sigkill_during_wave_two_resumes_without_rerunning_wave_one(
    tmp_path: Path, gateway: FakeGateway
) -> None:
    """The server dies while wave 2's subagent waits for the model; after the restart the
    parent's `delegate` call runs again with the same id, finds its plan, skips the finished
    wave-1 subtask and resumes wave 2; the task ends once, with one push."""
    port = unused_port()
    plan = {
        "subtasks": [
            {"id": "a", "type": "summarize-notes", "params": {"topic": "milk"}},
            {
                "id": "b",
                "type": "summarize-notes",
                "params": {"topic": "eggs"},
                "depends_on": ["a"],
            },
        ]
    }
    async with FakeModelServer() as model_server:
        config = write_config(tmp_path / "looping.toml", port, gateway)
        with config.open("a") as extra:
            extra.write(keeper(model_server.base_url, agent="support.agents:PlanningAgent"))
        key = ed25519_private_jwk("agent-key-1")
        endpoint = f"http://127.0.0.1:{port}/a2a"
        gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
        model_server.replies += [
            Reply.tool_calls(("p1", "delegate", plan)),
            Reply.text("Milk summary."),  # wave 1
            Reply.slow(5),  # wave 2: the server dies while it waits
            Reply.text("Eggs summary."),  # wave 2 again, after the restart
            Reply.text("Both summarized."),
        ]
        first = await serve(config, port, key)
        try:
            status, body = await gateway.send_turn(endpoint, tenant="keeper", text="summarize")
            assert status == 200, body
            task_id = body["result"]["task"]["id"]
            for _ in range(500):
                if len(model_server.requests) == 3:
                    break
                await asyncio.sleep(0.01)
            assert len(model_server.requests) == 3
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=30)

        second = await serve(config, port, key)
        try:
            [push] = await gateway.wait_for_pushes(1, timeout=30)
            task = push.json["task"]
            assert (task["id"], task["status"]["state"]) == (task_id, "TASK_STATE_COMPLETED")
            assert task["artifacts"][0]["parts"] == [{"text": "Both summarized."}]
            states = {
                s["id"]: (s["state"], s["attempts"]) for s in task["metadata"]["looping.subtasks"]
            }
            assert states == {"p1/a": ("done", 1), "p1/b": ("done", 2)}
        finally:
            second.send_signal(signal.SIGINT)
            second.wait(timeout=30)
        topics = [
            json.loads(r["messages"][1]["content"][0]["text"])["params"]["topic"]
            for r in model_server.requests[1:4]
        ]
        assert topics == ["milk", "eggs", "eggs"]  # wave 1 ran once; wave 2 resumed
        assert len(model_server.requests) == 5
        assert len(gateway.pushes) == 1
