"""An MCP server's tools as core's: their names, and what a call's result becomes."""

from __future__ import annotations

import base64
import binascii
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


def tool_result(result: Any) -> list[Any]:
    """A `CallToolResult` as tool-result content: text, images, audio, documents (embedded
    resources), links and structured content as data. Structured content stands for the text
    blocks beside it (the spec has servers serialize it there for older clients), so the model
    reads it once. A result the server marked `isError` becomes a `ToolError` carrying its text,
    which the model sees as the call's error."""
    if result.is_error:
        texts = [block.text for block in result.content if block.type == "text"]
        raise ToolError(" ".join(texts) if texts else "the MCP tool reported an error")
    blocks: list[Any] = []
    structured = result.structured_content
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
