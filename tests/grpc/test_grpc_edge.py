"""The gRPC binding's edge: every token negative of the HTTP edge, refused as UNAUTHENTICATED
before any handler runs (and nothing fetched from an unlisted key set, nothing written);
callers kept apart; malformed messages, missing tenants and versions refused with the spec's
status codes and `google.rpc` details; the limits of the HTTP edge."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from joserfc import jws
from joserfc.jwk import OctKey

from looping_core.a2a._jose import b64url, b64url_decode
from looping_core.testing import FakeGateway

from support import agents as test_agents
from support.bindings import Answer, Grpc, grpc_error, grpc_request, message
from support.serving import RunningAgent, start_agent

SERVICE = "/lf.a2a.v1.A2AService"


@pytest.fixture
async def agent(gateway: FakeGateway) -> AsyncIterator[RunningAgent]:
    running, listener = await start_agent(
        [gateway.origin], grpc=True, server="max_body_bytes = 65536"
    )
    yield running
    await running.session.close()
    await listener.cleanup()


@pytest.fixture
def binding(agent: RunningAgent, gateway: FakeGateway) -> Grpc:
    return Grpc(agent, gateway)


def refused_token(answer: Answer, check: str) -> None:
    assert answer.status == grpc.StatusCode.UNAUTHENTICATED.value[0], answer.body
    assert answer.reason == "UNAUTHENTICATED"
    assert answer.body["message"].startswith(("Gateway token rejected", "A gateway token is"))
    assert answer.body["details"][0]["metadata"] == {"check": check}


def _send_params(gateway: FakeGateway) -> dict[str, Any]:
    return {
        "message": message("should never be written"),
        "configuration": {"returnImmediately": True,
                          "taskPushNotificationConfig": gateway.push_config()},
    }  # fmt: skip


def _alg_confusion(gateway: FakeGateway, audience: str) -> str:
    """HS256 keyed with the gateway's public key bytes: the classic algorithm confusion."""
    now = int(time.time())
    claims = {"iss": gateway.origin, "sub": "caller", "aud": audience, "tenant": "alice",
              "iat": now, "exp": now + 300}  # fmt: skip
    header = {"alg": "HS256", "kid": gateway.public_jwk["kid"], "jku": gateway.jwks_url}
    key = OctKey.import_key(b64url_decode(gateway.public_jwk["x"]))
    return jws.serialize_compact(header, json.dumps(claims).encode(), key, algorithms=["HS256"])


TOKENS = {
    "expired": lambda g, aud: g.token(tenant="alice", aud=aud, now=time.time() - 3600),
    "audience-mismatch": lambda g, aud: g.token(tenant="alice", aud=aud.replace(":", ":1", 1)),
    "tenant-mismatch": lambda g, aud: g.token(tenant="bob", aud=aud),
    "lifetime-too-long": lambda g, aud: g.token(tenant="alice", aud=aud, lifetime=7200),
    "algorithm-not-allowed": _alg_confusion,
    "alg-none": lambda g, aud: (
        b64url(json.dumps({"alg": "none", "kid": "k", "jku": g.jwks_url}).encode())
        + "."
        + b64url(json.dumps({"iss": g.origin, "aud": aud, "tenant": "alice"}).encode())
        + "."
    ),
}
CHECKS = {"alg-none": "algorithm-not-allowed"}


@pytest.mark.parametrize("case", sorted(TOKENS))
async def test_every_token_negative_is_refused_and_nothing_is_written(
    binding: Grpc, gateway: FakeGateway, case: str
) -> None:
    token = TOKENS[case](gateway, binding.audience)
    for method, params in (("SendMessage", _send_params(gateway)), ("GetTask", {"id": "x"})):
        refused_token(await binding.call(method, params, token=token), CHECKS.get(case, case))
    listed = await binding.call("ListTasks", {})
    assert listed.ok, listed.body
    assert listed.result.get("tasks", []) == []


async def test_a_call_without_a_token_is_refused_before_its_message_is_looked_at(
    binding: Grpc, gateway: FakeGateway
) -> None:
    answer = await binding.exchange(
        "SendMessage", _send_params(gateway), "alice", {"A2A-Version": "1.0"}
    )
    refused_token(answer, "token-missing")
    for scheme in ("Basic abc", "Bearer ", "bearer"):
        answer = await binding.exchange(
            "GetTask", {"id": "x"}, "alice", {"Authorization": scheme, "A2A-Version": "1.0"}
        )
        refused_token(answer, "token-missing")


async def test_an_unlisted_key_set_is_never_fetched(
    binding: Grpc, other_gateway: FakeGateway, gateway: FakeGateway
) -> None:
    token = other_gateway.token(tenant="alice", aud=binding.audience)
    refused_token(await binding.call("GetTask", {"id": "x"}, token=token), "jku-not-allowed")
    # The gateway's own origin, but the key set of the unlisted one: refused, nothing fetched.
    spoofed = gateway.token(tenant="alice", aud=binding.audience, jku=other_gateway.jwks_url)
    refused_token(await binding.call("GetTask", {"id": "x"}, token=spoofed), "jku-not-allowed")
    assert other_gateway.jwks_fetches == 0


