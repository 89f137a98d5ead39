"""The JSON codec for content: strict decoding, canonical encoding.

Every block carries its wire tag in `type`, every message its `role`. Decoding refuses, with a
typed error naming the field (never echoing its value): an unknown tag, an unknown field, a
missing field, a wrong type, text that is not UTF-8 or holds a lone surrogate, duplicate keys,
NaN or Infinity, a block over `Limits.max_block_bytes`, a message over `Limits.max_blocks`.
Encoding is RFC 8785 canonical JSON: the same value always gives the same bytes.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import attrs
import cattrs
import rfc8785
from cattrs.errors import ForbiddenExtraKeysError
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn

from looping_core._strict import error_leaves, json_type, register_strict_primitives
from looping_core.content._blocks import BLOCK_TYPES, Block, ResultContent
from looping_core.content._errors import (
    BlockTooLarge,
    ContentDecodeError,
    InvalidText,
    InvalidValue,
    MissingField,
    TooManyBlocks,
    UnknownField,
    UnknownTag,
    WrongType,
)
from looping_core.content._messages import MESSAGE_TYPES, AssistantContent, Message, UserContent
from looping_core.content._usage import Usage

__all__ = [
    "DEFAULT_LIMITS",
    "RECORDS",
    "Limits",
    "decode",
    "decode_block",
    "decode_conversation",
    "decode_message",
    "decode_usage",
    "encode",
    "from_json",
    "to_json",
]

_T = TypeVar("_T")
_MAX_JSON_INT = 2**53 - 1


@attrs.frozen
class Limits:
    """Caps applied while decoding untrusted documents."""

    max_block_bytes: int = 8 * 1024 * 1024
    """Per top-level block, counted over its strings and keys (UTF-8) and inline bytes."""
    max_blocks: int = 1024
    """Blocks per message."""


DEFAULT_LIMITS = Limits()


# -- the converter ----------------------------------------------------------------------------


def _structure_str(value: object, _: type) -> str:
    if not isinstance(value, str):
        raise WrongType("", f"expected a string, got {json_type(value)}")
    _check_text(value)
    return value


def _check_text(value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidText("", "text holds a lone surrogate") from None


def _structure_bytes(value: object, _: type) -> bytes:
    if not isinstance(value, str):
        raise WrongType("", f"expected base64 text, got {json_type(value)}")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidValue("", "not valid base64") from None


def _structure_json_object(value: object, _: type) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise WrongType("", f"expected a JSON object, got {json_type(value)}")
    checked: dict[str, Any] = _json_value(value)
    return checked


def _structure_json_value(value: object, _: type) -> Any:
    """A data block's value: any JSON value but null."""
    if value is None:
        raise InvalidValue("", "a data block's value must not be null")
    return _json_value(value)


def _json_value(value: Any) -> Any:
    """A deep copy of a JSON value, checked: JSON types only, safe integers, UTF-8 text."""
    if isinstance(value, str):
        _check_text(value)
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidValue("", "JSON numbers must be finite")
        return value
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if abs(value) <= _MAX_JSON_INT:
            return value
        # JSON numbers are doubles (RFC 8785, I-JSON): a larger integer is read as its double.
        if abs(value) < 2**1024:
            return float(value)
        raise InvalidValue("", "a JSON number is out of the range of doubles")
    if isinstance(value, list):
        return [_json_value(item) for item in value]
    if isinstance(value, dict):
        for key in value:
            _check_text(key)
        return {key: _json_value(item) for key, item in value.items()}
    raise WrongType("", f"expected a JSON value, got {json_type(value)}")


def _is_tuple(type_: Any) -> bool:
    return type_ is tuple or getattr(type_, "__origin__", None) is tuple


def _tag_of(cls: type[Any]) -> tuple[str, str] | None:
    """The wire tag of a record class: `("type", TAG)` for blocks, `("role", ROLE)` for messages."""
    if hasattr(cls, "TAG"):
        return "type", cls.TAG
    if hasattr(cls, "ROLE"):
        return "role", cls.ROLE
    return None


