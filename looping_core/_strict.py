"""Strict primitive structure hooks shared by the config and wire converters.

cattrs would quietly turn `42` into `"42"` or `1` into `True`; in a config file or a request body
that is a mistake to report, not to repair.
"""

from __future__ import annotations

import cattrs


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
