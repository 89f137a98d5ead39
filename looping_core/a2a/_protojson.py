"""ProtoJSON for A2A wire models, through a private cattrs converter.

ProtoJSON as A2A 1.0 uses it: lowerCamelCase names out, camelCase or snake_case accepted in,
default values omitted, enums as their `SCREAMING_SNAKE` names, timestamps as RFC 3339 UTC with a
`Z`. Unknown fields are ignored on input (A2A §5.7); wrong types and missing required fields are
errors that name the field by its wire path (`message.messageId`).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import enum
from collections.abc import Callable
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from looping_core._strict import (
    describe,
    error_leaves,
    register_strict_primitives,
    structure_int,
)
from looping_core.a2a._models import Int64

__all__ = ["WireError", "camel", "from_wire", "to_wire"]

_T = TypeVar("_T")


class WireError(ValueError):
    """A payload does not fit its wire type; `problems` are `(field path, message)` pairs."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{path}: {message}" for path, message in problems))


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _structure_enum(value: object, type_: type[enum.Enum]) -> enum.Enum:
    if isinstance(value, str):
        try:
            return type_[value]
        except KeyError:
            pass
    elif isinstance(value, int) and not isinstance(value, bool):
        for member in type_:
            if member.value == value:
                return member
    names = ", ".join(member.name for member in type_)
    raise ValueError(f"expected one of {names}")


def _enum_name(member: enum.Enum) -> str:
    return member.name


_INT32 = range(-(2**31), 2**31)


def _structure_int32(value: object, type_: type) -> int:
    """Every integer field of A2A 1.0 is an int32."""
    number = structure_int(value, type_)
    if number not in _INT32:
        raise ValueError("expected an integer between -2^31 and 2^31 - 1 (int32)")
    return number


_INT64 = range(-(2**63), 2**63)


def _structure_int64(value: object, _: type) -> int:
    """A proto `int64`: ProtoJSON writes it as a decimal string; a JSON number is read too."""
    if isinstance(value, str) and value.lstrip("-").isdigit() and len(value) <= 20:
        value = int(value)
    number = structure_int(value, int)
    if number not in _INT64:
        raise ValueError("expected an integer between -2^63 and 2^63 - 1 (int64)")
    return number


def _structure_bytes(value: object, _: type) -> bytes:
    """ProtoJSON bytes: base64, standard or URL-safe alphabet, padding optional."""
    if not isinstance(value, str):
        raise ValueError("expected base64 text")
    text = value.replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("expected base64 text") from None


def _structure_timestamp(value: object, _: type) -> datetime.datetime:
    if not isinstance(value, str):
        raise ValueError("expected an RFC 3339 timestamp string")
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError("expected an RFC 3339 timestamp such as 2026-01-31T12:00:00Z") from None
    if parsed.tzinfo is None:
        raise ValueError("the timestamp needs a time zone (use Z for UTC)")
    return parsed.astimezone(datetime.UTC)


def _unstructure_timestamp(value: datetime.datetime) -> str:
    utc = value.astimezone(datetime.UTC)
    return utc.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _make_converter() -> cattrs.Converter:
    converter = cattrs.Converter()
    register_strict_primitives(converter)
    converter.register_structure_hook(int, _structure_int32)
    converter.register_structure_hook(Int64, _structure_int64)
    converter.register_unstructure_hook(Int64, str)
    # Enums by name, registered both ways: cattrs 24.1 finds enums by class (its own
    # hook for `Enum` shadows a predicate), later releases by predicate first.
    is_enum = lambda t: isinstance(t, type) and issubclass(t, enum.Enum)  # noqa: E731
    converter.register_structure_hook(enum.Enum, _structure_enum)
    converter.register_structure_hook_func(is_enum, _structure_enum)
    converter.register_unstructure_hook(enum.Enum, _enum_name)
    converter.register_unstructure_hook_func(is_enum, _enum_name)
    converter.register_structure_hook(bytes, _structure_bytes)
    converter.register_unstructure_hook(bytes, lambda data: base64.b64encode(data).decode("ascii"))
    converter.register_structure_hook(datetime.datetime, _structure_timestamp)
    converter.register_unstructure_hook(datetime.datetime, _unstructure_timestamp)

    def structure_factory(cls: type[Any]) -> Callable[[Any, type], Any]:
        renames = {f.name: override(rename=camel(f.name)) for f in attrs.fields(cls)}
        structure = make_dict_structure_fn(cls, converter, **renames)  # type: ignore[arg-type]
        aliases = {f.name: camel(f.name) for f in attrs.fields(cls)}

        def hook(data: Any, _: type) -> Any:
            if not isinstance(data, dict):
                raise ValueError("expected an object")
            renamed = {aliases.get(str(key), str(key)): value for key, value in data.items()}
            return structure(renamed, cls)

        return hook

    def unstructure_factory(cls: type[Any]) -> Callable[[Any], Any]:
        renames: dict[str, Any] = {
            f.name: override(rename=camel(f.name)) for f in attrs.fields(cls)
        }
        return make_dict_unstructure_fn(cls, converter, _cattrs_omit_if_default=True, **renames)

    converter.register_structure_hook_factory(attrs.has, structure_factory)
    converter.register_unstructure_hook_factory(attrs.has, unstructure_factory)
    return converter


_converter = _make_converter()


def to_wire(value: Any) -> Any:
    """The ProtoJSON form of a wire model (plain dicts, lists and scalars)."""
    return _converter.unstructure(value)


def from_wire(data: Any, type_: type[_T]) -> _T:
    """Parse ProtoJSON into `type_`; raise `WireError` naming every offending field."""
    try:
        return _converter.structure(data, type_)
    except Exception as exc:  # cattrs raises groups of arbitrary leaf errors
        raise WireError(_problems(exc)) from None


def _problems(exc: BaseException) -> list[tuple[str, str]]:
    """(wire path, problem) pairs: `message.messageId`, `message.parts[0].text`."""
    problems = []
    for leaf, where in error_leaves(exc, ""):
        path = ".".join(camel(part) for part in where.lstrip(".").split("."))
        problems.append((path, describe(leaf)))
    return problems
