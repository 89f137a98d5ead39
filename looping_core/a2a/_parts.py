"""Blocks to and from A2A 1.0 `Part`s, for the edge's messages and artifacts.

| block | part |
|---|---|
| text | `text` |
| image / audio with a URL | `url` + `mediaType` |
| image / audio with bytes | `raw` + `mediaType` |
| document with bytes | `raw` + `mediaType` + `filename`; its text in `metadata.extractedText` |
| document with text only | `text` + `mediaType` + `filename` |
| (from a `data` part) document | `data` becomes a JSON document's extracted text |

Thinking, tool use, tool result and refusal blocks have no A2A form: `NoA2AForm` says so.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import rfc8785

from looping_core.a2a._models import Part
from looping_core.content import (
    AudioBlock,
    Block,
    ContentError,
    DocumentBlock,
    ImageBlock,
    NoA2AForm,
    TextBlock,
)
from looping_core.content._messages import UserContent

__all__ = [
    "UnsupportedPart",
    "block_to_part",
    "blocks_to_parts",
    "part_to_block",
    "parts_to_blocks",
]

EXTRACTED_TEXT = "extractedText"


class UnsupportedPart(ContentError):
    """An A2A part with no block form (a URL to something that is neither image nor audio)."""


def block_to_part(block: Block) -> Part:
    """The A2A part for a block; `NoA2AForm` for kinds A2A cannot carry."""
    if isinstance(block, TextBlock):
        return Part(text=block.text)
    if isinstance(block, ImageBlock | AudioBlock):
        if block.url is not None:
            return Part(url=block.url, media_type=block.media_type)
        return Part(raw=block.data, media_type=block.media_type)
    if isinstance(block, DocumentBlock):
        if block.data is None:
            return Part(text=block.text, media_type=block.media_type, filename=block.name)
        metadata = {EXTRACTED_TEXT: block.text} if block.text is not None else None
        return Part(
            raw=block.data, media_type=block.media_type, filename=block.name, metadata=metadata
        )
    raise NoA2AForm(
        f"a {block.TAG} block has no A2A part form; keep it in the session, or turn it into text "
        "deliberately before it leaves the agent"
    )


def part_to_block(part: Part) -> UserContent:
    """The block for an A2A part (what a client sent us)."""
    kind = part.media_type.split("/", 1)[0]
    if part.text is not None:
        if part.filename:
            return DocumentBlock(
                media_type=part.media_type or "text/plain", name=part.filename, text=part.text
            )
        return TextBlock(text=part.text)
    if part.raw is not None:
        if kind == "image":
            return ImageBlock(media_type=part.media_type, data=part.raw)
        if kind == "audio":
            return AudioBlock(media_type=part.media_type, data=part.raw)
        extracted = (part.metadata or {}).get(EXTRACTED_TEXT)
        return DocumentBlock(
            media_type=part.media_type or "application/octet-stream",
            name=part.filename or "attachment",
            data=part.raw,
            text=extracted if isinstance(extracted, str) else None,
        )
    if part.url is not None:
        if kind == "image":
            return ImageBlock(media_type=part.media_type, url=part.url)
        if kind == "audio":
            return AudioBlock(media_type=part.media_type, url=part.url)
        raise UnsupportedPart(
            "a url part is understood only for image/* and audio/* media types; send the "
            "document's bytes (raw) or text instead"
        )
    return DocumentBlock(
        media_type=part.media_type or "application/json",
        name=part.filename or "data.json",
        text=_json_text(part.data),
    )


def _json_text(value: Any) -> str:
    return rfc8785.dumps(value).decode("utf-8")


def blocks_to_parts(blocks: Iterable[Block]) -> list[Part]:
    return [block_to_part(block) for block in blocks]


def parts_to_blocks(parts: Iterable[Part]) -> list[UserContent]:
    return [part_to_block(part) for part in parts]
