"""`LoopingAgent` end to end: the gateway sends turns, the agent's loop asks a real
OpenAI-compatible server (on 127.0.0.1) and runs the example notes tools; the caller's session
carries the conversation from one task to the next; mistakes stop the server at startup."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from looping_core.agent import AgentLoadError
from looping_core.testing import FakeGateway, FakeModelServer, Reply

from a2a_support import start_agent


def keeper(base_url: str, agent: str = "a2a_agents:NotesAgent", model: bool = True) -> str:
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


@pytest.fixture
async def model_server() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer() as server:
        yield server


async def answer_of(gateway: FakeGateway, count: int) -> dict[str, Any]:
    pushes = await gateway.wait_for_pushes(count)
    push = pushes[count - 1]
    assert push.error is None, push.error
    task: dict[str, Any] = push.json["task"]
    return task


async def test_the_loop_uses_tools_and_the_session_carries_the_conversation(
    gateway: FakeGateway, model_server: FakeModelServer
) -> None:
    agent, listener = await start_agent([gateway.origin], extra=keeper(model_server.base_url))
    gateway.agent_jwks_url = agent.base_url + "/.well-known/jwks.json"
    model_server.replies += [
        Reply.tool_calls(("c1", "add_note", {"text": "milk"})),
        Reply.text("Noted."),
        Reply.tool_calls(("c2", "list_notes", {})),
        Reply.text("You have: milk"),
    ]
    try:
        _, first = await gateway.send_turn(agent.endpoint, tenant="keeper", text="remember milk")
        context_id = first["result"]["task"]["contextId"]
        task = await answer_of(gateway, 1)
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert task["artifacts"][0]["parts"] == [{"text": "Noted."}]
        # The turn's usage (two model calls of the fake server) is the task's metadata.
        usage = task["metadata"]["looping.usage"]
        assert (usage["input_tokens"], usage["output_tokens"]) == (30, 13)
        assert task["metadata"]["looping.models"] == ["openai:m", "openai:m"]
        assert task["metadata"]["looping.rounds"] == 2
        _, got = await gateway.call(
            agent.endpoint, "GetTask", {"tenant": "keeper", "id": task["id"]}, tenant="keeper"
        )
        assert got["result"]["metadata"] == task["metadata"]

        await gateway.send_turn(
            agent.endpoint, tenant="keeper", text="what do I have?", context_id=context_id
        )
        task = await answer_of(gateway, 2)
        assert task["artifacts"][0]["parts"] == [{"text": "You have: milk"}]
    finally:
        await agent.session.close()
        await listener.cleanup()

    system, *turn_one = model_server.requests[2]["messages"]
    assert system["role"] == "system"
    assert system["content"].startswith("You keep notes. Lets an agent keep and list notes")
    assert [m["role"] for m in turn_one] == ["user", "assistant", "tool", "assistant", "user"]
    assert turn_one[1]["tool_calls"][0]["function"]["name"] == "add_note"
    assert json.loads(turn_one[2]["content"]) == {"id": 1}
    listed = model_server.requests[3]["messages"][-1]
    assert listed["role"] == "tool"
    assert json.loads(listed["content"]) == {"notes": ["milk"]}


async def test_another_caller_does_not_see_the_session_or_the_notes(
    gateway: FakeGateway, model_server: FakeModelServer
) -> None:
    agent, listener = await start_agent([gateway.origin], extra=keeper(model_server.base_url))
    gateway.agent_jwks_url = agent.base_url + "/.well-known/jwks.json"
    model_server.replies += [
        Reply.tool_calls(("c1", "add_note", {"text": "alice's secret"})),
        Reply.text("Noted."),
        Reply.tool_calls(("c2", "list_notes", {})),
        Reply.text("Nothing."),
    ]
    try:
        _, first = await gateway.send_turn(agent.endpoint, tenant="keeper", text="keep this")
        await answer_of(gateway, 1)
        context_id = first["result"]["task"]["contextId"]
        await gateway.send_turn(
            agent.endpoint, tenant="keeper", text="list", context_id=context_id, subject="mallory"
        )
        await answer_of(gateway, 2)
    finally:
        await agent.session.close()
        await listener.cleanup()
    _, *mallory = model_server.requests[2]["messages"]
    assert [m["role"] for m in mallory] == ["user"]  # a new session: nothing of alice's
    assert json.loads(model_server.requests[3]["messages"][-1]["content"]) == {"notes": []}


@pytest.mark.parametrize(
    ("agent", "model", "problem"),
    [
        ("a2a_agents:NotesAgent", False, "needs a model; add a [tenants.keeper.model] table"),
        ("a2a_agents:WrongFamiliesAgent", True, "do not provide: weather (available: notes)"),
    ],
)
async def test_a_misconfigured_looping_agent_stops_the_server_at_startup(
    gateway: FakeGateway, agent: str, model: bool, problem: str
) -> None:
    with pytest.raises(AgentLoadError, match=re.escape(problem)):
        await start_agent(
            [gateway.origin], extra=keeper("http://127.0.0.1:9/v1", agent=agent, model=model)
        )


async def test_the_model_asks_the_caller_and_the_follow_up_continues_the_turn(
    gateway: FakeGateway, model_server: FakeModelServer
) -> None:
    config = keeper(model_server.base_url, agent="a2a_agents:AskingAgent")
    agent, listener = await start_agent([gateway.origin], extra=config)
    gateway.agent_jwks_url = agent.base_url + "/.well-known/jwks.json"
    model_server.replies += [
        Reply.tool_calls(("c1", "ask_caller", {"message": "Which list?"})),
        Reply.text("Added to groceries."),
    ]
    try:
        _, first = await gateway.send_turn(agent.endpoint, tenant="keeper", text="add milk")
        task_id = first["result"]["task"]["id"]
        task = await answer_of(gateway, 1)
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        assert task["status"]["message"]["parts"] == [{"text": "Which list?"}]
        await gateway.send_turn(agent.endpoint, tenant="keeper", text="groceries", task_id=task_id)
        task = await answer_of(gateway, 2)
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert task["artifacts"][-1]["parts"] == [{"text": "Added to groceries."}]
    finally:
        await agent.session.close()
        await listener.cleanup()
    _, *conversation = model_server.requests[1]["messages"]
    assert [m["role"] for m in conversation] == ["user", "assistant", "tool", "user"]
    assert conversation[-1]["content"] == [{"type": "text", "text": "groceries"}]
