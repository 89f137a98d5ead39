"""The task lifecycle end to end: real agent server, real SQLite file, a FakeGateway that sends
turns and receives (and verifies) pushes."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from a2a.types import (
    ListTaskPushNotificationConfigsResponse,
    ListTasksResponse,
    SendMessageResponse,
    StreamResponse,
    Task,
    TaskPushNotificationConfig,
)
from google.protobuf.json_format import ParseDict

from looping_core.a2a import Message, Part, Role, TaskState
from looping_core.contract import Identity
from looping_core.server.internal import SERVICES
from looping_core.store.internal import Database, TaskStore
from looping_core.testing import FakeGateway

from support import agents as test_agents
from support.served import wait_for
from support.serving import UNLIMITED, RunningAgent, start_agent

FAST_PUSH = "[push]\nbackoff_seconds = 0.01\nbackoff_max_seconds = 0.05\n" + UNLIMITED
PATIENT = (
    UNLIMITED
    + """
[tenants.patient]
agent = "support.agents:EchoAgent"
allow_configless = true
max_wait_seconds = 600
[tenants.patient.card]
name = "Patient"
description = "Waits long."
skills = [{ id = "echo", name = "Echo", description = "Echoes.", tags = ["echo"] }]
"""
)


def strict(document: Any, proto: type) -> Any:
    """Parse with the official SDK's protobuf type; unknown fields raise."""
    return ParseDict(document, proto())


@pytest.fixture
async def agent(gateway: FakeGateway, store_url: str) -> AsyncIterator[RunningAgent]:
    """The agent on each store: every test here runs on SQLite and on PostgreSQL."""
    running, runner = await start_agent([gateway.origin], store_url=store_url, extra=FAST_PUSH)
    gateway.agent_jwks_url = running.base_url + "/.well-known/jwks.json"
    yield running
    await running.session.close()
    await runner.cleanup()


async def send(
    agent: RunningAgent, gateway: FakeGateway, text: str, tenant: str = "alice", **kw: Any
) -> dict[str, Any]:
    status, body = await gateway.send_turn(agent.endpoint, tenant=tenant, text=text, **kw)
    assert status == 200, body
    assert "result" in body, body
    strict(body["result"], SendMessageResponse)
    return body["result"]["task"]


async def call(
    agent: RunningAgent,
    gateway: FakeGateway,
    method: str,
    params: dict[str, Any],
    tenant: str = "alice",
    subject: str = "caller",
) -> dict[str, Any]:
    status, body = await gateway.call(
        agent.endpoint, method, {"tenant": tenant, **params}, tenant=tenant, subject=subject
    )
    assert status == 200, body
    return body


async def wait_state(
    agent: RunningAgent,
    gateway: FakeGateway,
    task_id: str,
    state: str,
    tenant: str = "alice",
    subject: str = "caller",
) -> dict[str, Any]:
    for _ in range(500):
        task = (await call(agent, gateway, "GetTask", {"id": task_id}, tenant, subject))["result"]
        if task["status"]["state"] == state:
            return task
        await asyncio.sleep(0.01)
    raise AssertionError(f"task {task_id} never reached {state}: {task['status']}")


