"""Both A2A bindings behind one small interface, so one parametrized suite runs on each: a call
is a method name and its params; the answer is the result, or the error's `reason` (the
ErrorInfo both bindings carry) with the HTTP status."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import aiohttp
import attrs

from looping_core.testing import FakeGateway

from support.serving import RunningAgent


@attrs.frozen
class Answer:
    status: int
    result: Any = None
    reason: str | None = None
    """The ErrorInfo reason of an error (`TASK_NOT_FOUND`), `None` on success."""
    body: Any = None
    headers: Mapping[str, str] = attrs.field(factory=dict)

    @property
    def ok(self) -> bool:
        return self.reason is None


CONFIGS = "/tasks/{taskId}/pushNotificationConfigs"

# method -> (HTTP method, path template after the tenant, where params go)
REST_ROUTES: Mapping[str, tuple[str, str, str]] = {
    "SendMessage": ("POST", "/message:send", "body"),
    "SendStreamingMessage": ("POST", "/message:stream", "body"),
    "GetTask": ("GET", "/tasks/{id}", "query"),
    "ListTasks": ("GET", "/tasks", "query"),
    "CancelTask": ("POST", "/tasks/{id}:cancel", "body"),
    "SubscribeToTask": ("POST", "/tasks/{id}:subscribe", "body"),
    "CreateTaskPushNotificationConfig": ("POST", f"{CONFIGS}", "body"),
    "GetTaskPushNotificationConfig": ("GET", f"{CONFIGS}/{{id}}", "query"),
    "ListTaskPushNotificationConfigs": ("GET", f"{CONFIGS}", "query"),
    "DeleteTaskPushNotificationConfig": ("DELETE", f"{CONFIGS}/{{id}}", "query"),
    "GetExtendedAgentCard": ("GET", "/extendedAgentCard", "query"),
}  # fmt: skip


class Binding:
    name: str

    def __init__(self, agent: RunningAgent, gateway: FakeGateway, version: str = "1.0") -> None:
        self.agent = agent
        self.gateway = gateway
        self.version = version
        """The `A2A-Version` every call sends."""

    @property
    def audience(self) -> str:
        raise NotImplementedError

    def headers(self, tenant: str, subject: str, token: str | None) -> dict[str, str]:
        token = token or self.gateway.token(tenant=tenant, aud=self.audience, sub=subject)
        return {"Authorization": f"Bearer {token}", "A2A-Version": self.version}

    async def call(
        self,
        method: str,
        params: Mapping[str, Any],
        *,
        tenant: str = "alice",
        subject: str = "caller",
        token: str | None = None,
    ) -> Answer:
        """Call `method` for `tenant` as `subject` (a fresh token for this binding by default)."""
        return await self.exchange(method, params, tenant, self.headers(tenant, subject, token))

    async def exchange(
        self, method: str, params: Mapping[str, Any], tenant: str, headers: dict[str, str]
    ) -> Answer:
        raise NotImplementedError

    def stream_request(
        self, method: str, params: Mapping[str, Any], tenant: str
    ) -> tuple[str, str, Any]:
        """(HTTP method, URL, JSON body) of a streaming call."""
        raise NotImplementedError

    def event_result(self, data: Any) -> dict[str, Any]:
        """The `StreamResponse` in one SSE event's data."""
        raise NotImplementedError

    async def stream(
        self, method: str, params: Mapping[str, Any], *, tenant: str = "alice",
        subject: str = "caller",
    ) -> list[dict[str, Any]]:  # fmt: skip
        """A streaming call read to its end: its `StreamResponse`s (server-sent events here)."""
        verb, url, body = self.stream_request(method, params, tenant)
        headers = self.headers(tenant, subject, None)
        async with (
            aiohttp.ClientSession() as session,
            session.request(verb, url, json=body, headers=headers) as response,
        ):
            return [self.event_result(data) for _, data in await read_sse_events(response)]


async def read_sse_events(response: aiohttp.ClientResponse) -> list[tuple[str | None, Any]]:
    """Every server-sent event of a response: its `id` and its data, as JSON."""
    events, fields = [], {}
    async for raw in response.content:
        line = raw.decode().rstrip("\n")
        if not line:
            if "data" in fields:
                events.append((fields.get("id"), json.loads(fields["data"])))
            fields = {}
            continue
        if not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")
    return events


class JsonRpc(Binding):
    name = "jsonrpc"

    @property
    def audience(self) -> str:
        return self.agent.endpoint

    async def exchange(
        self, method: str, params: Mapping[str, Any], tenant: str, headers: dict[str, str]
    ) -> Answer:
        envelope = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": method,
            "params": {"tenant": tenant, **params} if tenant else dict(params),
        }
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.agent.endpoint, json=envelope, headers=headers) as response,
        ):
            body = json.loads(await response.text())
        headers = dict(response.headers)
        if "error" in body:
            reason = body["error"]["data"][0]["reason"]
            return Answer(response.status, reason=reason, body=body, headers=headers)
        return Answer(response.status, result=body["result"], body=body, headers=headers)

    def stream_request(
        self, method: str, params: Mapping[str, Any], tenant: str
    ) -> tuple[str, str, Any]:
        envelope = {
            "jsonrpc": "2.0",
            "id": 3,
            "method": method,
            "params": {"tenant": tenant, **params},
        }
        return "POST", self.agent.endpoint, envelope

    def event_result(self, data: Any) -> dict[str, Any]:
        result: dict[str, Any] = data["result"]
        return result


