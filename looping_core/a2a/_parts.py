"""Blocks to and from A2A 1.0 `Part`s, for the edge's messages and artifacts.

| block | part |
|---|---|
| text | `text` |
| image / audio with a URL | `url` + `mediaType` (+ `filename` from its `name`) |
| image / audio with bytes | `raw` + `mediaType` (+ `filename`) |
| document with bytes | `raw` + `mediaType` + `filename`; its text in `metadata.extractedText` |
| document by URL | `url` + `mediaType` + `filename`; its text in `metadata.extractedText` |
| document with text only | `text` + `mediaType` + `filename` |
| data | `data` + `mediaType` |

Every part a client can send has a block form: a `url` or `raw` part that is neither image nor
audio is a document. Thinking, tool use, tool result and refusal blocks have no A2A form:
`NoA2AForm` says so.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from looping_core.a2a._models import Part
from looping_core.content import (
    AudioBlock,
    Block,
    DataBlock,
    DocumentBlock,
    ImageBlock,
    NoA2AForm,
    TextBlock,
    UserContent,
)

__all__ = [
    "block_to_part",
    "blocks_to_parts",
    "media_type_accepted",
    "media_type_of",
    "part_to_block",
    "parts_to_blocks",
]

EXTRACTED_TEXT = "extractedText"
JSON = "application/json"


def block_to_part(block: Block) -> Part:
    """The A2A part for a block; `NoA2AForm` for kinds A2A cannot carry."""
    if isinstance(block, TextBlock):
        return Part(text=block.text)
    if isinstance(block, ImageBlock | AudioBlock):
        if block.url is not None:
            return Part(url=block.url, media_type=block.media_type, filename=block.name)
        return Part(raw=block.data, media_type=block.media_type, filename=block.name)
    if isinstance(block, DocumentBlock):
        if block.data is None and block.url is None:
            return Part(text=block.text, media_type=block.media_type, filename=block.name)
        metadata = {EXTRACTED_TEXT: block.text} if block.text is not None else None
        return Part(
            raw=block.data,
            url=block.url,
            media_type=block.media_type,
            filename=block.name,
            metadata=metadata,
        )
    if isinstance(block, DataBlock):
        return Part(data=block.value, media_type=block.media_type)
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
    if part.data is not None:
        return DataBlock(value=part.data, media_type=part.media_type or JSON)
    if kind == "image":
        return ImageBlock(part.media_type, url=part.url, data=part.raw, name=part.filename)
    if kind == "audio":
        return AudioBlock(part.media_type, url=part.url, data=part.raw, name=part.filename)
    extracted = (part.metadata or {}).get(EXTRACTED_TEXT)
    return DocumentBlock(
        media_type=part.media_type or "application/octet-stream",
        name=part.filename or ("attachment" if part.raw is not None else ""),
        data=part.raw,
        url=part.url,
        text=extracted if isinstance(extracted, str) else None,
    )


def blocks_to_parts(blocks: Iterable[Block]) -> list[Part]:
    return [block_to_part(block) for block in blocks]


def parts_to_blocks(parts: Iterable[Part]) -> list[UserContent]:
    return [part_to_block(part) for part in parts]


def media_type_of(part: Part) -> str:
    """The part's media type, lower-case and without parameters; where it names none, what its
    kind implies (text: `text/plain`, data: `application/json`, bytes or URL: an octet stream)."""
    declared = part.media_type.split(";", 1)[0].strip().lower()
    if declared:
        return declared
    if part.text is not None:
        return "text/plain"
    if part.data is not None:
        return JSON
    return "application/octet-stream"


def media_type_accepted(media_type: str, ranges: Iterable[str]) -> bool:
    """Whether `media_type` is one of `ranges` (`image/png`, `image/*`, `*/*`)."""
    kind = media_type.split("/", 1)[0]
    accepted = _lowered(tuple(ranges))
    return "*/*" in accepted or media_type in accepted or f"{kind}/*" in accepted


@functools.lru_cache(maxsize=256)
def _lowered(ranges: tuple[str, ...]) -> frozenset[str]:
    """A tenant's media ranges, lower-case, as a set: each part of each request is looked up in
    it (a card lists its ranges once; the edge asks for every part)."""
    return frozenset(accepted.lower() for accepted in ranges)
