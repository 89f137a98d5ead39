"""A tenant with `[tenants.<id>.model]`, end to end: the gateway sends a turn, the agent asks its
models (a real OpenAI-compatible server on 127.0.0.1, the first one failing), the result is
pushed; stopping the server closes the models' connections."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from looping_core.agent import OpenAIChatModel
from looping_core.testing import FakeGateway, FakeModelServer, Reply

from support import agents as test_agents
from support.serving import start_agent


@pytest.fixture
async def models_server() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer() as server:
        yield server


async def test_a_turn_is_answered_by_the_fallback_model_and_pushed(
    gateway: FakeGateway, models_server: FakeModelServer
) -> None:
    tenant = f"""
[tenants.modeled]
agent = "support.agents:ModelAgent"
[tenants.modeled.card]
name = "Modeled"
description = "Asks a model."
skills = [{{ id = "ask", name = "Ask", description = "Asks.", tags = ["model"] }}]
[tenants.modeled.model]
model = "primary"
base_url = "{models_server.base_url}"
max_retries = 0
[[tenants.modeled.model.fallback]]
model = "backup"
base_url = "{models_server.base_url}"
max_retries = 0
"""
    agent, listener = await start_agent([gateway.origin], extra=tenant)
    gateway.agent_jwks_url = agent.base_url + "/.well-known/jwks.json"
    models_server.replies += [Reply.failure(503), Reply.text("Hello ", "from backup")]
    try:
        _, body = await gateway.send_turn(agent.endpoint, tenant="modeled", text="hi there")
        assert body["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
        [push] = await gateway.wait_for_pushes(1)
        assert push.error is None, push.error
        task = push.json["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert task["artifacts"][0]["name"] == "openai:backup"
        assert task["artifacts"][0]["parts"] == [{"text": "Hello from backup"}]
        sent = models_server.requests[-1]
        assert sent["messages"][0] == {"role": "system", "content": "App words, not core's."}
        assert sent["messages"][-1]["content"] == [{"type": "text", "text": "hi there"}]
    finally:
        await agent.session.close()
        await listener.cleanup()
    models = test_agents.CONTEXTS["modeled"].models
    assert [model.label for model in models] == ["openai:primary", "openai:backup"]
    assert all(isinstance(m, OpenAIChatModel) and m._client.is_closed() for m in models)
