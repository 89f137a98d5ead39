"""Property-based: encode/decode is the identity, encodings match the schemas, and no input makes
the decoder fail with anything but its own typed errors."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st
from referencing import Registry, Resource

from looping_core.content import (
    AssistantMessage,
    AudioBlock,
    ContentDecodeError,
    DataBlock,
    DocumentBlock,
    ImageBlock,
    ProviderPayload,
    RefusalBlock,
    SystemMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolResultMessage,
    ToolUseBlock,
    Usage,
    UserMessage,
)
from looping_core.content._codec import (
    RECORDS,
    decode,
    decode_conversation,
    decode_message,
    encode,
    to_json,
)
from looping_core.content._usage import MAX_TOKENS

SCHEMAS = Path(__file__).parents[2] / "contracts" / "content"
_resources = [
    Resource.from_contents(json.loads(p.read_text())) for p in SCHEMAS.glob("*.schema.json")
]
_registry = Registry().with_resources((r.id(), r) for r in _resources)  # type: ignore[misc]
VALIDATORS = {
    p.name.removesuffix(".schema.json"): jsonschema.Draft202012Validator(
        json.loads(p.read_text()), registry=_registry
    )
    for p in SCHEMAS.glob("*.schema.json")
}

text = st.text()
names = st.text(min_size=1, max_size=20)
media = st.sampled_from(["image/png", "audio/wav", "application/pdf", "text/plain"])
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
payloads = st.builds(ProviderPayload, format=names, value=text)


def url_or_data(cls: type[Any]) -> st.SearchStrategy[Any]:
    file_names = st.just("") | names
    return st.builds(
        cls, media_type=media, url=st.text(min_size=1), data=st.none(), name=file_names
    ) | st.builds(
        cls, media_type=media, url=st.none(), data=st.binary(max_size=64), name=file_names
    )


documents = (
    st.builds(
        DocumentBlock,
        media_type=media,
        name=text,
        data=st.binary(max_size=32),
        text=st.none() | text,
    )
    | st.builds(DocumentBlock, media_type=media, name=text, data=st.none(), text=text)
    | st.builds(
        DocumentBlock, media_type=media, name=text, url=st.text(min_size=1), text=st.none() | text
    )
)
data_blocks = st.builds(
    DataBlock,
    value=json_values.filter(lambda value: value is not None),
    media_type=st.just("application/json") | media,
)
result_content = (
    st.builds(TextBlock, text=text)
    | url_or_data(ImageBlock)
    | url_or_data(AudioBlock)
    | documents
    | data_blocks
)
thinking = st.builds(
    ThinkingBlock, text=text, signature=st.none() | payloads, state=st.none() | payloads
)
tool_uses = st.builds(
    ToolUseBlock,
    id=names,
    name=names,
    input=st.dictionaries(st.text(max_size=8), json_values, max_size=4),
)
tool_results = st.builds(
    ToolResultBlock,
    tool_use_id=names,
    content=st.lists(result_content, max_size=3).map(tuple),
    is_error=st.booleans(),
)
refusals = st.builds(RefusalBlock, text=text)
counts = st.integers(0, MAX_TOKENS)
usages = st.builds(
    lambda i, o, r, cr, cc, c: Usage(i, o, cr, cc, min(r, o), c),
    counts,
    counts,
    counts,
    counts,
    counts,
    counts,
)
user_messages = st.builds(UserMessage, st.lists(result_content, min_size=1, max_size=4))
assistant_messages = st.builds(
    AssistantMessage,
    st.lists(
        st.builds(TextBlock, text=text) | url_or_data(ImageBlock) | thinking | tool_uses | refusals,
        max_size=4,
    ),
    st.none() | usages,
)
system_messages = st.builds(
    SystemMessage, st.lists(st.builds(TextBlock, text=text), min_size=1, max_size=2)
)
tool_messages = st.builds(ToolResultMessage, st.lists(tool_results, min_size=1, max_size=2))
messages = user_messages | assistant_messages | system_messages | tool_messages
blocks = result_content | thinking | tool_uses | tool_results | refusals


def record_name(value: Any) -> str:
    return getattr(value, "TAG", None) or getattr(value, "ROLE", None) or "usage"


@settings(max_examples=300)
@given(blocks)
def test_blocks_round_trip_and_match_their_schema(block: Any) -> None:
    data = encode(block)
    assert decode(data, RECORDS[block.TAG]) == block
    assert encode(decode(data, RECORDS[block.TAG])) == data
    VALIDATORS[block.TAG].validate(to_json(block))


@settings(max_examples=300)
@given(messages)
def test_messages_round_trip_and_match_their_schema(message: Any) -> None:
    data = encode(message)
    assert decode_message(data) == message
    VALIDATORS[message.ROLE].validate(to_json(message))


@given(usages)
def test_usage_round_trips(usage: Usage) -> None:
    assert decode(encode(usage), Usage) == usage
    VALIDATORS["usage"].validate(to_json(usage))


@given(st.lists(messages, max_size=4))
def test_conversations_round_trip(conversation: list[Any]) -> None:
    data = encode(conversation)
    assert decode_conversation(data) == conversation
    VALIDATORS["conversation"].validate(json.loads(data))


@settings(max_examples=500)
@given(st.binary(max_size=256))
def test_arbitrary_bytes_only_raise_typed_errors(data: bytes) -> None:
    with contextlib.suppress(ContentDecodeError):
        decode_message(data)


@settings(max_examples=500)
@given(json_values)
def test_arbitrary_json_only_raises_typed_errors(value: Any) -> None:
    for record in ("user", "assistant", "tool_result", "usage", "conversation"):
        with contextlib.suppress(ContentDecodeError):
            decode(json.dumps(value), RECORDS[record])


@settings(max_examples=300)
@given(messages, st.data())
def test_mutated_messages_only_raise_typed_errors(message: Any, data: st.DataObject) -> None:
    document = to_json(message)
    target = document["content"][0] if document.get("content") else document
    key = data.draw(st.sampled_from(sorted(target)))
    target[key] = data.draw(json_values)
    with contextlib.suppress(ContentDecodeError):
        decode_message(json.dumps(document))
