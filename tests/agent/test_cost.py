"""What model calls cost: each priced from the `[prices]` table and its usage, recorded on its
message, summed over a turn (summaries included), and a turn's budget in money."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import pytest

from looping_core.agent import (
    Budget,
    Compaction,
    Compactor,
    ModelRequest,
    ModelUnavailable,
    Prices,
    StreamEnd,
    respond_with_fallback,
    run_tool_loop,
)
from looping_core.config import ModelPrice
from looping_core.content import (
    AssistantMessage,
    Message,
    TextBlock,
    TextChunk,
    ToolUseChunk,
    Usage,
    UserMessage,
    decode_message,
    encode,
)
from looping_core.contract import Tool, ToolCall
from looping_core.testing import ScriptedModel

PRICES = Prices(
    {
        "mini": ModelPrice(input=0.15, output=0.60, cached_input=0.075),
        "openai:mini": ModelPrice(input=0.25, output=1.00),
        "big": ModelPrice(input=2.50, output=10.00, cached_input=1.25, cache_write=3.75),
    }
)
REQUEST = ModelRequest((UserMessage([TextBlock("count")]),), system="App soul.")


def priced(input_: str, output: str, tokens: dict[str, int]) -> Decimal:
    """The cost by hand, in decimal: per million tokens."""
    total = Decimal(tokens.get("input", 0)) * Decimal(input_) + Decimal(
        tokens.get("output", 0)
    ) * Decimal(output)
    return total / Decimal(1_000_000)


def cents(value: float | Decimal) -> Decimal:
    return Decimal(str(value)).quantize(Decimal("0.01"))


def test_a_call_costs_its_usage_times_the_price_per_million() -> None:
    usage = Usage(
        input_tokens=1_200_000,
        cache_read_tokens=400_000,
        cache_creation_tokens=100_000,
        output_tokens=300_000,
        reasoning_tokens=100_000,  # part of the output tokens: priced once
    )
    cost = PRICES.cost("scripted:big", usage)
    # 1.2 M at 2.50, 0.4 M cached at 1.25, 0.1 M written at 3.75, 0.3 M out at 10.00
    assert cost == pytest.approx(3.00 + 0.50 + 0.375 + 3.00, rel=1e-12)
    assert cents(cost) == Decimal("6.88")


def test_a_cache_price_left_out_is_the_input_price() -> None:
    usage = Usage(input_tokens=1000, cache_read_tokens=1000, cache_creation_tokens=1000)
    cost = Prices({"m": ModelPrice(input=3.0, output=15.0)}).cost("p:m", usage)
    assert cost == pytest.approx(3000 * 3.0 / 1_000_000, rel=1e-12)


def test_the_provider_and_model_entry_wins_over_the_model_alone() -> None:
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    assert PRICES.cost("openai:mini", usage) == pytest.approx(1.25)
    assert PRICES.cost("ollama:mini", usage) == pytest.approx(0.75)


def test_an_unpriced_model_or_a_call_without_usage_has_no_cost() -> None:
    assert PRICES.cost("openai:gpt-5", Usage(input_tokens=10)) is None
    assert PRICES.cost("scripted:mini", None) is None
    assert Prices().cost("scripted:mini", Usage(input_tokens=10)) is None


def answer(text: str, tokens_in: int, tokens_out: int) -> list[Any]:
    return [
        TextChunk(text),
        StreamEnd(Usage(input_tokens=tokens_in, output_tokens=tokens_out), "end"),
    ]


def tool_call(call_id: str, tokens_in: int, tokens_out: int) -> list[Any]:
    return [
        ToolUseChunk(0, "{}", id=call_id, name="look"),
        StreamEnd(Usage(input_tokens=tokens_in, output_tokens=tokens_out), "tool_use"),
    ]


async def look(arguments: Any, call: ToolCall) -> str:
    return "seen"


LOOK = Tool("look", "Looks.", {"type": "object"}, look)


class Log:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def append(self, messages: Sequence[Message]) -> None:
        self.messages.extend(messages)


async def test_a_turn_sums_its_calls_and_each_message_keeps_its_own_cost() -> None:
    model = ScriptedModel(
        [tool_call("c1", 120_000, 4_000), answer("done", 130_000, 20_000)], label="scripted:mini"
    )
    log = Log()
    outcome = await run_tool_loop([model], REQUEST, [LOOK], log=log, prices=PRICES)
    first = priced("0.15", "0.60", {"input": 120_000, "output": 4_000})
    second = priced("0.15", "0.60", {"input": 130_000, "output": 20_000})
    said = [m for m in log.messages if isinstance(m, AssistantMessage)]
    assert [m.cost for m in said] == [pytest.approx(float(first)), pytest.approx(float(second))]
    assert outcome.cost == pytest.approx(float(first + second))
    assert cents(outcome.cost or 0) == cents(first + second)
    # The session keeps it with the usage: the message's JSON carries it, and reads it back.
    assert decode_message(encode(said[0])) == said[0]


async def test_without_prices_no_call_has_a_cost() -> None:
    model = ScriptedModel([answer("done", 10, 2)], label="scripted:mini")
    log = Log()
    outcome = await run_tool_loop([model], REQUEST, [LOOK], log=log)
    assert outcome.cost is None
    assert all(m.cost is None for m in log.messages if isinstance(m, AssistantMessage))


async def test_a_budget_in_money_ends_with_one_last_call_without_tools() -> None:
    # Each tool call costs 0.10 (1 M input tokens at 0.10 per million): spent after three.
    prices = Prices({"m": ModelPrice(input=0.10, output=0.0)})
    script = [tool_call(f"c{n}", 1_000_000, 0) for n in range(3)]
    model = ScriptedModel([*script, answer("Where I got to.", 1_000_000, 0)], label="p:m")
    outcome = await run_tool_loop(
        [model],
        REQUEST,
        [LOOK],
        budget=Budget(max_rounds=50, max_cost=0.30),
        budget_note="Budget spent: answer now.",
        prices=prices,
    )
    assert outcome.exhausted == "max_cost"
    assert outcome.rounds == 4
    assert model.requests[-1].tools == ()
    assert model.requests[-1].system.endswith("Budget spent: answer now.")
    assert all(r.tools for r in model.requests[:-1])
    assert outcome.cost == pytest.approx(0.40)


async def test_a_budget_in_money_counts_only_priced_calls() -> None:
    script = [tool_call(f"c{n}", 1_000_000, 0) for n in range(2)]
    model = ScriptedModel([*script, answer("done", 10, 0)], label="p:unpriced")
    outcome = await run_tool_loop(
        [model], REQUEST, [LOOK], budget=Budget(max_cost=0.01), prices=PRICES
    )
    assert outcome.exhausted is None
    assert outcome.cost is None


async def test_the_model_that_served_is_the_one_priced() -> None:
    down = ScriptedModel([ModelUnavailable("openai:mini", "503")], label="openai:mini")
    up = ScriptedModel([answer("ok", 1_000_000, 0)], label="scripted:big")
    response = await respond_with_fallback([down, up], REQUEST, prices=PRICES)
    assert response.served_by == "scripted:big"
    assert response.message.cost == pytest.approx(2.50)


async def test_a_summary_costs_too() -> None:
    summarizer = ScriptedModel([answer("earlier: milk", 2_000_000, 100_000)], label="x:big")
    compactor = Compactor(
        Compaction(prompt="Summarize.", keep_last=1),
        None,
        [summarizer],
        prices=PRICES,
    )
    messages = (
        UserMessage([TextBlock("one")]),
        AssistantMessage([TextBlock("ok")]),
        UserMessage([TextBlock("two")]),
    )
    compacted = await compactor.compact(ModelRequest(messages))
    assert compacted[0] == UserMessage([TextBlock("earlier: milk")])
    assert compactor.cost == pytest.approx(2 * 2.50 + 0.1 * 10.00)
