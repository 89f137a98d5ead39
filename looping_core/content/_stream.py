"""Stream chunks, and the accumulator that folds a chunk stream into complete blocks.

Providers stream text, reasoning, refusals, tool-call arguments and images in fragments. Tool-call
and image fragments carry an `index`: the accumulator keeps one buffer per index, so two tool
calls' arguments (or two images) are never spliced together however their fragments interleave.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from looping_core._random import uuid4
from looping_core.content._blocks import (
    ImageBlock,
    ProviderPayload,
    RefusalBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
)
from looping_core.content._errors import AccumulatorError
from looping_core.content._messages import AssistantContent

MAX_ARGUMENT_DEPTH = 64
"""How deeply a tool call's arguments may nest; deeper ones are not taken as JSON."""

__all__ = [
    "Accumulator",
    "Chunk",
    "ImageChunk",
    "RefusalChunk",
    "TextChunk",
    "ThinkingChunk",
    "ToolUseChunk",
]


@attrs.frozen
class TextChunk:
    text: str


@attrs.frozen
class ThinkingChunk:
    """Reasoning text; the signature or state usually arrives once, in the last chunk."""

    text: str = ""
    signature: ProviderPayload | None = None
    state: ProviderPayload | None = None


@attrs.frozen
class RefusalChunk:
    text: str


@attrs.frozen
class ToolUseChunk:
    """A fragment of tool call `index`: its id and name (in the first fragment) and arguments."""

    index: int
    arguments: str = ""
    id: str | None = None
    name: str | None = None


@attrs.frozen
class ImageChunk:
    """A fragment of image `index`: its media type (in the first fragment) and bytes."""

    index: int
    data: bytes = b""
    media_type: str | None = None


Chunk = TextChunk | ThinkingChunk | RefusalChunk | ToolUseChunk | ImageChunk


@attrs.define
class _Text:
    kind: type[Any]
    parts: list[str] = attrs.field(factory=list)
    signature: ProviderPayload | None = None
    state: ProviderPayload | None = None


@attrs.define
class _ToolCall:
    index: int
    id: str | None = None
    name: str | None = None
    arguments: list[str] = attrs.field(factory=list)


@attrs.define
class _Image:
    index: int
    media_type: str | None = None
    data: list[bytes] = attrs.field(factory=list)