class Rest(Binding):
    name = "http+json"

    @property
    def audience(self) -> str:
        return self.agent.config.server.rest_url

    def _request(
        self, method: str, params: Mapping[str, Any], tenant: str
    ) -> tuple[str, str, Any, dict[str, str]]:
        verb, template, where = REST_ROUTES[method]
        remaining = dict(params)
        path = template
        for name in ("taskId", "id"):
            if "{" + name + "}" in path:
                path = path.replace("{" + name + "}", quote(str(remaining.pop(name)), safe=""))
        url = self.audience + (f"/{tenant}" if tenant else "") + path
        if where == "body":
            return verb, url, remaining, {}
        query = {k: json.dumps(v) if isinstance(v, bool) else str(v) for k, v in remaining.items()}
        return verb, url, None, query

    async def exchange(
        self, method: str, params: Mapping[str, Any], tenant: str, headers: dict[str, str]
    ) -> Answer:
        verb, url, body, query = self._request(method, params, tenant)
        async with (
            aiohttp.ClientSession() as session,
            session.request(verb, url, json=body, params=query, headers=headers) as response,
        ):
            text = await response.text()
            document = json.loads(text) if text else None
        if response.status >= 400:
            reason = document["error"]["details"][0]["reason"]
            return Answer(
                response.status, reason=reason, body=document, headers=dict(response.headers)
            )
        assert response.content_type == "application/a2a+json"
        return Answer(response.status, result=document, body=document)

    def stream_request(
        self, method: str, params: Mapping[str, Any], tenant: str
    ) -> tuple[str, str, Any]:
        verb, url, body, _ = self._request(method, params, tenant)
        return verb, url, body

    def event_result(self, data: Any) -> dict[str, Any]:
        result: dict[str, Any] = data
        return result


class Grpc(Binding):
    """The gRPC binding, through grpcio with the official SDK's message classes; an answer's
    result is its ProtoJSON (as the JSON bindings give it), an error's status the gRPC code."""

    name = "grpc"

    @property
    def audience(self) -> str:
        return self.agent.config.server.grpc_url

    async def exchange(
        self, method: str, params: Mapping[str, Any], tenant: str, headers: dict[str, str]
    ) -> Answer:
        import grpc  # noqa: PLC0415 - the grpc extra

        metadata = tuple((key.lower(), value) for key, value in headers.items())
        draft = headers.get("A2A-Version") == "1.1"
        params = {"tenant": tenant, **params} if tenant else params
        request = grpc_request(method, params, draft=draft)
        async with grpc.aio.insecure_channel(self.agent.config.server.grpc_url) as channel:
            call = channel.unary_unary(
                f"/lf.a2a.v1.A2AService/{method}",
                request_serializer=lambda message: message.SerializeToString(),
                response_deserializer=grpc_response_class(method, draft=draft).FromString,
            )
            try:
                response = await call(request, metadata=metadata)
            except grpc.aio.AioRpcError as exc:
                if not _has_details(exc):  # grpc's own refusal (a size, a method), no details
                    body = {"code": exc.code().value[0], "message": exc.details()}
                    return Answer(exc.code().value[0], reason=exc.code().name, body=body)
                status = grpc_error(exc)
                # A RetryInfo is the HTTP bindings' Retry-After: shown as that header, so one
                # test reads either.
                retry = [d["retryDelay"] for d in status["details"] if "retryDelay" in d]
                headers = {"Retry-After": retry[0].removesuffix("s")} if retry else {}
                return Answer(
                    exc.code().value[0], reason=status["details"][0]["reason"], body=status,
                    headers=headers,
                )  # fmt: skip
        return Answer(0, result=proto_json(response), body=proto_json(response))

    async def stream(
        self, method: str, params: Mapping[str, Any], *, tenant: str = "alice",
        subject: str = "caller",
    ) -> list[dict[str, Any]]:  # fmt: skip
        import grpc  # noqa: PLC0415 - the grpc extra

        headers = self.headers(tenant, subject, None)
        metadata = tuple((key.lower(), value) for key, value in headers.items())
        draft = self.version == "1.1"
        stream_class = grpc_response_class(method, draft=draft)
        request = grpc_request(method, {"tenant": tenant, **params}, draft=draft)
        async with grpc.aio.insecure_channel(self.agent.config.server.grpc_url) as channel:
            call = channel.unary_stream(
                f"/lf.a2a.v1.A2AService/{method}",
                request_serializer=lambda message: message.SerializeToString(),
                response_deserializer=stream_class.FromString,
            )(request, metadata=metadata)
            events = []
            while (event := await call.read()) is not grpc.aio.EOF:
                events.append(proto_json(event))
            return events


