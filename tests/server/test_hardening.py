"""One request must never stop the server, stall push delivery, or get an internal error.

Each test here is the regression test of a defect an adversarial run found: the bad input is
refused at the door with the right code and field, nothing is written, and rows an earlier release
let in are failed and recorded instead of blocking startup or other pushes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from looping_core.server.internal import node_of
from looping_core.store.internal import Database
from looping_core.testing import FakeGateway

from support import agents as test_agents
from support.serving import RunningAgent, start_agent

FAST_PUSH = "[push]\nbackoff_seconds = 0.01\nbackoff_max_seconds = 0.05\n"


@pytest.fixture
def store_file(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
async def agent(gateway: FakeGateway, store_file: Path) -> AsyncIterator[RunningAgent]:
    running, runner = await start_agent(
        [gateway.origin], store_url=f"sqlite:///{store_file}", extra=FAST_PUSH
    )
    gateway.agent_jwks_url = running.base_url + "/.well-known/jwks.json"
    yield running
    await running.session.close()
    await runner.cleanup()


@pytest.fixture
def errors(caplog: pytest.LogCaptureFixture) -> Iterator[list[logging.LogRecord]]:
    """ERROR records logged while the test ran (a client's mistake must log none)."""
    caplog.set_level(logging.INFO)
    records: list[logging.LogRecord] = []
    yield records
    during = caplog.get_records("setup") + caplog.get_records("call")
    records.extend(r for r in during if r.levelno >= logging.ERROR)
    assert records == [], [r.getMessage() for r in records]


async def post_raw(
    agent: RunningAgent, gateway: FakeGateway, body: str, tenant: str = "alice"
) -> tuple[int, Any]:
    """POST `body` exactly as given (surrogate escapes, NaN, deep nesting survive)."""
    token = gateway.token(tenant=tenant, aud=agent.endpoint, sub="caller")
    status, _, document = await agent.post(body, token=token)
    return status, document


def envelope(method: str, params: dict[str, Any]) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})


def send_params(gateway: FakeGateway, **changes: Any) -> dict[str, Any]:
    """A valid SendMessage for alice; `changes` replace parts of it by dotted path."""
    params: dict[str, Any] = {
        "tenant": "alice",
        "message": {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "hi"}]},
        "configuration": {
            "returnImmediately": True,
            "taskPushNotificationConfig": gateway.push_config(),
        },
    }
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = params
        for name in parents:
            node = node[name]
        node[leaf] = value
    return params


async def task_count(agent: RunningAgent, gateway: FakeGateway) -> int:
    status, body = await gateway.call(
        agent.endpoint, "ListTasks", {"tenant": "alice"}, tenant="alice"
    )
    assert status == 200, body
    return int(body["result"]["totalSize"])


def violation(body: Any) -> tuple[int, list[str]]:
    error = body["error"]
    fields = [v["field"] for detail in error["data"] for v in detail.get("fieldViolations", [])]
    return error["code"], fields


# -- severe: the push config ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        (
            {"url": "http://127.0.0.1:1/push/\ud800"},
            "params.configuration.taskPushNotificationConfig.url",
        ),
        ({"token": "a\nb"}, "params.configuration.taskPushNotificationConfig.token"),
        ({"token": "a\rb"}, "params.configuration.taskPushNotificationConfig.token"),
        ({"token": "a\x00b"}, "params.configuration.taskPushNotificationConfig.token"),
        (
            {"authentication": {"scheme": "Bearer", "credentials": "x\r\nX-Injected: 1"}},
            "params.configuration.taskPushNotificationConfig.authentication.credentials",
        ),
        (
            {"authentication": {"scheme": "Bea rer", "credentials": "x"}},
            "params.configuration.taskPushNotificationConfig.authentication.scheme",
        ),
        (
            {"url": "http://127.0.0.1:1/push/a b"},
            "params.configuration.taskPushNotificationConfig.url",
        ),
        ({"id": "cfg\x01"}, "params.configuration.taskPushNotificationConfig.id"),
    ],
)
async def test_an_undeliverable_push_config_is_refused_at_the_door(
    agent: RunningAgent,
    gateway: FakeGateway,
    errors: list[logging.LogRecord],
    changes: dict[str, Any],
    field: str,
) -> None:
    params = send_params(gateway)
    config = params["configuration"]["taskPushNotificationConfig"]
    if "url" in changes:  # keep the allowlisted origin: only the rest of the URL is bad
        changes = {"url": changes["url"].replace("http://127.0.0.1:1", gateway.origin)}
    config.update(changes)
    status, body = await post_raw(agent, gateway, envelope("SendMessage", params))
    assert status == 200
    assert violation(body) == (-32602, [field])
    assert await task_count(agent, gateway) == 0