class Accumulator:
    """Feed chunks in stream order; `blocks()` returns the complete blocks in first-seen order.

    Consecutive text (or thinking, or refusal) chunks join one block; a chunk of another kind in
    between starts a new one. Tool calls and images are keyed by `index`.

    A tool call whose arguments are not a JSON object is an `AccumulatorError`, unless
    `keep_bad_arguments`: then its block takes empty arguments and `bad_arguments` says which call
    it was and what was wrong, so a tool loop can answer the model with an error result instead of
    failing the whole response.
    """

    def __init__(self, *, keep_bad_arguments: bool = False) -> None:
        self._keep_bad_arguments = keep_bad_arguments
        self.bad_arguments: dict[str, str] = {}
        """Tool-call id -> what was wrong with its arguments (with `keep_bad_arguments`)."""
        self._items: list[_Text | _ToolCall | _Image] = []
        self._calls: dict[int, _ToolCall] = {}
        self._images: dict[int, _Image] = {}

    def feed(self, chunk: Chunk) -> None:
        if isinstance(chunk, TextChunk):
            self._text(TextBlock).parts.append(chunk.text)
        elif isinstance(chunk, RefusalChunk):
            self._text(RefusalBlock).parts.append(chunk.text)
        elif isinstance(chunk, ThinkingChunk):
            thinking = self._text(ThinkingBlock)
            thinking.parts.append(chunk.text)
            thinking.signature = chunk.signature or thinking.signature
            thinking.state = chunk.state or thinking.state
        elif isinstance(chunk, ToolUseChunk):
            self._tool_call(chunk)
        elif isinstance(chunk, ImageChunk):
            self._image(chunk)
        else:  # pragma: no cover - the Chunk union is closed
            raise AccumulatorError(f"not a chunk: {type(chunk).__name__}")

    def _text(self, kind: type[Any]) -> _Text:
        last = self._items[-1] if self._items else None
        if isinstance(last, _Text) and last.kind is kind:
            return last
        item = _Text(kind)
        self._items.append(item)
        return item

    def _tool_call(self, chunk: ToolUseChunk) -> None:
        call = self._calls.get(chunk.index)
        if call is None:
            call = self._calls[chunk.index] = _ToolCall(chunk.index)
            self._items.append(call)
        for name in ("id", "name"):
            given, known = getattr(chunk, name), getattr(call, name)
            if given is not None and known is not None and given != known:
                raise AccumulatorError(
                    f"tool call {chunk.index} changed its {name} mid-stream; two calls share one "
                    "index"
                )
            if given is not None:
                setattr(call, name, given)
        call.arguments.append(chunk.arguments)

    def _image(self, chunk: ImageChunk) -> None:
        image = self._images.get(chunk.index)
        if image is None:
            image = self._images[chunk.index] = _Image(chunk.index)
            self._items.append(image)
        if chunk.media_type is not None:
            if image.media_type not in (None, chunk.media_type):
                raise AccumulatorError(f"image {chunk.index} changed its media type mid-stream")
            image.media_type = chunk.media_type
        image.data.append(chunk.data)

    def blocks(self) -> tuple[AssistantContent, ...]:
        """The blocks so far, complete. Raises `AccumulatorError` for an unfinishable stream."""
        return tuple(self._finish(item) for item in self._items)

    def _finish(self, item: _Text | _ToolCall | _Image) -> AssistantContent:
        if isinstance(item, _Text):
            text = "".join(item.parts)
            if item.kind is ThinkingBlock:
                return ThinkingBlock(text=text, signature=item.signature, state=item.state)
            block: AssistantContent = item.kind(text=text)
            return block
        if isinstance(item, _ToolCall):
            if not item.name:
                missing = "its name" if item.id else "its id and name"
                raise AccumulatorError(f"tool call {item.index} never received {missing}")
            if not item.id:
                # Some OpenAI-compatible servers send an empty id: the call gets one of its own,
                # so its result can still be matched to it.
                item.id = f"call_{uuid4().hex[:24]}"
            arguments, problem = _arguments("".join(item.arguments).strip() or "{}")
            if problem is not None:
                if not self._keep_bad_arguments:
                    raise AccumulatorError(f"tool call {item.index} has arguments that {problem}")
                self.bad_arguments[item.id] = f"the arguments {problem}"
                arguments = {}
            return ToolUseBlock(id=item.id, name=item.name, input=arguments)
        if item.media_type is None:
            raise AccumulatorError(f"image {item.index} never received its media type")
        return ImageBlock(media_type=item.media_type, data=b"".join(item.data))


class _NotJson(ValueError):
    pass


def _no_constants(name: str) -> Any:
    raise _NotJson(f"{name} is not a JSON number")


def _arguments(raw: str) -> tuple[dict[str, Any], str | None]:
    """A tool call's arguments, or what is wrong with them: not JSON (NaN and Infinity are not
    JSON numbers; nesting past `MAX_ARGUMENT_DEPTH` is refused, as deep nesting is a way to
    make every later reader recurse), or not an object."""
    try:
        arguments = json.loads(raw, parse_constant=_no_constants)
    except RecursionError:
        return {}, f"are not JSON (nested deeper than {MAX_ARGUMENT_DEPTH} levels)"
    except _NotJson as exc:
        return {}, f"are not JSON ({exc})"
    except ValueError:
        return {}, "are not JSON"
    if _deeper_than(arguments, MAX_ARGUMENT_DEPTH):
        return {}, f"are not JSON (nested deeper than {MAX_ARGUMENT_DEPTH} levels)"
    if not isinstance(arguments, dict):
        return {}, "are not a JSON object"
    return arguments, None


def _deeper_than(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            if level > limit:
                return True
            inner = item.values() if isinstance(item, dict) else item
            stack += [(each, level + 1) for each in inner]
    return False
