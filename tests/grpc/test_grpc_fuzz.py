"""Property-based fuzzing of the gRPC binding: whatever bytes a call carries (random, or a valid
request with bytes flipped, cut or appended; any method; any `a2a-version`, `last-event-id` or
tenant metadata), the answer is a message or a refusal with the spec's status and details, never
INTERNAL or UNKNOWN, and nothing is logged as an error; afterwards the server still serves.

Bounded for CI (`EXAMPLES`)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import fuzzing
from support.bindings import grpc_request, message

EXAMPLES = 150
SERVICE = "/lf.a2a.v1.A2AService"
METHODS = (
    "SendMessage", "SendStreamingMessage", "GetTask", "ListTasks", "CancelTask",
    "SubscribeToTask", "CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs", "DeleteTaskPushNotificationConfig", "GetExtendedAgentCard",
)  # fmt: skip
REFUSED_WRONGLY = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}


class Served(fuzzing.Served):
    """The agent serving gRPC too, and a channel to it."""

    def __init__(self) -> None:
        # With the A2A 1.1 draft on, so `a2a-version: 1.1` calls take the draft's proto too.
        super().__init__(grpc=True, server="a2a_1_1_draft = true")
        self.channel: Any = self.run(self._open())

    async def _open(self) -> Any:
        return grpc.aio.insecure_channel(self.agent.config.server.grpc_url)

    def call(self, method: str, body: bytes, metadata: tuple[tuple[str, str], ...]) -> str:
        """The status the call ended with (a stream read to its end, or for at most 2 s)."""

        async def send() -> str:
            try:
                if method in ("SendStreamingMessage", "SubscribeToTask"):
                    stream = self.channel.unary_stream(f"{SERVICE}/{method}")(
                        body, metadata=metadata, timeout=2
                    )
                    async for _ in stream:
                        pass
                else:
                    await self.channel.unary_unary(f"{SERVICE}/{method}")(
                        body, metadata=metadata, timeout=10
                    )
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED and method.endswith(
                    ("StreamingMessage", "SubscribeToTask")
                ):
                    return "OK (a stream still open)"
                return exc.code().name
            return "OK"

        code = self.run(send())
        self.codes[code] += 1
        return code

    async def _closing(self) -> None:
        await self.channel.close()


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    errors = fuzzing.ErrorLog()
    logging.getLogger().addHandler(errors)
    server = Served()
    try:
        yield server
        # Afterwards it still answers a normal call, and nothing was logged as an error.
        metadata = _metadata(server, "alice", "1.0")
        valid = grpc_request("GetExtendedAgentCard", {"tenant": "alice"}).SerializeToString()
        assert server.call("GetExtendedAgentCard", valid, metadata) == "OK"
        print(f"\ngRPC fuzz: {sum(server.codes.values())} calls; answers: {dict(server.codes)}")
        assert errors.records == [], [r.getMessage() for r in errors.records]
    finally:
        server.close()
        logging.getLogger().removeHandler(errors)


def _metadata(
    server: Served, tenant: str, version: str, extra: tuple[tuple[str, str], ...] = ()
) -> tuple[tuple[str, str], ...]:
    token = server.gateway.token(tenant=tenant, aud=server.agent.config.server.grpc_url)
    return (("authorization", f"Bearer {token}"), ("a2a-version", version), *extra)


def _valid(method: str) -> bytes:
    """A well-formed request of `method` for tenant alice."""
    params: dict[str, Any] = {"tenant": "alice"}
    if method in ("SendMessage", "SendStreamingMessage"):
        params["message"] = message("fuzz")
        params["configuration"] = {"returnImmediately": True}
    elif method in ("GetTask", "CancelTask", "SubscribeToTask"):
        params["id"] = "01a24524-0000-7000-8000-000000000000"
    elif "PushNotificationConfig" in method:
        params["taskId"] = "01a24524-0000-7000-8000-000000000000"
        if method == "CreateTaskPushNotificationConfig":
            params["url"] = "http://127.0.0.1:1/push"
        elif method != "ListTaskPushNotificationConfigs":
            params["id"] = "c1"
    return bytes(grpc_request(method, params).SerializeToString())


@st.composite
def _mangled(draw: st.DrawFn, valid: bytes) -> bytes:
    """`valid` with bytes flipped, cut off, or appended."""
    data = bytearray(valid)
    for _ in range(draw(st.integers(1, 4))):
        if data and draw(st.booleans()):
            index = draw(st.integers(0, len(data) - 1))
            data[index] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    if draw(st.booleans()):
        data += draw(st.binary(max_size=40))
    return bytes(data)


_metadata_values = st.one_of(
    st.sampled_from(["1.0", "1.1", "0.3", "", "2", "1.0.1", "x" * 300]),
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30),
)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    method=st.sampled_from(METHODS),
    data=st.data(),
    version=_metadata_values,
    cursor=st.one_of(st.none(), _metadata_values),
)
def test_no_call_gets_an_internal_error(
    served: Served, method: str, data: st.DataObject, version: str, cursor: str | None
) -> None:
    body = data.draw(st.one_of(st.binary(max_size=200), _mangled(_valid(method))))
    extra = (("last-event-id", cursor),) if cursor is not None else ()
    code = served.call(method, body, _metadata(served, "alice", version, extra))
    assert code not in {status.name for status in REFUSED_WRONGLY}, (method, body, version)