async def test_create_push_config_applies_the_same_rules(
    agent: RunningAgent, gateway: FakeGateway, errors: list[logging.LogRecord]
) -> None:
    _, body = await gateway.send_turn(agent.endpoint, tenant="alice", text="hi")
    task_id = body["result"]["task"]["id"]
    params = {"tenant": "alice", "taskId": task_id, **gateway.push_config("other")}
    params["token"] = "line\nbreak"
    _, body = await post_raw(agent, gateway, envelope("CreateTaskPushNotificationConfig", params))
    assert violation(body) == (-32602, ["params.token"])
    _status, body = await gateway.call(
        agent.endpoint,
        "ListTaskPushNotificationConfigs",
        {"tenant": "alice", "taskId": task_id},
        tenant="alice",
    )
    assert [c["id"] for c in body["result"]["configs"]] == [task_id]  # only the inline one


# -- severe: rows an earlier release let in ------------------------------------------------------


def _bad_config(task_id: str, config_id: str, **fields: str) -> str:
    """A push config body as an earlier release stored it (JSON escapes keep it ASCII)."""
    return json.dumps({"url": "", "taskId": task_id, "id": config_id, **fields})


def on_store(store_url: str, *statements: tuple[str, tuple[Any, ...]]) -> list[Any]:
    """Run SQL on the store directly, as an earlier release would have; the last one's rows."""
    database = Database.from_url(store_url)

    def run() -> list[Any]:
        rows: list[Any] = []
        with database.write():
            for statement, params in statements:
                cursor = database.execute(statement, params)
                rows = list(cursor.fetchall()) if cursor.description else []
        return rows

    try:
        return database.run_sync(run)
    finally:
        database.close()


