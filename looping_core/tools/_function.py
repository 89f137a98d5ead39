"""`tool`: a `Tool` made from a typed function.

The function's name is the tool's, its docstring the description (the parameter sections left
out: they describe the parameters), its type hints the JSON Schema of its arguments. The loop
checks a call's arguments against that schema; the handler then structures them into the
parameters' types with cattrs (attrs classes, enums, lists of them...) and calls the function, a
plain `def` in a worker thread so it never blocks the event loop. What the function returns is
unstructured back to JSON (an attrs instance becomes an object), unless it is text or content
blocks, which go to the model as they are.

A parameter typed `ToolCall` is given the call being served (its id is an idempotency key) and
one typed `ToolContext` the context the agent built its tools with (the caller's tenant, instance
and workspace): the model never sees either.

Every problem with a function is found when `tool` is applied, so an agent module whose tool
cannot be described fails to import when the server starts, naming the function, the parameter
and the fix.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import typing
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any, get_args, get_origin, overload

import attrs
import cattrs
from cattrs.strategies import configure_union_passthrough

from looping_core.content import AudioBlock, DocumentBlock, ImageBlock, TextBlock
from looping_core.contract import Tool, ToolCall, ToolContext, ToolError
from looping_core.errors import LoopingError
from looping_core.tools._schema import (
    Unsupported,
    describe,
    description_of,
    parameter_descriptions,
    with_default,
    with_description,
)

__all__ = [
    "ApprovalRule",
    "FunctionTool",
    "ToolDefinitionError",
    "schema_of",
    "structurer_of",
    "tool",
]

_RESULT_BLOCKS = (TextBlock, ImageBlock, AudioBlock, DocumentBlock)
_INJECTED = (ToolCall, ToolContext)


class ToolDefinitionError(LoopingError, TypeError):
    """A function that cannot be made a tool: the message names it, the parameter and the fix."""


def _converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True)
    converter.register_structure_hook(type(None), lambda value, _: value)  # the schema said null
    # A union of JSON scalars (str | int) takes the value as it came; the schema checked it.
    configure_union_passthrough(typing.Union[str, int, float, bool, None], converter)  # noqa: UP007
    return converter


_CONVERTER = _converter()


@attrs.frozen
class _Parameter:
    """A parameter as a call needs it: what the loop gives it (`ToolCall`, `ToolContext`), or
    how the model's argument is structured into its type (found once, when `tool` is applied)."""

    name: str
    hint: Any
    injected: type | None = None
    structure: Callable[[Any, Any], Any] | None = None


@attrs.frozen
class FunctionTool(Tool):
    """A `Tool` made by `tool` from a typed function; calling it calls the function (so tests
    can call the function itself)."""

    function: Callable[..., Any] = attrs.field(kw_only=True, repr=False)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)


ApprovalRule = Callable[[ToolCall, Mapping[str, Any]], bool]
"""Whether a call needs the caller's approval, from the call and the model's arguments."""


