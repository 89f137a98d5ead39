"""The repository's example config served for real: a gateway turn in, a verified push with the
artifact out; its LoopingAgent tenant with a fake model server."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import peewee
from aiohttp import web

from looping_core.config import load_config
from looping_core.server.internal import create_app
from looping_core.testing import FakeGateway, FakeModelServer, Reply, ed25519_private_jwk

from support.ports import unused_port

EXAMPLE = Path(__file__).parents[1] / "examples" / "looping.toml"


async def test_a_turn_through_the_example_config(fake_gateway: FakeGateway, tmp_path: Path) -> None:
    config = load_config(EXAMPLE)
    port = unused_port()
    server = attrs.evolve(config.server, port=port, public_url=f"http://127.0.0.1:{port}")
    security = attrs.evolve(config.security, gateway_origins=(fake_gateway.origin,))
    store = attrs.evolve(config.store, url=f"sqlite:///{tmp_path / 'looping.db'}")
    config = attrs.evolve(config, server=server, security=security, store=store)
    key = json.dumps(ed25519_private_jwk("example-key"))
    runner = web.AppRunner(create_app(config, environ={"A2A_SIGNING_KEY": key}), shutdown_timeout=5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        fake_gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
        status, body = await fake_gateway.send_turn(
            config.server.endpoint_url, tenant="words", text="one two three four"
        )
        assert status == 200, body
        [push] = await fake_gateway.wait_for_pushes(1)
        assert push.error is None, push.error
        task = push.json["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert task["artifacts"] == [
            {"artifactId": task["artifacts"][0]["artifactId"], "name": "word-count",
             "parts": [{"text": "4"}]}
        ]  # fmt: skip
    finally:
        await runner.cleanup()
    database = peewee.SqliteDatabase(str(tmp_path / "looping.db"))
    # The plugin store was ensured at startup and its version recorded.
    assert "example_notes" in database.get_tables()
    assert database.execute_sql("SELECT plugin, version FROM plugin_migration").fetchall() == [
        ("example-notes", 2)
    ]
    database.close()


async def test_the_notes_keeper_keeps_a_note_with_its_model(
    fake_gateway: FakeGateway, tmp_path: Path
) -> None:
    """The LoopingAgent tenant of the example config, its model a fake OpenAI-compatible server:
    the model calls add_note, the note lands in the plugin's table, the answer is pushed."""
    async with FakeModelServer() as models:
        models.replies += [
            Reply.tool_calls(("c1", "add_note", {"text": "the meeting moved to Friday"})),
            Reply.text("Noted: the meeting is on Friday."),
        ]
        config = load_config(EXAMPLE)
        port = unused_port()
        server = attrs.evolve(config.server, port=port, public_url=f"http://127.0.0.1:{port}")
        security = attrs.evolve(config.security, gateway_origins=(fake_gateway.origin,))
        store = attrs.evolve(config.store, url=f"sqlite:///{tmp_path / 'looping.db'}")
        notes = config.tenants["notes"]
        assert notes.model is not None
        model = attrs.evolve(notes.model, base_url=models.base_url, max_retries=0)
        tenants = {**config.tenants, "notes": attrs.evolve(notes, model=model)}
        config = attrs.evolve(
            config, server=server, security=security, store=store, tenants=tenants
        )
        key = json.dumps(ed25519_private_jwk("example-key"))
        app = create_app(config, environ={"A2A_SIGNING_KEY": key})
        runner = web.AppRunner(app, shutdown_timeout=5)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            fake_gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
            await fake_gateway.send_turn(
                config.server.endpoint_url, tenant="notes", text="Remember: Friday meeting."
            )
            [push] = await fake_gateway.wait_for_pushes(1)
            assert push.error is None, push.error
            task = push.json["task"]
            assert task["status"]["state"] == "TASK_STATE_COMPLETED"
            assert task["artifacts"][0]["parts"] == [{"text": "Noted: the meeting is on Friday."}]
        finally:
            await runner.cleanup()
        assert models.requests[0]["messages"][0]["content"].startswith("You keep notes")
    database = peewee.SqliteDatabase(str(tmp_path / "looping.db"))
    assert database.execute_sql("SELECT text FROM example_notes").fetchall() == [
        ("the meeting moved to Friday",)
    ]
    database.close()
