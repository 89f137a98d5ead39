"""JSON Schema for a subtask type's params, derived from its attrs `params_type`, so the model is
told exactly what `structure_plugin_config` will accept (unknown keys refused)."""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

__all__ = ["params_schema"]

_SCALARS: Mapping[Any, Mapping[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
}


def params_schema(params_type: type[Any]) -> dict[str, Any]:
    """The object schema of an attrs class: its fields, the ones without defaults required."""
    if not attrs.has(params_type):
        raise TypeError(f"{params_type.__name__} is not an attrs class")
    hints = typing.get_type_hints(params_type)
    properties = {}
    required = []
    for field in attrs.fields(params_type):
        properties[field.name] = _schema_of(hints.get(field.name, Any))
        if field.default is attrs.NOTHING:
            required.append(field.name)
    document: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        document["required"] = required
    return document


def _schema_of(hint: Any) -> dict[str, Any]:
    if hint in _SCALARS:
        return dict(_SCALARS[hint])
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_schema_of(argument) for argument in arguments]}
    if origin is typing.Literal:
        return {"enum": list(arguments)}
    if origin in (list, tuple, Sequence, set, frozenset) or hint in (list, tuple):
        items = [a for a in arguments if a is not Ellipsis]
        schema: dict[str, Any] = {"type": "array"}
        if items:
            schema["items"] = _schema_of(items[0])
        return schema
    if origin in (dict, Mapping) or hint is dict:
        schema = {"type": "object"}
        if len(arguments) == 2:
            schema["additionalProperties"] = _schema_of(arguments[1])
        return schema
    if isinstance(hint, type) and attrs.has(hint):
        return params_schema(hint)
    return {}  # anything: structuring decides
