"""The inspection endpoint (`[server] inspection`): off unless enabled, loopback only, a gateway
token for its own URL on every call, and a caller sees its own tasks and nothing of another's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from looping_core.config import parse_config
from looping_core.errors import ConfigError
from looping_core.server.internal import handle_inspect, is_loopback_client
from looping_core.testing import FakeGateway

from support.serving import RunningAgent, serving, start_agent

INSPECT = "/_looping/inspect"


async def inspect(
    agent: RunningAgent, tenant: str, task_id: str, token: str | None
) -> tuple[int, dict[str, str], Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = f"{agent.base_url}{INSPECT}/{tenant}/tasks/{task_id}"
    async with agent.session.get(url, headers=headers) as response:
        if response.content_type != "application/json":
            return response.status, dict(response.headers), await response.text()
        return response.status, dict(response.headers), await response.json()


def inspection_token(gateway: FakeGateway, agent: RunningAgent, **claims: Any) -> str:
    options: dict[str, Any] = {"tenant": "alice", "aud": agent.base_url + INSPECT}
    options.update(claims)
    return gateway.token(**options)


async def finished_task(gateway: FakeGateway, agent: RunningAgent, subject: str = "caller") -> str:
    _, answer = await gateway.send_turn(
        agent.endpoint, tenant="alice", text="hello", subject=subject
    )
    task_id = str(answer["result"]["task"]["id"])
    await gateway.wait_for_pushes_of([task_id])
    return task_id


async def test_the_owner_reads_its_task_events_and_pushes(gateway: FakeGateway) -> None:
    async with serving(gateway, server="inspection = true") as agent:
        task_id = await finished_task(gateway, agent)
        status, _, found = await inspect(agent, "alice", task_id, inspection_token(gateway, agent))
    assert status == 200
    assert found["task"]["id"] == task_id
    assert found["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert found["owner"] == {"tenant": "alice", "issuer": gateway.origin, "subject": "caller"}
    assert [event["seq"] for event in found["events"]] == list(range(1, len(found["events"]) + 1))
    assert found["events"][0]["event"]["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"
    assert found["events"][-1]["event"]["statusUpdate"]["status"]["state"] == (
        "TASK_STATE_COMPLETED"
    )
    [push] = found["pushes"]
    assert push["state"] == "delivered"
    assert [attempt["status"] for attempt in push["attempts"]] == [200]
    assert "token" not in push
    assert gateway.push_credentials not in str(found)  # the config's secrets never leave
    assert found["subtasks"] == []


async def test_inspection_is_off_unless_enabled(gateway: FakeGateway) -> None:
    async with serving(gateway) as agent:
        task_id = await finished_task(gateway, agent)
        fetched = gateway.jwks_fetches
        status, _, _ = await inspect(agent, "alice", task_id, inspection_token(gateway, agent))
    assert status == 404
    assert gateway.jwks_fetches == fetched  # no route: no token was even looked at


JSON_RPC_ENDPOINT = object()
"""Stands for the agent's JSON-RPC endpoint, known once it listens."""


@pytest.mark.parametrize(
    ("claims", "check"),
    [
        ({"aud": JSON_RPC_ENDPOINT}, "audience-mismatch"),  # a token for another binding
        ({"tenant": "bob"}, "tenant-mismatch"),
        ({"lifetime": -60}, "expired"),
    ],
)
async def test_a_token_not_for_this_endpoint_is_refused(
    gateway: FakeGateway, claims: dict[str, Any], check: str
) -> None:
    async with serving(gateway, server="inspection = true") as agent:
        task_id = await finished_task(gateway, agent)
        claims = {k: agent.endpoint if v is JSON_RPC_ENDPOINT else v for k, v in claims.items()}
        status, headers, body = await inspect(
            agent, "alice", task_id, inspection_token(gateway, agent, **claims)
        )
    assert status == 401
    assert body["error"]["status"] == "UNAUTHENTICATED"
    assert body["error"]["details"][0]["metadata"]["check"] == check
    assert "task" not in body
    assert headers["WWW-Authenticate"].startswith("Bearer")


async def test_without_a_token_nothing_is_read(gateway: FakeGateway) -> None:
    async with serving(gateway, server="inspection = true") as agent:
        task_id = await finished_task(gateway, agent)
        status, _, body = await inspect(agent, "alice", task_id, None)
    assert status == 401
    assert body["error"]["details"][0]["metadata"]["check"] == "token-missing"


