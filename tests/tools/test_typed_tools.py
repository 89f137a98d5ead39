"""Tools as typed functions: the schema is what the hints say (the whole table, refusals
included), arguments are checked and structured before the call, the call and the caller's
context are given where asked for, and the result goes back as JSON or content."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import threading
import typing
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

import attrs
import jsonschema
import pytest
from typed_dicts import Color, Label, Shipment

from looping_core.agent import ModelRequest, run_tool_loop
from looping_core.content import TextBlock, ToolResultMessage, UserMessage
from looping_core.contract import Tool, ToolCall, ToolContext, ToolError
from looping_core.testing import FunctionModel, ModelReply, ScriptedModel, TestModel
from looping_core.testing import ToolCall as ScriptedCall
from looping_core.tools import FunctionTool, ToolDefinitionError, schema_of, tool


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@attrs.frozen
class Point:
    """A point on the page.

    Attributes:
        x: pixels from the left
    """

    x: int
    y: int = 0


@dataclasses.dataclass
class Box:
    corner: Point
    label: str | None = None
    tags: list[str] = dataclasses.field(default_factory=list)


class Unseen(typing.TypedDict):
    """`NotRequired` under postponed annotations: the class takes the key as required."""

    city: str
    weight: typing.NotRequired[float]


POINT = {
    "description": "A point on the page.",
    "type": "object",
    "properties": {
        "x": {"type": "integer", "description": "pixels from the left"},
        "y": {"type": "integer", "default": 0},
    },
    "required": ["x"],
    "additionalProperties": False,
}

TABLE: list[tuple[Any, dict[str, Any]]] = [
    (str, {"type": "string"}),
    (int, {"type": "integer"}),
    (float, {"type": "number"}),
    (bool, {"type": "boolean"}),
    (type(None), {"type": "null"}),
    (Any, {}),
    (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
    (Literal[1, "one"], {"enum": [1, "one"]}),
    (Color, {"type": "string", "enum": ["red", "blue"]}),
    (Level, {"type": "integer", "enum": [1, 2]}),
    (list[int], {"type": "array", "items": {"type": "integer"}}),
    (Sequence[str], {"type": "array", "items": {"type": "string"}}),
    (tuple[str, ...], {"type": "array", "items": {"type": "string"}}),
    (set[int], {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}),
    (frozenset[str], {"type": "array", "items": {"type": "string"}, "uniqueItems": True}),
    (
        tuple[str, int],
        {
            "type": "array",
            "prefixItems": [{"type": "string"}, {"type": "integer"}],
            "minItems": 2,
            "maxItems": 2,
        },
    ),
    (list, {"type": "array"}),
    (dict[str, float], {"type": "object", "additionalProperties": {"type": "number"}}),
    (
        Mapping[str, list[bool]],
        {
            "type": "object",
            "additionalProperties": {"type": "array", "items": {"type": "boolean"}},
        },
    ),
    (dict, {"type": "object"}),
    (str | None, {"anyOf": [{"type": "string"}, {"type": "null"}]}),
    (int | str, {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
    (typing.Optional[int], {"anyOf": [{"type": "integer"}, {"type": "null"}]}),  # noqa: UP045
    (Annotated[str, "a city"], {"type": "string", "description": "a city"}),
    (Point, POINT),
    (list[Point], {"type": "array", "items": POINT}),
    (
        Box,
        {
            "type": "object",
            "properties": {
                "corner": POINT,
                "label": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["corner"],
            "additionalProperties": False,
        },
    ),
    (
        Shipment,
        {
            "description": "Where a parcel goes.",
            "type": "object",
            "properties": {"city": {"type": "string"}, "weight": {"type": "number"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    ),
    (
        Label,
        {
            "type": "object",
            "properties": {
                "text": {"type": "string"},
                "color": {"type": "string", "enum": ["red", "blue"]},
            },
            "required": ["text"],
            "additionalProperties": False,
        },
    ),
]


@pytest.mark.parametrize(("hint", "expected"), TABLE, ids=[repr(h) for h, _ in TABLE])
def test_each_hint_has_the_schema_the_table_says(hint: Any, expected: dict[str, Any]) -> None:
    schema = schema_of(hint)
    assert schema == expected
    jsonschema.Draft202012Validator.check_schema(schema)


def test_a_function_becomes_a_tool_named_and_described_by_itself() -> None:
    @tool
    async def forecast(
        city: Annotated[str, "The city, as its people write it"],
        days: int = 3,
        unit: Literal["C", "F"] = "C",
        point: Point | None = None,
    ) -> str:
        """Tell the weather to come.

        It looks a few days ahead.

        Args:
            city: this description loses to the annotation
            days: how many days ahead
        """
        return "sunny"

    assert isinstance(forecast, Tool)
    assert isinstance(forecast, FunctionTool)
    assert forecast.name == "forecast"
    assert forecast.description == "Tell the weather to come.\n\nIt looks a few days ahead."
    assert forecast.input_schema == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "The city, as its people write it"},
            "days": {"type": "integer", "description": "how many days ahead", "default": 3},
            "unit": {"type": "string", "enum": ["C", "F"], "default": "C"},
            "point": {"anyOf": [POINT, {"type": "null"}], "default": None},
        },
        "required": ["city"],
        "additionalProperties": False,
    }
    assert asyncio.run(forecast("Oslo")) == "sunny"  # still the function when called


@pytest.mark.parametrize(
    "doc",
    [
        "Look up.\n\nArgs:\n    query: what to look for\n    limit: at most this many\n",
        "Look up.\n\n:param query: what to look for\n:param limit: at most this many\n",
        "Look up.\n\nParameters\n----------\nquery : str\n    what to look for\n"
        "limit : int\n    at most\n    this many\n",
    ],
    ids=["google", "rest", "numpy"],
)
def test_parameter_descriptions_come_from_the_docstring_in_each_style(doc: str) -> None:
    def look_up(query: str, limit: int = 5) -> list[str]:
        return []

    look_up.__doc__ = doc
    made = tool(look_up)
    assert made.description == "Look up."
    properties = made.input_schema["properties"]
    assert properties["query"]["description"] == "what to look for"
    assert properties["limit"]["description"] == "at most this many"


def test_name_and_description_can_be_given() -> None:
    @tool(name="notes.find", description="Find notes.")
    def find(text: str) -> list[str]:
        """Not this."""
        return []

    assert (find.name, find.description) == ("notes.find", "Find notes.")


def test_a_function_without_a_docstring_has_an_empty_description() -> None:
    @tool
    def ping() -> str:
        return "pong"

    assert ping.description == ""
    assert ping.input_schema == {"type": "object", "properties": {}, "additionalProperties": False}


class Later:
    pass


@attrs.frozen
class Node:
    value: int
    children: list[Node] = attrs.Factory(list)


@attrs.frozen
class Left:
    size: int


@attrs.frozen
class Right:
    size: int


def _untyped(text):  # type: ignore[no-untyped-def]
    return text


def _star(*words: str) -> None:
    return None


def _keywords(**options: str) -> None:
    return None


def _when(at: Later) -> None:
    return None


def _keys(counts: dict[int, str]) -> None:
    return None


def _tree(root: Node) -> None:
    return None


def _either(side: Left | Right) -> None:
    return None


def _Upper(text: str) -> None:
    return None


def _unresolved(text: Missing) -> None:  # type: ignore[name-defined]  # noqa: F821
    return None


def _bad_literal(choice: Literal[b"x"]) -> None:
    return None


def _bytes(data: bytes) -> None:
    return None


REFUSALS = [
    (_untyped, "parameter 'text' has no type hint; annotate it"),
    (_star, "parameter 'words': *args and **kwargs have no schema"),
    (_keywords, "parameter 'options': *args and **kwargs have no schema"),
    (_when, "parameter 'at': Later has no JSON Schema here; use str, int"),
    (_keys, "parameter 'counts': a mapping with int keys has no JSON form"),
    (_tree, "parameter 'root': Node.children: Node contains itself; give the nested value"),
    (_either, "parameter 'side': its arguments cannot be structured"),
    (_Upper, "name must be 1-63 characters of lowercase letters"),
    (_unresolved, "its type hints cannot be resolved (NameError"),
    (_bad_literal, "parameter 'choice': Literal[b'x'] has a value that is not a JSON scalar"),
    (_bytes, "parameter 'data': bytes has no JSON Schema here"),
]


@pytest.mark.parametrize(("function", "says"), REFUSALS, ids=[f.__name__ for f, _ in REFUSALS])
def test_a_function_that_cannot_be_described_is_refused_naming_it_and_the_fix(
    function: Any, says: str
) -> None:
    with pytest.raises(ToolDefinitionError) as refused:
        tool(function)
    message = str(refused.value)
    assert says in message
    assert f"tool {__name__}.{function.__name__}" in message


def test_schema_of_a_hint_with_none_says_what_to_write_instead() -> None:
    with pytest.raises(ToolDefinitionError, match="complex has no JSON Schema here; use str"):
        schema_of(complex)


def test_a_typed_dict_whose_keys_class_cannot_see_their_required_marks_is_refused() -> None:
    with pytest.raises(ToolDefinitionError) as refused:
        schema_of(Unseen)
    assert str(refused.value) == (
        "Unseen.weight is marked NotRequired but the class requires it (its module has `from "
        "__future__ import annotations`, which hides the mark from TypedDict before Python "
        "3.12); define the TypedDict in a module without that import"
    )


def test_a_refused_name_says_how_to_rename() -> None:
    with pytest.raises(ToolDefinitionError, match=r"give @tool\(name=\.\.\.\)"):
        tool(_Upper)
    assert tool(name="upper")(_Upper).name == "upper"


@attrs.frozen
class Positive:
    value: int = attrs.field(validator=attrs.validators.gt(0))


# -- calls --------------------------------------------------------------------------------------


@attrs.frozen
class Order:
    item: str
    quantity: int
    color: Color = Color.RED
    at: Point | None = None


def _request(text: str = "go") -> ModelRequest:
    return ModelRequest(messages=(UserMessage([TextBlock(text)]),))


def _results(outcome: Any) -> list[Any]:
    return [
        block
        for message in outcome.messages
        if isinstance(message, ToolResultMessage)
        for block in message.content
    ]


def _text(result: Any) -> str:
    return "".join(b.text for b in result.content if isinstance(b, TextBlock))


async def test_arguments_are_structured_into_the_parameters_types() -> None:
    seen: list[Any] = []

    @tool
    async def place(orders: list[Order], rush: bool = False) -> Mapping[str, Any]:
        """Place orders."""
        seen.append((orders, rush))
        return {"placed": len(orders)}

    model = ScriptedModel(
        [
            ScriptedModel.calls(
                "place",
                {"orders": [{"item": "tea", "quantity": 2, "color": "blue", "at": {"x": 4}}]},
            ),
            ScriptedModel.answer("Placed."),
        ]
    )
    outcome = await run_tool_loop([model], _request(), [place])
    assert seen == [([Order("tea", 2, Color.BLUE, Point(4, 0))], False)]
    [result] = _results(outcome)
    assert not result.is_error
    assert json.loads(_text(result)) == {"placed": 1}


async def test_typed_dict_arguments_are_structured_with_their_keys_only() -> None:
    seen: list[Any] = []

    @tool
    async def ship(parcel: Shipment, label: Label) -> str:
        """Ship a parcel."""
        seen.append((parcel, label))
        return "shipped"

    model = ScriptedModel(
        [
            ScriptedModel.calls(
                "ship", {"parcel": {"city": "Oslo"}, "label": {"text": "x", "color": "red"}}
            ),
            ScriptedModel.calls("ship", {"parcel": {"town": "Oslo"}, "label": {"text": "x"}}),
            ScriptedModel.answer("Shipped."),
        ]
    )
    outcome = await run_tool_loop([model], _request(), [ship])
    assert seen == [({"city": "Oslo"}, {"text": "x", "color": Color.RED})]
    first, second = _results(outcome)
    assert not first.is_error
    assert second.is_error
    assert "town" in _text(second)


async def test_arguments_that_fail_the_schema_never_reach_the_function() -> None:
    calls: list[Any] = []

    @tool
    def place(order: Order) -> str:
        """Place an order."""
        calls.append(order)
        return "placed"

    bad = {"order": {"item": "tea", "quantity": "two", "color": "green", "extra": 1}}
    model = ScriptedModel([ScriptedModel.calls("place", bad), ScriptedModel.answer("Sorry.")])
    outcome = await run_tool_loop([model], _request(), [place])
    [result] = _results(outcome)
    assert result.is_error
    text = _text(result)
    assert "order/quantity" in text
    assert "order/color" in text
    assert "'extra' was unexpected" in text
    assert calls == []


async def test_a_structuring_problem_the_schema_cannot_see_is_the_models_error() -> None:
    """An attrs validator refuses what the schema let through: the model is told, as for any
    bad argument, and the loop goes on."""

    @tool
    def check(number: Positive) -> str:
        """Check."""
        return "fine"

    with pytest.raises(ToolError, match=r"invalid arguments: .*@ number"):
        await check.handler({"number": {"value": -1}}, ToolCall("c1", "check"))


async def test_the_call_and_the_context_are_given_not_asked_of_the_model() -> None:
    given: list[tuple[ToolCall, ToolContext]] = []

    @tool
    async def remember(text: str, call: ToolCall, context: ToolContext) -> str:
        """Remember."""
        given.append((call, context))
        return "kept"

    assert set(remember.input_schema["properties"]) == {"text"}
    caller = ToolContext(tenant="t", instance_id="gw#alice")
    model = ScriptedModel(
        [
            ScriptedModel.calls("remember", {"text": "milk"}, call_id="call-7"),
            ScriptedModel.answer("Kept."),
        ]
    )
    await run_tool_loop([model], _request(), [remember], tool_context=caller)
    [(call, context)] = given
    assert (call.id, call.name) == ("call-7", "remember")
    assert context is caller
    assert call.context is caller


async def test_a_tool_asking_for_a_context_the_loop_was_not_given_fails_its_call() -> None:
    @tool
    async def needs(context: ToolContext) -> str:
        """Needs a context."""
        return context.tenant

    model = ScriptedModel([ScriptedModel.calls("needs", {}), ScriptedModel.answer("Done.")])
    outcome = await run_tool_loop([model], _request(), [needs])
    [result] = _results(outcome)
    assert result.is_error
    assert _text(result) == "failed: RuntimeError"


async def test_a_plain_function_runs_off_the_event_loop() -> None:
    loop_thread = threading.get_ident()
    threads: list[int] = []

    @tool
    def blocking(seconds: float) -> str:
        """Block."""
        threads.append(threading.get_ident())
        return "done"

    model = ScriptedModel(
        [ScriptedModel.calls("blocking", {"seconds": 0.01}), ScriptedModel.answer("Ok.")]
    )
    await run_tool_loop([model], _request(), [blocking])
    assert threads
    assert threads[0] != loop_thread


async def test_results_go_back_as_json_or_as_content() -> None:
    @tool
    def where(name: str) -> Point:
        """Where."""
        return Point(len(name), 2)

    @tool
    def say(text: str) -> TextBlock:
        """Say."""
        return TextBlock(text.upper())

    @tool
    def colors() -> list[Color]:
        """Colors."""
        return [Color.BLUE]

    model = FunctionModel(
        lambda request: (
            ModelReply(
                tool_calls=(
                    ScriptedCall("where", {"name": "abc"}),
                    ScriptedCall("say", {"text": "hi"}),
                    ScriptedCall("colors", {}),
                )
            )
            if len(request.messages) == 1
            else "Done."
        )
    )
    outcome = await run_tool_loop([model], _request(), [where, say, colors])
    results = _results(outcome)
    assert [_text(r) for r in results] == ['{"x":3,"y":2}', "HI", '["blue"]']


async def test_hand_written_tools_keep_working_beside_typed_ones() -> None:
    async def legacy(arguments: Mapping[str, Any], call: ToolCall) -> str:
        return f"legacy {arguments['n']}"

    hand = Tool(
        "legacy",
        "Old style.",
        {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
        legacy,
    )

    @tool
    def typed(n: int) -> int:
        """New style."""
        return n * 2

    outcome = await run_tool_loop([TestModel()], _request(), [hand, typed])
    assert [_text(r) for r in _results(outcome)] == ["legacy 0", "0"]


@pytest.mark.parametrize(("hint", "expected"), TABLE, ids=[repr(h) for h, _ in TABLE])
async def test_test_model_arguments_for_every_hint_reach_the_function(
    hint: Any, expected: dict[str, Any]
) -> None:
    """TestModel makes arguments valid for each schema of the table; they pass the loop's
    check and structure into the hint's type."""
    received: list[Any] = []

    async def take(value: Any) -> str:
        received.append(value)
        return "ok"

    take.__annotations__ = {"value": hint, "return": str}
    made = tool(name="take")(take)
    outcome = await run_tool_loop([TestModel()], _request(), [made])
    [result] = _results(outcome)
    assert not result.is_error, _text(result)
    assert len(received) == 1


@attrs.frozen
class Room:
    """A room of the hotel."""

    number: int
    floor: int = 0
    """Its floor (0: the ground floor)."""


def test_a_class_typed_parameter_keeps_its_own_description() -> None:
    """The parameter's words (its docstring's, or `Annotated`'s) describe this use of the
    class; the class's docstring only what it is, where nothing else says."""

    @tool
    def book(room: Room, spare: Room, also: Annotated[Room, "A room next to it"]) -> str:
        """Book a room.

        Args:
            room: The room the guest asked for.
            also: Not this one: Annotated says it.
        """
        return "booked"

    properties = book.input_schema["properties"]
    assert properties["room"]["description"] == "The room the guest asked for."
    assert properties["spare"]["description"] == "A room of the hotel."
    assert properties["also"]["description"] == "A room next to it"
