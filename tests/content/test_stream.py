"""The accumulator folds interleaved fragments into blocks without splicing them together."""

from __future__ import annotations

import pytest

from looping_core.content import (
    Accumulator,
    AccumulatorError,
    Chunk,
    ImageBlock,
    ImageChunk,
    ProviderPayload,
    RefusalBlock,
    RefusalChunk,
    TextBlock,
    TextChunk,
    ThinkingBlock,
    ThinkingChunk,
    ToolUseBlock,
    ToolUseChunk,
)


def fold(*chunks: Chunk) -> tuple:  # type: ignore[type-arg]
    accumulator = Accumulator()
    for chunk in chunks:
        accumulator.feed(chunk)
    return accumulator.blocks()


def test_a_tool_call_without_an_id_gets_one_of_its_own() -> None:
    """Some OpenAI-compatible servers send `"id": ""`: the call goes on with an id of its own
    (distinct per call), instead of failing the whole response."""
    accumulator = Accumulator()
    accumulator.feed(ToolUseChunk(0, '{"q": ', name="search"))
    accumulator.feed(ToolUseChunk(1, "{}", name="list"))
    accumulator.feed(ToolUseChunk(0, '"x"}'))
    first, second = accumulator.blocks()
    assert isinstance(first, ToolUseBlock)
    assert isinstance(second, ToolUseBlock)
    assert (first.name, first.input, second.name) == ("search", {"q": "x"}, "list")
    assert first.id.startswith("call_")
    assert second.id.startswith("call_")
    assert first.id != second.id


def test_interleaved_tool_call_fragments_stay_apart() -> None:
    blocks = fold(
        ToolUseChunk(0, '{"city": "Li', id="call_a", name="weather"),
        ToolUseChunk(1, '{"query"', id="call_b", name="search"),
        ToolUseChunk(0, 'sbon"}'),
        ToolUseChunk(1, ': "flights"}'),
    )
    assert blocks == (
        ToolUseBlock("call_a", "weather", {"city": "Lisbon"}),
        ToolUseBlock("call_b", "search", {"query": "flights"}),
    )


def test_interleaved_image_fragments_stay_apart() -> None:
    blocks = fold(
        ImageChunk(0, b"\x89P", media_type="image/png"),
        ImageChunk(1, b"GIF", media_type="image/gif"),
        ImageChunk(0, b"NG"),
        ImageChunk(1, b"89a"),
    )
    assert blocks == (
        ImageBlock("image/png", data=b"\x89PNG"),
        ImageBlock("image/gif", data=b"GIF89a"),
    )


def test_text_thinking_and_refusal_join_runs_of_their_kind() -> None:
    signature = ProviderPayload("anthropic-v1", "sig")
    blocks = fold(
        ThinkingChunk("Let me "),
        ThinkingChunk("think.", signature=signature),
        TextChunk("Hel"),
        TextChunk("lo"),
        ToolUseChunk(0, "", id="c", name="f"),
        TextChunk("More"),
        RefusalChunk(""),
    )
    assert blocks == (
        ThinkingBlock("Let me think.", signature=signature),
        TextBlock("Hello"),
        ToolUseBlock("c", "f", {}),
        TextBlock("More"),
        RefusalBlock(""),
    )


def test_two_calls_on_one_index_are_refused() -> None:
    with pytest.raises(AccumulatorError, match="tool call 0 changed its id mid-stream"):
        fold(ToolUseChunk(0, "{", id="a", name="f"), ToolUseChunk(0, "}", id="b"))


@pytest.mark.parametrize(
    ("chunks", "message"),
    [
        (
            (ToolUseChunk(0, "{not json", id="a", name="f"),),
            "tool call 0 has arguments that are not JSON",
        ),
        (
            (ToolUseChunk(0, "[1]", id="a", name="f"),),
            "tool call 0 has arguments that are not a JSON object",
        ),
        ((ToolUseChunk(0, "{}"),), "tool call 0 never received its id and name"),
        ((ToolUseChunk(0, "{}", id="a"),), "tool call 0 never received its name$"),
        ((ImageChunk(0, b"x"),), "image 0 never received its media type"),
        (
            (ImageChunk(0, b"x", "image/png"), ImageChunk(0, b"y", "image/gif")),
            "image 0 changed its media type",
        ),
    ],
)
def test_unfinishable_streams(chunks: tuple, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(AccumulatorError, match=message):
        fold(*chunks)


def test_kept_bad_arguments_become_empty_arguments_and_are_named() -> None:
    accumulator = Accumulator(keep_bad_arguments=True)
    for chunk in (
        ToolUseChunk(0, "{not json", id="a", name="f"),
        ToolUseChunk(1, "[1]", id="b", name="g"),
        ToolUseChunk(2, '{"x": 1}', id="c", name="h"),
    ):
        accumulator.feed(chunk)
    assert accumulator.blocks() == (
        ToolUseBlock("a", "f", {}),
        ToolUseBlock("b", "g", {}),
        ToolUseBlock("c", "h", {"x": 1}),
    )
    assert accumulator.bad_arguments == {
        "a": "the arguments are not JSON",
        "b": "the arguments are not a JSON object",
    }


def test_thinking_labels_decide_replay() -> None:
    block = ThinkingBlock("x", signature=ProviderPayload("anthropic-v1", "s"))
    assert block.replayable_to("anthropic-v1")
    assert not block.replayable_to("openai-responses-v1")
    mixed = ThinkingBlock("x", signature=ProviderPayload("a", "s"), state=ProviderPayload("b", "t"))
    assert not mixed.replayable_to("a")
    assert not ThinkingBlock("x").replayable_to("a")
