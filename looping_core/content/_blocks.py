"""Content blocks: a closed set. Only this module defines variants, so a `match` on `Block` can be
exhaustive. Every block is a frozen attrs class; its wire tag is `TAG`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

__all__ = [
    "BLOCK_TYPES",
    "AudioBlock",
    "Block",
    "DocumentBlock",
    "ImageBlock",
    "ProviderPayload",
    "RefusalBlock",
    "ResultContent",
    "TextBlock",
    "ThinkingBlock",
    "ToolResultBlock",
    "ToolUseBlock",
]


def _one_of_url_or_data(instance: Any, _: attrs.Attribute[Any], __: Any) -> None:
    if (instance.url is None) == (instance.data is None):
        raise ValueError("exactly one of url or data must be given")


def _non_empty(instance: Any, attribute: attrs.Attribute[str], value: str) -> None:
    if not value:
        raise ValueError(f"{attribute.name} must not be empty")


@attrs.frozen
class TextBlock:
    TAG: ClassVar[str] = "text"
    text: str


@attrs.frozen
class _MediaRef:
    """Media by URL or inline bytes (exactly one): the shape images and audio share."""

    media_type: str = attrs.field(validator=_non_empty)
    url: str | None = None
    data: bytes | None = attrs.field(default=None, validator=_one_of_url_or_data)


@attrs.frozen
class ImageBlock(_MediaRef):
    """An image by URL or inline bytes (exactly one)."""

    TAG: ClassVar[str] = "image"


@attrs.frozen
class AudioBlock(_MediaRef):
    """Audio by URL or inline bytes (exactly one)."""

    TAG: ClassVar[str] = "audio"


def _bytes_or_text(instance: DocumentBlock, _: attrs.Attribute[Any], __: Any) -> None:
    if instance.data is None and instance.text is None:
        raise ValueError("a document needs data, extracted text, or both")


@attrs.frozen
class DocumentBlock:
    """A document: its bytes and/or the text extracted from it."""

    TAG: ClassVar[str] = "document"
    media_type: str = attrs.field(validator=_non_empty)
    name: str
    data: bytes | None = None
    text: str | None = attrs.field(default=None, validator=_bytes_or_text)


@attrs.frozen
class ProviderPayload:
    """Something only one provider understands, labelled with its format (e.g. a signature)."""

    format: str = attrs.field(validator=_non_empty)
    value: str


@attrs.frozen
class ThinkingBlock:
    """Reasoning text, with a provider signature and/or opaque provider state.

    Each carries a format label; `replayable_to(label)` says whether a provider speaking `label`
    may be sent this block's signature or state (never when the labels differ).
    """

    TAG: ClassVar[str] = "thinking"
    text: str
    signature: ProviderPayload | None = None
    state: ProviderPayload | None = None

    def replayable_to(self, provider_format: str) -> bool:
        payloads = [p for p in (self.signature, self.state) if p is not None]
        return bool(payloads) and all(p.format == provider_format for p in payloads)


def _json_object(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, Mapping):
        raise ValueError(f"{attribute.name} must be a JSON object")


@attrs.frozen
class ToolUseBlock:
    """The model calls a tool: an id it chose, the tool's name, a JSON object of arguments."""

    TAG: ClassVar[str] = "tool_use"
    id: str = attrs.field(validator=_non_empty)
    name: str = attrs.field(validator=_non_empty)
    input: Mapping[str, Any] = attrs.field(validator=_json_object)


ResultContent = TextBlock | ImageBlock | AudioBlock | DocumentBlock
"""What a tool result may hold."""


def _result_content(instance: Any, _: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
    for block in value:
        if not isinstance(block, TextBlock | ImageBlock | AudioBlock | DocumentBlock):
            raise ValueError(f"a tool result cannot hold a {type(block).__name__}")


@attrs.frozen
class ToolResultBlock:
    """What a tool returned to the call `tool_use_id`; `is_error` marks a failure."""

    TAG: ClassVar[str] = "tool_result"
    tool_use_id: str = attrs.field(validator=_non_empty)
    content: tuple[ResultContent, ...] = attrs.field(default=(), validator=_result_content)
    is_error: bool = False


@attrs.frozen
class RefusalBlock:
    """The model declined. Its own kind, never text, so "declined" stays distinguishable from
    "answered", also when the refusal text is empty."""

    TAG: ClassVar[str] = "refusal"
    text: str = ""


Block = (
    TextBlock
    | ImageBlock
    | AudioBlock
    | DocumentBlock
    | ThinkingBlock
    | ToolUseBlock
    | ToolResultBlock
    | RefusalBlock
)

BLOCK_TYPES: Mapping[str, type[Any]] = {
    cls.TAG: cls
    for cls in (
        TextBlock, ImageBlock, AudioBlock, DocumentBlock, ThinkingBlock, ToolUseBlock,
        ToolResultBlock, RefusalBlock,
    )
}  # fmt: skip
