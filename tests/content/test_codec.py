"""The content codec: one test per decode error class, caps, canonical encoding, no echoes."""

from __future__ import annotations

import json

import pytest

from looping_core.content import (
    AssistantMessage,
    BlockTooLarge,
    ContentDecodeError,
    ImageBlock,
    InvalidText,
    InvalidValue,
    Limits,
    MissingField,
    RefusalBlock,
    TextBlock,
    ToolUseBlock,
    TooManyBlocks,
    UnknownField,
    UnknownTag,
    UserMessage,
    WrongType,
    clone,
    decode,
    decode_block,
    decode_conversation,
    decode_message,
    encode,
)

SECRET = "sk-live-DO-NOT-ECHO"
LATIN1 = '{"role": "user", "content": [{"type": "text", "text": "café"}]}'.encode("latin-1")


def user(*blocks: object) -> bytes:
    return json.dumps({"role": "user", "content": list(blocks)}).encode()


@pytest.mark.parametrize(
    ("document", "error", "path", "problem"),
    [
        (user({"type": SECRET, "text": "a"}), UnknownTag, "$.content[0].type",
         "unknown block type; expected one of audio, data, document, image, refusal, text, "
         "thinking, tool_result, tool_use"),
        (json.dumps({"role": SECRET, "content": []}).encode(), UnknownTag, "$.role",
         "unknown message role; expected one of assistant, system, tool, user"),
        (user({"type": "text", "text": "a", "extra": SECRET}), UnknownField, "$.content[0].extra",
         "unknown field(s): extra"),
        (user({"type": "text"}), MissingField, "$.content[0].text", "required field missing"),
        (user({"type": "image", "url": "u"}), MissingField, "$.content[0].media_type",
         "required field missing"),
        (user({"type": "text", "text": 12345}), WrongType, "$.content[0].text",
         "expected a string, got integer"),
        (json.dumps({"role": "user", "content": SECRET}).encode(), WrongType, "$.content",
         "expected an array, got string"),
        (user({"type": "text", "text": "\\ud800"}).replace(b"\\\\ud800", b"\\ud800"), InvalidText,
         "$.content[0].text", "text holds a lone surrogate"),
        (LATIN1, InvalidText, "$", "the document is not UTF-8"),
        (user({"type": "image", "media_type": "image/png", "url": "u", "data": "AA=="}),
         InvalidValue, "$.content[0]", "exactly one of url or data must be given"),
        (user({"type": "tool_use", "id": "a", "name": "b", "input": {}}), InvalidValue,
         "$.content[0]", "a tool_use block is not allowed here"),
        (user(), InvalidValue, "$", "a user message needs at least one block"),
        (b'{"role": "user", "role": "user", "content": []}', InvalidValue, "$",
         "an object has a duplicate key"),
        (b'{"role": "assistant", "content": [], "usage": {"input_tokens": NaN}}', WrongType, "$",
         "NaN and Infinity are not JSON numbers"),
        (b"[1, 2", WrongType, "$", "not a JSON document"),
    ],
)  # fmt: skip
def test_each_decode_error_class(
    document: bytes, error: type[ContentDecodeError], path: str, problem: str
) -> None:
    with pytest.raises(error) as caught:
        decode_message(document)
    assert (caught.value.path, caught.value.problem) == (path, problem)
    assert SECRET not in str(caught.value)
    assert "12345" not in str(caught.value)


def test_all_problems_of_a_document_are_kept() -> None:
    document = user(
        {"type": "text"}, {"type": "text", "text": 1}, {"type": "text", "text": "ok", "x": 1}
    )
    with pytest.raises(ContentDecodeError) as caught:
        decode_message(document)
    found = [(type(e).__name__, e.path) for e in (caught.value, *caught.value.others)]
    assert found == [
        ("MissingField", "$.content[0].text"),
        ("WrongType", "$.content[1].text"),
        ("UnknownField", "$.content[2].x"),
    ]


def test_a_block_over_the_size_cap() -> None:
    big = user({"type": "text", "text": "x" * 2000})
    with pytest.raises(BlockTooLarge) as caught:
        decode_message(big, Limits(max_block_bytes=1000))
    assert caught.value.path == "$.content[0]"
    decode_message(big, Limits(max_block_bytes=3000))


def test_a_message_over_the_block_count_cap() -> None:
    many = user(*[{"type": "text", "text": "x"}] * 11)
    with pytest.raises(TooManyBlocks) as caught:
        decode_message(many, Limits(max_blocks=10))
    assert caught.value.path == "$.content"


def test_caps_apply_inside_a_conversation() -> None:
    conversation = (
        b"["
        + user({"type": "text", "text": "x"})
        + b","
        + user(*[{"type": "text", "text": "x"}] * 3)
        + b"]"
    )
    with pytest.raises(TooManyBlocks) as caught:
        decode_conversation(conversation, Limits(max_blocks=2))
    assert caught.value.path == "$[1].content"


def test_tool_input_must_be_plain_json() -> None:
    with pytest.raises(InvalidValue) as caught:
        decode_block(b'{"type":"tool_use","id":"a","name":"b","input":{"n":1' + b"0" * 400 + b"}}")
    assert caught.value.problem == "a JSON number is out of the range of doubles"
    large = decode_block(b'{"type":"tool_use","id":"a","name":"b","input":{"n":9007199254740992}}')
    assert large.input == {"n": 2.0**53}  # type: ignore[union-attr]
    with pytest.raises(InvalidValue):
        decode_block(b'{"type":"tool_use","id":"a","name":"b","input":{"n":1e400}}')
    with pytest.raises(WrongType):
        decode_block(b'{"type":"tool_use","id":"a","name":"b","input":[1]}')


def test_a_concrete_record_checks_its_own_tag() -> None:
    with pytest.raises(InvalidValue) as caught:
        decode(b'{"type":"refusal"}', TextBlock)
    assert caught.value.path == "$.type"


def test_encoding_is_canonical() -> None:
    one = ToolUseBlock("c", "f", {"b": 1, "a": [True, None, 1.5, "é"]})
    two = ToolUseBlock("c", "f", {"a": [True, None, 1.5, "é"], "b": 1})
    assert (
        encode(one)
        == encode(two)
        == (
            '{"id":"c","input":{"a":[true,null,1.5,"é"],"b":1},"name":"f","type":"tool_use"}'.encode()
        )
    )


def test_refusal_stays_distinguishable_from_text_when_empty() -> None:
    refusal = decode_message(encode(AssistantMessage([RefusalBlock("")])))
    text = decode_message(encode(AssistantMessage([TextBlock("")])))
    assert refusal != text
    assert isinstance(refusal.content[0], RefusalBlock)


def test_bytes_round_trip_through_base64() -> None:
    message = UserMessage([ImageBlock("image/png", data=bytes(range(256)))])
    assert decode_message(encode(message)) == message


def test_clone_shares_nothing_with_the_original() -> None:
    block = ToolUseBlock("c", "f", {"nested": {"list": [1]}})
    copy = clone(block)
    assert copy == block
    copy.input["nested"]["list"].append(2)  # type: ignore[index]
    assert block.input == {"nested": {"list": [1]}}