async def test_send_returns_submitted_then_a_verified_push_carries_the_result(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    task = await send(agent, gateway, "hello")
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
    [push] = await gateway.wait_for_pushes(1)
    assert push.error is None, push.error
    assert push.headers["Content-Type"] == "application/a2a+json"
    assert push.claims is not None
    assert push.claims["taskId"] == task["id"]
    assert push.claims["iss"] == agent.base_url
    pushed = strict(push.json, StreamResponse)
    assert pushed.task.id == task["id"]
    assert push.json["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert push.json["task"]["artifacts"][0]["parts"] == [{"text": "hello (after 0)"}]
    done = (await call(agent, gateway, "GetTask", {"id": task["id"]}))["result"]
    strict(done, Task)
    assert [m["role"] for m in done["history"]] == ["ROLE_USER", "ROLE_AGENT"]


async def test_fifty_concurrent_duplicates_make_one_task_and_one_turn(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    message_id = str(uuid.uuid4())
    results = await asyncio.gather(
        *(send(agent, gateway, "dup", message_id=message_id) for _ in range(50))
    )
    assert len({task["id"] for task in results}) == 1
    task_id = results[0]["id"]
    await wait_state(agent, gateway, task_id, "TASK_STATE_COMPLETED")
    await gateway.wait_for_pushes(1)
    await asyncio.sleep(0.05)
    assert test_agents.RUNS[task_id] == 1
    assert len([p for p in gateway.pushes if p.claims and p.claims["taskId"] == task_id]) == 1


async def test_a_duplicate_after_a_restart_starts_nothing(
    gateway: FakeGateway, store_url: str
) -> None:
    first, runner = await start_agent([gateway.origin], store_url=store_url, extra=FAST_PUSH)
    message_id = str(uuid.uuid4())
    task = await send(first, gateway, "once", message_id=message_id)
    await wait_state(first, gateway, task["id"], "TASK_STATE_COMPLETED")
    await first.session.close()
    await runner.cleanup()
    again, runner = await start_agent([gateway.origin], store_url=store_url, extra=FAST_PUSH)
    try:
        repeat = await send(again, gateway, "once", message_id=message_id)
        assert repeat["id"] == task["id"]
        assert repeat["status"]["state"] == "TASK_STATE_COMPLETED"
        assert test_agents.RUNS[task["id"]] == 1
    finally:
        await again.session.close()
        await runner.cleanup()


async def test_the_same_message_id_from_another_caller_is_another_task(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    message_id = str(uuid.uuid4())
    mine = await send(agent, gateway, "a", message_id=message_id)
    theirs = await send(agent, gateway, "a", message_id=message_id, subject="someone-else")
    assert mine["id"] != theirs["id"]


async def test_a_follow_up_to_a_working_task_joins_it_and_begins_the_next_turn(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    """An agent that does not read follow-ups while it works (a plain `Agent`) ends its turn
    without seeing one: its output is kept, the follow-up begins the next turn of the same task,
    and only the last turn's end is pushed."""
    held, more = f"held-{uuid.uuid4()}", f"more-{uuid.uuid4()}"
    task = await send(agent, gateway, held, tenant="bob")
    await wait_state(agent, gateway, task["id"], "TASK_STATE_WORKING", "bob")
    joined = await send(agent, gateway, more, tenant="bob", task_id=task["id"])
    assert (joined["id"], joined["status"]["state"]) == (task["id"], "TASK_STATE_WORKING")
    assert [m["parts"] for m in joined["history"]] == [[{"text": held}], [{"text": more}]]
    test_agents.RELEASE.setdefault(held, asyncio.Event()).set()
    for _ in range(500):
        if test_agents.RUNS[task["id"]] == 2:
            break
        await asyncio.sleep(0.01)
    assert test_agents.RUNS[task["id"]] == 2
    working = await wait_state(agent, gateway, task["id"], "TASK_STATE_WORKING", "bob")
    assert [a["parts"] for a in working["artifacts"]] == [[{"text": held}]]  # the first output
    test_agents.RELEASE.setdefault(more, asyncio.Event()).set()
    done = await wait_state(agent, gateway, task["id"], "TASK_STATE_COMPLETED", "bob")
    assert [a["parts"] for a in done["artifacts"]] == [[{"text": held}], [{"text": more}]]
    assert [m["role"] for m in done["history"]] == ["ROLE_USER", "ROLE_USER"] + ["ROLE_AGENT"] * 2
    pushes = await gateway.wait_for_pushes(1)
    states = [p.json["task"]["status"]["state"] for p in pushes if p.claims["taskId"] == task["id"]]
    assert states == ["TASK_STATE_COMPLETED"]


async def test_a_retried_follow_up_is_accepted_once(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    first = await send(agent, gateway, "ask")  # an EchoAgent turn, asks for input
    await wait_state(agent, gateway, first["id"], "TASK_STATE_INPUT_REQUIRED")
    message_id = str(uuid.uuid4())
    again = await send(agent, gateway, "x", task_id=first["id"], message_id=message_id)
    duplicate = await send(agent, gateway, "x", task_id=first["id"], message_id=message_id)
    assert duplicate["id"] == again["id"]  # a retried follow-up is still accepted once
    done = await wait_state(agent, gateway, first["id"], "TASK_STATE_COMPLETED")
    users = [m for m in done["history"] if m["role"] == "ROLE_USER"]
    assert [m["parts"] for m in users] == [[{"text": "ask"}], [{"text": "x"}]]


@pytest.mark.parametrize("attempt", range(10))
async def test_cancel_racing_completion_ends_in_exactly_one_terminal_state(
    agent: RunningAgent, gateway: FakeGateway, attempt: int
) -> None:
    text = f"race-{uuid.uuid4()}"
    task = await send(agent, gateway, text, tenant="bob")
    await wait_state(agent, gateway, task["id"], "TASK_STATE_WORKING", "bob")
    test_agents.RELEASE.setdefault(text, asyncio.Event())
    cancel = asyncio.create_task(call(agent, gateway, "CancelTask", {"id": task["id"]}, "bob"))
    if attempt % 2:
        await asyncio.sleep(0)
    test_agents.RELEASE[text].set()
    canceled = await cancel
    final = None
    for _ in range(200):
        final = (await call(agent, gateway, "GetTask", {"id": task["id"]}, "bob"))["result"]
        if final["status"]["state"] in ("TASK_STATE_COMPLETED", "TASK_STATE_CANCELED"):
            break
        await asyncio.sleep(0.01)
    assert final is not None
    if "result" in canceled:
        strict(canceled["result"], Task)
        assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
        assert final["status"]["state"] == "TASK_STATE_CANCELED"
        assert "artifacts" not in final  # the completion lost: its result was discarded
    else:
        assert canceled["error"]["code"] == -32002
        assert final["status"]["state"] == "TASK_STATE_COMPLETED"
    pushes = await gateway.wait_for_pushes(1)
    states = [
        p.json["task"]["status"]["state"]
        for p in pushes
        if p.claims and p.claims["taskId"] == task["id"]
    ]
    assert states == [final["status"]["state"]]


async def test_guarded_terminal_writes_have_exactly_one_winner(agent: RunningAgent) -> None:
    """Three terminal writes race on each task: one wins. The tasks are made through a store
    of their own on the same database, one that tells no job engine: with the server's (on
    PostgreSQL) the engine would run each turn too, a fourth writer that can win first."""
    database = Database.from_url(agent.config.store.location())
    store = TaskStore(database)
    caller = Identity("alice", "https://gw", "x")
    try:
        for _ in range(20):
            message = Message(
                message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=(Part(text="x"),)
            )
            task_id = (await store.start_turn(caller, message, None)).task.id
            outcomes = await asyncio.gather(
                store.transition(task_id, TaskState.TASK_STATE_COMPLETED),
                store.transition(task_id, TaskState.TASK_STATE_CANCELED),
                store.transition(task_id, TaskState.TASK_STATE_FAILED),
            )
            assert sorted(outcomes) == [False, False, True]
    finally:
        database.close()


async def test_cancel_of_a_terminal_or_unknown_task(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    task = await send(agent, gateway, "x")
    await wait_state(agent, gateway, task["id"], "TASK_STATE_COMPLETED")
    body = await call(agent, gateway, "CancelTask", {"id": task["id"]})
    assert body["error"]["code"] == -32002
    assert (await call(agent, gateway, "CancelTask", {"id": "no-such-task"}))["error"][
        "code"
    ] == -32001


async def test_input_required_then_a_follow_up_by_task_id_only(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    task = await send(agent, gateway, "ask")
    asked = await wait_state(agent, gateway, task["id"], "TASK_STATE_INPUT_REQUIRED")
    assert asked["status"]["message"]["parts"] == [{"text": "which one?"}]
    follow = await send(agent, gateway, "the blue one", task_id=task["id"])
    assert follow["id"] == task["id"]
    assert follow["contextId"] == task["contextId"]  # inferred from the task
    done = await wait_state(agent, gateway, task["id"], "TASK_STATE_COMPLETED")
    assert done["artifacts"][0]["parts"] == [{"text": "the blue one (after 2)"}]
    states = [p.json["task"]["status"]["state"] for p in await gateway.wait_for_pushes(2)]
    assert states == ["TASK_STATE_INPUT_REQUIRED", "TASK_STATE_COMPLETED"]


async def test_follow_up_errors(agent: RunningAgent, gateway: FakeGateway) -> None:
    asked = await send(agent, gateway, "ask")
    await wait_state(agent, gateway, asked["id"], "TASK_STATE_INPUT_REQUIRED")
    status, body = await gateway.send_turn(
        agent.endpoint, tenant="alice", text="x", task_id=asked["id"], context_id="another-context"
    )
    assert status == 200  # a client's mistake is a JSON-RPC error, not an HTTP failure
    assert body["error"]["code"] == -32602
    done = await send(agent, gateway, "x")
    await wait_state(agent, gateway, done["id"], "TASK_STATE_COMPLETED")
    _, body = await gateway.send_turn(
        agent.endpoint, tenant="alice", text="more", task_id=done["id"]
    )
    assert body["error"]["code"] == -32004
    _, body = await gateway.send_turn(
        agent.endpoint, tenant="alice", text="more", task_id="no-such-task"
    )
    assert body["error"]["code"] == -32001


async def test_history_length(agent: RunningAgent, gateway: FakeGateway) -> None:
    task = await send(agent, gateway, "h")
    await wait_state(agent, gateway, task["id"], "TASK_STATE_COMPLETED")
    full = (await call(agent, gateway, "GetTask", {"id": task["id"]}))["result"]
    none = (await call(agent, gateway, "GetTask", {"id": task["id"], "historyLength": 0}))["result"]
    last = (await call(agent, gateway, "GetTask", {"id": task["id"], "historyLength": 1}))["result"]
    assert len(full["history"]) == 2
    assert "history" not in none
    assert [m["role"] for m in last["history"]] == ["ROLE_AGENT"]
    bad = await call(agent, gateway, "GetTask", {"id": task["id"], "historyLength": -1})
    assert bad["error"]["code"] == -32602


async def test_list_tasks_pages_newest_first(agent: RunningAgent, gateway: FakeGateway) -> None:
    ids = []
    for index in range(5):
        task = await send(agent, gateway, f"t{index}", subject="lister")
        await wait_state(agent, gateway, task["id"], "TASK_STATE_COMPLETED", subject="lister")
        ids.append(task["id"])
    seen, token = [], None
    while True:
        params: dict[str, Any] = {"pageSize": 2}
        if token:
            params["pageToken"] = token
        page = (await call(agent, gateway, "ListTasks", params, subject="lister"))["result"]
        strict(page, ListTasksResponse)
        assert page["totalSize"] == 5
        assert page["pageSize"] == 2
        assert "nextPageToken" in page
        assert all("artifacts" not in task for task in page["tasks"])
        seen += [task["id"] for task in page["tasks"]]
        token = page["nextPageToken"]
        if not token:
            break
    assert seen == list(reversed(ids))
    with_artifacts = (
        await call(
            agent, gateway, "ListTasks", {"includeArtifacts": True, "pageSize": 1}, subject="lister"
        )
    )["result"]
    assert with_artifacts["tasks"][0]["artifacts"]


async def test_list_tasks_filters_and_errors(agent: RunningAgent, gateway: FakeGateway) -> None:
    asked = await send(agent, gateway, "ask", subject="filters")
    await wait_state(agent, gateway, asked["id"], "TASK_STATE_INPUT_REQUIRED", subject="filters")
    by_state = (
        await call(
            agent, gateway, "ListTasks", {"status": "TASK_STATE_INPUT_REQUIRED"}, subject="filters"
        )
    )["result"]
    assert [t["id"] for t in by_state["tasks"]] == [asked["id"]]
    by_context = (
        await call(
            agent, gateway, "ListTasks", {"contextId": asked["contextId"]}, subject="filters"
        )
    )["result"]
    assert by_context["totalSize"] == 1
    empty = (await call(agent, gateway, "ListTasks", {"contextId": "nope"}, subject="filters"))[
        "result"
    ]
    assert empty == {"tasks": [], "nextPageToken": "", "pageSize": 50, "totalSize": 0}
    for params in (
        {"pageSize": 0},
        {"pageSize": 101},
        {"pageToken": "garbage!"},
        {"status": "completed"},
        {"historyLength": -2},
    ):
        assert (await call(agent, gateway, "ListTasks", params))["error"]["code"] == -32602


async def test_send_without_a_push_config_is_refused_by_the_gateway_contract(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    status, body = await gateway.send_turn(agent.endpoint, tenant="alice", text="x", inbox=None)
    assert status == 200
    assert body["error"]["code"] == -32602
    assert (
        body["error"]["data"][1]["fieldViolations"][0]["field"]
        == "params.configuration.taskPushNotificationConfig"
    )


async def test_a_configless_tenant_blocks_until_the_task_ends(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    status, body = await gateway.send_turn(
        agent.endpoint, tenant="sdk", text="hi", inbox=None, return_immediately=False
    )
    assert status == 200, body
    task = body["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "hi (after 0)"}]


async def test_a_blocking_duplicate_of_a_finished_turn_answers_without_waiting(
    gateway: FakeGateway,
) -> None:
    """Nothing runs the duplicate's task any more, so nothing would end the wait: it must not
    start (the tenant would wait its whole 600 s)."""
    agent, runner = await start_agent([gateway.origin], extra=PATIENT)
    try:
        message_id = str(uuid.uuid4())
        turns = [
            gateway.send_turn(
                agent.endpoint,
                tenant="patient",
                text="once",
                message_id=message_id,
                inbox=None,
                return_immediately=False,
            )
            for _ in range(2)
        ]
        _, first = await turns[0]
        _, again = await asyncio.wait_for(turns[1], 60)  # a hang guard, not a timing
    finally:
        await agent.session.close()
        await runner.cleanup()
    assert first["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert again["result"]["task"] == first["result"]["task"]


async def test_concurrent_blocking_duplicates_all_answer_when_the_turn_ends(
    gateway: FakeGateway,
) -> None:
    """Regression: the runner forgot a finished turn one loop step after waking its waiters; a
    duplicate arriving in that step waited on a fresh event nobody set (the tenant's whole
    `max_wait_seconds`, here 600 s). Duplicates spread over the turn's life hit that step: the
    old runner fails this within a few of the five rounds."""
    agent, runner = await start_agent([gateway.origin], extra=PATIENT)

    async def duplicate(message_id: str, delay: float) -> dict[str, Any]:
        await asyncio.sleep(delay)
        _, body = await gateway.send_turn(
            agent.endpoint,
            tenant="patient",
            text="once",
            message_id=message_id,
            inbox=None,
            return_immediately=False,
        )
        task: dict[str, Any] = body["result"]["task"]
        return task

    try:
        for _ in range(5):  # duplicates spread over the turn's whole short life, and after it
            message_id = str(uuid.uuid4())
            sends = [duplicate(message_id, index * 0.002) for index in range(20)]
            tasks = await asyncio.wait_for(asyncio.gather(*sends), 60)  # a hang guard
            assert {task["id"] for task in tasks} == {tasks[0]["id"]}
            assert {task["status"]["state"] for task in tasks} == {"TASK_STATE_COMPLETED"}
    finally:
        await agent.session.close()
        await runner.cleanup()


async def test_push_urls_must_be_on_an_allowlisted_gateway_origin(
    agent: RunningAgent, gateway: FakeGateway, other_gateway: FakeGateway
) -> None:
    params = {
        "message": {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "x"}]},
        "configuration": {
            "taskPushNotificationConfig": {"url": "http://169.254.169.254/latest/meta-data"}
        },
    }
    body = await call(agent, gateway, "SendMessage", params)
    assert body["error"]["code"] == -32602
    listed = (await call(agent, gateway, "ListTasks", {}))["result"]
    assert listed["totalSize"] == 0  # nothing was stored
    task = await send(agent, gateway, "x")
    body = await call(
        agent,
        gateway,
        "CreateTaskPushNotificationConfig",
        {"taskId": task["id"], "url": other_gateway.push_url()},
    )
    assert body["error"]["code"] == -32602


async def test_push_secrets_are_sealed_in_the_database_file_and_still_delivered(
    tmp_path: Path, gateway: FakeGateway
) -> None:
    """The store holds no push token or credentials in clear (the SQLite file and its WAL, read
    as bytes), and every push still carries them: the gateway refuses a push without them."""
    url = f"sqlite:///{tmp_path / 'sealed.db'}"
    agent, runner = await start_agent([gateway.origin], store_url=url, extra=FAST_PUSH)
    gateway.agent_jwks_url = agent.base_url + "/.well-known/jwks.json"
    try:
        task = await send(agent, gateway, "ask")
        await wait_state(agent, gateway, task["id"], "TASK_STATE_INPUT_REQUIRED")
        [push] = await gateway.wait_for_pushes(1)
        assert push.error is None  # the gateway checked the push's Authorization header
        listed = (
            await call(agent, gateway, "ListTaskPushNotificationConfigs", {"taskId": task["id"]})
        )["result"]["configs"]
        assert [set(config) for config in listed] == [{"id", "taskId", "url", "authentication"}]
    finally:
        await agent.session.close()
        await runner.cleanup()
    stored = b"".join(path.read_bytes() for path in tmp_path.glob("sealed.db*"))
    assert b'"token":"lps1.' in stored  # sealed, not left out
    for secret in (gateway.push_token, gateway.push_credentials):
        assert secret.encode() not in stored


async def test_push_config_methods_and_nothing_sent_after_delete(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    task = await send(agent, gateway, "ask")
    await wait_state(agent, gateway, task["id"], "TASK_STATE_INPUT_REQUIRED")
    await gateway.wait_for_pushes(1)
    created = (
        await call(
            agent,
            gateway,
            "CreateTaskPushNotificationConfig",
            {"taskId": task["id"], **gateway.push_config("second")},
        )
    )["result"]
    strict(created, TaskPushNotificationConfig)
    config_id = created["id"]
    got = (
        await call(
            agent, gateway, "GetTaskPushNotificationConfig", {"taskId": task["id"], "id": config_id}
        )
    )["result"]
    # Read back without its secrets (write-only): the token and the credentials are left out.
    assert created["token"] == gateway.push_token
    assert created["authentication"]["credentials"] == gateway.push_credentials
    assert got == {
        **{key: value for key, value in created.items() if key != "token"},
        "authentication": {"scheme": "Bearer"},
    }
    listed = (
        await call(agent, gateway, "ListTaskPushNotificationConfigs", {"taskId": task["id"]})
    )["result"]
    strict(listed, ListTaskPushNotificationConfigsResponse)
    assert len(listed["configs"]) == 2
    assert all(
        "token" not in config and config["authentication"] == {"scheme": "Bearer"}
        for config in listed["configs"]
    )
    for _ in range(2):  # idempotent
        assert (
            await call(
                agent,
                gateway,
                "DeleteTaskPushNotificationConfig",
                {"taskId": task["id"], "id": config_id},
            )
        )["result"] == {}
    gone = await call(
        agent, gateway, "GetTaskPushNotificationConfig", {"taskId": task["id"], "id": config_id}
    )
    assert gone["error"]["code"] == -32001
    await send(agent, gateway, "done now", task_id=task["id"])
    await wait_state(agent, gateway, task["id"], "TASK_STATE_COMPLETED")
    await gateway.wait_for_pushes(2)
    await asyncio.sleep(0.1)
    assert [p.inbox for p in gateway.pushes] == ["inbox", "inbox"]


async def test_a_receiver_failing_three_times_gets_the_same_jti(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    gateway.push_failures = 3
    task = await send(agent, gateway, "retry me")
    [delivered] = await gateway.wait_for_pushes(1)
    attempts = [p for p in gateway.pushes if p.claims and p.claims["taskId"] == task["id"]]
    assert [p.status for p in attempts] == [503, 503, 503, 200]
    assert {p.claims["jti"] for p in attempts if p.claims} == {delivered.claims["jti"]}  # type: ignore[index]
    for _ in range(200):  # the deliverer records the outcome after the receiver answered
        [row] = await agent.app[SERVICES].store.outbox_rows(task["id"])
        if row["state"] != "pending":
            break
        await asyncio.sleep(0.01)
    assert row["state"] == "delivered"
    assert [a["status"] for a in row["attempts"]] == [503, 503, 503, 200]


async def test_an_agent_that_raises_fails_the_task_without_details(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    task = await send(agent, gateway, "boom")
    failed = await wait_state(agent, gateway, task["id"], "TASK_STATE_FAILED")
    assert failed["status"]["message"]["parts"] == [{"data": {"reason": "AGENT_ERROR"}}]
    assert "exploded" not in str(failed)
    [push] = await gateway.wait_for_pushes(1)
    assert push.json["task"]["status"]["state"] == "TASK_STATE_FAILED"


async def test_a_refusal_is_rejected_and_stays_a_refusal(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    task = await send(agent, gateway, "refuse")
    rejected = await wait_state(agent, gateway, task["id"], "TASK_STATE_REJECTED")
    assert rejected["history"][-1]["parts"] == [{"text": "", "metadata": {"looping.refusal": True}}]


@pytest.mark.parametrize(
    "method",
    [
        "GetTask",
        "CancelTask",
        "ListTaskPushNotificationConfigs",
        "SendMessage",
        "GetTaskPushNotificationConfig",
        "CreateTaskPushNotificationConfig",
        "DeleteTaskPushNotificationConfig",
    ],
)
async def test_other_callers_and_tenants_get_task_not_found(
    agent: RunningAgent, gateway: FakeGateway, method: str
) -> None:
    task = await send(agent, gateway, "ask")
    await wait_state(agent, gateway, task["id"], "TASK_STATE_INPUT_REQUIRED")
    params = {
        "GetTask": {"id": task["id"]},
        "CancelTask": {"id": task["id"]},
        "ListTaskPushNotificationConfigs": {"taskId": task["id"]},
        "SendMessage": {
            "message": {
                "messageId": str(uuid.uuid4()),
                "role": "ROLE_USER",
                "parts": [{"text": "x"}],
                "taskId": task["id"],
            },
            "configuration": {"taskPushNotificationConfig": gateway.push_config()},
        },
        "GetTaskPushNotificationConfig": {"taskId": task["id"], "id": "any"},
        "CreateTaskPushNotificationConfig": {"taskId": task["id"], **gateway.push_config()},
        "DeleteTaskPushNotificationConfig": {"taskId": task["id"], "id": "any"},
    }[method]
    other_caller = await call(agent, gateway, method, params, subject="mallory")
    other_tenant = await call(agent, gateway, method, params, tenant="sdk")
    assert other_caller["error"]["code"] == other_tenant["error"]["code"] == -32001
    assert other_caller["error"]["message"] == "Task not found"
    still = (await call(agent, gateway, "GetTask", {"id": task["id"]}))["result"]
    assert still["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


async def test_list_tasks_shows_only_the_callers_tasks(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    await send(agent, gateway, "mine", subject="owner")
    assert (await call(agent, gateway, "ListTasks", {}, subject="owner"))["result"][
        "totalSize"
    ] == 1
    assert (await call(agent, gateway, "ListTasks", {}, subject="stranger"))["result"][
        "totalSize"
    ] == 0
    assert (await call(agent, gateway, "ListTasks", {}, tenant="sdk", subject="owner"))["result"][
        "totalSize"
    ] == 0


async def test_deliveries_stop_after_max_attempts(gateway: FakeGateway) -> None:
    limits = "[push]\nmax_attempts = 2\nbackoff_seconds = 0.01\nbackoff_max_seconds = 0.02\n"
    agent, runner = await start_agent([gateway.origin], extra=limits)
    gateway.agent_jwks_url = agent.base_url + "/.well-known/jwks.json"
    gateway.push_failures = 100
    try:
        task = await send(agent, gateway, "never delivered")
        for _ in range(300):
            [row] = await agent.app[SERVICES].store.outbox_rows(task["id"]) or [None]
            if row and row["state"] != "pending":
                break
            await asyncio.sleep(0.01)
        assert row is not None
        assert row["state"] == "failed"
        assert [a["status"] for a in row["attempts"]] == [503, 503]
    finally:
        await agent.session.close()
        await runner.cleanup()


async def test_a_turn_whose_task_another_process_ended_is_stopped(
    agent: RunningAgent, gateway: FakeGateway, tmp_path: Path
) -> None:
    """Another server worker took the CancelTask: it ended the task in the store, and (with the
    job engine, on PostgreSQL) aborted the turn's job. The runner running the turn notices
    within its poll interval (embedded), or is told at once (the engine), and stops it."""
    held = tmp_path / "held"
    task = await send(agent, gateway, f"file:{held}", tenant="bob")
    await wait_for(Path(f"{held}.started"))
    services = agent.app[SERVICES]
    assert await services.store.transition(task["id"], TaskState.TASK_STATE_CANCELED)
    if services.runtime is not None and services.runtime.jobs is not None:
        await services.runtime.jobs.abort_turn(task["id"])
    await wait_for(Path(f"{held}.cancelled"))
    assert (await call(agent, gateway, "GetTask", {"id": task["id"]}, "bob"))["result"]["status"][
        "state"
    ] == "TASK_STATE_CANCELED"


async def test_a_blocking_send_on_the_job_engine_waits_for_events_not_a_poll(
    gateway: FakeGateway, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine's worker may be any process: the waiting edge reads the task's state when the
    wait begins and again only when an event of the task is written (here: the job's WORKING,
    then its end), never on a timer while the turn holds."""
    agent, runner = await start_agent([gateway.origin], store_url=postgres_url)
    gateway.agent_jwks_url = agent.base_url + "/.well-known/jwks.json"
    store = agent.app[SERVICES].store
    read_state = store.task_state
    reads: list[str] = []

    async def counted(task_id: str) -> TaskState | None:
        reads.append(task_id)
        return await read_state(task_id)

    monkeypatch.setattr(store, "task_state", counted)
    text = f"held-{uuid.uuid4()}"
    try:
        sending = asyncio.create_task(
            gateway.send_turn(agent.endpoint, tenant="bob", text=text, return_immediately=False)
        )
        for _ in range(1500):  # a hang guard, not a timing
            if text in test_agents.RELEASE:
                break  # the turn runs, and holds
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)  # the notices of its first events arrive
        held = len(reads)
        # The first look, and at most one per notice of the SUBMITTED and WORKING events (this
        # process's own write and PostgreSQL's notice of it may wake the wait apart).
        assert 1 <= held <= 4
        await asyncio.sleep(1.5)  # a poll (10 to 200 ms) would have read ~10 times by now
        assert len(reads) == held
        test_agents.RELEASE[text].set()
        status, body = await asyncio.wait_for(sending, 30)  # a hang guard, not a timing
    finally:
        await agent.session.close()
        await runner.cleanup()
    assert status == 200, body
    assert body["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert held < len(reads) <= held + 2  # the end's event (and its notice) woke it
    assert set(reads) == {body["result"]["task"]["id"]}


async def test_the_deliverer_looks_after_a_turn_only_when_it_queued_a_push(
    gateway: FakeGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Turns without a push config end without waking the deliverer (a look is two outbox
    statements); a turn with one wakes it, and its push is delivered at once, not at the next
    periodic look (every 5 s, which wakes nothing and is not counted here)."""
    agent, runner = await start_agent([gateway.origin])
    gateway.agent_jwks_url = agent.base_url + "/.well-known/jwks.json"
    deliverer = agent.app[SERVICES].deliverer
    assert deliverer is not None
    wake = deliverer.wake
    wakes: list[str] = []

    def counted() -> None:
        wakes.append("woken")
        wake()

    monkeypatch.setattr(deliverer, "wake", counted)
    try:
        for n in range(5):
            status, body = await gateway.send_turn(
                agent.endpoint, tenant="sdk", text=f"plain {n}", inbox=None,
                return_immediately=False,
            )  # fmt: skip
            assert body["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", body
        assert wakes == []
        status, body = await gateway.send_turn(agent.endpoint, tenant="sdk", text="pushed")
        assert status == 200, body
        [push] = await gateway.wait_for_pushes(1, timeout=30)
    finally:
        await agent.session.close()
        await runner.cleanup()
    assert push.json["task"]["id"] == body["result"]["task"]["id"]
    assert wakes == ["woken"]  # the push's own turn woke it


async def test_a_turn_with_a_free_slot_is_accepted_and_begun_in_one_transaction(
    gateway: FakeGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """concurrency = 1: the first turn begins as it is accepted (no begin of its own); the
    second waits for the slot and begins as before; a duplicate of the second gives its slot
    back; and all of them end, so no slot was lost on the way."""
    agent, runner = await start_agent([gateway.origin], extra="[runner]\nconcurrency = 1\n")
    gateway.agent_jwks_url = agent.base_url + "/.well-known/jwks.json"
    store = agent.app[SERVICES].store
    begin_turn = store.begin_turn
    begun_apart: list[str] = []

    async def counted(task_id: str) -> Any:
        begun_apart.append(task_id)
        return await begin_turn(task_id)

    monkeypatch.setattr(store, "begin_turn", counted)
    first, second = f"held-{uuid.uuid4()}", f"held-{uuid.uuid4()}"
    try:
        _, body = await gateway.send_turn(agent.endpoint, tenant="bob", text=first)
        first_id = body["result"]["task"]["id"]
        assert body["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"  # as accepted
        assert await store.task_state(first_id) is TaskState.TASK_STATE_WORKING
        again = str(uuid.uuid4())
        _, body = await gateway.send_turn(
            agent.endpoint, tenant="bob", text=second, message_id=again
        )
        second_id = body["result"]["task"]["id"]
        _, duplicate = await gateway.send_turn(
            agent.endpoint, tenant="bob", text=second, message_id=again
        )
        assert duplicate["result"]["task"]["id"] == second_id
        assert begun_apart == []  # the slot is taken: the second waits for it
        for text in (first, second):
            test_agents.RELEASE.setdefault(text, asyncio.Event()).set()
        pushes = await gateway.wait_for_pushes_of([first_id, second_id], timeout=10)
        assert begun_apart == [second_id]
        events = await store.events_after({first_id: 0})
    finally:
        await agent.session.close()
        await runner.cleanup()
    assert {push.json["task"]["status"]["state"] for each in pushes.values() for push in each} == {
        "TASK_STATE_COMPLETED"
    }
    # The first turn's events are those of any turn: WORKING first, numbered from 1.
    assert [event.seq for event in events] == list(range(1, len(events) + 1))
    assert '"TASK_STATE_WORKING"' in events[0].body


async def test_the_job_engines_tables_are_analyzed_when_the_store_is_prepared(
    gateway: FakeGateway, postgres_url: str
) -> None:
    """The turns and pushes get statistics at every start; procrastinate's jobs table does not
    (statistics from the few jobs it holds then would plan its fetch for an empty turns queue:
    see `analyze_engine_tables`)."""
    agent, runner = await start_agent([gateway.origin], store_url=postgres_url)
    query = "SELECT relname FROM pg_stat_user_tables WHERE last_analyze IS NOT NULL"
    try:
        for _ in range(100):  # statistics reach the view within a second: a hang guard
            with psycopg.connect(postgres_url) as connection:
                analyzed = {name for (name,) in connection.execute(query).fetchall()}
            if "push_outbox" in analyzed:
                break
            await asyncio.sleep(0.05)
    finally:
        await agent.session.close()
        await runner.cleanup()
    assert {"procrastinate_periodic_defers", "tasks", "push_outbox"} <= analyzed
    assert "procrastinate_jobs" not in analyzed
