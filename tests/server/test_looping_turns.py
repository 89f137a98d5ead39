"""`LoopingAgent` end to end: the gateway sends turns, the agent's loop asks a real
OpenAI-compatible server (on 127.0.0.1) and runs the example notes tools; the caller's session
carries the conversation from one task to the next; mistakes stop the server at startup."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from looping_core.agent import AgentLoadError, ModelSetupError
from looping_core.testing import FakeGateway, FakeModelServer, Reply

from support.serving import keeper, serving, start_agent
from support.sse import open_stream, streaming_send


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
    model_server.replies += [
        Reply.tool_calls(("c1", "add_note", {"text": "milk"})),
        Reply.text("Noted."),
        Reply.tool_calls(("c2", "list_notes", {})),
        Reply.text("You have: milk"),
    ]
    async with serving(gateway, extra=keeper(model_server.base_url)) as agent:
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
    model_server.replies += [
        Reply.tool_calls(("c1", "add_note", {"text": "alice's secret"})),
        Reply.text("Noted."),
        Reply.tool_calls(("c2", "list_notes", {})),
        Reply.text("Nothing."),
    ]
    async with serving(gateway, extra=keeper(model_server.base_url)) as agent:
        _, first = await gateway.send_turn(agent.endpoint, tenant="keeper", text="keep this")
        await answer_of(gateway, 1)
        context_id = first["result"]["task"]["contextId"]
        await gateway.send_turn(
            agent.endpoint, tenant="keeper", text="list", context_id=context_id, subject="mallory"
        )
        await answer_of(gateway, 2)
    _, *mallory = model_server.requests[2]["messages"]
    assert [m["role"] for m in mallory] == ["user"]  # a new session: nothing of alice's
    assert json.loads(model_server.requests[3]["messages"][-1]["content"]) == {"notes": []}


@pytest.mark.parametrize(
    ("agent", "model", "problem"),
    [
        ("support.agents:NotesAgent", False, "needs a model; add a [tenants.keeper.model] table"),
        ("support.agents:WrongFamiliesAgent", True, "do not provide: weather (available: notes)"),
        (
            "support.agents:OwnModelAgent",
            False,
            "base_url must be an absolute http(s) URL without query or fragment @ "
            "OwnModelAgent.agent_config().model.base_url",
        ),
    ],
)
async def test_a_misconfigured_looping_agent_stops_the_server_at_startup(
    gateway: FakeGateway, agent: str, model: bool, problem: str
) -> None:
    with pytest.raises((AgentLoadError, ModelSetupError), match=re.escape(problem)):
        await start_agent(
            [gateway.origin], extra=keeper("http://127.0.0.1:9/v1", agent=agent, model=model)
        )


async def test_an_agent_may_name_its_own_model_and_the_config_replaces_it(
    gateway: FakeGateway, model_server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LPT_OWN_MODEL_URL", model_server.base_url)
    model_server.replies += [Reply.text("From my own model."), Reply.text("From the config's.")]
    for model, expected in ((False, "openai:own"), (True, "openai:m")):
        config = keeper(model_server.base_url, agent="support.agents:OwnModelAgent", model=model)
        pushed = len(gateway.pushes)
        async with serving(gateway, extra=config) as agent:
            await gateway.send_turn(agent.endpoint, tenant="keeper", text="hi")
            task = await answer_of(gateway, pushed + 1)
        assert task["metadata"]["looping.models"] == [expected]


async def test_the_model_asks_the_caller_and_the_follow_up_continues_the_turn(
    gateway: FakeGateway, model_server: FakeModelServer
) -> None:
    config = keeper(model_server.base_url, agent="support.agents:AskingAgent")
    model_server.replies += [
        Reply.tool_calls(("c1", "ask_caller", {"message": "Which list?"})),
        Reply.text("Added to groceries."),
    ]
    async with serving(gateway, extra=config) as agent:
        _, first = await gateway.send_turn(agent.endpoint, tenant="keeper", text="add milk")
        task_id = first["result"]["task"]["id"]
        task = await answer_of(gateway, 1)
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        assert task["status"]["message"]["parts"] == [{"text": "Which list?"}]
        await gateway.send_turn(agent.endpoint, tenant="keeper", text="groceries", task_id=task_id)
        task = await answer_of(gateway, 2)
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert task["artifacts"][-1]["parts"] == [{"text": "Added to groceries."}]
    _, *conversation = model_server.requests[1]["messages"]
    assert [m["role"] for m in conversation] == ["user", "assistant", "tool", "user"]
    assert conversation[-1]["content"] == [{"type": "text", "text": "groceries"}]


async def test_a_follow_up_sent_while_the_loop_runs_is_seen_before_its_next_model_call(
    gateway: FakeGateway, model_server: FakeModelServer
) -> None:
    model_server.replies += [
        attrs.evolve(Reply.tool_calls(("c1", "add_note", {"text": "milk"})), hang=0.5),
        Reply.text("Noted milk and eggs."),
    ]
    async with serving(gateway, extra=keeper(model_server.base_url)) as agent:
        _, first = await gateway.send_turn(agent.endpoint, tenant="keeper", text="remember milk")
        task_id = first["result"]["task"]["id"]
        while not model_server.requests:  # the first model call is under way
            await asyncio.sleep(0.01)
        _, joined = await gateway.send_turn(
            agent.endpoint, tenant="keeper", text="and eggs", task_id=task_id
        )
        assert joined["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING"
        task = await answer_of(gateway, 1)
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert task["artifacts"][0]["parts"] == [{"text": "Noted milk and eggs."}]
        assert task["metadata"]["looping.rounds"] == 2  # one turn took both messages
    _, *conversation = model_server.requests[1]["messages"]
    assert [m["role"] for m in conversation] == ["user", "assistant", "tool", "user"]
    assert conversation[-1]["content"] == [{"type": "text", "text": "and eggs"}]
    assert len(gateway.pushes) == 1


async def test_models_that_fail_fail_the_task_with_a_reason(
    gateway: FakeGateway, model_server: FakeModelServer
) -> None:
    model_server.replies.append(Reply.failure(500))
    async with serving(gateway, extra=keeper(model_server.base_url)) as agent:
        await gateway.send_turn(agent.endpoint, tenant="keeper", text="remember milk")
        task = await answer_of(gateway, 1)
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert task["status"]["message"]["metadata"] == {"reason": "MODEL_UNAVAILABLE"}
    told = json.dumps(task)
    assert "HTTP 500" not in told  # what went wrong is logged, not told
    assert "scripted failure" not in told


async def test_a_conversation_over_its_window_is_compacted_in_the_store(
    gateway: FakeGateway,
    model_server: FakeModelServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Turn 2 of a context would pass `compact_at` of the window: turn 1 leaves the stored
    session (no summary prompt: truncation), the example listener is told, the model sees only
    turn 2. `[tenants.keeper.loop]` sets what is kept and `model.context_window` the window."""
    store = tmp_path / "looping.db"
    config = (
        keeper(model_server.base_url)
        .replace('enabled = ["example-notes"]', 'enabled = ["example-notes", "example-gates"]')
        .replace('plugins = ["example-notes"]', 'plugins = ["example-notes", "example-gates"]')
    )
    config += "context_window = 2250\n[tenants.keeper.loop]\nkeep_last = 1\n"
    model_server.replies += [Reply.text("y" * 4000), Reply.text("Second.")]
    async with serving(gateway, store_url=f"sqlite:///{store}", extra=config) as agent:
        with caplog.at_level(logging.INFO):
            _, first = await gateway.send_turn(agent.endpoint, tenant="keeper", text="x" * 4000)
            context_id = first["result"]["task"]["contextId"]
            await answer_of(gateway, 1)
            await gateway.send_turn(
                agent.endpoint, tenant="keeper", text="and now?", context_id=context_id
            )
            task = await answer_of(gateway, 2)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["metadata"]["looping.compactions"] == 1
    _, *seen = model_server.requests[1]["messages"]
    assert seen == [{"role": "user", "content": [{"type": "text", "text": "and now?"}]}]
    with sqlite3.connect(store) as connection:
        rows = connection.execute("SELECT COUNT(*) FROM session_messages").fetchone()
    assert rows == (2,)  # turn 2's question and answer; turn 1 left
    assert f"2 message(s) displaced from context {context_id} of tenant keeper" in caplog.text


