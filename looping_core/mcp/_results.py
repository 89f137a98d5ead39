"""An MCP server's tools as core's: their names, and what a call's result becomes."""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from looping_core.content import AudioBlock, DataBlock, DocumentBlock, ImageBlock, TextBlock
from looping_core.contract import ToolError

__all__ = ["tool_name", "tool_result"]

_NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,62}$")


def tool_name(prefix: str, mcp_name: str) -> str | None:
    """The name the model calls an MCP tool by: snake_case (`getWeather` is `get_weather`), other
    characters as `_`, after `prefix_`; `None` when no such name fits core's tool names."""
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", mcp_name).lower()
    name = re.sub(r"[^a-z0-9_.-]+", "_", name).strip("_")
    if prefix:
        name = f"{prefix}_{name}"
    return name if _NAME.match(name) else None


def tool_result(result: Any, max_bytes: int) -> list[Any]:
    """A `CallToolResult` as tool-result content: text, images, audio, documents (embedded
    resources), links and structured content as data. Structured content stands for the text
    blocks beside it (the spec has servers serialize it there for older clients), so the model
    reads it once. A result the server marked `isError` becomes a `ToolError` carrying its text,
    which the model sees as the call's error.

    Content over `max_bytes` is cut to it (structured content too large falls back to the
    text beside it), and a last text block says how large the result was, so neither the model
    nor the session takes a server's flood whole."""
    if result.is_error:
        texts = [block.text for block in result.content if block.type == "text"]
        text = " ".join(texts) if texts else "the MCP tool reported an error"
        raise ToolError(_cut_text(text, max_bytes))
    structured = result.structured_content
    if structured is not None and _size(DataBlock(structured)) > max_bytes:
        structured = None  # its text form (or nothing) is cut below instead
    return _within(_blocks(result, structured), max_bytes)


def _blocks(result: Any, structured: Any) -> list[Any]:
    blocks: list[Any] = []
    for block in result.content:
        if block.type == "text":
            if structured is None:
                blocks.append(TextBlock(block.text))
        elif block.type in ("image", "audio"):
            kind = ImageBlock if block.type == "image" else AudioBlock
            blocks.append(kind(media_type=block.mime_type, data=_decoded(block.data)))
        elif block.type == "resource":
            blocks.append(_document(block.resource))
        elif block.type == "resource_link":
            link = {"uri": str(block.uri), "name": block.name}
            if block.mime_type:
                link["mime_type"] = block.mime_type
            if block.description:
                link["description"] = block.description
            blocks.append(DataBlock({"resource_link": link}))
    if structured is not None:
        blocks.append(DataBlock(structured))
    return blocks


def _within(blocks: list[Any], max_bytes: int) -> list[Any]:
    """`blocks` in order while they fit in `max_bytes`: a text cut where the room ends, others
    left out whole; then a note of the result's size if anything was cut."""
    total = sum(_size(block) for block in blocks)
    if total <= max_bytes:
        return blocks
    kept: list[Any] = []
    room = max_bytes
    for block in blocks:
        size = _size(block)
        if size <= room:
            kept.append(block)
            room -= size
        elif isinstance(block, TextBlock) and room > 0:
            kept.append(TextBlock(_cut_text(block.text, room)))
            room = 0
    kept.append(TextBlock(f"[result cut: {total} bytes, over the limit of {max_bytes}]"))
    return kept


def _size(block: Any) -> int:
    if isinstance(block, TextBlock):
        return len(block.text.encode("utf-8"))
    if isinstance(block, DataBlock):
        return len(json.dumps(block.value, ensure_ascii=False, separators=(",", ":")).encode())
    if isinstance(block, DocumentBlock) and block.text is not None:
        return len(block.text.encode("utf-8"))
    return len(getattr(block, "data", b"") or b"")


def _cut_text(text: str, max_bytes: int) -> str:
    encoded = text.encode("utf-8")
    if len(encoded) <= max_bytes:
        return text
    return encoded[:max_bytes].decode("utf-8", errors="ignore")


def _document(resource: Any) -> DocumentBlock:
    media_type = resource.mime_type or "text/plain"
    if getattr(resource, "text", None) is not None:
        return DocumentBlock(media_type=media_type, name=str(resource.uri), text=resource.text)
    return DocumentBlock(
        media_type=resource.mime_type or "application/octet-stream",
        name=str(resource.uri),
        data=_decoded(resource.blob),
    )


def _decoded(data: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ToolError("the MCP server sent binary content that is not base64") from None
