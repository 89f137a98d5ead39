"""gRPC streams: one `StreamResponse` per stored event, numbered by the initial metadata and
resumed with `last-event-id`, as SSE streams are with `Last-Event-ID`; a caller's stream cap;
a client that never reads is cut at the write deadline and its slot given back; a stream ends
when its token does."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from a2a.types import a2a_pb2

from looping_core.testing import FakeGateway

from support import agents as test_agents
from support.bindings import Grpc, grpc_error, grpc_request, message, proto_json
from support.serving import FLOOD, STEPS, STREAM_LIMITS, RunningAgent, start_agent

FIRST_EVENT_ID = "looping-first-event-id"


@pytest.fixture
async def agent(gateway: FakeGateway) -> AsyncIterator[RunningAgent]:
    running, listener = await start_agent(
        [gateway.origin], grpc=True, extra=STREAM_LIMITS + FLOOD + STEPS
    )
    gateway.agent_jwks_url = running.base_url + "/.well-known/jwks.json"
    yield running
    await running.session.close()
    await listener.cleanup()


def release(key: str) -> None:
    test_agents.RELEASE.setdefault(key, asyncio.Event()).set()


class Stream:
    """One gRPC stream: its initial metadata's first event number and its messages."""

    def __init__(self, call: Any) -> None:
        self.call = call

    async def first_id(self) -> int:
        metadata = await self.call.initial_metadata()
        return int(metadata.get(FIRST_EVENT_ID))

    async def next(self) -> dict[str, Any]:
        message = await self.call.read()
        assert message is not grpc.aio.EOF, "the stream ended"
        return proto_json(message)

    async def rest(self) -> list[dict[str, Any]]:
        messages = []
        while (message := await self.call.read()) is not grpc.aio.EOF:
            messages.append(proto_json(message))
        return messages


@pytest.fixture
async def channel(agent: RunningAgent) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(agent.config.server.grpc_url) as opened:
        yield opened


def open_stream(
    channel: grpc.aio.Channel,
    binding: Grpc,
    method: str,
    params: dict[str, Any],
    *,
    tenant: str,
    subject: str = "caller",
    last_event_id: int | None = None,
    token: str | None = None,
) -> Stream:
    metadata = [(k.lower(), v) for k, v in binding.headers(tenant, subject, token).items()]
    if last_event_id is not None:
        metadata.append(("last-event-id", str(last_event_id)))
    call = channel.unary_stream(
        f"/lf.a2a.v1.A2AService/{method}",
        request_serializer=lambda message: message.SerializeToString(),
        response_deserializer=a2a_pb2.StreamResponse.FromString,
    )(grpc_request(method, {"tenant": tenant, **params}), metadata=tuple(metadata))
    return Stream(call)


def send_params(gateway: FakeGateway, text: str) -> dict[str, Any]:
    return {"message": message(text),
            "configuration": {"taskPushNotificationConfig": gateway.push_config()}}  # fmt: skip


