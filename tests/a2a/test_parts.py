"""Blocks to and from A2A parts, held against the official SDK's Part type."""

from __future__ import annotations

import pytest
from a2a.types import Part as ProtoPart
from google.protobuf.json_format import ParseDict

from looping_core.a2a import Part, block_to_part, from_wire, part_to_block, to_wire
from looping_core.a2a.internal import media_type_accepted
from looping_core.content import (
    AudioBlock,
    DataBlock,
    DocumentBlock,
    ImageBlock,
    NoA2AForm,
    ProviderPayload,
    RefusalBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

ROUND_TRIPS = [
    TextBlock("hello"),
    ImageBlock("image/png", url="https://example.com/a.png"),
    ImageBlock("image/png", data=b"\x89PNG"),
    AudioBlock("audio/wav", data=b"RIFF"),
    AudioBlock("audio/mpeg", url="https://example.com/a.mp3"),
    DocumentBlock("application/pdf", "r.pdf", data=b"%PDF", text="extracted"),
    DocumentBlock("application/pdf", "r.pdf", data=b"%PDF"),
    DocumentBlock("text/markdown", "notes.md", text="# Notes"),
    ImageBlock("image/png", url="https://example.com/c.png", name="chart.png"),
    AudioBlock("audio/wav", data=b"RIFF", name="memo.wav"),
    DocumentBlock("application/pdf", "r.pdf", url="https://example.com/r.pdf"),
    DocumentBlock("application/pdf", "r.pdf", url="https://example.com/r.pdf", text="extracted"),
    DataBlock({"guests": 2, "tags": ["a"], "ok": True}),
    DataBlock([1, "x", None], media_type="application/vnd.example+json"),
    DataBlock("just a string"),
]


@pytest.mark.parametrize("block", ROUND_TRIPS, ids=lambda b: type(b).__name__)
def test_blocks_round_trip_through_parts(block: object) -> None:
    part = block_to_part(block)  # type: ignore[arg-type]
    wire = to_wire(part)
    ParseDict(wire, ProtoPart())  # strict: the official type accepts exactly this
    assert part_to_block(from_wire(wire, Part)) == block


def test_wire_shapes() -> None:
    assert to_wire(block_to_part(TextBlock("hi"))) == {"text": "hi"}
    assert to_wire(block_to_part(ImageBlock("image/png", data=b"\x01\x02"))) == {
        "raw": "AQI=",
        "mediaType": "image/png",
    }


@pytest.mark.parametrize(
    "block",
    [
        ThinkingBlock("x", signature=ProviderPayload("a", "s")),
        ToolUseBlock("c", "f", {}),
        ToolResultBlock("c"),
        RefusalBlock(""),
    ],
    ids=lambda b: type(b).__name__,
)
def test_blocks_without_an_a2a_form_are_refused_clearly(block: object) -> None:
    with pytest.raises(NoA2AForm, match=f"a {block.TAG} block has no A2A part form"):  # type: ignore[attr-defined]
        block_to_part(block)  # type: ignore[arg-type]


def test_a_data_part_becomes_a_data_block() -> None:
    block = part_to_block(Part(data={"b": 1, "a": [True]}))
    assert block == DataBlock({"b": 1, "a": [True]}, media_type="application/json")


def test_file_artifacts_by_url_carry_their_file_name_and_media_type() -> None:
    part = block_to_part(
        DocumentBlock("application/pdf", "report.pdf", url="https://files.example.com/r.pdf")
    )
    assert to_wire(part) == {
        "url": "https://files.example.com/r.pdf",
        "filename": "report.pdf",
        "mediaType": "application/pdf",
    }
    image = to_wire(block_to_part(ImageBlock("image/png", url="https://x/c.png", name="c.png")))
    assert image == {"url": "https://x/c.png", "filename": "c.png", "mediaType": "image/png"}


def test_a_url_to_a_document_is_a_document_by_url() -> None:
    block = part_to_block(Part(url="https://example.com/r.pdf", media_type="application/pdf"))
    assert block == DocumentBlock("application/pdf", "", url="https://example.com/r.pdf")


def test_a_part_holds_exactly_one_content() -> None:
    with pytest.raises(ValueError, match="exactly one of text, raw, url or data"):
        Part(text="a", url="b")
    with pytest.raises(ValueError, match="exactly one"):
        Part()


@pytest.mark.parametrize("ranges", [("Image/*", "TEXT/plain"), ["Image/*", "TEXT/plain"]])
def test_media_types_are_matched_against_a_cards_ranges_whatever_their_case(
    ranges: list[str] | tuple[str, ...],
) -> None:
    """A card's ranges (kept as a lower-case set per tuple of them) take a type itself, its
    kind's `*`, or anything with `*/*`; nothing else."""
    assert media_type_accepted("text/plain", ranges)
    assert media_type_accepted("image/png", ranges)
    assert not media_type_accepted("text/html", ranges)
    assert not media_type_accepted("application/json", ranges)
    assert media_type_accepted("application/json", (*ranges, "*/*"))
