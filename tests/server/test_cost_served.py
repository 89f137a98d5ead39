"""Cost, served: a turn's model calls priced by `[prices]` are the task's `looping.cost` (in
`GetTask` and in the push, equal to the price table times the usage to the cent), a turn stops
at its budget in money, and a caller whose turns have cost its daily budget is refused at the
door on every binding, before anything is written, while other callers go on."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest

from looping_core.testing import FakeGateway, FakeModelServer, Reply

from support.bindings import BINDINGS, send_params, throttled
from support.serving import keeper, rows, serving

# Per million tokens: a Reply.tool_calls is 20 in and 8 out, a Reply.text 10 in and 5 out.
PRICES = """
[prices.m]
input = 1250.0
output = 5000.0
"""
TOOL_CALL = Decimal(20 * 1250 + 8 * 5000) / 1_000_000  # 0.065
TEXT = Decimal(10 * 1250 + 5 * 5000) / 1_000_000  # 0.0375


@pytest.fixture
async def model_server() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer() as server:
        yield server


def cents(value: float | Decimal) -> Decimal:
    return Decimal(str(value)).quantize(Decimal("0.01"))


async def test_the_task_and_its_push_carry_what_the_turn_cost(
    gateway: FakeGateway, model_server: FakeModelServer
) -> None:
    model_server.replies += [
        Reply.tool_calls(("c1", "add_note", {"text": "milk"})),
        Reply.text("Noted."),
    ]
    async with serving(gateway, extra=keeper(model_server.base_url) + PRICES) as agent:
        await gateway.send_turn(agent.endpoint, tenant="keeper", text="remember milk")
        [push] = await gateway.wait_for_pushes(1)
        task: dict[str, Any] = push.json["task"]
        cost = task["metadata"]["looping.cost"]
        assert cost == pytest.approx(float(TOOL_CALL + TEXT), rel=1e-12)
        assert cents(cost) == cents(TOOL_CALL + TEXT) == Decimal("0.10")
        _, got = await gateway.call(
            agent.endpoint, "GetTask", {"tenant": "keeper", "id": task["id"]}, tenant="keeper"
        )
        assert got["result"]["metadata"]["looping.cost"] == cost
        # The caller's spend of the day counts it.
        path = agent.config.store.url.removeprefix("sqlite:///")
        with sqlite3.connect(path) as db:
            spent = db.execute("SELECT tenant, subject, cost FROM caller_spend").fetchall()
        assert spent == [("keeper", "caller", pytest.approx(cost))]


async def test_without_prices_a_turn_has_no_cost(
    gateway: FakeGateway, model_server: FakeModelServer
) -> None:
    model_server.replies += [Reply.text("Hi.")]
    async with serving(gateway, extra=keeper(model_server.base_url)) as agent:
        await gateway.send_turn(agent.endpoint, tenant="keeper", text="hello")
        [push] = await gateway.wait_for_pushes(1)
        assert "looping.cost" not in push.json["task"]["metadata"]
        assert rows(agent, "caller_spend") == 0


async def test_a_turn_stops_at_its_budget_in_money(
    gateway: FakeGateway, model_server: FakeModelServer
) -> None:
    # Two tool calls cost 0.13: past 0.10, so the third call is the last, without tools.
    model_server.replies += [
        Reply.tool_calls(("c1", "add_note", {"text": "a"})),
        Reply.tool_calls(("c2", "add_note", {"text": "b"})),
        Reply.text("That is all I could do."),
    ]
    budget = "[tenants.keeper.loop]\nmax_cost = 0.10\n"
    async with serving(gateway, extra=keeper(model_server.base_url) + PRICES + budget) as agent:
        await gateway.send_turn(agent.endpoint, tenant="keeper", text="note everything")
        [push] = await gateway.wait_for_pushes(1)
    task = push.json["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["metadata"]["looping.budgetSpent"] == "max_cost"
    assert task["metadata"]["looping.rounds"] == 3
    assert cents(task["metadata"]["looping.cost"]) == cents(2 * TOOL_CALL + TEXT)
    assert "tools" in model_server.requests[1]
    assert "tools" not in model_server.requests[2]


DAILY = "[tenants.keeper.limits]\ncaller_daily_cost = 0.09\n"


async def test_a_caller_over_its_daily_budget_is_refused_at_the_door(
    gateway: FakeGateway, model_server: FakeModelServer, binding_name: str
) -> None:
    model_server.replies += [Reply.tool_calls(("c1", "add_note", {"text": "a"})), Reply.text("ok")]
    extra = keeper(model_server.base_url) + PRICES + DAILY
    async with serving(gateway, extra=extra, grpc=binding_name == "grpc") as agent:
        binding = BINDINGS[binding_name](agent, gateway)
        first_id = str(uuid.uuid4())
        first = await binding.call(
            "SendMessage", send_params(binding, "note a", first_id), tenant="keeper"
        )
        assert first.ok, first.body
        await gateway.wait_for_pushes(1)  # the turn ended: it cost 0.1025, over 0.09
        written = {t: rows(agent, t) for t in ("tasks", "messages", "push_configs", "caller_spend")}

        refused = await binding.call("SendMessage", send_params(binding, "more"), tenant="keeper")
        metadata = throttled(binding, refused, "DAILY_BUDGET_SPENT")
        assert metadata["limit"] == "0.09"
        assert 1 <= int(metadata["retryAfterSeconds"]) <= 86_400
        assert {t: rows(agent, t) for t in written} == written  # no task was created
        assert len(model_server.requests) == 2  # and no model was asked
        # A gateway's retry of the first message still gets its task.
        again = await binding.call(
            "SendMessage", send_params(binding, "note a", first_id), tenant="keeper"
        )
        assert again.ok, again.body
        assert again.result["task"]["id"] == first.result["task"]["id"]
        # Another caller of the tenant has a budget of its own.
        model_server.replies += [Reply.text("hi")]
        other = await binding.call(
            "SendMessage", send_params(binding, "hello"), tenant="keeper", subject="bob"
        )
        assert other.ok, other.body
        async with asyncio.timeout(10):
            await gateway.wait_for_pushes(2)
