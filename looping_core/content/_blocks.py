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
    "DataBlock",
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
    """Media by URL or inline bytes (exactly one): the shape images and audio share. `name` is
    a file name for people and programs that save it (A2A `filename`); empty when it has none."""

    media_type: str = attrs.field(validator=_non_empty)
    url: str | None = None
    data: bytes | None = attrs.field(default=None, validator=_one_of_url_or_data)
    name: str = ""


@attrs.frozen
class ImageBlock(_MediaRef):
    """An image by URL or inline bytes (exactly one)."""

    TAG: ClassVar[str] = "image"


@attrs.frozen
class AudioBlock(_MediaRef):
    """Audio by URL or inline bytes (exactly one)."""

    TAG: ClassVar[str] = "audio"


def _document_content(instance: DocumentBlock, _: attrs.Attribute[Any], __: Any) -> None:
    if instance.data is not None and instance.url is not None:
        raise ValueError("a document is given by its bytes or by a URL, not both")
    if instance.data is None and instance.url is None and instance.text is None:
        raise ValueError("a document needs its bytes, a URL, or extracted text")


@attrs.frozen
class DocumentBlock:
    """A file: its bytes or a URL to it (at most one), and/or the text extracted from it.

    Core never fetches `url`: it is handed on as it came (an artifact a client downloads, a
    file a caller points at), so what may be fetched is the receiver's decision."""

    TAG: ClassVar[str] = "document"
    media_type: str = attrs.field(validator=_non_empty)
    name: str
    data: bytes | None = None
    text: str | None = None
    url: str | None = attrs.field(default=None, validator=_document_content)


def _json_value_not_null(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        raise ValueError("a data block's value must not be null (A2A cannot carry a null part)")


@attrs.frozen
class DataBlock:
    """Structured data (A2A `Part.data`): any JSON value but null, e.g. a form's fields or a
    tool's machine-readable result. `media_type` says which JSON it is."""

    TAG: ClassVar[str] = "data"
    value: Any = attrs.field(validator=_json_value_not_null)
    media_type: str = attrs.field(default="application/json", validator=_non_empty)


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


ResultContent = TextBlock | ImageBlock | AudioBlock | DocumentBlock | DataBlock
"""What a tool result may hold."""


def _result_content(instance: Any, _: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
    for block in value:
        if not isinstance(block, TextBlock | ImageBlock | AudioBlock | DocumentBlock | DataBlock):
            raise ValueError(f"a tool result cannot hold a {type(block).__name__}")


@attrs.frozen
class ToolResultBlock:
    """What a tool returned to the call `tool_use_id`; `is_error` marks a failure."""

    TAG: ClassVar[str] = "tool_result"
    tool_use_id: str = attrs.field(validator=_non_empty)
    content: tuple[ResultContent, ...] = attrs.field(default=(), validator=_result_content)
    is_error: bool = False

    @property
    def text(self) -> str:
        """Its text blocks' text, joined: what a test's model reads of a tool's answer."""
        return "".join(block.text for block in self.content if isinstance(block, TextBlock))


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
    | DataBlock
    | ThinkingBlock
    | ToolUseBlock
    | ToolResultBlock
    | RefusalBlock
)

BLOCK_TYPES: Mapping[str, type[Any]] = {
    cls.TAG: cls
    for cls in (
        TextBlock, ImageBlock, AudioBlock, DocumentBlock, DataBlock, ThinkingBlock, ToolUseBlock,
        ToolResultBlock, RefusalBlock,
    )
}  # fmt: skip