async def test_another_callers_task_is_not_found(binding: Grpc, gateway: FakeGateway) -> None:
    params = _send_params(gateway)
    task = (await binding.call("SendMessage", params)).result["task"]
    for method, call in (("GetTask", {"id": task["id"]}), ("CancelTask", {"id": task["id"]}),
                         ("ListTaskPushNotificationConfigs", {"taskId": task["id"]})):  # fmt: skip
        theirs = await binding.call(method, call, subject="someone-else")
        assert theirs.reason == "TASK_NOT_FOUND", theirs.body
        assert theirs.status == grpc.StatusCode.NOT_FOUND.value[0]
        other_tenant = await binding.call(method, call, tenant="bob")
        assert other_tenant.reason == "TASK_NOT_FOUND", other_tenant.body
    listed = await binding.call("ListTasks", {}, subject="someone-else")
    assert listed.result.get("tasks", []) == []


async def test_a_missing_or_unknown_tenant_and_an_old_version_are_refused(
    binding: Grpc, gateway: FakeGateway
) -> None:
    no_tenant = await binding.exchange(
        "GetTask", {"id": "x"}, "", binding.headers("alice", "caller", None)
    )
    assert no_tenant.reason == "INVALID_PARAMS", no_tenant.body
    assert no_tenant.status == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert no_tenant.body["details"][1]["fieldViolations"][0]["field"] == "tenant"
    unknown = await binding.call(
        "GetTask", {"id": "x"}, tenant="nobody",
        token=gateway.token(tenant="nobody", aud=binding.audience),
    )  # fmt: skip
    assert unknown.reason == "INVALID_PARAMS", unknown.body
    headers = binding.headers("alice", "caller", None)
    del headers["A2A-Version"]
    old = await binding.exchange("GetTask", {"id": "x"}, "alice", headers)
    assert old.reason == "VERSION_NOT_SUPPORTED", old.body
    assert old.status == grpc.StatusCode.FAILED_PRECONDITION.value[0]


async def _raw_call(agent: RunningAgent, method: str, body: bytes, metadata: Any) -> Any:
    async with grpc.aio.insecure_channel(agent.config.server.grpc_url) as channel:
        call = channel.unary_unary(f"{SERVICE}/{method}")
        return await call(body, metadata=metadata)


async def test_a_malformed_message_is_the_clients_error(agent: RunningAgent, binding: Grpc) -> None:
    metadata = tuple((k.lower(), v) for k, v in binding.headers("alice", "caller", None).items())
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await _raw_call(agent, "GetTask", b"\xff\xff\xff", metadata)
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert grpc_error(failed.value)["details"][0]["reason"] == "INVALID_REQUEST"


async def test_a_message_over_the_size_limit_is_refused_unread(
    agent: RunningAgent, binding: Grpc, gateway: FakeGateway
) -> None:
    params = _send_params(gateway)
    params["message"]["parts"] = [{"text": "x" * 70_000}]
    answer = await binding.call("SendMessage", params)
    assert answer.status == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert (await binding.call("ListTasks", {})).result.get("tasks", []) == []


async def test_an_unknown_method_is_unimplemented(agent: RunningAgent, binding: Grpc) -> None:
    metadata = tuple((k.lower(), v) for k, v in binding.headers("alice", "caller", None).items())
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await _raw_call(agent, "SendLiveMessage", b"", metadata)
    assert failed.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_struct_numbers_keep_their_json_form(binding: Grpc, gateway: FakeGateway) -> None:
    params = _send_params(gateway)
    params["message"]["metadata"] = {"count": 3, "ratio": 0.5, "nested": [1, {"n": 2}]}
    task = (await binding.call("SendMessage", params)).result["task"]
    stored = await binding.agent.rpc(
        "GetTask", {"tenant": "alice", "id": task["id"]},
        token=gateway.token(tenant="alice", aud=binding.agent.endpoint),
    )  # fmt: skip
    metadata = stored[2]["result"]["history"][0]["metadata"]
    assert metadata == {"count": 3, "ratio": 0.5, "nested": [1, {"n": 2}]}
    assert json.dumps(metadata["count"]) == "3"


async def test_calls_past_the_cap_are_refused(gateway: FakeGateway) -> None:
    """`[server] max_connections` bounds gRPC calls at once: with one stream held open the
    next call is RESOURCE_EXHAUSTED before any handler runs; once the stream ends, calls are
    served again."""
    agent, listener = await start_agent([gateway.origin], grpc=True, server="max_connections = 1")
    try:
        binding = Grpc(agent, gateway)
        address = agent.config.server.grpc_url
        headers = binding.headers("bob", "caller", None)
        metadata = tuple((key.lower(), value) for key, value in headers.items())
        key = "cap-" + uuid.uuid4().hex
        held = grpc_request("SendStreamingMessage", {"tenant": "bob", **_send_params(gateway)})
        held.message.parts[0].text = key
        card = grpc_request("GetExtendedAgentCard", {"tenant": "bob"}).SerializeToString()
        async with grpc.aio.insecure_channel(address) as channel:
            stream = channel.unary_stream(f"{SERVICE}/SendStreamingMessage")(
                held.SerializeToString(), metadata=metadata
            )
            assert await stream.read() is not grpc.aio.EOF  # the stream is open
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await channel.unary_unary(f"{SERVICE}/GetExtendedAgentCard")(
                    card, metadata=metadata
                )
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            stream.cancel()
            test_agents.RELEASE.setdefault(key, asyncio.Event()).set()
            for _ in range(100):  # its slot comes back once the server sees the cancel
                try:
                    await channel.unary_unary(f"{SERVICE}/GetExtendedAgentCard")(
                        card, metadata=metadata
                    )
                    break
                except grpc.aio.AioRpcError:
                    await asyncio.sleep(0.05)
            else:
                raise AssertionError("no call was served after the stream ended")
    finally:
        await agent.session.close()
        await listener.cleanup()
