"""The agent harness answers a task that waits for the caller's approval: approve and deny, by
call or all at once, and an answer that leaves a call out is refused as the gateway would see."""

from __future__ import annotations

import pytest

from looping_core.agent import ModelRequest
from looping_core.content import ToolResultMessage
from looping_core.testing import AgentHarness, FunctionModel, ModelReply, ToolCall

from support import agents as test_agents


def _payer(request: ModelRequest) -> ModelReply | str:
    results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
    if results:
        return " | ".join(r.text for r in results[-1].content)
    calls = (
        ToolCall("pay", {"amount": 250, "to": "bob"}),
        ToolCall("pay", {"amount": 300, "to": "ann"}),
    )
    return ModelReply(tool_calls=calls)


async def test_the_harness_approves_one_call_and_denies_another() -> None:
    async with AgentHarness("support.agents:PayingAgent", model=FunctionModel(_payer)) as harness:
        waiting = await harness.result(await harness.send("pay them"))
        bob, ann = harness.pending(waiting)
        assert (bob["arguments"], ann["arguments"]) == (
            {"amount": 250, "to": "bob"},
            {"amount": 300, "to": "ann"},
        )
        with pytest.raises(AssertionError, match="missing"):
            await harness.approve(waiting, bob["callId"])  # ann left undecided
        await harness.approve(waiting, bob["callId"], deny={ann["callId"]: "not ann"})
        done = await harness.result(waiting)
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert done["artifacts"][0]["parts"] == [
        {"text": "paid 250 to bob | not run: denied by the caller (not ann)"}
    ]
    assert [p[1:] for p in test_agents.PAID if p[0] in (bob["callId"], ann["callId"])] == [
        (250, "bob")
    ]


async def test_the_harness_denies_every_call() -> None:
    async with AgentHarness("support.agents:PayingAgent", model=FunctionModel(_payer)) as harness:
        waiting = await harness.result(await harness.send("pay them"))
        await harness.deny(waiting, reason="no")
        done = await harness.result(waiting)
    assert done["artifacts"][0]["parts"] == [
        {"text": "not run: denied by the caller (no) | not run: denied by the caller (no)"}
    ]
