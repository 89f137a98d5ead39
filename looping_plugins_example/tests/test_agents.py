"""The example agents served for real through looping-core's agent harness (a fake gateway with
real keys, the edge's checks, a store, signed pushes): no file outside this distribution."""

from __future__ import annotations

import json
from typing import Any

from looping_core.agent import StreamEnd
from looping_core.content import TextChunk, ToolUseChunk, Usage
from looping_core.testing import AgentHarness, ScriptedModel, TestModel


def call(call_id: str, name: str, arguments: str) -> list[Any]:
    return [ToolUseChunk(0, arguments, id=call_id, name=name), StreamEnd(Usage(), "tool_use")]


def answer(text: str) -> list[Any]:
    return [TextChunk(text), StreamEnd(Usage(input_tokens=5, output_tokens=3), "end")]


async def test_the_word_counter_answers_with_an_artifact() -> None:
    async with AgentHarness("looping_plugins_example.agent:WordCountAgent") as harness:
        done = await harness.result(await harness.send("one two three four"))
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [(a["name"], a["parts"]) for a in done["artifacts"]] == [("word-count", [{"text": "4"}])]


async def test_the_notes_keeper_keeps_a_note_and_reads_it_back() -> None:
    model = ScriptedModel(
        [
            call("c1", "add_note", '{"text": "the meeting moved to Friday"}'),
            answer("Noted."),
            call("c2", "list_notes", "{}"),
            answer("The meeting moved to Friday."),
        ]
    )
    agent = "looping_plugins_example.agent:NotesKeeper"
    async with AgentHarness(agent, model=model, plugins=["example-notes"]) as harness:
        first = await harness.send("Remember: the meeting moved to Friday.")
        assert (await harness.result(first))["artifacts"][0]["parts"] == [{"text": "Noted."}]
        second = await harness.send("When is the meeting?", context_id=first["contextId"])
        done = await harness.result(second)
    assert done["artifacts"][0]["parts"] == [{"text": "The meeting moved to Friday."}]
    assert model.requests[0].system.startswith("You keep notes")  # the app's soul
    assert "the meeting moved to Friday" in str(model.requests[3].messages[-1])


async def test_the_ticket_triage_answers_with_checked_data() -> None:
    fire = {"summary": "Printer on fire, floor 3", "urgency": "urgent", "team": "facilities"}
    wrong = {**fire, "urgency": "asap"}
    model = ScriptedModel([ScriptedModel.answers_with(wrong), ScriptedModel.answers_with(fire)])
    agent = "looping_plugins_example.agent:TicketTriage"
    async with AgentHarness(agent, model=model) as harness:
        done = await harness.result(await harness.send("The printer on floor 3 is on fire!"))
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert done["artifacts"][0]["parts"] == [{"data": fire, "mediaType": "application/json"}]
    [spec] = model.requests[0].tools
    assert spec.name == "final_answer"
    assert spec.input_schema["properties"]["urgency"]["enum"] == ["low", "normal", "urgent"]
    retry = str(model.requests[1].messages[-1])
    assert "'asap' is not one of ['low', 'normal', 'urgent']" in retry


async def test_the_ticket_triage_answers_offline_with_the_test_model() -> None:
    agent = "looping_plugins_example.agent:TicketTriage"
    async with AgentHarness(agent, model=TestModel()) as harness:
        done = await harness.result(await harness.send("My invoice is wrong"))
    assert done["artifacts"][0]["parts"][0]["data"] == {
        "summary": "My invoice is wrong",
        "urgency": "low",
        "team": "facilities",
    }


async def test_the_refund_desk_refunds_only_what_the_caller_approves() -> None:
    agent = "looping_plugins_example.agent:RefundDesk"
    async with AgentHarness(agent, model=TestModel()) as harness:
        waiting = await harness.result(await harness.send("A1234"))
        [pending] = harness.pending(waiting)
        assert pending["tool"] == "refund"
        assert pending["arguments"] == {"order": "A1234", "amount": 0}
        await harness.approve(waiting)
        done = await harness.result(waiting)
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    refunded = f"refunded 0 cents on order A1234 (refund {pending['callId']})"
    assert done["artifacts"][0]["parts"] == [{"text": json.dumps({"refund": refunded})}]
