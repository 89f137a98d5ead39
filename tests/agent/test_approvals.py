"""Tool calls that wait for the caller's approval, in the loop and in `LoopingAgent` (an
in-memory approval log and session stand in for the store's): which calls wait, what the others
do meanwhile, and how the decided calls are settled on the next turn: denied never runs, an
approved one runs at most once, and one a crash cut off is not run again unless idempotent."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import pluggy
import pytest

from looping_core.agent import (
    AgentContext,
    ControlAction,
    LoopingAgent,
    LoopingConfig,
    ModelRequest,
    TurnInput,
    TurnOutcome,
    run_tool_loop,
)
from looping_core.content import (
    DataBlock,
    TextBlock,
    ToolResultMessage,
    UserMessage,
)
from looping_core.contract import Identity, Tool, ToolCall, ToolContext
from looping_core.plugins import PluginHost, PluginRegistry
from looping_core.testing import (
    FunctionModel,
    MemoryApprovals,
    MemorySession,
    ModelReply,
    ScriptedModel,
)
from looping_core.testing import ToolCall as Call
from looping_core.tools import tool

CALLER = Identity("t", "https://gw.example", "alice")
CONTEXT = ToolContext(tenant="t", instance_id="alice")


class Ledger:
    """Tools that pay (approval above 100, by a rule) and refund (always), and what ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, str, int]] = []
        self.seen_calls: list[ToolCall] = []

    def tools(self, *, idempotent: bool = False) -> list[Tool]:
        def rule(call: ToolCall, arguments: Mapping[str, Any]) -> bool:
            self.seen_calls.append(call)
            return bool(arguments["amount"] > 100)

        @tool(requires_approval=rule)
        async def pay(call: ToolCall, amount: int) -> str:
            """Pay."""
            self.ran.append((call.id, "pay", amount))
            return f"paid {amount}"

        @tool(requires_approval=True, idempotent=idempotent)
        async def refund(call: ToolCall, amount: int) -> str:
            """Refund."""
            self.ran.append((call.id, "refund", amount))
            return f"refunded {amount}"

        return [pay, refund]


def _request(text: str = "go") -> ModelRequest:
    return ModelRequest(messages=(UserMessage((TextBlock(text),)),))


def _calls(*calls: tuple[str, str, int]) -> ModelReply:
    return ModelReply(tool_calls=tuple(Call(n, {"amount": a}, id=i) for i, n, a in calls))


# -- the loop -------------------------------------------------------------------------------------


async def test_calls_that_need_approval_end_the_loop_and_the_others_run() -> None:
    ledger = Ledger()
    model = ScriptedModel([_calls(("p1", "pay", 250), ("p2", "pay", 50), ("r1", "refund", 5))])
    outcome = await run_tool_loop(
        [model], _request(), ledger.tools(), approvals=True, tool_context=CONTEXT
    )
    assert [c.id for c in outcome.awaiting] == ["p1", "r1"]
    assert ledger.ran == [("p2", "pay", 50)]
    results = outcome.messages[-1]
    assert isinstance(results, ToolResultMessage)
    assert [r.tool_use_id for r in results.content] == ["p2"]  # the waiting have none yet
    assert len(model.requests) == 1  # the model is not asked again
    assert {c.id for c in ledger.seen_calls} == {"p1", "p2"}
    assert all(c.context is CONTEXT for c in ledger.seen_calls)  # the rule gets the call


async def test_a_loop_that_cannot_ask_refuses_such_calls_and_never_runs_them() -> None:
    ledger = Ledger()
    model = ScriptedModel([_calls(("p1", "pay", 250)), ScriptedModel.answer("ok")])
    outcome = await run_tool_loop([model], _request(), ledger.tools())
    assert outcome.awaiting == ()
    assert ledger.ran == []
    [result] = model.requests[1].messages[-1].content  # type: ignore[union-attr]
    assert result.is_error
    assert result.text == "not run: it needs the caller's approval, which cannot be asked for here"


