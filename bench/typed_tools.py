"""Micro benchmark: what a typed tool adds to a call (`looping_core.tools.tool`).

    python bench/typed_tools.py [--calls 20000]

Calls the handler of three tools of the same function, hand-written (`Tool` with a schema and
a `Mapping` handler) and typed (`@tool`: cattrs structures the arguments, the result is
unstructured), for flat arguments (a str and an int) and nested ones (a list of attrs
objects), and an `async def` against a plain `def` (a worker thread). Prints microseconds per
call; the tool loop's JSON Schema check, which both kinds get, is measured apart. Numbers only;
nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs

from looping_core.contract import Tool, ToolCall
from looping_core.tools import tool


@attrs.frozen
class Item:
    name: str
    quantity: int = 1


async def flat_by_hand(arguments: Mapping[str, Any], call: ToolCall) -> str:
    return str(arguments["text"]) * int(arguments["times"])


@tool
async def flat_typed(text: str, times: int = 1) -> str:
    """Repeat."""
    return text * times


@tool
def flat_sync(text: str, times: int = 1) -> str:
    """Repeat, in a thread."""
    return text * times


async def nested_by_hand(arguments: Mapping[str, Any], call: ToolCall) -> dict[str, int]:
    items = [Item(i["name"], i.get("quantity", 1)) for i in arguments["items"]]
    return {"count": sum(item.quantity for item in items)}


@tool
async def nested_typed(items: list[Item]) -> dict[str, int]:
    """Count."""
    return {"count": sum(item.quantity for item in items)}


FLAT = {"text": "ab", "times": 3}
NESTED = {"items": [{"name": f"n{i}", "quantity": i} for i in range(10)]}


async def per_call(
    handler: Callable[[Mapping[str, Any], ToolCall], Awaitable[Any]], arguments: Any, calls: int
) -> float:
    call = ToolCall("call-1", "bench")  # what the loop gives a handler (contract 3)
    began = time.perf_counter()
    for _ in range(calls):
        await handler(arguments, call)
    return (time.perf_counter() - began) / calls * 1e6


def schema_check(made: Tool, arguments: Any, calls: int) -> float:
    from looping_core.agent._tool_calls import argument_problem  # noqa: PLC0415 - the loop's
    from looping_core.content import ToolUseBlock  # noqa: PLC0415

    block = ToolUseBlock("call-1", made.name, arguments)
    began = time.perf_counter()
    for _ in range(calls):
        argument_problem(block, made.input_schema)
    return (time.perf_counter() - began) / calls * 1e6


async def main(calls: int) -> None:
    rows = [
        ("flat, by hand", await per_call(flat_by_hand, FLAT, calls)),
        ("flat, @tool async def", await per_call(flat_typed.handler, FLAT, calls)),
        ("flat, @tool def (thread)", await per_call(flat_sync.handler, FLAT, calls // 10)),
        ("nested (10 attrs items), by hand", await per_call(nested_by_hand, NESTED, calls)),
        ("nested (10 attrs items), @tool", await per_call(nested_typed.handler, NESTED, calls)),
        ("schema check (every tool), flat", schema_check(flat_typed, FLAT, calls)),
        ("schema check (every tool), nested", schema_check(nested_typed, NESTED, calls)),
    ]
    width = max(len(name) for name, _ in rows)
    for name, micros in rows:
        print(f"{name:<{width}}  {micros:8.2f} us/call")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    asyncio.run(main(parser.parse_args().calls))
