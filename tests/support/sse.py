"""A small SSE client for the streaming tests: opens a streaming JSON-RPC call with a gateway
token and reads its events one by one, comments (heartbeats) included."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import attrs

from looping_core.testing import FakeGateway


@attrs.frozen
class SseEvent:
    id: str | None
    event: str | None
    data: Any
    comment: str | None = None

    @property
    def result(self) -> dict[str, Any]:
        result: dict[str, Any] = self.data["result"]
        return result

    @property
    def kind(self) -> str:
        """`task`, `statusUpdate`, `artifactUpdate` or `message`; `comment` for a heartbeat."""
        return "comment" if self.comment is not None else next(iter(self.result))

    @property
    def state(self) -> str | None:
        if self.kind == "task":
            return str(self.result["task"]["status"]["state"])
        if self.kind == "statusUpdate":
            return str(self.result["statusUpdate"]["status"]["state"])
        return None


class Stream:
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response

    @property
    def status(self) -> int:
        return self.response.status

    @property
    def is_sse(self) -> bool:
        return self.response.content_type == "text/event-stream"

    async def json(self) -> Any:
        return json.loads(await self.response.text())

    async def next(self, timeout: float = 10.0, *, comments: bool = False) -> SseEvent | None:
        """The next event (`None` when the stream ended); heartbeats only with `comments`."""
        while True:
            event = await asyncio.wait_for(self._read_event(), timeout)
            if event is None or comments or event.comment is None:
                return event

    async def rest(self, timeout: float = 10.0) -> list[SseEvent]:
        """Every event until the stream ends."""
        events = []
        while (event := await self.next(timeout)) is not None:
            events.append(event)
        return events

    async def _read_event(self) -> SseEvent | None:
        fields: dict[str, str] = {}
        comment = None
        while True:
            raw = await self.response.content.readline()
            if not raw:
                return None
            line = raw.decode().rstrip("\n")
            if line == "":
                if comment is not None and not fields:
                    return SseEvent(None, None, None, comment)
                if fields:
                    data = fields.get("data")
                    return SseEvent(
                        fields.get("id"), fields.get("event"), json.loads(data) if data else None
                    )
                continue
            if line.startswith(":"):
                comment = line[1:].strip()
                continue
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")


@contextlib.asynccontextmanager
async def open_stream(
    endpoint: str,
    gateway: FakeGateway,
    method: str,
    params: Mapping[str, Any],
    *,
    tenant: str = "alice",
    subject: str = "caller",
    last_event_id: str | None = None,
    request_id: Any = 11,
    token: str | None = None,
) -> AsyncIterator[Stream]:
    """POST a streaming call the way a gateway would (a fresh token, `A2A-Version: 1.0`)."""
    token = token or gateway.token(tenant=tenant, aud=endpoint, sub=subject)
    headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    envelope = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": method,
        "params": {"tenant": tenant, **params},
    }
    async with (
        aiohttp.ClientSession() as session,
        session.post(endpoint, json=envelope, headers=headers) as response,
    ):
        yield Stream(response)


def streaming_send(gateway: FakeGateway, text: str, **message: Any) -> dict[str, Any]:
    """SendStreamingMessage params: `text` as a new message with a push config."""
    return {
        "message": {
            "messageId": message.pop("message_id", None) or str(uuid.uuid4()),
            "role": "ROLE_USER",
            "parts": [{"text": text}],
            **message,
        },
        "configuration": {"taskPushNotificationConfig": gateway.push_config()},
    }
