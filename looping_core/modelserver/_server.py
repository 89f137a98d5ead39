"""`ModelServer`: an OpenAI-compatible Chat Completions endpoint on 127.0.0.1 answering from any
`ChatModel` in this process (a `FunctionModel`, a `TestModel`...), so an agent served next to it
gets answers with no hosted model, no key and no network; and `load_model`, which finds the
model `looping model serve --model module:attr` names."""

from __future__ import annotations

import asyncio
import errno
import importlib
import inspect
import json
import logging
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from looping_core.agent import (
    ChatModel,
    ContextTooLong,
    ModelError,
    ModelEvent,
    ModelUnavailable,
    respond,
)
from looping_core.errors import LoopingError
from looping_core.gateway.internal import LocalServer
from looping_core.modelserver._chat_api import (
    BadRequest,
    ChunkWriter,
    completion,
    error_json,
    model_request,
    sse,
)
from looping_core.modelserver._function_models import FunctionModel, TestModel

__all__ = ["DEFAULT_PORT", "ModelLoadError", "ModelServer", "load_model", "serve_model"]

_log = logging.getLogger("looping_core.modelserver")

DEFAULT_PORT = 11434
"""Ollama's port: the address `examples/looping.toml` gives its model-driven tenants, so the
endpoint stands in for Ollama with nothing changed."""


class ModelLoadError(LoopingError):
    """`--model module:attr` names nothing that is or makes a chat model."""