async def test_a_streamed_turn_and_its_resume(
    agent: RunningAgent, gateway: FakeGateway, channel: grpc.aio.Channel
) -> None:
    binding = Grpc(agent, gateway)
    key = uuid.uuid4().hex
    stream = open_stream(
        channel, binding, "SendStreamingMessage", send_params(gateway, f"steps:{key}"),
        tenant="steps",
    )  # fmt: skip
    first = await stream.first_id()
    task = (await stream.next())["task"]
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
    seen = [await stream.next() for _ in range(2)]
    stream.call.cancel()  # the client goes after three messages: events first..first+2
    release(key)
    resumed = open_stream(
        channel, binding, "SubscribeToTask", {"id": task["id"]}, tenant="steps",
        last_event_id=first + 2,
    )  # fmt: skip
    assert await resumed.first_id() == first + 3
    rest = await resumed.rest()
    assert rest[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    # The events are the ones the JSON bindings stream: all of them from event 1, once each.
    everything = open_stream(
        channel, binding, "SubscribeToTask", {"id": task["id"]}, tenant="steps",
        last_event_id=0,
    )  # fmt: skip
    assert await everything.first_id() == 1
    all_events = await everything.rest()
    assert all_events[first:] == [*seen, *rest]
    chunks = [e["artifactUpdate"]["artifact"]["parts"][0]["text"]
              for e in all_events if "artifactUpdate" in e]  # fmt: skip
    assert chunks[:3] == ["a", "b", "c"]


async def test_an_ended_task_is_not_subscribed_to(
    agent: RunningAgent, gateway: FakeGateway, channel: grpc.aio.Channel
) -> None:
    binding = Grpc(agent, gateway)
    params = {"message": message("hello"),
              "configuration": {"taskPushNotificationConfig": gateway.push_config()}}  # fmt: skip
    task = (await binding.call("SendMessage", params)).result["task"]
    stream = open_stream(channel, binding, "SubscribeToTask", {"id": task["id"]}, tenant="alice")
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await stream.rest()
    assert failed.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert grpc_error(failed.value)["details"][0]["reason"] == "UNSUPPORTED_OPERATION"
    bad_cursor = open_stream(
        channel, binding, "SubscribeToTask", {"id": task["id"]}, tenant="alice",
        last_event_id=10**6,
    )  # fmt: skip
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await bad_cursor.rest()
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_caller_holds_at_most_its_cap_of_streams(
    agent: RunningAgent, gateway: FakeGateway, channel: grpc.aio.Channel
) -> None:
    binding = Grpc(agent, gateway)
    key = "hold-" + uuid.uuid4().hex
    first = open_stream(
        channel, binding, "SendStreamingMessage", send_params(gateway, key), tenant="bob"
    )
    task_id = (await first.next())["task"]["id"]
    second = open_stream(channel, binding, "SubscribeToTask", {"id": task_id}, tenant="bob")
    await second.next()
    third = open_stream(channel, binding, "SubscribeToTask", {"id": task_id}, tenant="bob")
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await third.next()
    assert failed.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    details = grpc_error(failed.value)["details"][0]
    assert (details["reason"], details["metadata"]) == ("TOO_MANY_STREAMS", {"maxStreams": "2"})
    second.call.cancel()
    for _ in range(200):  # its slot comes back once the server sees the cancel
        again = open_stream(channel, binding, "SubscribeToTask", {"id": task_id}, tenant="bob")
        try:
            await again.next()
            break
        except grpc.aio.AioRpcError:
            await asyncio.sleep(0.02)
    else:
        raise AssertionError("the canceled stream's slot never came back")
    release(key)


async def test_a_client_that_never_reads_is_cut_and_its_slot_given_back(
    agent: RunningAgent, gateway: FakeGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "looping_core.server")
    binding = Grpc(agent, gateway)
    key = uuid.uuid4().hex
    # A client that announces small windows and never reads a message.
    options = [("grpc.http2.bdp_probe", 0), ("grpc.max_receive_message_length", 2**24)]
    async with grpc.aio.insecure_channel(agent.config.server.grpc_url, options=options) as slow:
        stream = open_stream(
            slow, binding, "SendStreamingMessage", send_params(gateway, f"flood:{key}"),
            tenant="flood",
        )  # fmt: skip
        await stream.first_id()
        async with asyncio.timeout(30):
            while "took no event" not in caplog.text:
                await asyncio.sleep(0.05)
        async with grpc.aio.insecure_channel(agent.config.server.grpc_url) as channel:
            listed = await binding.call("ListTasks", {}, tenant="flood")
            task_id = listed.result["tasks"][0]["id"]
            # Its slot is free again: the caller opens two more streams (the cap) at once.
            one = open_stream(channel, binding, "SubscribeToTask", {"id": task_id},
                              tenant="flood")  # fmt: skip
            two = open_stream(channel, binding, "SubscribeToTask", {"id": task_id},
                              tenant="flood")  # fmt: skip
            assert "task" in await one.next()
            assert "task" in await two.next()
            release(key)
            one.call.cancel()
            two.call.cancel()
        # Reading on, the slow client gets what was queued for it, then the cut's status.
        with pytest.raises(grpc.aio.AioRpcError) as cut:
            await stream.rest()
        assert cut.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "resume the stream with last-event-id" in (cut.value.details() or "")


async def test_a_stream_ends_when_its_token_does(
    agent: RunningAgent, gateway: FakeGateway, channel: grpc.aio.Channel
) -> None:
    binding = Grpc(agent, gateway)
    key = "hold-" + uuid.uuid4().hex
    lasting = gateway.token(tenant="bob", aud=binding.audience)
    # Expired already but within the leeway (30 s): accepted, then the stream's end is near.
    short = gateway.token(tenant="bob", aud=binding.audience, lifetime=1, now=time.time() - 30)
    stream = open_stream(
        channel, binding, "SendStreamingMessage", send_params(gateway, key), tenant="bob",
        token=short,
    )  # fmt: skip
    task_id = (await stream.next())["task"]["id"]
    async with asyncio.timeout(20):
        rest = await stream.rest()  # it ends, cleanly (no error), with the token
    states = [event["statusUpdate"]["status"]["state"] for event in rest]
    assert "TASK_STATE_COMPLETED" not in states  # the turn still holds: the token ended it
    resumed = open_stream(
        channel, binding, "SubscribeToTask", {"id": task_id}, tenant="bob", token=lasting
    )
    assert "task" in await resumed.next()
    release(key)
    resumed.call.cancel()
