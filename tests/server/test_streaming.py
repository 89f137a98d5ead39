"""SendStreamingMessage and SubscribeToTask over SSE: the task first, then its updates in order,
closed at the end; every event numbered, so a client resumes with `Last-Event-ID` and misses
nothing and gets nothing twice; slow subscribers dropped; progress and direct answers."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from a2a.types import StreamResponse as ProtoStreamResponse
from google.protobuf.json_format import ParseDict
from test_tasks import call, send, wait_state

from looping_core.server._services import SERVICES as SERVICES_KEY
from looping_core.testing import FakeGateway

from support import agents as test_agents
from support.serving import STEPS, RunningAgent, serving, start_agent
from support.sse import SseEvent, open_stream, streaming_send

STREAM_TENANTS = (
    STEPS
    + """
[tenants.direct]
agent = "support.agents:DirectAgent"
[tenants.direct.card]
name = "Direct"
description = "Answers with a message."
skills = [{ id = "d", name = "D", description = "Direct.", tags = ["d"] }]
"""
)


@pytest.fixture
async def streamer(gateway: FakeGateway) -> AsyncIterator[RunningAgent]:
    async with serving(gateway, extra=STREAM_TENANTS) as running:
        yield running


def strict_events(events: list[SseEvent]) -> None:
    """Each event is a JSON-RPC response whose result the official StreamResponse accepts."""
    for event in events:
        assert event.data["jsonrpc"] == "2.0"
        ParseDict(event.result, ProtoStreamResponse())


def release(key: str) -> None:
    test_agents.RELEASE.setdefault(key, asyncio.Event()).set()


async def test_the_cards_say_streaming(agent: RunningAgent, gateway: FakeGateway) -> None:
    card = (await call(agent, gateway, "GetExtendedAgentCard", {}))["result"]
    assert card["capabilities"]["streaming"] is True
    async with agent.session.get(agent.base_url + "/.well-known/agent-card.json") as response:
        assert (await response.json())["capabilities"]["streaming"] is True


async def test_a_streamed_send_gives_the_task_then_its_updates_and_closes_at_the_end(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    params = streaming_send(gateway, "hello")
    async with open_stream(
        agent.endpoint, gateway, "SendStreamingMessage", params, request_id="req-1"
    ) as stream:
        assert stream.status == 200
        assert stream.is_sse
        events = await stream.rest()
    strict_events(events)
    assert {event.data["id"] for event in events} == {"req-1"}
    assert [event.kind for event in events] == [
        "task",
        "statusUpdate",
        "artifactUpdate",
        "statusUpdate",
    ]
    assert [int(event.id or -1) for event in events] == [0, 1, 2, 3]
    assert [event.state for event in events] == [
        "TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", None, "TASK_STATE_COMPLETED"
    ]  # fmt: skip
    task_id = events[0].result["task"]["id"]
    artifact = events[2].result["artifactUpdate"]["artifact"]
    assert artifact["parts"] == [{"text": "hello (after 0)"}]
    # A completed task carries the agent's reply as its status message, addressed to the task.
    final = events[3].result["statusUpdate"]["status"]["message"]
    assert final["parts"] == [{"text": "echo: hello"}]
    assert final["taskId"] == task_id
    assert final["contextId"] == events[0].result["task"]["contextId"]
    done = (await call(agent, gateway, "GetTask", {"id": task_id}))["result"]
    assert done["status"]["message"]["parts"] == [{"text": "echo: hello"}]


async def test_progress_and_artifact_chunks_stream_in_order_chunks_coalesced(
    streamer: RunningAgent, gateway: FakeGateway
) -> None:
    key = uuid.uuid4().hex
    params = streaming_send(gateway, f"steps:{key}")
    async with open_stream(
        streamer.endpoint, gateway, "SendStreamingMessage", params, tenant="steps"
    ) as stream:
        seen = [await stream.next() for _ in range(5)]
        release(key)
        seen += await stream.rest()
    strict_events([event for event in seen if event is not None])
    events = [event for event in seen if event is not None]
    kinds = [(event.kind, event.state) for event in events]
    assert kinds == [
        ("task", "TASK_STATE_SUBMITTED"),
        ("statusUpdate", "TASK_STATE_WORKING"),
        ("statusUpdate", "TASK_STATE_WORKING"),
        ("artifactUpdate", None),
        ("statusUpdate", "TASK_STATE_WORKING"),
        ("artifactUpdate", None),
        ("statusUpdate", "TASK_STATE_COMPLETED"),
    ]
    progress = [e.result["statusUpdate"]["status"].get("message") for e in events[1:3]]
    assert progress[0] is None
    assert progress[1]["parts"] == [{"text": "looking"}]
    chunk = events[3].result["artifactUpdate"]
    assert chunk["append"] is True  # three chunks close together: one event
    assert chunk["artifact"]["parts"] == [{"text": "abc"}]  # text running on is one part
    whole = events[5].result["artifactUpdate"]
    assert "append" not in whole
    assert whole["artifact"]["artifactId"] == chunk["artifact"]["artifactId"]
    assert whole["artifact"]["parts"] == [{"text": "abc"}]
    # The task keeps the last progress while it works, and the whole artifact in the end.
    task_id = events[0].result["task"]["id"]
    done = (await call(streamer, gateway, "GetTask", {"id": task_id}, tenant="steps"))["result"]
    assert done["artifacts"][0]["parts"] == [{"text": "abc"}]


async def test_subscribers_get_the_same_events_and_closing_one_affects_nothing(
    streamer: RunningAgent, gateway: FakeGateway
) -> None:
    key = uuid.uuid4().hex
    _, body = await gateway.send_turn(streamer.endpoint, tenant="steps", text=f"steps:{key}")
    task_id = body["result"]["task"]["id"]
    await wait_state(streamer, gateway, task_id, "TASK_STATE_WORKING", tenant="steps")
    subscribe = {"id": task_id}
    async with (
        open_stream(streamer.endpoint, gateway, "SubscribeToTask", subscribe, tenant="steps") as a,
        open_stream(streamer.endpoint, gateway, "SubscribeToTask", subscribe, tenant="steps") as b,
    ):
        async with open_stream(
            streamer.endpoint, gateway, "SubscribeToTask", subscribe, tenant="steps"
        ) as quitter:
            first = await quitter.next()
            assert first is not None
            assert first.kind == "task"  # the snapshot comes first
        release(key)
        events_a, events_b = await asyncio.gather(a.rest(), b.rest())
    strict_events(events_a)
    # Each starts with the task as it was when it subscribed; from the later snapshot on, both
    # got the same events in the same order.
    assert events_a[0].kind == events_b[0].kind == "task"
    since = max(int(events_a[0].id or 0), int(events_b[0].id or 0))
    tail_a = [(e.id, e.data) for e in events_a[1:] if int(e.id or 0) > since]
    assert tail_a == [(e.id, e.data) for e in events_b[1:] if int(e.id or 0) > since]
    assert tail_a
    assert events_a[-1].state == "TASK_STATE_COMPLETED"
    ids = [int(e.id or -1) for e in events_a]
    assert ids == sorted(ids)
    assert len(set(ids[1:])) == len(ids) - 1


async def test_a_client_resumes_with_last_event_id_missing_nothing_repeating_nothing(
    streamer: RunningAgent, gateway: FakeGateway
) -> None:
    key = uuid.uuid4().hex
    params = streaming_send(gateway, f"steps:{key}")
    async with open_stream(
        streamer.endpoint, gateway, "SendStreamingMessage", params, tenant="steps"
    ) as stream:
        before = [await stream.next() for _ in range(3)]
    assert all(event is not None for event in before)
    last = before[-1]
    assert last is not None
    task_id = before[0].result["task"]["id"]  # type: ignore[union-attr]
    release(key)  # the turn goes on while nobody listens
    await wait_state(streamer, gateway, task_id, "TASK_STATE_COMPLETED", tenant="steps")
    async with open_stream(
        streamer.endpoint,
        gateway,
        "SubscribeToTask",
        {"id": task_id},
        tenant="steps",
        last_event_id=last.id,
    ) as resumed:
        after = await resumed.rest()
    # Everything after the last event seen, exactly once; no snapshot on a resumed stream.
    assert [int(e.id or -1) for e in after] == list(range(int(last.id or 0) + 1, 7))
    assert after[0].kind != "task"
    assert after[-1].state == "TASK_STATE_COMPLETED"
    # The same messageId sent again with Last-Event-ID resumes as well (a retried stream).
    async with open_stream(
        streamer.endpoint,
        gateway,
        "SendStreamingMessage",
        params,
        tenant="steps",
        last_event_id="4",
    ) as again:
        replayed = await again.rest()
    assert [int(e.id or -1) for e in replayed] == [5, 6]


@pytest.mark.parametrize(
    ("last_event_id", "code"),
    [("abc", -32602), ("-1", -32602), ("99", -32602), ("1" * 30, -32602)],
)
async def test_a_last_event_id_that_is_not_an_event_of_the_task_is_refused(
    agent: RunningAgent, gateway: FakeGateway, last_event_id: str, code: int
) -> None:
    task = await send(agent, gateway, "ask")
    await wait_state(agent, gateway, task["id"], "TASK_STATE_INPUT_REQUIRED")
    async with open_stream(
        agent.endpoint, gateway, "SubscribeToTask", {"id": task["id"]}, last_event_id=last_event_id
    ) as stream:
        assert not stream.is_sse
        body = await stream.json()
    assert body["error"]["code"] == code
    assert "Last-Event-ID" in body["error"]["message"]


async def test_errors_before_the_first_event_are_ordinary_json_rpc_errors(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    done = await send(agent, gateway, "hello")
    await wait_state(agent, gateway, done["id"], "TASK_STATE_COMPLETED")
    cases: list[tuple[dict[str, Any], dict[str, Any], int]] = [
        ({"id": done["id"]}, {}, -32004),  # a terminal task has nothing more to stream
        ({"id": str(uuid.uuid4())}, {}, -32001),
        ({"id": done["id"]}, {"subject": "someone-else"}, -32001),
        ({"id": done["id"]}, {"subject": "someone-else", "last_event_id": "0"}, -32001),
        ({"id": done["id"]}, {"tenant": "bob"}, -32001),
        ({"id": ""}, {}, -32602),
        ({"id": done["id"]}, {"last_event_id": "3"}, -32004),  # nothing was missed
    ]
    for params, options, code in cases:
        async with open_stream(
            agent.endpoint, gateway, "SubscribeToTask", params, **options
        ) as stream:
            assert stream.response.content_type == "application/json"
            body = await stream.json()
        assert body["error"]["code"] == code, (params, options, body)


async def test_an_unauthenticated_stream_is_refused_before_anything_starts(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    params = streaming_send(gateway, "hello")
    token = gateway.token(tenant="alice", aud="https://elsewhere.example/a2a")
    async with open_stream(
        agent.endpoint, gateway, "SendStreamingMessage", params, token=token
    ) as stream:
        assert stream.status == 401
        body = await stream.json()
    assert body["error"]["data"][0]["metadata"]["check"] == "audience-mismatch"
    listed = (await call(agent, gateway, "ListTasks", {}))["result"]
    assert listed["tasks"] == []


async def test_a_stream_of_an_interrupted_task_is_its_snapshot(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    params = streaming_send(gateway, "ask")
    async with open_stream(agent.endpoint, gateway, "SendStreamingMessage", params) as stream:
        events = await stream.rest()
    assert events[-1].state == "TASK_STATE_INPUT_REQUIRED"
    task_id = events[0].result["task"]["id"]
    async with open_stream(agent.endpoint, gateway, "SubscribeToTask", {"id": task_id}) as again:
        [snapshot] = await again.rest()
    assert snapshot.kind == "task"
    assert snapshot.state == "TASK_STATE_INPUT_REQUIRED"
    assert snapshot.id == events[-1].id


async def test_a_subscriber_that_does_not_read_is_dropped_and_nothing_waits_for_it(
    gateway: FakeGateway,
) -> None:
    extra = "[streaming]\nbuffer_events = 2\n" + STREAM_TENANTS
    async with serving(gateway, extra=extra) as running:
        key = uuid.uuid4().hex
        _, body = await gateway.send_turn(running.endpoint, tenant="steps", text=f"steps:{key}")
        task_id = body["result"]["task"]["id"]
        await wait_state(running, gateway, task_id, "TASK_STATE_WORKING", tenant="steps")
        hub = running.app[SERVICES_KEY].streams
        assert hub is not None
        # A subscription nobody reads (a client that stopped reading its socket).
        stalled = hub.subscribe(task_id, 0)
        async with open_stream(
            running.endpoint, gateway, "SubscribeToTask", {"id": task_id}, tenant="steps"
        ) as reader:
            release(key)
            events = await reader.rest()
        assert events[-1].state == "TASK_STATE_COMPLETED"
        assert stalled.ended is not None
        assert "dropped" in stalled.ended
        await wait_state(running, gateway, task_id, "TASK_STATE_COMPLETED", tenant="steps")


async def test_idle_streams_get_heartbeat_comments(gateway: FakeGateway) -> None:
    extra = "[streaming]\nheartbeat_seconds = 0.05\n"
    async with serving(gateway, extra=extra) as running:
        params = streaming_send(gateway, "hold-" + uuid.uuid4().hex)
        text = params["message"]["parts"][0]["text"]
        async with open_stream(
            running.endpoint, gateway, "SendStreamingMessage", params, tenant="bob"
        ) as stream:
            kinds = [(await stream.next(comments=True)) for _ in range(4)]
            release(text)
            rest = await stream.rest()
        assert [e.kind for e in kinds if e is not None][:2] == ["task", "statusUpdate"]
        assert "comment" in [e.kind for e in kinds if e is not None]
        assert rest[-1].state == "TASK_STATE_COMPLETED"


async def test_with_streaming_off_both_methods_are_unsupported_and_the_card_says_so(
    gateway: FakeGateway,
) -> None:
    async with serving(gateway, extra="[streaming]\nenabled = false\n") as running:
        card = (await call(running, gateway, "GetExtendedAgentCard", {}))["result"]
        assert card["capabilities"]["streaming"] is False
        for method, params in (
            ("SendStreamingMessage", streaming_send(gateway, "hello")),
            ("SubscribeToTask", {"id": str(uuid.uuid4())}),
        ):
            async with open_stream(running.endpoint, gateway, method, params) as stream:
                body = await stream.json()
            assert body["error"]["code"] == -32004, body
        listed = (await call(running, gateway, "ListTasks", {}))["result"]
        assert listed["tasks"] == []


async def test_a_direct_message_answers_a_blocking_send_and_its_retries(
    streamer: RunningAgent, gateway: FakeGateway
) -> None:
    message_id = str(uuid.uuid4())
    for _ in range(2):  # the retry answers the same, from the task record
        status, body = await gateway.send_turn(
            streamer.endpoint,
            tenant="direct",
            text="Ann",
            message_id=message_id,
            return_immediately=False,
        )
        assert status == 200
        message = body["result"]["message"]
        assert message["parts"] == [{"text": "hi, Ann"}]
        assert message["role"] == "ROLE_AGENT"
        assert message["contextId"]
        assert "taskId" not in message
    # Without waiting, the caller gets the task (the agent has not answered yet).
    status, body = await gateway.send_turn(streamer.endpoint, tenant="direct", text="Bo")
    assert "task" in body["result"]


async def test_progress_is_pushed_only_where_the_push_policy_says_so(
    gateway: FakeGateway,
) -> None:
    for push_progress in (False, True):
        extra = f"[push]\nprogress = {'true' if push_progress else 'false'}\n" + STREAM_TENANTS
        async with serving(gateway, extra=extra) as running:
            key = uuid.uuid4().hex
            _, body = await gateway.send_turn(running.endpoint, tenant="steps", text=f"steps:{key}")
            task_id = body["result"]["task"]["id"]
            release(key)
            await wait_state(running, gateway, task_id, "TASK_STATE_COMPLETED", tenant="steps")
            await gateway.wait_for_pushes(3 if push_progress else 1)
            await asyncio.sleep(0.2)
            mine = [p for p in gateway.pushes if p.claims and p.claims["taskId"] == task_id]
            kinds = [next(iter(p.json)) for p in mine]
            if push_progress:
                assert kinds == ["statusUpdate", "statusUpdate", "task"]
                assert mine[0].json["statusUpdate"]["status"]["message"]["parts"] == [
                    {"text": "looking"}
                ]
            else:
                assert kinds == ["task"]
        gateway.pushes.clear()


async def test_on_postgresql_another_process_is_notified_at_once(
    gateway: FakeGateway, postgres_url: str
) -> None:
    """Two servers on one PostgreSQL store, polling only every few minutes: the stream on the
    second still gets the first's events as they happen (LISTEN/NOTIFY wakes it)."""
    slow_poll = "[streaming]\npoll_seconds = 30\n" + STREAM_TENANTS
    runs, runs_listener = await start_agent(
        [gateway.origin], store_url=postgres_url, extra=slow_poll, server='node = "a"'
    )
    reads, reads_listener = await start_agent(
        [gateway.origin], store_url=postgres_url, extra=slow_poll, server='node = "b"'
    )
    try:
        key = uuid.uuid4().hex
        _, body = await gateway.send_turn(runs.endpoint, tenant="steps", text=f"steps:{key}")
        task_id = body["result"]["task"]["id"]
        async with open_stream(
            reads.endpoint, gateway, "SubscribeToTask", {"id": task_id}, tenant="steps"
        ) as stream:
            first = await stream.next()
            assert first is not None
            release(key)
            rest = await stream.rest(timeout=5)  # far below the poll interval
        assert rest[-1].state == "TASK_STATE_COMPLETED"
    finally:
        for running, listener in ((reads, reads_listener), (runs, runs_listener)):
            await running.session.close()
            await listener.cleanup()