async def test_a_store_with_undeliverable_rows_from_an_earlier_release_starts_and_delivers(
    gateway: FakeGateway, store_url: str, errors: list[logging.LogRecord]
) -> None:
    first, runner = await start_agent([gateway.origin], store_url=store_url, extra=FAST_PUSH)
    _, body = await gateway.send_turn(first.endpoint, tenant="bob", text=f"held-{uuid.uuid4()}")
    task_id = body["result"]["task"]["id"]
    for _ in range(200):
        if test_agents.RUNS[task_id]:
            break
        await asyncio.sleep(0.01)
    # What an earlier release accepted: a push URL with a lone surrogate for this task, and 33
    # configs whose token holds a line break, each with a pending push (more than one batch).
    surrogate_url = gateway.push_url("\ud800")
    node = node_of(first.config)
    queued = int(time.time() * 1_000_000)
    statements: list[tuple[str, tuple[Any, ...]]] = [
        (
            # An older release's row: its target was never checked (no verdict kept).
            "UPDATE push_configs SET body = ?, target_checked = ? WHERE task_id = ?",
            (_bad_config(task_id, task_id, url=surrogate_url), False, task_id),
        )
    ]
    for index in range(33):
        config_id = f"bad-{index}"
        statements += [
            (
                "INSERT INTO push_configs (task_id, config_id, body) VALUES (?, ?, ?)",
                (task_id, config_id,
                 _bad_config(task_id, config_id, url=gateway.push_url(), token="a\nb")),
            ),
            (
                "INSERT INTO push_outbox (task_id, config_id, jti, url, body, state, attempts,"
                " next_attempt_ts, created_ts, node, worker)"
                " VALUES (?, ?, ?, ?, '{}', 'pending', 0, 0, ?, ?, 0)",
                # Queued now: a row from 1970 is one the retention sweep (which the job engine
                # starts at once) may delete as soon as it has failed.
                (task_id, config_id, str(uuid.uuid4()), gateway.push_url(), queued, node),
            ),
        ]  # fmt: skip
    on_store(store_url, *statements)
    await first.session.close()
    await runner.cleanup()  # the turn is stopped; its task stays WORKING, as after a crash

    again, runner = await start_agent([gateway.origin], store_url=store_url, extra=FAST_PUSH)
    gateway.agent_jwks_url = again.base_url + "/.well-known/jwks.json"
    try:
        # It started, and recovery failed the task although its push config is bad (at once
        # on SQLite; on PostgreSQL as soon as a job worker takes the turn's job up again) ...
        state = None
        for _ in range(250):
            _status, body = await gateway.call(
                again.endpoint, "GetTask", {"tenant": "bob", "id": task_id}, tenant="bob"
            )
            state = body["result"]["status"]["state"]
            if state != "TASK_STATE_WORKING":
                break
            await asyncio.sleep(0.02)
        assert state == "TASK_STATE_FAILED"
        # ... and a normal turn's push goes out despite the 33 undeliverable ones.
        await gateway.send_turn(again.endpoint, tenant="alice", text="normal")
        [push] = await gateway.wait_for_pushes(1, timeout=5)
        assert push.error is None, push.error
        assert push.json["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        for _ in range(200):
            rows = on_store(
                store_url,
                (
                    "SELECT o.state, a.error FROM push_outbox o"
                    " LEFT JOIN push_attempts a ON a.outbox_id = o.id WHERE o.task_id = ?",
                    (task_id,),
                ),
            )
            if all(state == "failed" for state, _ in rows):
                break
            await asyncio.sleep(0.02)
        # 33 old pending rows + the recovery's pushes to 34 configs, each failed once, recorded.
        assert len(rows) == 33 + 34
        assert {state for state, _ in rows} == {"failed"}
        assert all(error.startswith("undeliverable config: ") for _, error in rows)
        assert any("url" in error for _, error in rows)
        assert sum("token" in error for _, error in rows) == 66
    finally:
        await again.session.close()
        await runner.cleanup()


# -- client mistakes that were internal errors ---------------------------------------------------


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("body", "code", "fields"),
    [
        # About 1,000 levels: json.loads itself gives up.
        (
            '{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"tenant": "alice",'
            f' "id": "x", "metadata": {{"deep": {_nested(5000)}}}}}}}',
            -32600,
            [],
        ),
        # Deeper than the limit, but readable: named by path.
        (
            envelope(
                "SendMessage",
                {
                    "tenant": "alice",
                    "message": {
                        "messageId": "m",
                        "role": "ROLE_USER",
                        "parts": [{"data": json.loads(_nested(80))}],
                    },
                },
            ),
            -32602,
            ["params.message.parts[0].data" + "[0]" * 59],
        ),
        (envelope("GetTask", {"tenant": "alice", "id": "\ud800"}), -32602, ["params.id"]),
        (envelope("CancelTask", {"tenant": "alice", "id": "x\udfff"}), -32602, ["params.id"]),
        (
            envelope(
                "GetTaskPushNotificationConfig", {"tenant": "alice", "taskId": "t", "id": "\ud83d"}
            ),
            -32602,
            ["params.id"],
        ),
        (envelope("GetTask", {"tenant": "alice", "id": "x", "\ud800": 1}), -32602, ["params"]),
        (envelope("GetTask", {"tenant": "alice", "id": "x\x00"}), -32602, ["params.id"]),
        (envelope("GetTask", {"tenant": "alice", "id": "x" * 300}), -32602, ["params.id"]),
        (envelope("GetTask", {"tenant": "alice", "id": ""}), -32602, ["params.id"]),
        (
            envelope("GetTask", {"tenant": "alice", "id": "x", "historyLength": 2**63}),
            -32602,
            ["params.historyLength"],
        ),
        (
            envelope("GetTask", {"tenant": "alice", "id": "x", "historyLength": 2**40}),
            -32602,
            ["params.historyLength"],
        ),
        (
            envelope(
                "ListTasks",
                {"tenant": "alice", "pageToken": "eyJ0cyI6OTIyMzM3MjAzNjg1NDc3NTgwOCwiaWQiOiJ4In0"},
            ),
            -32602,
            ["params.pageToken"],
        ),
        (
            '{"jsonrpc": "2.0", "id": 1, "method": "GetTask",'
            ' "params": {"tenant": "alice", "id": "x", "metadata": {"x": NaN}}}',
            -32700,
            [],
        ),
        (
            '{"jsonrpc": "2.0", "id": 1, "method": "GetTask",'
            ' "params": {"tenant": "alice", "id": "x", "metadata": {"x": -Infinity}}}',
            -32700,
            [],
        ),
        (
            '{"jsonrpc": "2.0", "id": 1, "method": "GetTask",'
            ' "params": {"tenant": "alice", "id": "x", "metadata": {"x": 1e400}}}',
            -32602,
            ["params.metadata.x"],
        ),
        ('{"jsonrpc": "2.0", "id": "\\ud800", "method": "GetTask", "params": {}}', -32600, []),
        ('{"jsonrpc": "2.0", "id": 9007199254740993, "method": "GetTask"}', -32600, []),
    ],
)
async def test_malformed_values_are_client_errors(
    agent: RunningAgent,
    gateway: FakeGateway,
    errors: list[logging.LogRecord],
    body: str,
    code: int,
    fields: list[str],
) -> None:
    status, document = await post_raw(agent, gateway, body)
    assert status == 200
    assert violation(document) == (code, fields), document["error"]["message"]


