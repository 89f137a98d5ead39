"""`looping serve --workers 2` with `[server] grpc_port`: both worker processes listen for gRPC,
and the official SDK's gRPC client (its `grpc` extra) runs every method against it, blocking
and streaming, with a resubscribe to a running task; its errors come back as the SDK's own."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import httpx
import pytest
from a2a.client import ClientCallContext, ClientConfig, create_client
from a2a.types import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError

from looping_core.testing import FakeGateway, ed25519_private_jwk, tenant_toml

from support.ports import unused_ports
from support.processes import stop
from support.served import serve, wait_until_all_listen, write_config

pytestmark = pytest.mark.slow


@pytest.fixture
async def served(tmp_path: Path, gateway: FakeGateway) -> AsyncIterator[tuple[str, str]]:
    """Two workers serving HTTP and gRPC; yields the base URL and the gRPC address."""
    port, grpc_port = unused_ports(2)
    echo = tenant_toml("echo", "support.agents:EchoAgent", "allow_configless = true")
    config = write_config(
        tmp_path / "looping.toml", port, gateway, workers=2, grpc_port=grpc_port, more=echo
    )
    key = ed25519_private_jwk("served-key")
    process = await serve(config, port, key)
    gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
    try:
        await wait_until_all_listen(process, grpc_port, 2)
        yield f"http://127.0.0.1:{port}", f"127.0.0.1:{grpc_port}"
    finally:
        stop(process)
    log = (tmp_path / "server.log").read_text()
    assert log.count("serving gRPC on") == 2, log


def _context(gateway: FakeGateway, tenant: str, address: str) -> ClientCallContext:
    token = gateway.token(tenant=tenant, aud=address)
    return ClientCallContext(service_parameters={"authorization": f"Bearer {token}"})


def _message(text: str) -> Message:
    return Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])


async def test_the_sdk_grpc_client_runs_every_method(
    served: tuple[str, str], gateway: FakeGateway, tmp_path: Path
) -> None:
    base_url, address = served
    config = ClientConfig(
        grpc_channel_factory=grpc.aio.insecure_channel,
        supported_protocol_bindings=["GRPC"],
        streaming=False,
    )
    echo = _context(gateway, "echo", address)
    async with httpx.AsyncClient() as http:
        config.httpx_client = http  # the stub card is fetched over HTTP; calls go over gRPC
        client = await create_client(base_url, config)
        card = await client.get_extended_agent_card(
            GetExtendedAgentCardRequest(tenant="echo"), context=echo
        )
        grpc_interfaces = [i for i in card.supported_interfaces if i.protocol_binding == "GRPC"]
        assert [(i.url, i.tenant) for i in grpc_interfaces] == [(address, "echo")]
        # Blocking: the answer is the finished task.
        answers = [
            event
            async for event in client.send_message(
                SendMessageRequest(tenant="echo", message=_message("over grpc")), context=echo
            )
        ]
        task = answers[-1].task
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert task.artifacts[0].parts[0].text == "over grpc (after 0)"
        got = await client.get_task(
            GetTaskRequest(tenant="echo", id=task.id, history_length=1), context=echo
        )
        assert (got.id, len(got.history)) == (task.id, 1)
        listed = await client.list_tasks(ListTasksRequest(tenant="echo", page_size=5), context=echo)
        assert [t.id for t in listed.tasks] == [task.id]
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(tenant="echo", id=task.id), context=echo)
        other = _context(gateway, "bob", address)
        with pytest.raises(TaskNotFoundError):  # another caller's task
            await client.get_task(GetTaskRequest(tenant="bob", id=task.id), context=other)
        # Push configs.
        push = TaskPushNotificationConfig(
            tenant="echo", task_id=task.id, id="second", url=gateway.push_url("second"),
            token=gateway.push_token,
        )  # fmt: skip
        created = await client.create_task_push_notification_config(push, context=echo)
        assert created.id == "second"
        fetched = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(tenant="echo", task_id=task.id, id="second"),
            context=echo,
        )
        assert fetched.url == push.url
        configs = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(tenant="echo", task_id=task.id), context=echo
        )
        assert "second" in [c.id for c in configs.configs]
        await client.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(tenant="echo", task_id=task.id, id="second"),
            context=echo,
        )
        await client.close()

        # Streaming: a held turn streamed, then resubscribed to while it runs.
        config.streaming = True
        client = await create_client(base_url, config)
        release = tmp_path / "release"
        bob = _context(gateway, "bob", address)
        request = SendMessageRequest(
            tenant="bob", message=_message(f"file:{release}"),
            configuration=SendMessageConfiguration(
                task_push_notification_config=TaskPushNotificationConfig(
                    url=gateway.push_url(), token=gateway.push_token
                )
            ),
        )  # fmt: skip
        stream = client.send_message(request, context=bob)
        first = await anext(stream)
        task_id = first.task.id
        await stream.aclose()  # the client goes; the turn goes on
        resumed = client.subscribe(SubscribeToTaskRequest(tenant="bob", id=task_id), context=bob)
        snapshot = await anext(resumed)
        assert snapshot.task.id == task_id
        release.touch()
        async with asyncio.timeout(30):
            rest = [event async for event in resumed]
        assert rest[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
        await client.close()
