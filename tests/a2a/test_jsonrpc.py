"""The JSON-RPC layer: every client mistake is a JSON-RPC error with the right code, never a 500."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from google.protobuf.json_format import ParseDict
from google.rpc.error_details_pb2 import BadRequest, ErrorInfo

from looping_core.a2a._errors import InvalidParams
from looping_core.a2a._jsonrpc import Method
from looping_core.server.internal import SERVICES
from looping_core.testing import FakeGateway

from support.serving import RunningAgent

DETAIL_TYPES = {
    "type.googleapis.com/google.rpc.ErrorInfo": ErrorInfo,
    "type.googleapis.com/google.rpc.BadRequest": BadRequest,
}


def assert_error(body: dict[str, Any], code: int, reason: str) -> dict[str, Any]:
    """Check the envelope and parse every detail strictly with the protobuf types."""
    assert set(body) == {"jsonrpc", "id", "error"}
    assert body["jsonrpc"] == "2.0"
    error = body["error"]
    assert set(error) == {"code", "message", "data"}
    assert error["code"] == code
    for detail in error["data"]:
        fields = {k: v for k, v in detail.items() if k != "@type"}
        ParseDict(fields, DETAIL_TYPES[detail["@type"]]())  # unknown fields would raise
    assert error["data"][0]["reason"] == reason
    return error


async def test_not_json(agent: RunningAgent) -> None:
    status, _, body = await agent.post(b"{not json")
    assert status == 200
    assert body["id"] is None
    assert_error(body, -32700, "PARSE_ERROR")


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (
            [{"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard"}],
            "Batch requests are not supported",
        ),
        ("just a string", "The request must be a JSON object"),
        ({"jsonrpc": "1.0", "id": 1, "method": "GetExtendedAgentCard"}, 'jsonrpc must be "2.0"'),
        ({"jsonrpc": "2.0", "id": 1}, "method must be a non-empty string"),
        (
            {"jsonrpc": "2.0", "id": True, "method": "GetExtendedAgentCard"},
            "id must be a string of well-formed Unicode, a safe integer or null",
        ),
    ],
)
async def test_invalid_requests(agent: RunningAgent, payload: Any, message: str) -> None:
    status, _, body = await agent.post(json.dumps(payload))
    assert status == 200
    error = assert_error(body, -32600, "INVALID_REQUEST")
    assert error["message"] == message


async def test_the_request_id_is_echoed_when_it_could_be_read(agent: RunningAgent) -> None:
    _, _, body = await agent.post({"jsonrpc": "1.0", "id": "abc", "method": "x"})
    assert body["id"] == "abc"


@pytest.mark.parametrize("method", ["SendMesage", "getExtendedAgentCard", "Nope"])
async def test_unknown_method(agent: RunningAgent, gateway: FakeGateway, method: str) -> None:
    token = gateway.token(tenant="alice", aud=agent.endpoint)
    _, _, body = await agent.rpc(method, {"tenant": "alice"}, token=token)
    assert (
        assert_error(body, -32601, "METHOD_NOT_FOUND")["message"] == f"Method not found: {method}"
    )


@pytest.mark.parametrize("method", ["Nope", "GetTask", "tasks/get"])
async def test_without_a_token_nothing_is_looked_at_not_even_the_method(
    agent: RunningAgent, method: str
) -> None:
    """§7.4: every request is authenticated first; an unknown and a known method are refused
    alike, so an unauthenticated caller learns nothing of the method table."""
    status, headers, body = await agent.rpc(method, {"tenant": "alice", "id": "x"})
    assert status == 401
    assert headers["WWW-Authenticate"].startswith("Bearer")
    error = assert_error(body, -32000, "UNAUTHENTICATED")
    assert method not in error["message"]  # nothing said of the method


async def test_v03_method_names_are_unknown_with_a_hint(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    token = gateway.token(tenant="alice", aud=agent.endpoint)
    _, _, body = await agent.rpc("message/send", {"tenant": "alice"}, token=token)
    error = assert_error(body, -32601, "METHOD_NOT_FOUND")
    assert "A2A 0.3 name" in error["message"]


async def test_params_must_be_an_object(agent: RunningAgent) -> None:
    _, _, body = await agent.rpc("GetExtendedAgentCard", ["alice"])  # type: ignore[arg-type]
    error = assert_error(body, -32602, "INVALID_PARAMS")
    assert error["data"][1]["fieldViolations"] == [
        {"field": "params", "description": "expected an object"}
    ]


async def test_tenant_of_the_wrong_type(agent: RunningAgent, gateway: FakeGateway) -> None:
    token = gateway.token(tenant="alice", aud=agent.endpoint)
    _, _, body = await agent.rpc("GetExtendedAgentCard", {"tenant": 5}, token=token)
    error = assert_error(body, -32602, "INVALID_PARAMS")
    assert error["data"][1]["fieldViolations"][0]["field"] == "params.tenant"


async def test_missing_version_means_0_3_and_is_refused(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    token = gateway.token(tenant="alice", aud=agent.endpoint)
    status, _, body = await agent.rpc(
        "GetExtendedAgentCard", {"tenant": "alice"}, version=None, token=token
    )
    assert status == 200
    error = assert_error(body, -32009, "VERSION_NOT_SUPPORTED")
    assert error["message"].startswith("A2A version '0.3' is not supported")


async def test_unsupported_major_version(agent: RunningAgent, gateway: FakeGateway) -> None:
    token = gateway.token(tenant="alice", aud=agent.endpoint)
    _, _, body = await agent.rpc(
        "GetExtendedAgentCard", {"tenant": "alice"}, version="2.0", token=token
    )
    assert_error(body, -32009, "VERSION_NOT_SUPPORTED")


async def test_version_from_the_query_string(agent: RunningAgent, gateway: FakeGateway) -> None:
    token = gateway.token(tenant="alice", aud=agent.endpoint)
    status, _, body = await agent.rpc(
        "GetExtendedAgentCard",
        {"tenant": "alice"},
        token=token,
        version=None,
        query="?A2A-Version=1.0",
    )
    assert status == 200
    assert body["result"]["name"] == "Alice"


async def test_wrong_content_type(agent: RunningAgent) -> None:
    status, _, body = await agent.post(
        b"tenant=alice", headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert status == 415
    assert_error(body, -32600, "UNSUPPORTED_MEDIA_TYPE")


async def test_a2a_json_content_type_is_accepted(agent: RunningAgent, gateway: FakeGateway) -> None:
    token = gateway.token(tenant="alice", aud=agent.endpoint)
    envelope = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "GetExtendedAgentCard",
        "params": {"tenant": "alice"},
    }
    status, _, body = await agent.post(
        envelope, token=token, headers={"Content-Type": "application/a2a+json"}
    )
    assert status == 200
    assert "result" in body


async def test_body_over_the_limit(agent: RunningAgent, gateway: FakeGateway) -> None:
    limit = agent.config.server.max_body_bytes
    padding = "x" * (limit + 1)
    envelope = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "GetExtendedAgentCard",
        "params": {"tenant": padding},
    }
    status, _, body = await agent.post(envelope)
    assert status == 413
    assert_error(body, -32600, "PAYLOAD_TOO_LARGE")
    assert gateway.jwks_fetches == 0


async def test_a_failing_handler_is_an_internal_error_without_details(
    agent: RunningAgent, gateway: FakeGateway, caplog: pytest.LogCaptureFixture
) -> None:
    async def explode(context: Any, params: Any) -> Any:
        raise RuntimeError("secret internals /etc/looping")

    async def refuse(context: Any, params: Any) -> Any:
        raise InvalidParams("no", violations=[("params.x", "bad")])

    services = agent.app[SERVICES]
    table = dict(services.methods)
    table["GetExtendedAgentCard"] = Method(table["GetExtendedAgentCard"].params_type, explode)
    table["Refuse"] = Method(table["GetExtendedAgentCard"].params_type, refuse)
    # The app is frozen once running; the test swaps its services for ones with this table.
    agent.app._state[SERVICES] = attrs.evolve(services, methods=table)
    token = gateway.token(tenant="alice", aud=agent.endpoint)
    status, _, body = await agent.rpc("GetExtendedAgentCard", {"tenant": "alice"}, token=token)
    assert status == 200
    error = assert_error(body, -32603, "INTERNAL")
    assert error["message"] == "Internal error"
    assert "secret internals" not in json.dumps(body)
    assert "RuntimeError: secret internals" in caplog.text
    _, _, refused = await agent.rpc("Refuse", {"tenant": "alice"}, token=token)
    assert assert_error(refused, -32602, "INVALID_PARAMS")["message"] == "no"


@pytest.mark.parametrize(
    "method", ["GetTaskPushNotificationConfig", "DeleteTaskPushNotificationConfig"]
)
async def test_a_push_config_of_an_unknown_task_is_task_not_found(
    agent: RunningAgent, gateway: FakeGateway, method: str
) -> None:
    token = gateway.token(tenant="alice", aud=agent.endpoint)
    params = {"tenant": "alice", "taskId": "no-such-task", "id": "cfg"}
    _, _, body = await agent.rpc(method, params, token=token)
    assert_error(body, -32001, "TASK_NOT_FOUND")
