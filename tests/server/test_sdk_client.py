"""The official A2A SDK's client against our edge: card discovery, GetExtendedAgentCard,
streaming and resubscribing."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.client.errors import A2AClientError
from a2a.types import (
    CancelTaskRequest,
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError
from a2a.utils.signing import create_signature_verifier
from jwt.api_jwk import PyJWK

from looping_core.testing import FakeGateway

from support import agents as test_agents
from support.serving import RunningAgent


async def verifier_for(agent: RunningAgent):  # type: ignore[no-untyped-def]
    async with agent.session.get(agent.base_url + "/.well-known/jwks.json") as response:
        keys = {key["kid"]: key for key in json.loads(await response.read())["keys"]}
    return create_signature_verifier(lambda kid, jku: PyJWK(keys[kid]), ["EdDSA"])


async def test_the_sdk_resolves_and_verifies_the_stub_card(agent: RunningAgent) -> None:
    verify = await verifier_for(agent)
    async with httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, agent.base_url).get_agent_card(signature_verifier=verify)
    assert card.supported_interfaces[0].url == agent.endpoint
    assert card.capabilities.extended_agent_card


async def test_the_sdk_client_gets_a_tenants_extended_card(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    token = gateway.token(tenant="alice", aud=agent.endpoint)
    verify = await verifier_for(agent)
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
        client = await create_client(
            agent.base_url,
            ClientConfig(httpx_client=http, streaming=False),
            signature_verifier=verify,
        )
        card = await client.get_extended_agent_card(
            GetExtendedAgentCardRequest(tenant="alice"), signature_verifier=verify
        )
        await client.close()
    assert card.name == "Alice"
    assert card.supported_interfaces[0].tenant == "alice"


async def test_the_sdk_client_without_a_token_is_refused(agent: RunningAgent) -> None:
    async with httpx.AsyncClient() as http:
        client = await create_client(
            agent.base_url, ClientConfig(httpx_client=http, streaming=False)
        )
        with pytest.raises(A2AClientError):
            await client.get_extended_agent_card(GetExtendedAgentCardRequest(tenant="alice"))
        await client.close()


async def test_the_sdk_client_streams_a_send_and_resubscribes_to_a_running_task(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    message = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text="hi")])
    token = gateway.token(tenant="sdk", aud=agent.endpoint)
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
        client = await create_client(agent.base_url, ClientConfig(httpx_client=http))
        events = [
            event
            async for event in client.send_message(
                SendMessageRequest(tenant="sdk", message=message)
            )
        ]
        await client.close()
    assert events[0].HasField("task")
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    artifacts = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    assert [part.text for part in artifacts[0].parts] == ["hi (after 0)"]

    hold = "sdk-hold-" + uuid.uuid4().hex
    _, body = await gateway.send_turn(agent.endpoint, tenant="bob", text=hold)
    task_id = body["result"]["task"]["id"]
    token = gateway.token(tenant="bob", aud=agent.endpoint)
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
        client = await create_client(agent.base_url, ClientConfig(httpx_client=http))
        stream = client.subscribe(SubscribeToTaskRequest(tenant="bob", id=task_id))
        first = await anext(stream)
        assert first.task.id == task_id
        test_agents.RELEASE.setdefault(hold, asyncio.Event()).set()
        rest = [event async for event in stream]
        await client.close()
    assert rest[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert rest[-1].status_update.task_id == task_id


async def test_the_sdk_rest_client_sends_streams_reads_and_cancels(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    rest = agent.config.server.rest_url
    token = gateway.token(tenant="sdk", aud=rest)
    config = ClientConfig(supported_protocol_bindings=["HTTP+JSON"])
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
        client = await create_client(agent.base_url, dataclasses.replace(config, httpx_client=http))
        text = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text="hi")])
        request = SendMessageRequest(tenant="sdk", message=text)
        events = [event async for event in client.send_message(request)]
        task_id = events[0].task.id
        assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
        task = await client.get_task(GetTaskRequest(tenant="sdk", id=task_id, history_length=1))
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert len(task.history) == 1
        listed = await client.list_tasks(ListTasksRequest(tenant="sdk", page_size=5))
        assert [t.id for t in listed.tasks] == [task_id]
        # Our google.rpc.Status error is read back as the SDK's own error type.
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(tenant="sdk", id=task_id))
        await client.close()