def grpc_request(method: str, params: Mapping[str, Any], *, draft: bool = False) -> Any:
    """`params` (ProtoJSON) as the method's request message: the SDK's class (A2A 1.0), or
    with `draft` the A2A 1.1 draft's (no SDK has it: looping-core's own)."""
    from google.protobuf.json_format import ParseDict  # noqa: PLC0415

    if draft:
        from looping_core.a2a.protobuf import message_class, service  # noqa: PLC0415

        input_type = service(draft=True).methods_by_name[method].input_type
        return ParseDict(dict(params), message_class(input_type.full_name, draft=True)())
    from a2a.types import a2a_pb2  # noqa: PLC0415

    sdk_service = a2a_pb2.DESCRIPTOR.services_by_name["A2AService"]
    request_class = getattr(a2a_pb2, sdk_service.methods_by_name[method].input_type.name)
    return ParseDict(dict(params), request_class())


def grpc_response_class(method: str, *, draft: bool = False) -> Any:
    """The method's answer's class (its stream's message's, for a streaming one)."""
    if draft:
        from looping_core.a2a.protobuf import message_class, service  # noqa: PLC0415

        output_type = service(draft=True).methods_by_name[method].output_type
        return message_class(output_type.full_name, draft=True)
    from a2a.types import a2a_pb2  # noqa: PLC0415
    from google.protobuf import empty_pb2  # noqa: PLC0415

    output = a2a_pb2.DESCRIPTOR.services_by_name["A2AService"].methods_by_name[method].output_type
    if output.full_name == "google.protobuf.Empty":
        return empty_pb2.Empty
    return getattr(a2a_pb2, output.name)


def proto_json(message: Any) -> dict[str, Any]:
    """A message's ProtoJSON (fields at their default value left out, as ProtoJSON may)."""
    from google.protobuf.json_format import MessageToDict  # noqa: PLC0415

    document: dict[str, Any] = MessageToDict(message)
    return document


def _has_details(exc: Any) -> bool:
    return any(key == "grpc-status-details-bin" for key, _ in exc.trailing_metadata() or ())


def grpc_error(exc: Any) -> dict[str, Any]:
    """A failed call's `google.rpc.Status` (from `grpc-status-details-bin`) as ProtoJSON."""
    from google.rpc import error_details_pb2, status_pb2  # noqa: PLC0415

    assert error_details_pb2.ErrorInfo  # its type registered, for the details' Any

    for key, value in exc.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            return proto_json(status_pb2.Status.FromString(value))
    raise AssertionError(f"no status details: {exc.code()} {exc.details()}")


BINDINGS = {"jsonrpc": JsonRpc, "http+json": Rest, "grpc": Grpc}
JSON_BINDINGS = ("jsonrpc", "http+json")


def message(text: str, **fields: Any) -> dict[str, Any]:
    return {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": [{"text": text}],
        **fields,
    }


def throttled(binding: Binding, answer: Answer, reason: str) -> dict[str, str]:
    """The refusal as every binding carries it; its ErrorInfo's metadata."""
    if binding.name == "grpc":  # RESOURCE_EXHAUSTED, when to retry in a RetryInfo
        assert answer.status == 8, answer.body
        assert answer.reason == reason, answer.body
        info, retry = answer.body["details"]
        assert retry["@type"] == "type.googleapis.com/google.rpc.RetryInfo"
        seconds = retry["retryDelay"].removesuffix("s")
        assert seconds == info["metadata"]["retryAfterSeconds"] == answer.headers["Retry-After"]
        assert int(seconds) >= 1
        assert info["domain"] == "looping-core"
        grpc_metadata: dict[str, str] = info["metadata"]
        return grpc_metadata
    assert answer.status == 429, answer.body
    assert answer.reason == reason, answer.body
    retry_after = answer.headers["Retry-After"]
    assert retry_after.isdigit()
    assert int(retry_after) >= 1
    if binding.name == "jsonrpc":
        error = answer.body["error"]
        assert error["code"] == -32000
        [info] = error["data"]
    else:
        assert answer.body["error"]["status"] == "RESOURCE_EXHAUSTED"
        [info] = answer.body["error"]["details"]
    assert info["domain"] == "looping-core"
    metadata: dict[str, str] = info["metadata"]
    assert metadata["retryAfterSeconds"] == retry_after
    return metadata


def send_params(binding: Binding, text: str, message_id: str | None = None) -> dict[str, Any]:
    sent = message(text)
    if message_id is not None:
        sent["messageId"] = message_id
    return {
        "message": sent,
        "configuration": {
            "returnImmediately": True,
            "taskPushNotificationConfig": binding.gateway.push_config(),
        },
    }
