"""Structured data and files by URL through the edge, and the media types a card declares."""

from __future__ import annotations

from a2a.types import AgentCard as ProtoAgentCard
from google.protobuf.json_format import ParseDict
from test_tasks import call, send, wait_state

from looping_core.testing import FakeGateway

from support.serving import RunningAgent, start_agent

DATA = {"data": {"date": "2026-12-01", "guests": 2, "tags": ["quiet"]}}
TYPED_DATA = {"data": [1, "x"], "mediaType": "application/json"}
REPORT = {
    "url": "https://files.example.com/r.pdf",
    "filename": "r.pdf",
    "mediaType": "application/pdf",
}
CHART = {"url": "https://files.example.com/c.png", "filename": "c.png", "mediaType": "image/png"}


async def test_data_and_files_by_url_reach_the_agent_and_come_back_as_they_were(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    parts = [DATA, TYPED_DATA, REPORT, CHART]
    task = await send(agent, gateway, "mirror", parts=parts)
    done = await wait_state(agent, gateway, task["id"], "TASK_STATE_COMPLETED")
    [artifact] = done["artifacts"]
    # A data part without a media type comes back with the one it implies.
    assert artifact["parts"] == [
        {**DATA, "mediaType": "application/json"},
        TYPED_DATA,
        REPORT,
        CHART,
    ]
    assert done["history"][0]["parts"][1:] == parts


async def test_a_part_outside_the_tenants_input_modes_is_refused_and_nothing_is_written(
    gateway: FakeGateway,
) -> None:
    extra = """
[tenants.texts]
agent = "support.agents:EchoAgent"
[tenants.texts.card]
name = "Texts"
description = "Takes text only."
input_modes = ["text/plain"]
output_modes = ["text/plain"]
skills = [{ id = "t", name = "T", description = "Text.", tags = ["t"] }]
"""
    running, runner = await start_agent([gateway.origin], extra=extra)
    try:
        card = (await call(running, gateway, "GetExtendedAgentCard", {}, tenant="texts"))["result"]
        ParseDict(card, ProtoAgentCard())
        assert card["defaultInputModes"] == ["text/plain"]
        assert card["defaultOutputModes"] == ["text/plain"]
        status, body = await gateway.send_turn(
            running.endpoint, tenant="texts", text="hi", parts=[DATA]
        )
        assert status == 200
        assert body["error"]["code"] == -32005, body
        assert "does not take application/json" in body["error"]["message"]
        listed = await call(running, gateway, "ListTasks", {}, tenant="texts")
        assert listed["result"]["tasks"] == []
        # The default card takes data, documents, images and audio.
        alice = (await call(running, gateway, "GetExtendedAgentCard", {}))["result"]
        assert alice["defaultInputModes"] == [
            "text/*",
            "application/json",
            "application/pdf",
            "image/*",
            "audio/*",
        ]
    finally:
        await running.session.close()
        await runner.cleanup()
