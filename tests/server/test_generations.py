"""Task generations (the A2A 1.1 draft, `[server] a2a_1_1_draft`), on every binding: a task
and its events carry generations 1..N with no gap, GetTask long-polls on `currentGeneration`
(answered once the task passes it, or at the bound when it does not), a stale
`ifGenerationMatch` is refused and writes nothing; a 1.0 call, and any call with the switch
off, is answered as before."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from looping_core.testing import FakeGateway

from support import agents as test_agents
from support.bindings import BINDINGS, Binding, message
from support.serving import STEPS, RunningAgent, start_agent

POLL = (
    """
[tenants.poll]
agent = "support.agents:HoldingAgent"
max_wait_seconds = 1
[tenants.poll.card]
name = "Poll"
description = "Holds its turns."
skills = [{ id = "hold", name = "Hold", description = "Holds.", tags = ["hold"] }]
"""
    + STEPS
)
MISMATCH_STATUS = {"jsonrpc": 200, "http+json": 409, "grpc": 10}  # gRPC ABORTED


async def _agent(gateway: FakeGateway, draft: bool) -> tuple[RunningAgent, Any]:
    server = "a2a_1_1_draft = true" if draft else ""
    return await start_agent([gateway.origin], grpc=True, server=server, extra=POLL)


@pytest.fixture
async def drafted(gateway: FakeGateway) -> AsyncIterator[RunningAgent]:
    running, listener = await _agent(gateway, draft=True)
    yield running
    await running.session.close()
    await listener.cleanup()


@pytest.fixture(params=sorted(BINDINGS))
def binding(request: pytest.FixtureRequest, drafted: RunningAgent, gateway: FakeGateway) -> Binding:
    return BINDINGS[request.param](drafted, gateway, version="1.1")


def release(key: str) -> None:
    test_agents.RELEASE.setdefault(key, asyncio.Event()).set()


def _send(binding: Binding, text: str, **configuration: Any) -> dict[str, Any]:
    return {
        "message": message(text),
        "configuration": {"returnImmediately": True,
                          "taskPushNotificationConfig": binding.gateway.push_config(),
                          **configuration},
    }  # fmt: skip


def generation(thing: dict[str, Any]) -> int:
    """ProtoJSON writes an int64 as a string."""
    value = thing["generation"]
    assert isinstance(value, str), thing
    return int(value)


async def test_a_streamed_task_counts_its_generations_without_a_gap(binding: Binding) -> None:
    key = "gen-" + uuid.uuid4().hex
    params = {
        "message": message(f"steps:{key}"),
        "configuration": {"taskPushNotificationConfig": binding.gateway.push_config()},
    }
    stream = asyncio.create_task(binding.stream("SendStreamingMessage", params, tenant="steps"))
    await asyncio.sleep(0)  # the stream first; the turn holds until released
    for _ in range(200):
        listed = (await binding.call("ListTasks", {}, tenant="steps")).result.get("tasks", [])
        if listed:
            break
        await asyncio.sleep(0.02)
    release(key)
    events = await stream
    first, *updates = events
    assert generation(first["task"]) == 1
    numbers = [generation(next(iter(update.values()))) for update in updates]
    assert numbers == list(range(2, len(events) + 1))
    task_id = first["task"]["id"]
    got = (await binding.call("GetTask", {"id": task_id}, tenant="steps")).result
    assert generation(got) == len(events)
    listed = (await binding.call("ListTasks", {}, tenant="steps")).result["tasks"]
    assert [generation(task) for task in listed] == [len(events)]


async def test_a_long_poll_returns_once_the_task_passes_the_generation(binding: Binding) -> None:
    key = "poll-" + uuid.uuid4().hex
    task = (await binding.call("SendMessage", _send(binding, key), tenant="poll")).result["task"]
    assert generation(task) == 1
    for _ in range(200):  # until its turn began (WORKING: generation 2)
        now = (await binding.call("GetTask", {"id": task["id"]}, tenant="poll")).result
        if now["status"]["state"] == "TASK_STATE_WORKING":
            break
        await asyncio.sleep(0.02)
    current = generation(now)
    poll = asyncio.create_task(
        binding.call("GetTask", {"id": task["id"], "currentGeneration": current}, tenant="poll")
    )
    await asyncio.sleep(0.1)
    assert not poll.done()  # held: nothing changed yet
    release(key)
    async with asyncio.timeout(10):
        answered = (await poll).result
    assert generation(answered) > current
    assert answered["status"]["state"] == "TASK_STATE_COMPLETED"
    # A generation the task passed already: answered at once.
    past = await binding.call("GetTask", {"id": task["id"], "currentGeneration": 1}, tenant="poll")
    assert generation(past.result) == generation(answered)


async def test_a_long_poll_ends_at_its_bound_when_nothing_changes(binding: Binding) -> None:
    key = "still-" + uuid.uuid4().hex
    task = (await binding.call("SendMessage", _send(binding, key), tenant="poll")).result["task"]
    for _ in range(200):
        now = (await binding.call("GetTask", {"id": task["id"]}, tenant="poll")).result
        if now["status"]["state"] == "TASK_STATE_WORKING":
            break
        await asyncio.sleep(0.02)
    async with asyncio.timeout(10):  # the tenant's max_wait_seconds is 1
        answered = await binding.call(
            "GetTask", {"id": task["id"], "currentGeneration": generation(now)}, tenant="poll"
        )
    assert generation(answered.result) == generation(now)
    assert answered.result["status"]["state"] == "TASK_STATE_WORKING"
    release(key)


async def test_a_stale_if_generation_match_is_refused_and_writes_nothing(
    binding: Binding,
) -> None:
    asked = (await binding.call("SendMessage", _send(binding, "ask"))).result["task"]
    for _ in range(200):
        now = (await binding.call("GetTask", {"id": asked["id"]})).result
        if now["status"]["state"] == "TASK_STATE_INPUT_REQUIRED":
            break
        await asyncio.sleep(0.02)
    current = generation(now)
    follow_up = _send(binding, "the blue one", ifGenerationMatch=str(current - 1))
    follow_up["message"]["taskId"] = asked["id"]
    refused = await binding.call("SendMessage", follow_up)
    assert refused.reason == "TASK_GENERATION_MISMATCH", refused.body
    assert refused.status == MISMATCH_STATUS[binding.name]
    if binding.name == "jsonrpc":
        assert refused.body["error"]["code"] == -32010
    after = (await binding.call("GetTask", {"id": asked["id"]})).result
    assert (generation(after), len(after["history"])) == (current, len(now["history"]))
    follow_up["configuration"]["ifGenerationMatch"] = str(current)
    follow_up["message"]["messageId"] = str(uuid.uuid4())
    accepted = await binding.call("SendMessage", follow_up)
    assert accepted.ok, accepted.body
    assert generation(accepted.result["task"]) > current


@pytest.mark.parametrize("draft", [False, True])
@pytest.mark.parametrize("name", sorted(BINDINGS))
async def test_a_1_0_call_or_the_switch_off_answers_as_before(
    gateway: FakeGateway, name: str, draft: bool
) -> None:
    agent, listener = await _agent(gateway, draft=draft)
    try:
        version = "1.1" if not draft else "1.0"  # 1.1 asked with the switch off, or 1.0 with it
        binding = BINDINGS[name](agent, gateway, version=version)
        asked = (await binding.call("SendMessage", _send(binding, "ask"))).result["task"]
        assert "generation" not in asked
        for _ in range(200):
            now = (await binding.call("GetTask", {"id": asked["id"]})).result
            if now["status"]["state"] == "TASK_STATE_INPUT_REQUIRED":
                break
            await asyncio.sleep(0.02)
        assert "generation" not in now
        follow_up = _send(binding, "the blue one", ifGenerationMatch="1")  # stale: not heeded
        follow_up["message"]["taskId"] = asked["id"]
        if name == "grpc" and version == "1.0":
            del follow_up["configuration"]["ifGenerationMatch"]  # not in the 1.0 proto
        accepted = await binding.call("SendMessage", follow_up)
        assert accepted.ok, accepted.body
        assert "generation" not in accepted.result["task"]
    finally:
        await agent.session.close()
        await listener.cleanup()


async def test_a_long_poll_on_postgresql_and_the_job_engine(
    gateway: FakeGateway, postgres_url: str
) -> None:
    """The turn runs as a job of the engine; the long-poll is woken by the store's notices
    (LISTEN/NOTIFY), as streams are. The wait's bound is longer than the test's, so only a wake
    answers in time (a loaded machine's worker may take over a second to start the job)."""
    waiting_long = POLL.replace("max_wait_seconds = 1", "max_wait_seconds = 60")
    agent, listener = await start_agent(
        [gateway.origin], store_url=postgres_url, server="a2a_1_1_draft = true", extra=waiting_long
    )
    try:
        binding = BINDINGS["jsonrpc"](agent, gateway, version="1.1")
        key = "pg-poll-" + uuid.uuid4().hex
        sent = await binding.call("SendMessage", _send(binding, key), tenant="poll")
        task = sent.result["task"]
        poll = asyncio.create_task(
            binding.call("GetTask", {"id": task["id"], "currentGeneration": "1"}, tenant="poll")
        )
        async with asyncio.timeout(30):  # WORKING passes generation 1
            answered = (await poll).result
        assert generation(answered) >= 2
        current = generation(answered)
        poll = asyncio.create_task(
            binding.call(
                "GetTask", {"id": task["id"], "currentGeneration": str(current)}, tenant="poll"
            )
        )
        release(key)
        async with asyncio.timeout(30):
            done = (await poll).result
        assert generation(done) > current
    finally:
        await agent.session.close()
        await listener.cleanup()