async def test_the_answer_streams_as_coalesced_chunks_of_its_artifact(
    gateway: FakeGateway, model_server: FakeModelServer
) -> None:
    pieces = [f"w{i} " for i in range(100)]
    model_server.replies += [Reply.tool_calls(("c1", "list_notes", {})), Reply.text(*pieces)]
    async with serving(gateway, extra=keeper(model_server.base_url)) as agent:
        params = streaming_send(gateway, "what notes?")
        async with open_stream(
            agent.endpoint, gateway, "SendStreamingMessage", params, tenant="keeper"
        ) as stream:
            events = await stream.rest()
    assert events[-1].state == "TASK_STATE_COMPLETED"
    updates = [e.result["artifactUpdate"] for e in events if e.kind == "artifactUpdate"]
    *chunks, final = updates
    answer = "".join(pieces)
    # The final answer replaces whatever streamed; it is the artifact the task keeps.
    assert "append" not in final
    assert final["artifact"]["parts"] == [{"text": answer}]
    assert {u["artifact"]["artifactId"] for u in updates} == {final["artifact"]["artifactId"]}
    # The answer's text streamed first: it starts the artifact, then appends, in order.
    assert "append" not in chunks[0]
    assert all(chunk["append"] is True for chunk in chunks[1:])
    streamed = "".join(p["text"] for chunk in chunks for p in chunk["artifact"]["parts"])
    assert streamed == answer
    assert len(chunks) < len(pieces)  # a hundred chunks, coalesced into far fewer events
