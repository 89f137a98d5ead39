"""Checking a tool's input schema, and a tool call's arguments against it, without any I/O.

A tool's schema may come from a third party (an MCP server), so it is hostile input. jsonschema,
given no registry, still retrieves a `$ref` it cannot resolve (a deprecated fallback that GETs
an `http://` URL or reads a `file://` path, with no timeout, on the calling thread). Here every
validator gets a `referencing` registry whose retrieval always refuses, so nothing is ever
fetched or read, and `schema_problem` refuses up front what could only fail later:

- a reference that leaves the schema (`$ref` not starting with `#`);
- a reference that cannot be resolved inside it;
- a cycle of references that never moves into the arguments (`{"$ref": "#"}`), which would
  recurse until Python's stack gives out at every call;
- a schema nested deeper than `MAX_SCHEMA_DEPTH`, or of a dialect jsonschema does not know.

`argument_problems` is what the tool loop runs per call: any failure while validating (a
`RecursionError` included) is reported as a problem, never raised.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import jsonschema
import referencing
import referencing.exceptions
import referencing.jsonschema

if TYPE_CHECKING:  # typed there, not exported by the package
    from referencing import _core as _referencing_core

__all__ = ["MAX_SCHEMA_DEPTH", "SchemaUnusable", "argument_problems", "schema_problem"]

MAX_SCHEMA_DEPTH = 64
"""How deeply a tool's input schema may nest (objects and arrays); deeper is refused."""

MAX_NAMED = 10
"""How many of a call's argument problems are named (every one, up to this)."""


class SchemaUnusable(Exception):
    """A tool's input schema cannot be used to check arguments; `args[0]` says why."""


def _refuse_retrieval(uri: str) -> referencing.Resource[Any]:
    raise referencing.exceptions.NoSuchResource(ref=uri)  # type: ignore[call-arg]


_NEVER_RETRIEVES: referencing.Registry[Any] = referencing.Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]


def schema_problem(schema: Mapping[str, Any]) -> str | None:
    """What makes `schema` unusable as a tool's input schema, in a phrase; `None`: nothing."""
    try:
        _checked_validator(_canonical(schema))
    except SchemaUnusable as exc:
        return str(exc)
    return None


def argument_problems(
    schema: Mapping[str, Any], arguments: Mapping[str, Any], *, what: str = "arguments"
) -> str | None:
    """What is wrong with `arguments` under `schema`, the problems joined (`None`: nothing).
    `what` names the value in them (`invalid answer at ...` for a structured answer).

    Raises `SchemaUnusable` when the schema itself cannot be used; never anything else."""
    validator = _validator_of(schema)
    try:
        errors = sorted(
            validator.iter_errors(dict(arguments) if isinstance(arguments, Mapping) else arguments),
            key=lambda error: [str(part) for part in error.absolute_path],
        )
    except RecursionError:
        return f"the {what} could not be checked (nested too deeply for the schema)"
    except Exception as exc:  # a reference that cannot be resolved, a bad pattern, ...
        raise SchemaUnusable(f"checking against it failed ({type(exc).__name__})") from None
    if not errors:
        return None
    named = [
        f"invalid {what} at {_where(error, what)}: {_cut(error.message)}"
        for error in errors[:MAX_NAMED]
    ]
    if len(errors) > MAX_NAMED:
        named.append(f"and {len(errors) - MAX_NAMED} more")
    return "; ".join(named)


def _where(error: jsonschema.ValidationError, what: str) -> str:
    return "/".join(str(part) for part in error.absolute_path) or f"(the {what})"