@pytest.mark.parametrize(
    ("changes", "code", "field"),
    [
        ({"message__messageId": "\ud800"}, -32602, "params.message.messageId"),
        ({"message__messageId": ""}, -32602, "params.message.messageId"),
        ({"message__contextId": "c\udc00"}, -32602, "params.message.contextId"),
        ({"message__contextId": "c\n"}, -32602, "params.message.contextId"),
        # Subagent sessions join contextId, task and scope with U+001F: no caller's may hold it.
        ({"message__contextId": "c\x1ftask\x1fa@x"}, -32602, "params.message.contextId"),
        (
            {"message__referenceTaskIds": ["ok", "\x7f"]},
            -32602,
            "params.message.referenceTaskIds[1]",
        ),
        ({"message__parts": [{"data": {"n": 2**60}}]}, -32602, "params.message.parts[0].data.n"),
        ({"message__parts": [{"text": "\ud800"}]}, -32602, "params.message.parts[0].text"),
        ({"configuration__historyLength": 2**63}, -32602, "params.configuration.historyLength"),
    ],
)
async def test_malformed_send_message_writes_nothing(
    agent: RunningAgent,
    gateway: FakeGateway,
    errors: list[logging.LogRecord],
    changes: dict[str, Any],
    code: int,
    field: str,
) -> None:
    params = send_params(gateway, **changes)
    _status, body = await post_raw(agent, gateway, envelope("SendMessage", params))
    assert violation(body) == (code, [field]), body["error"]["message"]
    assert await task_count(agent, gateway) == 0


async def test_a_part_of_a_type_the_card_does_not_take_is_refused_as_unsupported_content(
    agent: RunningAgent, gateway: FakeGateway, errors: list[logging.LogRecord]
) -> None:
    part = {"url": "https://example.org/movie.mp4", "mediaType": "video/mp4"}
    params = send_params(gateway, message__parts=[{"text": "see"}, part])
    _status, body = await post_raw(agent, gateway, envelope("SendMessage", params))
    assert body["error"]["code"] == -32005
    assert "does not take video/mp4" in body["error"]["message"]
    assert body["error"]["data"][0]["metadata"] == {
        "field": "params.message.parts[1]",
        "mediaType": "video/mp4",
    }
    assert await task_count(agent, gateway) == 0


async def test_a_client_that_disconnects_mid_body_is_no_error(
    agent: RunningAgent, gateway: FakeGateway, errors: list[logging.LogRecord]
) -> None:
    token = gateway.token(tenant="alice", aud=agent.endpoint, sub="caller")
    port = agent.config.server.port
    for _ in range(3):
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /a2a HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"A2A-Version: 1.0\r\nAuthorization: Bearer " + token.encode() + b"\r\n"
            b"Content-Length: 5000\r\n\r\n" + b'{"jsonrpc": "2.0", "id": 1, '
        )
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.close()
        await writer.wait_closed()
    await asyncio.sleep(0.2)
    _status, body = await gateway.send_turn(agent.endpoint, tenant="alice", text="still here")
    assert "result" in body