def _make_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True)
    register_strict_primitives(converter)
    converter.register_structure_hook(str, _structure_str)
    converter.register_structure_hook(bytes, _structure_bytes)
    converter.register_unstructure_hook(bytes, lambda data: base64.b64encode(data).decode("ascii"))
    is_json_object: Callable[[Any], bool] = lambda t: t == Mapping[str, Any]  # noqa: E731
    converter.register_structure_hook_func(is_json_object, _structure_json_object)
    converter.register_unstructure_hook_func(is_json_object, _json_value)
    converter.register_structure_hook_func(lambda t: t is Any, _structure_json_value)
    converter.register_unstructure_hook_func(lambda t: t is Any, _json_value)
    for union in (Block, ResultContent, UserContent, AssistantContent):
        _register_union(converter, union, "type", BLOCK_TYPES, "block type")
    _register_union(converter, Message, "role", MESSAGE_TYPES, "message role")
    converter.register_unstructure_hook_factory(
        attrs.has, lambda cls: _record_unstructurer(converter, cls)
    )
    converter.register_structure_hook_factory(
        attrs.has, lambda cls: _record_structurer(converter, cls)
    )
    return converter


def _register_union(
    converter: cattrs.Converter,
    union: Any,
    tag_name: str,
    types: Mapping[str, type[Any]],
    what: str,
) -> None:
    """Dispatch a union of records on its wire tag, refusing tags the union does not allow."""
    allowed = tuple(getattr(union, "__args__", (union,)))

    def structure(value: Any, _: type) -> Any:
        if not isinstance(value, dict):
            raise WrongType("", f"expected an object, got {json_type(value)}")
        tag = value.get(tag_name)
        if not isinstance(tag, str):
            raise MissingField(f".{tag_name}", f"a {what} needs a string `{tag_name}`")
        cls = types.get(tag)
        if cls is None:
            known = ", ".join(sorted(types))
            raise UnknownTag(f".{tag_name}", f"unknown {what}; expected one of {known}")
        if cls not in allowed:
            raise InvalidValue("", f"a {tag} {what.split(maxsplit=1)[0]} is not allowed here")
        return converter.structure(value, cls)

    converter.register_structure_hook_func(lambda t: t == union, structure)


def _record_unstructurer(converter: cattrs.Converter, cls: type[Any]) -> Callable[[Any], Any]:
    """Fields without their defaults, and the wire tag first."""
    fields = make_dict_unstructure_fn(cls, converter, _cattrs_omit_if_default=True)
    tag = _tag_of(cls)
    if tag is None:
        return fields
    name, wire_tag = tag
    return lambda value: {name: wire_tag, **fields(value)}


def _record_structurer(converter: cattrs.Converter, cls: type[Any]) -> Callable[[Any, type], Any]:
    """Strict: an object, the right wire tag, arrays where tuples are, no unknown fields."""
    structure = make_dict_structure_fn(cls, converter, _cattrs_forbid_extra_keys=True)
    tag = _tag_of(cls)
    arrays = [f.name for f in attrs.fields(cls) if _is_tuple(f.type)]

    def hook(value: Any, _: type) -> Any:
        if not isinstance(value, dict):
            raise WrongType("", f"expected an object, got {json_type(value)}")
        if tag is not None:
            name, expected = tag
            if name not in value:
                raise MissingField(f".{name}", "required field missing")
            if value[name] != expected:
                raise InvalidValue(f".{name}", f"expected {name} {expected!r} here")
            value = {key: item for key, item in value.items() if key != name}
        for field in arrays:
            if field in value and not isinstance(value[field], list):
                raise WrongType(f".{field}", f"expected an array, got {json_type(value[field])}")
        return structure(value, cls)

    return hook


_converter = _make_converter()


RECORDS: Mapping[str, Any] = {
    **BLOCK_TYPES,
    **MESSAGE_TYPES,
    "usage": Usage,
    "conversation": list[Message],
}
"""Every record the codec handles, by the name of its schema in contracts/content/."""


# -- decoding ---------------------------------------------------------------------------------