def _cut(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


_BY_OBJECT: dict[int, tuple[Mapping[str, Any], Any]] = {}
"""Validators by the schema object they were made for (kept alive beside them, so its id is
not reused): a tool's calls pass the same object every time, and need not serialize it to find
its validator. A schema is not changed once a tool is made with it."""


def _validator_of(schema: Mapping[str, Any]) -> Any:
    found = _BY_OBJECT.get(id(schema))
    if found is not None and found[0] is schema:
        return found[1]
    validator = _checked_validator(_canonical(schema))
    if len(_BY_OBJECT) >= 1024:
        _BY_OBJECT.pop(next(iter(_BY_OBJECT)))  # the oldest
    _BY_OBJECT[id(schema)] = (schema, validator)
    return validator


def _canonical(schema: Mapping[str, Any]) -> str:
    try:
        return json.dumps(schema, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return "null"  # refused by _checked_validator: not a JSON object


@functools.lru_cache(maxsize=1024)
def _checked_validator(schema_text: str) -> Any:
    """A validator for a schema (in canonical JSON) that never retrieves, made once: checking a
    schema costs far more than validating arguments with it. Raises `SchemaUnusable`."""
    document = json.loads(schema_text)
    if not isinstance(document, dict):
        raise SchemaUnusable("it is not a JSON object")
    if _depth(document) > MAX_SCHEMA_DEPTH:
        raise SchemaUnusable(f"it nests deeper than {MAX_SCHEMA_DEPTH} levels")
    dialect = document.get("$schema")
    kind = jsonschema.validators.validator_for(document, default=None)  # type: ignore[arg-type]
    if kind is None:
        if dialect is not None:
            raise SchemaUnusable(f"its $schema {_shown(dialect)} is not a JSON Schema dialect")
        kind = jsonschema.Draft202012Validator
    try:
        kind.check_schema(document)
    except jsonschema.SchemaError as exc:
        raise SchemaUnusable(f"it is not a valid JSON Schema ({_cut(exc.message)})") from None
    except RecursionError:
        raise SchemaUnusable("it could not be checked (it recurses without end)") from None
    specification = referencing.jsonschema.specification_with(
        kind.META_SCHEMA["$schema"], default=referencing.jsonschema.DRAFT202012
    )
    resource = specification.create_resource(document)
    registry = _NEVER_RETRIEVES.with_resource(resource.id() or "", resource)
    _References(specification).check(document, registry.resolver_with_root(resource))
    return kind(document, registry=registry)


def _depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if level > MAX_SCHEMA_DEPTH:
            break
        if isinstance(item, dict):
            stack += [(inner, level + 1) for inner in item.values()]
        elif isinstance(item, list):
            stack += [(inner, level + 1) for inner in item]
    return deepest


def _shown(value: Any) -> str:
    return _cut(repr(value), 80)


class _References:
    """Follows every `$ref` in a schema: each must stay inside it and resolve, and no chain of
    them may loop back without moving into a part of the value (that loop is endless recursion
    at every call). The subschemas are a graph, walked once; the loop check runs on its edges
    that stay on the same value."""

    def __init__(self, specification: referencing.Specification[Any]) -> None:
        self._specification = specification

    def check(self, schema: Any, resolver: _referencing_core.Resolver[Any]) -> None:
        same_value: dict[int, list[int]] = {}
        seen: set[int] = {id(schema)}
        waiting = [(schema, resolver)]
        while waiting:
            node, node_resolver = waiting.pop()
            if not isinstance(node, dict):
                continue
            node_resolver = node_resolver.in_subresource(self._specification.create_resource(node))
            edges = same_value.setdefault(id(node), [])
            found: list[tuple[Any, _referencing_core.Resolver[Any], bool]] = []
            for keyword in ("$ref", "$dynamicRef", "$recursiveRef"):
                if keyword in node:
                    target = _resolved(keyword, node[keyword], node_resolver)
                    found.append((target.contents, target.resolver, False))
            found += [(inner, node_resolver, moves) for inner, moves in _subschemas(node)]
            for inner, inner_resolver, moves in found:
                if not isinstance(inner, dict):
                    continue
                if not moves:
                    edges.append(id(inner))
                if id(inner) not in seen:
                    seen.add(id(inner))
                    waiting.append((inner, inner_resolver))
        if _has_cycle(same_value):
            raise SchemaUnusable("its references loop back to themselves ($ref cycle)")


def _resolved(
    keyword: str, ref: Any, resolver: _referencing_core.Resolver[Any]
) -> _referencing_core.Resolved[Any]:
    if not isinstance(ref, str):
        raise SchemaUnusable(f"its {keyword} is not a string")
    if not ref.startswith("#"):
        raise SchemaUnusable(
            f"its {keyword} {_shown(ref)} refers outside the schema (only references inside "
            "it, starting with '#', are followed; nothing is fetched)"
        )
    try:
        return resolver.lookup(ref)
    except (referencing.exceptions.Unresolvable, LookupError, ValueError, TypeError):
        raise SchemaUnusable(f"its {keyword} {_shown(ref)} points at nothing in it") from None


def _has_cycle(edges: Mapping[int, list[int]]) -> bool:
    """Whether the directed graph `edges` has a cycle (an iterative three-colour walk)."""
    state: dict[int, int] = {}  # 1: on the current path, 2: done
    for start in edges:
        if start in state:
            continue
        stack = [(start, iter(edges.get(start, ())))]
        state[start] = 1
        while stack:
            node, following = stack[-1]
            step = next(following, None)
            if step is None:
                state[node] = 2
                stack.pop()
            elif state.get(step) == 1:
                return True
            elif step not in state:
                state[step] = 1
                stack.append((step, iter(edges.get(step, ()))))
    return False


def _one(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]  # draft 7's `items` may be a list


def _many(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _mapped(value: Any) -> list[Any]:
    return list(value.values()) if isinstance(value, dict) else []


_ONE_INSIDE = (
    "items",
    "additionalItems",
    "contains",
    "additionalProperties",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
)

_SAME_VALUE: Mapping[str, Callable[[Any], list[Any]]] = {
    **dict.fromkeys(("not", "if", "then", "else"), _one),
    **dict.fromkeys(("allOf", "anyOf", "oneOf"), _many),
    "dependentSchemas": _mapped,
}
"""Keywords whose subschemas apply to the value itself: a cycle through them never ends."""

_INTO_VALUE: Mapping[str, Callable[[Any], list[Any]]] = {
    **dict.fromkeys(_ONE_INSIDE, _one),
    "prefixItems": _many,
    **dict.fromkeys(("properties", "patternProperties"), _mapped),
    # Definitions are followed on their own: a loop through one is found where it is used.
    **dict.fromkeys(("$defs", "definitions"), _mapped),
}
"""Keywords whose subschemas apply to a part of the value: a cycle through them ends with the
arguments' own depth."""


def _subschemas(schema: Mapping[str, Any]) -> Iterator[tuple[Any, bool]]:
    """Each subschema, and whether it applies to a part of the value (not the value itself)."""
    for table, moves in ((_SAME_VALUE, False), (_INTO_VALUE, True)):
        for keyword, inner in table.items():
            if keyword in schema:
                for each in inner(schema[keyword]):
                    yield each, moves