async def test_a_rule_that_raises_makes_the_call_wait() -> None:
    def broken(call: ToolCall, arguments: Mapping[str, Any]) -> bool:
        raise KeyError("amount")

    ran: list[Any] = []

    async def handler(arguments: Mapping[str, Any], call: ToolCall) -> str:
        ran.append(arguments)
        return "done"

    risky = Tool("risky", "Risky.", {"type": "object"}, handler, requires_approval=broken)
    model = ScriptedModel([ModelReply(tool_calls=(Call("risky", {}, id="x1"),))])
    outcome = await run_tool_loop([model], _request(), [risky], approvals=True)
    assert [c.id for c in outcome.awaiting] == ["x1"]
    assert ran == []


async def test_a_call_that_could_not_run_anyway_gets_its_error_not_an_approval() -> None:
    ledger = Ledger()
    model = ScriptedModel(
        [ModelReply(tool_calls=(Call("refund", {"amount": "lots"}, id="r1"),)), "ok"]  # type: ignore[list-item]
    )
    outcome = await run_tool_loop([model], _request(), ledger.tools(), approvals=True)
    assert outcome.awaiting == ()
    [result] = model.requests[1].messages[-1].content  # type: ignore[union-attr]
    assert result.is_error
    assert "invalid arguments at amount" in result.text


async def test_a_control_action_beside_waiting_calls_is_not_taken() -> None:
    ask = ControlAction("ask_caller", "Ask.", "input_required")
    model = ScriptedModel(
        [
            ModelReply(
                tool_calls=(
                    Call("refund", {"amount": 5}, id="r1"),
                    Call("ask_caller", {"message": "sure?"}, id="a1"),
                )
            )
        ]
    )
    outcome = await run_tool_loop(
        [model], _request(), Ledger().tools(), actions=[ask], approvals=True
    )
    assert outcome.control is None
    assert [c.id for c in outcome.awaiting] == ["r1"]
    [result] = outcome.messages[-1].content  # type: ignore[union-attr]
    assert result.text == "not taken: other calls wait for the caller's approval"


# -- LoopingAgent: asking, and settling on the next turn -------------------------------------------


class Payer(LoopingAgent):
    ledger = Ledger()
    idempotent = False

    def agent_soul(self, capabilities: Sequence[str]) -> str:
        return "Pay."

    def agent_config(self) -> LoopingConfig:
        return LoopingConfig(stream_answer=False)

    def agent_tools(self, context: ToolContext) -> Sequence[Tool]:
        return self.ledger.tools(idempotent=self.idempotent)


def _said(request: ModelRequest) -> ModelReply | str:
    """Asks to refund 5 and pay 250; then tells what the results were."""
    last = request.messages[-1]
    if isinstance(last, UserMessage) and len(request.messages) == 1:
        return _calls(("r1", "refund", 5), ("p1", "pay", 250))
    results = [m for m in request.messages if isinstance(m, ToolResultMessage)][-1]
    seen = " | ".join(r.text for r in results.content)
    heard = last.content[0].text if isinstance(last, UserMessage) else ""  # type: ignore[union-attr]
    return seen + (f" / {heard}" if heard else "")


@pytest.fixture
def payer() -> tuple[Payer, Ledger, FunctionModel]:
    ledger = Ledger()
    model = FunctionModel(_said)
    host = PluginHost(PluginRegistry(), pluggy.PluginManager("looping"))
    agent = Payer(AgentContext(tenant="t", plugins=host, models=(model,)))
    agent.ledger = ledger
    return agent, ledger, model


def _turn(
    session: MemorySession, approvals: MemoryApprovals, *blocks: Any, message_id: str = "m1"
) -> TurnInput:
    session.turn = message_id
    return TurnInput(
        task_id="task-1",
        context_id="ctx",
        caller=CALLER,
        message=UserMessage(blocks or (TextBlock("refund and pay"),)),
        session=session,
        approvals=approvals,
        tool_context=CONTEXT,
    )