class ModelServer(LocalServer):
    """Chat Completions (`POST /v1/chat/completions`, streamed or not, with tool calls and
    usage) and `GET /v1/models` on 127.0.0.1:`port` (a free one when 0), answering every request
    from `model` (`TestModel()` when none is given). Any model name is accepted."""

    max_body_bytes = 32 * 1024**2
    """A conversation larger than this is refused with 413 naming the limit: hosted endpoints
    take conversations of many megabytes (images inline), and an agent's follow-up carries the
    whole conversation so far."""

    def __init__(self, model: ChatModel | None = None, *, port: int = 0) -> None:
        self.model: ChatModel = model if model is not None else TestModel()
        super().__init__(port)

    @property
    def base_url(self) -> str:
        """What a `[tenants.<id>.model] base_url` names."""
        return f"{self._origin}/v1"

    def _routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._complete)
        app.router.add_get("/v1/models", self._models)

    async def _models(self, request: web.Request) -> web.Response:
        entry = {"id": self.model.label, "object": "model", "created": 0, "owned_by": "looping"}
        return web.json_response({"object": "list", "data": [entry]})

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        # JSON only: a page can post `text/plain` to 127.0.0.1 without asking first (CORS).
        if request.content_type != "application/json":
            return _refusal(
                415, "send JSON (Content-Type: application/json)", "invalid_request_error"
            )
        try:
            body = await request.json(loads=_strict_loads)
        except web.HTTPRequestEntityTooLarge:
            return _refusal(
                413, f"the body is over this endpoint's limit of {self.max_body_bytes} bytes",
                "invalid_request_error",
            )  # fmt: skip
        except (ValueError, RecursionError):
            return _refusal(400, "the body is not JSON", "invalid_request_error")
        try:
            asked, stream, include_usage = model_request(body)
        except BadRequest as exc:
            return _refusal(400, exc.message, "invalid_request_error")
        except Exception as exc:  # any other shape it cannot read is the client's mistake too
            _log.debug("an unreadable request", exc_info=True)
            return _refusal(
                400, f"the body is not a Chat Completions request ({type(exc).__name__})",
                "invalid_request_error",
            )  # fmt: skip
        name = str(body.get("model") or self.model.label)
        try:
            if not stream:
                return web.json_response(completion(await respond(self.model, asked), name))
            events = aiter(self.model.stream(asked))
            first = await anext(events)  # a model that fails at once answers with a status
        except ModelError as exc:
            return _model_error(exc)
        except Exception:
            _log.exception("the model %s failed", self.model.label)
            return _refusal(500, "the model raised an error (see the server's log)", "server_error")
        return await self._stream(request, ChunkWriter(name, include_usage), first, events)

    async def _stream(
        self,
        request: web.Request,
        writer: ChunkWriter,
        first: ModelEvent,
        events: AsyncIterator[ModelEvent],
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        event: ModelEvent | None = first
        try:
            while event is not None:
                await response.write(sse(writer.chunks(event)))
                event = await anext(events, None)
        except ModelError as exc:  # mid-stream: the error event a hosted endpoint sends
            body = error_json(exc.reason, "server_error")
            await response.write(f"data: {json.dumps(body)}\n\n".encode())
        except Exception:
            _log.exception("the model %s failed", self.model.label)
            body = error_json("the model raised an error", "server_error")
            await response.write(f"data: {json.dumps(body)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _strict_loads(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def _model_error(exc: ModelError) -> web.Response:
    """A model's failure as a hosted endpoint answers it, so the agent's client maps it back:
    unavailable is 503 (a fallback model may answer), too long is 400 with the code."""
    if isinstance(exc, ModelUnavailable):
        return _refusal(503, exc.reason, "server_error")
    if isinstance(exc, ContextTooLong):
        return _refusal(400, exc.reason, "invalid_request_error", "context_length_exceeded")
    return _refusal(400, exc.reason, "invalid_request_error")


def _refusal(status: int, message: str, kind: str, code: str | None = None) -> web.Response:
    return web.json_response(error_json(message, kind, code), status=status)


def load_model(reference: str) -> ChatModel:
    """The chat model `"module:attr"` names: a `ChatModel` (a `FunctionModel`, a `TestModel`), a
    class or function of no arguments that returns one, or a function of a `ModelRequest` (made
    a `FunctionModel`). `ModelLoadError` says what it found and what to point at instead."""
    module_name, colon, attribute = reference.partition(":")
    if not colon or not module_name or not attribute:
        raise ModelLoadError(f"--model {reference!r}: write it as module:attribute")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise ModelLoadError(
            f"--model {reference!r}: cannot import {module_name!r} ({type(exc).__name__}: "
            f"{exc}){_guess(module_name, attribute)}"
        ) from exc
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ModelLoadError(f"--model {reference!r}: {module_name!r} has no {part!r}")
        target = getattr(target, part)
    if _is_model(target):
        return target  # type: ignore[no-any-return]
    if callable(target):
        made = _call(target, reference)
        if made is not None:
            return made
    raise ModelLoadError(
        f"--model {reference!r} is a {type(target).__name__}, not a chat model; point it at a "
        "FunctionModel or TestModel, a function of a ModelRequest, or a function of no "
        "arguments that returns a chat model"
    )


def _guess(module_name: str, attribute: str) -> str:
    """A likelier reference when the module is a file of a folder here (`tests/x.py` for
    `x`): a test module is imported by its package's name."""
    path = Path(*module_name.split("."))
    for folder in ("tests", "test"):
        if (Path(folder) / path.with_suffix(".py")).is_file():
            return f"; did you mean {folder}.{module_name}:{attribute}?"
    return ""


def _call(target: Callable[..., Any], reference: str) -> ChatModel | None:
    try:
        parameters = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return None
    named = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [p for p in parameters.values() if p.default is p.empty and p.kind in named]
    if len(required) == 1 and not isinstance(target, type):
        return FunctionModel(target, label=reference.rpartition(":")[2])
    if required:
        return None
    made = target()
    return made if _is_model(made) else None


def _is_model(value: Any) -> bool:
    return not isinstance(value, type) and callable(getattr(value, "stream", None))


async def serve_model(
    model: ChatModel, port: int = DEFAULT_PORT, ready: Callable[[ModelServer], None] | None = None
) -> None:
    """Serve `model` on 127.0.0.1:`port` until SIGINT or SIGTERM (handled here: a shell starts
    a background job with SIGINT ignored). `ready` is told once it listens."""
    server = ModelServer(model, port=port)
    try:
        await server.start()
    except OSError as exc:
        where = f"127.0.0.1:{port}"
        if exc.errno == errno.EADDRINUSE:
            raise ModelLoadError(
                f"{where} is in use (a model server, Ollama, or another `looping model serve`?); "
                "stop it or give --port"
            ) from None
        raise ModelLoadError(f"cannot listen on {where}: {exc.strerror}") from None
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for signum in signals:
        loop.add_signal_handler(signum, stopping.set)
    try:
        if ready is not None:
            ready(server)
        await stopping.wait()
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)
        await server.stop()
        await model.aclose()
