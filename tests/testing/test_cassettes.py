"""Cassettes: the openai provider's HTTP recorded against the fake model server, then replayed
with that server stopped; credentials never written; an unrecorded request blocked, naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp import ClientSession

from looping_core.agent import ModelRequest, OpenAIChatModel, respond
from looping_core.content import TextBlock, UserMessage
from looping_core.testing import FakeModelServer, Reply, cassette

HELLO = ModelRequest((UserMessage([TextBlock("Hello")]),), system="App words.")


async def test_record_then_replay_with_the_server_stopped(tmp_path: Path) -> None:
    tape = tmp_path / "cassettes" / "hello.yaml"
    async with FakeModelServer([Reply.text("Hi there.")]) as server:
        base_url = server.base_url
        model = OpenAIChatModel(
            "m", base_url=server.base_url, api_key="sk-secret-key", max_retries=0
        )
        with cassette(tape, record=True):
            recorded = await respond(model, HELLO)
        await model.aclose()
    written = tape.read_text()
    assert "sk-secret-key" not in written
    assert "authorization" not in written.lower()
    # The server is gone; the same request is answered from the cassette.
    model = OpenAIChatModel("m", base_url=base_url, api_key="sk-other", max_retries=0)
    with cassette(tape) as played:
        replayed = await respond(model, HELLO)
    await model.aclose()
    assert replayed.message == recorded.message
    assert played.play_count == 1


async def test_a_request_with_no_recording_is_blocked_and_named(tmp_path: Path) -> None:
    tape = tmp_path / "cassettes" / "empty.yaml"
    with cassette(tape), pytest.raises(Exception, match=r"http://127\.0\.0\.1:9/nothing"):
        async with ClientSession() as session, session.get("http://127.0.0.1:9/nothing"):
            pass  # never sent: nothing listens on port 9, and nothing was recorded


async def test_the_fixture_names_the_cassette_after_the_test(
    cassette: object, request: pytest.FixtureRequest
) -> None:
    assert Path(cassette.path).name == f"{request.node.name}.yaml"  # type: ignore[attr-defined]
    assert Path(cassette.path).parent.name == "test_cassettes"  # type: ignore[attr-defined]
