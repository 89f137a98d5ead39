"""JSON Schemas from Python type hints: what a typed tool's parameters look like to a model.

The table (in the package's docs) is deliberately small and exact, so that every schema says
only what the structuring that follows can honour. Anything else (a `datetime`, a class of no
kind in the table, a recursive class) is `Unsupported`, with the fix, so a tool whose schema
would lie is refused before anything serves it.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import attrs
import docstring_parser

__all__ = [
    "Unsupported",
    "annotated_words",
    "describe",
    "description_of",
    "is_object_class",
    "parameter_descriptions",
    "with_default",
    "with_description",
]

_SCALARS: Mapping[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
}
_ARRAYS = {
    list,
    tuple,
    set,
    frozenset,
    collections.abc.Sequence,
    collections.abc.MutableSequence,
    collections.abc.Set,
    collections.abc.MutableSet,
}
_SETS = {set, frozenset, collections.abc.Set, collections.abc.MutableSet}
_MAPPINGS = {dict, collections.abc.Mapping, collections.abc.MutableMapping}
_FIX = (
    "use str, int, float, bool, a Literal, an Enum, a list, a dict with str keys, an attrs "
    "class, a dataclass or a TypedDict (or Any)"
)


class Unsupported(Exception):
    """A hint with no schema here: `problem` says what, `fix` what to write instead."""

    def __init__(self, problem: str, fix: str = _FIX) -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem}; {fix}")


def is_object_class(hint: Any) -> bool:
    """Whether `hint` is a class whose instances are JSON objects here (attrs, dataclass or
    `TypedDict`)."""
    return isinstance(hint, type) and (
        attrs.has(hint) or dataclasses.is_dataclass(hint) or typing.is_typeddict(hint)
    )


def annotated_words(hint: Any) -> str | None:
    """The description `Annotated[T, "words"]` gives, if `hint` is one."""
    if get_origin(hint) is not Annotated:
        return None
    return next((item for item in get_args(hint)[1:] if isinstance(item, str)), None)


def with_description(schema: dict[str, Any], hint: Any, documented: str | None) -> dict[str, Any]:
    """A parameter's or field's schema with its own description: `Annotated` words first, then
    its docstring's words (before a class's own, which describe the class, not this use)."""
    if annotated_words(hint) is None and documented:
        return {**schema, "description": documented}
    return schema


def describe(hint: Any, seen: tuple[type, ...] = ()) -> dict[str, Any]:
    """The JSON Schema of values of `hint`; `Unsupported` when it has none here. `seen`: the
    classes being described around this one (a class inside itself is refused)."""
    origin, args = get_origin(hint), get_args(hint)
    if origin is Annotated:
        schema = describe(args[0], seen)
        words = next((item for item in args[1:] if isinstance(item, str)), None)
        return {**schema, "description": words} if words else schema
    if hint is Any or hint is object:
        return {}
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    if origin is Literal:
        return _enum(list(args), f"Literal{list(args)!r}")
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum([member.value for member in hint], f"the enum {hint.__name__}")
    if origin is Union or origin is types.UnionType:
        return {"anyOf": [describe(option, seen) for option in args]}
    if hint in _ARRAYS or origin in _ARRAYS:
        return _array(origin or hint, args, seen)
    if hint in _MAPPINGS or origin in _MAPPINGS:
        return _mapping(args, seen)
    if is_object_class(hint):
        return _object(hint, seen)
    raise Unsupported(f"{_name(hint)} has no JSON Schema here")


def _enum(values: list[Any], what: str) -> dict[str, Any]:
    if not values:
        raise Unsupported(f"{what} has no values", "give it at least one")
    kinds = {_json_type(value) for value in values}
    if None in kinds:
        raise Unsupported(
            f"{what} has a value that is not a JSON scalar",
            "use values that are str, int, float, bool or None",
        )
    schema: dict[str, Any] = {"enum": values}
    if len(kinds) == 1:
        schema = {"type": kinds.pop(), **schema}
    return schema


def _json_type(value: Any) -> str | None:
    if value is None:
        return "null"
    for kind in (bool, int, float, str):  # bool first: it is an int too
        if isinstance(value, kind):
            return _SCALARS[kind]
    return None


def _array(container: Any, args: tuple[Any, ...], seen: tuple[type, ...]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "array"}
    if container is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        if args == ((),):  # tuple[()]: the empty tuple
            return {**schema, "maxItems": 0}
        items = [describe(arg, seen) for arg in args]
        return {**schema, "prefixItems": items, "minItems": len(items), "maxItems": len(items)}
    if args:
        schema["items"] = describe(args[0], seen)
    if container in _SETS:
        schema["uniqueItems"] = True
    return schema


def _mapping(args: tuple[Any, ...], seen: tuple[type, ...]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object"}
    if not args:
        return schema
    key, value = args
    if key is not str and key is not Any:
        raise Unsupported(
            f"a mapping with {_name(key)} keys has no JSON form (JSON object keys are strings)",
            "use str keys",
        )
    return {**schema, "additionalProperties": describe(value, seen)}


def _object(cls: type, seen: tuple[type, ...]) -> dict[str, Any]:
    if cls in seen:
        raise Unsupported(
            f"{cls.__name__} contains itself",
            "give the nested value a class of its own, or type it as a dict",
        )
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception as exc:  # a name only defined later, or under TYPE_CHECKING
        raise Unsupported(
            f"the type hints of {cls.__name__} cannot be resolved ({exc})",
            "define the types it names where its module can see them at run time",
        ) from None
    described = parameter_descriptions(cls.__doc__ if _own_doc(cls) else None)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, has_default, default in _fields(cls):
        hint = _unwrapped_key(hints.get(name, Any))
        try:
            schema = describe(hint, (*seen, cls))
        except Unsupported as exc:
            raise Unsupported(f"{cls.__name__}.{name}: {exc.problem}", exc.fix) from None
        schema = with_description(schema, hint, described.get(name))
        if has_default:
            schema = with_default(schema, default)
        else:
            required.append(name)
        properties[name] = schema
    schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    words = description_of(cls.__doc__) if _own_doc(cls) else ""
    return {"description": words, **schema} if words else schema


def _fields(cls: type) -> list[tuple[str, bool, Any]]:
    """Each field set through `__init__` (a `TypedDict`'s keys): its name, whether it may be
    left out (a default, or a key that is not required), the default (a plain value, or
    `_NONE` for a factory or none)."""
    if typing.is_typeddict(cls):
        required: frozenset[str] = getattr(cls, "__required_keys__", frozenset())
        hints = typing.get_type_hints(cls, include_extras=True)
        for name, hint in hints.items():
            _check_required_mark(cls, name, get_origin(hint), name in required)
        return [(name, name not in required, _NONE) for name in hints]
    if attrs.has(cls):
        return [
            (f.name, f.default is not attrs.NOTHING, _plain(f.default))
            for f in attrs.fields(cls)
            if f.init
        ]
    found = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        has_default = f.default is not dataclasses.MISSING or (
            f.default_factory is not dataclasses.MISSING
        )
        found.append((f.name, has_default, _plain(f.default)))
    return found


def _check_required_mark(cls: type, name: str, mark: Any, required: bool) -> None:
    """Refuse a key whose `Required`/`NotRequired` its class did not see: the schema must say
    what structuring (which follows the class) will do."""
    said = {typing.Required: True, typing.NotRequired: False}.get(mark)
    if said is None or said == required:
        return
    raise Unsupported(
        f"{cls.__name__}.{name} is marked {mark.__name__} but the class "
        f"{'requires' if required else 'does not require'} it (its module has `from __future__ "
        "import annotations`, which hides the mark from TypedDict before Python 3.12)",
        "define the TypedDict in a module without that import",
    )


def _unwrapped_key(hint: Any) -> Any:
    """A `TypedDict` key's type without `Required[...]`/`NotRequired[...]` (its class says
    which keys are required)."""
    if get_origin(hint) in (typing.Required, typing.NotRequired):
        return get_args(hint)[0]
    return hint


def _plain(default: Any) -> Any:
    """A default as a schema may show it (`_NONE` for a factory or a missing one)."""
    if isinstance(default, attrs.Factory) or any(  # type: ignore[arg-type]
        default is missing for missing in (attrs.NOTHING, dataclasses.MISSING)
    ):
        return _NONE
    return default


_NONE = object()


def with_default(schema: dict[str, Any], default: Any) -> dict[str, Any]:
    """`schema` showing `default` when it is a value JSON can show as it is."""
    if isinstance(default, enum.Enum):
        default = default.value
    if default is not _NONE and _json_type(default) is not None:
        return {**schema, "default": default}
    return schema


def _own_doc(cls: type) -> bool:
    """Whether the class's docstring is its author's (a dataclass without one gets a made-up
    one, `Name(field: type, ...)`)."""
    doc = cls.__doc__ or ""
    return bool(doc.strip()) and not doc.startswith(f"{cls.__name__}(")


def description_of(doc: str | None) -> str:
    """A docstring's text without its parameter, return and raise sections."""
    if not doc:
        return ""
    return (docstring_parser.parse(doc).description or "").strip()


def parameter_descriptions(doc: str | None) -> dict[str, str]:
    """What a docstring says of each parameter (Google, NumPy or reST style)."""
    if not doc:
        return {}
    return {
        param.arg_name: " ".join(param.description.split())
        for param in docstring_parser.parse(doc).params
        if param.description
    }


def _name(hint: Any) -> str:
    if isinstance(hint, type):
        return hint.__qualname__
    return repr(hint).replace("typing.", "")