DECISIONS = DataBlock({"toolApprovals": {"decisions": []}})  # what the edge checked and wrote


async def _asked(payer: tuple[Payer, Ledger, FunctionModel]) -> tuple[MemorySession, Any]:
    agent, _, _ = payer
    session, approvals = MemorySession(), MemoryApprovals()
    first = await agent.run(_turn(session, approvals))
    assert first.outcome is TurnOutcome.INPUT_REQUIRED
    return session, approvals


async def test_the_turn_asks_with_the_pending_calls_as_data(
    payer: tuple[Payer, Ledger, FunctionModel],
) -> None:
    agent, ledger, _ = payer
    session, approvals = MemorySession(), MemoryApprovals()
    result = await agent.run(_turn(session, approvals))
    assert result.outcome is TurnOutcome.INPUT_REQUIRED
    assert result.reply == (
        DataBlock(
            {
                "toolApprovals": {
                    "pending": [
                        {"callId": "r1", "tool": "refund", "arguments": {"amount": 5}},
                        {"callId": "p1", "tool": "pay", "arguments": {"amount": 250}},
                    ]
                }
            }
        ),
    )
    assert [a.state for a in await approvals.approvals()] == ["pending", "pending"]
    assert ledger.ran == []


async def test_approved_calls_run_once_and_denied_ones_never(
    payer: tuple[Payer, Ledger, FunctionModel],
) -> None:
    agent, ledger, model = payer
    session, approvals = await _asked(payer)
    approvals.decide("r1", True)
    approvals.decide("p1", False, "too much")
    second = await agent.run(_turn(session, approvals, DECISIONS, TextBlock("ok"), message_id="m2"))
    assert second.outcome is TurnOutcome.COMPLETED
    assert ledger.ran == [("r1", "refund", 5)]
    assert second.reply == (
        TextBlock("refunded 5 | not run: denied by the caller (too much) / ok"),
    )
    assert all(a.ended for a in await approvals.approvals())
    # The same turn run again (a retried job, a second worker): nothing left to settle.
    again = await agent.run(_turn(session, approvals, DECISIONS, message_id="m2"))
    assert again.outcome is TurnOutcome.COMPLETED
    assert ledger.ran == [("r1", "refund", 5)]
    assert len(model.requests) >= 2


async def test_a_call_a_crash_cut_off_is_not_run_again(
    payer: tuple[Payer, Ledger, FunctionModel],
) -> None:
    agent, ledger, _ = payer
    session, approvals = await _asked(payer)
    approvals.decide("r1", True)
    approvals.decide("p1", True)
    assert await approvals.start("r1")  # a run began it, then died before its result
    result = await agent.run(_turn(session, approvals, DECISIONS, message_id="m2"))
    assert ledger.ran == [("p1", "pay", 250)]
    assert result.reply == (
        TextBlock("not run again: it began before a crash and its outcome is unknown | paid 250"),
    )


async def test_an_idempotent_tool_cut_off_by_a_crash_runs_again(
    payer: tuple[Payer, Ledger, FunctionModel],
) -> None:
    agent, ledger, _ = payer
    agent.idempotent = True
    session, approvals = await _asked(payer)
    approvals.decide("r1", True)
    approvals.decide("p1", False)
    assert await approvals.start("r1")
    result = await agent.run(_turn(session, approvals, DECISIONS, message_id="m2"))
    assert ledger.ran == [("r1", "refund", 5)]
    assert result.reply == (TextBlock("refunded 5 | not run: denied by the caller"),)


async def test_a_turn_without_an_approval_log_never_runs_such_calls(
    payer: tuple[Payer, Ledger, FunctionModel],
) -> None:
    agent, ledger, _ = payer
    turn = attrs.evolve(_turn(MemorySession(), MemoryApprovals()), approvals=None)
    result = await agent.run(turn)
    assert result.outcome is TurnOutcome.COMPLETED
    assert ledger.ran == []
