"""Plugin contract 2: a tool's writes to its plugin's tables run on the store's own thread, with
the store's writes, so concurrent turns in several server processes on one SQLite file never
meet "database is locked" and lose nothing."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from looping_core.testing import FakeGateway, ed25519_private_jwk, tenant_toml

from support.ports import unused_ports
from support.processes import start_looping, stop, wait_for_url
from support.served import TESTS, log_of, serve, write_config

pytestmark = pytest.mark.slow  # processes of its own (see tests/conftest.py)

TURNS = 48


async def test_tool_writes_and_store_writes_never_meet_a_lock_under_load(
    fake_gateway: FakeGateway, tmp_path: Path
) -> None:
    model_port, port = unused_ports(2)
    model_log = tmp_path / "model.log"
    model = start_looping(
        "model", "serve", "--port", str(model_port), "--model", "support.note_models:take_note",
        env={"PYTHONPATH": str(TESTS)}, log=model_log,
    )  # fmt: skip
    notes = tenant_toml(
        "notes", "looping_plugins_example.agent:NotesKeeper", 'plugins = ["example-notes"]'
    )
    more = f"""
[plugins]
enabled = ["example-notes"]
{notes}
[tenants.notes.model]
model = "local"
base_url = "http://127.0.0.1:{model_port}/v1"
max_retries = 0
"""
    config = write_config(tmp_path / "looping.toml", port, fake_gateway, workers=2, more=more)
    key = ed25519_private_jwk("agent-key")
    try:
        wait_for_url(f"http://127.0.0.1:{model_port}/v1/models", model, model_log)
        server = await serve(config, port, key)
        fake_gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
        endpoint = f"http://127.0.0.1:{port}/a2a"
        try:
            sent = await asyncio.gather(
                *(
                    fake_gateway.send_turn(
                        endpoint, tenant="notes", text=f"note {i}", subject=f"s{i % 4}"
                    )
                    for i in range(TURNS)
                )
            )
            assert [status for status, _ in sent] == [200] * TURNS, sent
            pushes = await fake_gateway.wait_for_pushes(TURNS, timeout=120)
        finally:
            stop(server)
    finally:
        stop(model)
    states = [push.json["task"]["status"]["state"] for push in pushes]
    assert states == ["TASK_STATE_COMPLETED"] * TURNS
    database = sqlite3.connect(tmp_path / "looping.db")
    try:
        rows = database.execute("SELECT text FROM example_notes").fetchall()
    finally:
        database.close()
    assert sorted(text for (text,) in rows) == sorted(f"note {i}" for i in range(TURNS))
    log = log_of(config).read_text()
    assert "database is locked" not in log
    assert "Traceback" not in log