def _parse(data: bytes | str) -> Any:
    if isinstance(data, bytes | bytearray):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidText("$", "the document is not UTF-8") from None
    else:
        text = data

    def no_constants(name: str) -> Any:
        raise WrongType("$", "NaN and Infinity are not JSON numbers")

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in items:
            if key in result:
                raise InvalidValue("$", "an object has a duplicate key")
            result[key] = value
        return result

    try:
        return json.loads(text, parse_constant=no_constants, object_pairs_hook=pairs)
    except ContentDecodeError:
        raise
    except ValueError:
        raise WrongType("$", "not a JSON document") from None


def from_json(document: Any, type_: Any, limits: Limits = DEFAULT_LIMITS) -> Any:
    """Decode an already parsed JSON value into `type_` (a record class or `Block`/`Message`)."""
    _check_limits(document, type_, limits)
    try:
        return _converter.structure(document, type_)
    except Exception as exc:  # cattrs groups arbitrary leaf errors; each becomes a typed error
        errors = [_typed(leaf, path) for leaf, path in error_leaves(exc, "$")]
        first = errors[0]
        first.others = tuple(errors[1:])
        raise first from None


def decode(data: bytes | str, type_: type[_T], limits: Limits = DEFAULT_LIMITS) -> _T:
    """Decode a JSON document into `type_`; raise a `ContentDecodeError` subclass."""
    result: _T = from_json(_parse(data), type_, limits)
    return result


def decode_block(data: bytes | str, limits: Limits = DEFAULT_LIMITS) -> Block:
    result: Block = from_json(_parse(data), Block, limits)
    return result


def decode_message(data: bytes | str, limits: Limits = DEFAULT_LIMITS) -> Message:
    result: Message = from_json(_parse(data), Message, limits)
    return result


def decode_conversation(data: bytes | str, limits: Limits = DEFAULT_LIMITS) -> list[Message]:
    result: list[Message] = from_json(_parse(data), list[Message], limits)
    return result


def decode_usage(data: bytes | str) -> Usage:
    return decode(data, Usage)


def _check_limits(document: Any, type_: Any, limits: Limits) -> None:
    if type_ == list[Message] and isinstance(document, list):
        for index, message in enumerate(document):
            _check_message(message, f"$[{index}]", limits)
    elif type_ in (Message, *MESSAGE_TYPES.values()):
        _check_message(document, "$", limits)
    elif type_ is Block or type_ in BLOCK_TYPES.values():
        _check_block(document, "$", limits)


def _check_message(message: Any, path: str, limits: Limits) -> None:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return
    if len(content) > limits.max_blocks:
        raise TooManyBlocks(f"{path}.content", f"more than {limits.max_blocks} blocks")
    for index, block in enumerate(content):
        _check_block(block, f"{path}.content[{index}]", limits)


def _check_block(block: Any, path: str, limits: Limits) -> None:
    if _size(block) > limits.max_block_bytes:
        raise BlockTooLarge(path, f"the block is over {limits.max_block_bytes} bytes")


def _size(value: Any) -> int:
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, dict):
        return sum(_size(key) + _size(item) for key, item in value.items())
    if isinstance(value, list):
        return sum(_size(item) for item in value)
    return 8


def _typed(exc: BaseException, path: str) -> ContentDecodeError:
    if isinstance(exc, ContentDecodeError):
        return type(exc)(path + (exc.path if exc.path.startswith(".") else ""), exc.problem)
    if isinstance(exc, ForbiddenExtraKeysError):
        names = sorted(exc.extra_fields)
        return UnknownField(f"{path}.{names[0]}", f"unknown field(s): {', '.join(names)}")
    if isinstance(exc, KeyError):
        return MissingField(path, "required field missing")
    if isinstance(exc, ValueError) and str(exc).startswith("expected "):
        return WrongType(path, str(exc))
    if isinstance(exc, ValueError | TypeError) and str(exc):
        return InvalidValue(path, str(exc))
    return WrongType(path, "invalid value")


# -- encoding ---------------------------------------------------------------------------------


def to_json(value: Any) -> Any:
    """The JSON value of a record (or a list of messages), as `encode` writes it."""
    if isinstance(value, list | tuple):
        return [_converter.unstructure(item) for item in value]
    return _converter.unstructure(value)


def encode(value: Block | Message | Usage | Sequence[Message]) -> bytes:
    """Canonical JSON bytes (RFC 8785): equal values always give equal bytes."""
    return rfc8785.dumps(to_json(value))
