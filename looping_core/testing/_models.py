"""Models for tests: a scripted in-process `ChatModel`, and a fake OpenAI-compatible HTTP server
(a real aiohttp server on 127.0.0.1) that streams scripted Chat Completions responses and fails
on cue (429, 500, a context-length error, a hang, a malformed chunk)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
from aiohttp import web

from looping_core.agent import ModelError, ModelEvent, ModelRequest, StreamEnd
from looping_core.content import TextChunk, Usage
from looping_core.gateway.internal import LocalServer
from looping_core.modelserver import FunctionModel, ModelReply, ToolCall, reply_events

__all__ = ["FakeModelServer", "Reply", "ScriptedModel"]


class ScriptedModel(FunctionModel):
    """A `ChatModel` that answers each call with the next scripted item: a sequence of events
    (chunks, ending with a `StreamEnd`), or a `ModelError` to raise. Every request is kept in
    `requests`. `ScriptedModel.says(...)` scripts plain text answers; `calls` and `answer` make
    one scripted answer each, `answers_with` a structured one."""

    def __init__(
        self,
        script: Iterable[Sequence[ModelEvent] | ModelReply | ModelError],
        label: str = "scripted",
    ) -> None:
        super().__init__(self._next, label=label)
        self._script = list(script)

    def _next(self, request: ModelRequest) -> Sequence[ModelEvent] | ModelReply | ModelError:
        if not self._script:
            raise AssertionError(f"{self.label} was called more often than scripted")
        return self._script.pop(0)

    @classmethod
    def says(cls, *answers: str, label: str = "scripted") -> ScriptedModel:
        return cls(
            [
                [TextChunk(answer), StreamEnd(Usage(input_tokens=1, output_tokens=1), "end")]
                for answer in answers
            ],
            label=label,
        )

    @staticmethod
    def calls(
        name: str, arguments: Mapping[str, Any] | None = None, *, call_id: str | None = None
    ) -> list[ModelEvent]:
        """One scripted answer that calls tool `name` with `arguments`:
        `ScriptedModel([ScriptedModel.calls("notes.add", {"text": "milk"}),
        ScriptedModel.answer("Noted.")])`."""
        call = ToolCall(name, dict(arguments or {}))
        return reply_events(ModelReply(tool_calls=(attrs.evolve(call, id=call_id or call.id),)))

    @staticmethod
    def answer(text: str) -> list[ModelEvent]:
        """One scripted answer of plain text."""
        return reply_events(ModelReply(text=text))

    @staticmethod
    def answers_with(output: Mapping[str, Any]) -> ModelReply:
        """One scripted structured answer, given the way each request asks for it (a call of
        its answer tool, or JSON text in native mode)."""
        return ModelReply(output=dict(output))


@attrs.frozen
class Reply:
    """One scripted answer of `FakeModelServer`; build it with the class methods."""

    status: int = 200
    chunks: tuple[Mapping[str, Any], ...] = ()
    """Chunk `delta`s and a last `finish_reason` (streamed as SSE `data:` lines)."""
    usage: Mapping[str, Any] | None = None
    error: Mapping[str, Any] | None = None
    hang: float = 0.0
    raw: tuple[str, ...] = ()
    """SSE lines sent as they are (for malformed streams)."""

    @classmethod
    def text(cls, *pieces: str, prompt_tokens: int = 10, completion_tokens: int = 5) -> Reply:
        deltas = tuple({"delta": {"content": piece}} for piece in pieces)
        return cls(
            chunks=(*deltas, {"delta": {}, "finish_reason": "stop"}),
            usage={"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
        )

    @classmethod
    def tool_calls(cls, *calls: tuple[str, str, Mapping[str, Any]], split: int = 2) -> Reply:
        """Calls `(id, name, arguments)`, their arguments streamed in `split` fragments each,
        the fragments of different calls interleaved."""
        fragments: list[Mapping[str, Any]] = []
        texts = [json.dumps(dict(arguments)) for _, _, arguments in calls]
        for index, (call_id, name, _) in enumerate(calls):
            head = {"index": index, "id": call_id, "type": "function", "function": {"name": name}}
            fragments.append({"delta": {"tool_calls": [head]}})
        for part in range(split):
            for index, text in enumerate(texts):
                size = -(-len(text) // split)
                piece = text[part * size : (part + 1) * size]
                call = {"index": index, "function": {"arguments": piece}}
                fragments.append({"delta": {"tool_calls": [call]}})
        return cls(
            chunks=(*fragments, {"delta": {}, "finish_reason": "tool_calls"}),
            usage={"prompt_tokens": 20, "completion_tokens": 8},
        )

    @classmethod
    def failure(
        cls, status: int, message: str = "scripted failure", code: str | None = None
    ) -> Reply:
        return cls(status=status, error={"message": message, "type": "error", "code": code})

    @classmethod
    def slow(cls, seconds: float) -> Reply:
        return cls(hang=seconds, chunks=({"delta": {}, "finish_reason": "stop"},))

    @classmethod
    def malformed(cls, *lines: str) -> Reply:
        return cls(raw=lines)


class FakeModelServer(LocalServer):
    """An OpenAI-compatible Chat Completions endpoint on 127.0.0.1 (`base_url`), answering each
    request with the next `Reply` of `replies`. Received bodies are kept in `requests`, their
    headers in `headers`. `port`: a fixed one (a config that names it), else a free one."""

    def __init__(
        self, replies: Iterable[Reply] = (), *, model: str = "fake-model", port: int = 0
    ) -> None:
        self.replies = list(replies)
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.headers: list[Mapping[str, str]] = []
        """Each request's headers (names in any case)."""
        super().__init__(port)

    @property
    def base_url(self) -> str:
        return f"{self._origin}/v1"

    def _routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._complete)

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(await request.json())
        self.headers.append(request.headers.copy())
        if not self.replies:
            raise web.HTTPInternalServerError(text="no reply scripted")
        reply = self.replies.pop(0)
        if reply.hang:
            await asyncio.sleep(reply.hang)
        if reply.error is not None:
            return web.json_response({"error": dict(reply.error)}, status=reply.status)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        lines = list(reply.raw) or [f"data: {json.dumps(c)}" for c in self._chunks(reply)]
        for line in [*lines, "data: [DONE]"]:
            await response.write(f"{line}\n\n".encode())
        await response.write_eof()
        return response

    def _chunks(self, reply: Reply) -> list[dict[str, Any]]:
        base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0}
        chunks = [
            {
                **base,
                "model": self.model,
                "choices": [
                    {"index": 0, "delta": dict(c["delta"]), "finish_reason": c.get("finish_reason")}
                ],
            }
            for c in reply.chunks
        ]
        if reply.usage is not None:
            usage = dict(reply.usage)
            usage.setdefault("total_tokens", usage["prompt_tokens"] + usage["completion_tokens"])
            chunks.append({**base, "model": self.model, "choices": [], "usage": usage})
        return chunks