async def test_another_callers_task_is_not_found(
    gateway: FakeGateway, other_gateway: FakeGateway
) -> None:
    """Another subject of the same gateway, and the same subject of another trusted gateway,
    find nothing of the task: as GetTask, not found rather than forbidden."""
    agent, listener = await start_agent(
        [gateway.origin, other_gateway.origin], server="inspection = true"
    )
    gateway.agent_jwks_url = agent.base_url + "/.well-known/jwks.json"
    try:
        task_id = await finished_task(gateway, agent)
        other_subject = inspection_token(gateway, agent, sub="mallory")
        other_issuer = other_gateway.token(tenant="alice", aud=agent.base_url + INSPECT)
        answers = [
            await inspect(agent, "alice", task_id, token) for token in (other_subject, other_issuer)
        ]
        owner = await inspect(agent, "alice", task_id, inspection_token(gateway, agent))
    finally:
        await agent.session.close()
        await listener.cleanup()
    for status, _, body in answers:
        assert status == 404
        assert body["error"]["status"] == "NOT_FOUND"
        assert task_id not in str(body.get("task", ""))
    assert owner[0] == 200


async def test_a_tenant_not_served_here_and_a_bad_id_are_refused(gateway: FakeGateway) -> None:
    async with serving(gateway, server="inspection = true") as agent:
        stranger = gateway.token(tenant="nobody", aud=agent.base_url + INSPECT)
        unknown = await inspect(agent, "nobody", "t1", stranger)
        bad_id = await inspect(agent, "alice", "%01", inspection_token(gateway, agent))
    assert unknown[0] == 404
    assert bad_id[0] == 400
    assert bad_id[2]["error"]["status"] == "INVALID_ARGUMENT"


@pytest.mark.parametrize(
    ("remote", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("10.0.0.7", False),
        ("192.168.1.2", False),
        ("::ffff:10.0.0.7", False),
        ("2001:db8::1", False),
        ("", False),
        (None, False),
        ("not-an-address", False),
    ],
)
def test_only_this_machines_addresses_are_loopback_clients(
    remote: str | None, loopback: bool
) -> None:
    assert is_loopback_client(remote) is loopback


async def test_a_client_from_another_machine_is_refused_before_anything_is_read() -> None:
    """A peer that is not loopback gets 403 before the token or the services are touched (the
    app here has none: reaching them would be a 500)."""

    class Peer:
        def get_extra_info(self, name: str, default: Any = None) -> Any:
            return ("10.0.0.7", 50000) if name == "peername" else default

    request = make_mocked_request(
        "GET",
        f"{INSPECT}/alice/tasks/t1",
        headers={"Authorization": "Bearer x.y.z"},
        match_info={"tenant": "alice", "task_id": "t1"},
        app=web.Application(),
        transport=Peer(),
    )
    response = await handle_inspect(request)
    assert isinstance(response, web.Response)
    assert response.status == 403
    assert response.text is not None
    assert "PERMISSION_DENIED" in response.text


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.2", "example.com", "::"])
def test_inspection_on_a_host_others_can_reach_is_a_config_error(host: str, tmp_path: Path) -> None:
    source = tmp_path / "looping.toml"
    text = f"""
[server]
host = "{host}"
inspection = true
[security]
signing_key = "env:KEY"
gateway_origins = ["http://127.0.0.1:9000"]
"""
    with pytest.raises(ConfigError) as raised:
        parse_config(text, source=str(source))
    message = str(raised.value)
    assert "$.server.inspection" in message
    assert str(source) in message
    assert "loopback" in message


@pytest.mark.parametrize(
    ("public_url", "refused"),
    [
        ("https://agent.example.com", True),
        ("http://10.0.0.5:8080", True),
        ("http://127.0.0.1:8080", False),
        ("http://localhost:8080/agent", False),
    ],
)
def test_inspection_behind_a_public_url_is_a_config_error(
    public_url: str, refused: bool, tmp_path: Path
) -> None:
    """Behind a reverse proxy on this machine every client's address is 127.0.0.1, so the
    endpoint's loopback check cannot tell: the public URL must be loopback too."""
    source = tmp_path / "looping.toml"
    text = f"""
[server]
host = "127.0.0.1"
public_url = "{public_url}"
inspection = true
[security]
signing_key = "env:KEY"
gateway_origins = ["http://127.0.0.1:9000"]
"""
    if not refused:
        assert parse_config(text, source=str(source)).server.inspection
        return
    with pytest.raises(ConfigError) as raised:
        parse_config(text, source=str(source))
    message = str(raised.value)
    assert "public_url must be a loopback address too" in message
    assert "$.server.inspection" in message


@pytest.mark.parametrize("key", ["rpc_path", "rest_path"])
def test_the_inspection_path_is_kept_from_the_bindings(key: str, tmp_path: Path) -> None:
    text = f"""
[server]
{key} = "/_looping/inspect"
[security]
signing_key = "env:KEY"
gateway_origins = ["http://127.0.0.1:9000"]
"""
    with pytest.raises(ConfigError) as raised:
        parse_config(text, source=str(tmp_path / "looping.toml"))
    assert f"$.server.{key}" in str(raised.value)
    assert "/_looping" in str(raised.value)
