"""What the config, wire and content converters share: strict primitive structure hooks, and one
way to read what cattrs found wrong.

cattrs would quietly turn `42` into `"42"` or `1` into `True`; in a config file or a request body
that is a mistake to report, not to repair. When structuring fails, cattrs raises a tree of
errors; `error_leaves` walks it to each leaf error and the path it happened at, and `describe`
words a leaf the same way for every reader.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator

import attrs
import cattrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError


def json_type(value: object) -> str:
    """The JSON name of a value's type, for error messages (never the value itself)."""
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    for kind, name in names.items():
        if isinstance(value, kind):
            return name
    if isinstance(value, int):
        return "integer"
    return "number" if isinstance(value, float) else type(value).__name__


def structure_str(value: object, _: type) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {json_type(value)}")
    return value


def structure_int(value: object, _: type) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {json_type(value)}")
    return value


def structure_bool(value: object, _: type) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {json_type(value)}")
    return value


def structure_float(value: object, _: type) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number, got {json_type(value)}")
    return float(value)


def register_strict_primitives(converter: cattrs.Converter) -> None:
    """Make `converter` refuse wrong primitive types instead of coercing them."""
    converter.register_structure_hook(float, structure_float)
    converter.register_structure_hook(str, structure_str)
    converter.register_structure_hook(int, structure_int)
    converter.register_structure_hook(bool, structure_bool)


def error_leaves(exc: BaseException, path: str) -> Iterator[tuple[BaseException, str]]:
    """Each leaf error of a failed `structure` call, with its path below `path`: `.field` for
    attributes, `[0]` for list items, `['key']` for mapping keys."""
    if isinstance(exc, IterableValidationError):
        indexed, unplaced = exc.group_exceptions()
        for inner, index_note in indexed:
            yield from error_leaves(inner, f"{path}[{index_note.index!r}]")
        for inner in unplaced:
            yield from error_leaves(inner, path)
    elif isinstance(exc, ClassValidationError):
        named, unnamed = exc.group_exceptions()
        for inner, name_note in named:
            yield from error_leaves(inner, f"{path}.{name_note.name}")
        for inner in unnamed:
            yield from error_leaves(inner, path)
    else:
        yield exc, path


def describe(exc: BaseException) -> str:
    """A leaf error in words (never the offending value, unless the error's own message has it)."""
    if isinstance(exc, ForbiddenExtraKeysError):
        known = [field.name for field in attrs.fields(exc.cl)] if attrs.has(exc.cl) else []
        return (
            f"extra fields found ({', '.join(_guess(e, known) for e in sorted(exc.extra_fields))})"
        )
    if isinstance(exc, KeyError):
        return "required field missing"
    if isinstance(exc, ValueError | TypeError) and str(exc):
        return str(exc)
    return "invalid value"


def _guess(unknown: str, known: list[str]) -> str:
    """`unknown`, with the closest known name when one is close (`hots: did you mean host?`)."""
    close = difflib.get_close_matches(unknown, known, n=1, cutoff=0.6)
    return f"{unknown}: did you mean {close[0]}?" if close else unknown