@overload
def tool(function: Callable[..., Any], /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool | ApprovalRule = False,
    idempotent: bool = False,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool | ApprovalRule = False,
    idempotent: bool = False,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a `Tool` of a typed function (`async def` or `def`): `@tool`, or `@tool(name=...,
    description=...)` to set what the function's name and docstring would give.
    `requires_approval`: `True`, or a rule of the call and its arguments (`lambda call, args:
    args["amount"] > 100`), for calls the caller must approve first; `idempotent`: a call cut
    off by a crash after it began may run again.

    `ToolDefinitionError` when the function cannot be described: a parameter without a type
    hint, a hint with no JSON Schema, `*args`/`**kwargs`, or a name that is no tool name."""

    def make(function: Callable[..., Any]) -> FunctionTool:
        made = _make(function, name, description)
        return attrs.evolve(made, requires_approval=requires_approval, idempotent=idempotent)

    return make if function is None else make(function)


def _make(function: Callable[..., Any], name: str | None, description: str | None) -> FunctionTool:
    where = f"tool {_qualname(function)}"
    if not callable(function):
        raise ToolDefinitionError(f"{where}: not a function; apply @tool to a function")
    tool_name = str(name or getattr(function, "__name__", ""))
    doc = inspect.getdoc(function)
    parameters, schema = _describe(function, where)
    handler = _handler(function, parameters, where)
    try:
        return FunctionTool(
            name=tool_name,
            description=description if description is not None else description_of(doc),
            input_schema=schema,
            handler=handler,
            function=function,
        )
    except ValueError as exc:
        raise ToolDefinitionError(
            f"{where}: {exc}; rename the function or give @tool(name=...)"
        ) from None


def _describe(
    function: Callable[..., Any], where: str
) -> tuple[tuple[_Parameter, ...], dict[str, Any]]:
    """The parameters the model fills in, and the JSON Schema of their object."""
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except Exception as exc:  # a name defined later, or only under TYPE_CHECKING
        raise ToolDefinitionError(
            f"{where}: its type hints cannot be resolved ({type(exc).__name__}: {exc}); define "
            "the types it names where its module can see them at run time"
        ) from None
    described = parameter_descriptions(inspect.getdoc(function))
    parameters: list[_Parameter] = []
    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in inspect.signature(function).parameters.values():
        at = f"{where}, parameter {parameter.name!r}"
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise ToolDefinitionError(
                f"{at}: *args and **kwargs have no schema; name each parameter the model fills in"
            )
        if parameter.name not in hints:
            raise ToolDefinitionError(
                f"{at} has no type hint; annotate it (for example `{parameter.name}: str`) so "
                "the model knows what to pass"
            )
        hint = hints[parameter.name]
        injected = _injected(hint)
        if injected is not None:
            parameters.append(_Parameter(parameter.name, hint, injected=injected))
            continue
        try:
            schema = describe(hint)
            structure = _CONVERTER.get_structure_hook(hint)
        except Unsupported as exc:
            raise ToolDefinitionError(f"{at}: {exc.problem}; {exc.fix}") from None
        except Exception as exc:  # cattrs cannot structure it (an ambiguous union, ...)
            raise ToolDefinitionError(
                f"{at}: its arguments cannot be structured ({exc}); "
                "give each class of a union a required field no other has, or use one class"
            ) from None
        parameters.append(_Parameter(parameter.name, hint, structure=structure))
        schema = with_description(schema, hint, described.get(parameter.name))
        if parameter.default is parameter.empty:
            required.append(parameter.name)
        else:
            schema = with_default(schema, parameter.default)
        properties[parameter.name] = schema
    schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    return tuple(parameters), schema


def schema_of(hint: Any) -> dict[str, Any]:
    """The JSON Schema `tool` gives a parameter typed `hint` (the table in the package's
    docs); `ToolDefinitionError` saying what to write instead when it has none."""
    try:
        return describe(hint)
    except Unsupported as exc:
        raise ToolDefinitionError(f"{exc.problem}; {exc.fix}") from None


def structurer_of(hint: Any) -> Callable[[Any], Any]:
    """How a JSON value that fits `schema_of(hint)` becomes a `hint` (the structuring typed
    tools' arguments get); `ToolDefinitionError` when cattrs cannot structure it."""
    try:
        hook = _CONVERTER.get_structure_hook(hint)
    except Exception as exc:
        raise ToolDefinitionError(
            f"{_name_of(hint)} cannot be structured ({exc}); give each class of a union a "
            "required field no other has, or use one class"
        ) from None
    return functools.partial(_structured, hook, hint)


def _structured(hook: Callable[[Any, Any], Any], hint: Any, value: Any) -> Any:
    """`value` structured into `hint`; `ToolError` with every problem when it cannot be."""
    try:
        return hook(value, hint)
    except Exception as exc:
        raise ToolError("; ".join(_problems(exc, "$"))) from None


def _name_of(hint: Any) -> str:
    return hint.__qualname__ if isinstance(hint, type) else repr(hint)


def _injected(hint: Any) -> type | None:
    """`ToolCall` or `ToolContext` when a parameter asks for one (the loop fills it in)."""
    if get_origin(hint) is Annotated:
        hint = get_args(hint)[0]
    return hint if hint in _INJECTED else None


def _handler(
    function: Callable[..., Any], parameters: tuple[_Parameter, ...], where: str
) -> Callable[[Mapping[str, Any], ToolCall], Awaitable[Any]]:
    is_async = inspect.iscoroutinefunction(function)

    async def handler(arguments: Mapping[str, Any], call: ToolCall) -> Any:
        kwargs = _arguments(parameters, arguments, call, where)
        if is_async:
            value = await function(**kwargs)
        else:  # a plain function runs off the event loop
            value = await asyncio.to_thread(functools.partial(function, **kwargs))
        return _result(value)

    return handler


def _arguments(
    parameters: tuple[_Parameter, ...], arguments: Mapping[str, Any], call: ToolCall, where: str
) -> dict[str, Any]:
    """The function's keyword arguments: the model's (checked against the schema by the loop)
    structured into their types, and the call and context where asked for. What structuring
    finds that the schema cannot say is the model's error."""
    kwargs: dict[str, Any] = {}
    problems: list[str] = []
    for parameter in parameters:
        if parameter.injected is not None:
            kwargs[parameter.name] = _given(parameter.injected, call, where)
        elif parameter.structure is not None and parameter.name in arguments:
            try:
                kwargs[parameter.name] = parameter.structure(
                    arguments[parameter.name], parameter.hint
                )
            except Exception as exc:
                problems += _problems(exc, parameter.name)
    if problems:
        raise ToolError("invalid arguments: " + "; ".join(problems))
    return kwargs


def _given(wanted: type, call: ToolCall, where: str) -> ToolCall | ToolContext:
    if wanted is ToolCall:
        return call
    if call.context is None:
        raise RuntimeError(
            f"{where} asks for the ToolContext but the loop was given none "
            "(run_tool_loop(..., tool_context=...))"
        )
    return call.context


def _problems(exc: Exception, name: str) -> list[str]:
    if isinstance(exc, cattrs.BaseValidationError):
        return list(cattrs.transform_error(exc, path=name))
    return [f"{exc} @ {name}"]


def _result(value: Any) -> Any:
    """What the loop turns into the tool's result: text and blocks as they are, anything else
    unstructured to JSON (attrs instances, enums, dataclasses...)."""
    if value is None or isinstance(value, (str, *_RESULT_BLOCKS)):
        return value
    if (
        isinstance(value, list | tuple)
        and value
        and all(isinstance(v, _RESULT_BLOCKS) for v in value)
    ):
        return value
    return _CONVERTER.unstructure(value)


def _qualname(function: Any) -> str:
    module = getattr(function, "__module__", None)
    name = getattr(function, "__qualname__", None) or repr(function)
    return f"{module}.{name}" if module else name
