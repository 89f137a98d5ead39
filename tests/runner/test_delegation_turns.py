"""`RoundAgent` end to end: the model plans through `delegate`, a refused plan is told why and
corrected, subagents run isolated (their own session, only their recipe's tools, no `delegate`),
and the task carries the plan, the per-subtask states and the summed usage and cost."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from looping_core.agent import AgentLoadError
from looping_core.testing import FakeGateway, FakeModelServer, Reply, ed25519_private_jwk

from support.serving import keeper, serving, start_agent


@pytest.fixture
async def model_server() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer() as server:
        yield server


def plan(*subtasks: dict[str, Any]) -> Reply:
    return Reply.tool_calls(("p1", "delegate", {"subtasks": list(subtasks)}))


async def test_a_refused_plan_is_corrected_and_the_subtasks_run_isolated(
    gateway: FakeGateway, model_server: FakeModelServer, tmp_path: Path
) -> None:
    store = tmp_path / "looping.db"
    model_server.replies += [
        plan(
            {"id": "a", "type": "summarize-notes", "params": {"topic": "milk", "colour": 1}},
            {"id": "b", "type": "nope", "params": {}},
        ),
        Reply.tool_calls(
            (
                "p2",
                "delegate",
                {
                    "subtasks": [
                        {"id": "a", "type": "summarize-notes", "params": {"topic": "milk"}},
                        {
                            "id": "b",
                            "type": "summarize-notes",
                            "params": {"topic": "eggs"},
                            "depends_on": ["a"],
                        },
                    ]
                },
            )
        ),
        Reply.text("Milk summary."),  # subagent a (wave 1)
        Reply.text("Eggs summary."),  # subagent b (wave 2)
        Reply.text("Both summarized."),
    ]
    config = keeper(model_server.base_url, agent="support.agents:PlanningAgent")
    config += "[prices.m]\ninput = 1000000.0\noutput = 0.0\n"  # a cost of 1 per input token
    async with serving(gateway, store_url=f"sqlite:///{store}", extra=config) as agent:
        _, first = await gateway.send_turn(agent.endpoint, tenant="keeper", text="summarize")
        [push] = await gateway.wait_for_pushes(1)
    task = push.json["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "Both summarized."}]
    surfaced = {a["name"]: a["parts"] for a in task["artifacts"][1:]}
    assert surfaced == {"p2/a": [{"text": "Milk summary."}], "p2/b": [{"text": "Eggs summary."}]}
    subtasks = task["metadata"]["looping.subtasks"]
    assert [(s["id"], s["state"], s["wave"]) for s in subtasks] == [
        ("p2/a", "done", 1),
        ("p2/b", "done", 2),
    ]
    waves = task["metadata"]["looping.waves"]
    assert [(w["plan"], w["wave"], w["subtasks"]) for w in waves] == [
        ("p2", 1, ["p2/a"]),
        ("p2", 2, ["p2/b"]),
    ]
    assert all(w["seconds"] >= 0 for w in waves)
    usage = task["metadata"]["looping.usage"]
    assert usage["input_tokens"] == 20 + 20 + 10 + 10 + 10  # parent's three calls, two subagents
    assert [s["cost"] for s in subtasks] == [10.0, 10.0]  # each subagent's, and summed:
    assert task["metadata"]["looping.cost"] == 20 + 20 + 10 + 10 + 10

    refused = model_server.requests[1]["messages"][-1]
    assert refused["role"] == "tool"
    told = str(refused["content"])  # every problem, named where it is
    assert "at subtasks/0/params: Additional properties are not allowed ('colour'" in told
    assert "at subtasks/1/type: 'nope' is not one of ['summarize-notes']" in told
    parent_tools = [t["function"]["name"] for t in model_server.requests[0]["tools"]]
    assert sorted(parent_tools) == ["add_note", "delegate", "list_notes"]
    for index, topic in ((2, "milk"), (3, "eggs")):
        sub = model_server.requests[index]
        system, brief = sub["messages"]
        assert system == {
            "role": "system",
            "content": f"Summarize at most 20 notes about {topic}.",  # the plugin's recipe
        }
        assert json.loads(brief["content"][0]["text"])["params"]["topic"] == topic
        assert "delegate" not in [t["function"]["name"] for t in sub.get("tools", [])]
    b_brief = json.loads(model_server.requests[3]["messages"][1]["content"][0]["text"])
    assert b_brief["inputs"] == {"p2/a": "Milk summary."}
    result = json.loads(model_server.requests[4]["messages"][-1]["content"])
    assert result == {
        "a": {"state": "done", "result": "Milk summary."},
        "b": {"state": "done", "result": "Eggs summary."},
    }
    with sqlite3.connect(store) as connection:
        rows = connection.execute(
            "SELECT subtask_id, state, cost FROM subtasks ORDER BY seq"
        ).fetchall()
        sessions = connection.execute("SELECT context_id FROM sessions").fetchall()
    assert rows == [("p2/a", "done", 10.0), ("p2/b", "done", 10.0)]
    assert len(sessions) == 3  # the caller's, and one for each subagent
    assert first["result"]["task"]["contextId"] in [c for (c,) in sessions]


async def test_a_round_policy_missing_a_word_stops_the_server(gateway: FakeGateway) -> None:
    config = keeper("http://127.0.0.1:9/v1", agent="support.agents:WordlessPlanningAgent")
    with pytest.raises(AgentLoadError, match=re.escape("round_policy()")):
        await start_agent([gateway.origin], extra=config)


def test_looping_check_makes_the_agents_and_reports_a_wordless_policy(
    looping_cli: Any, tmp_path: Path
) -> None:
    """`check` reads every agent's seams as `serve` does, so a policy missing a word shows."""
    config = tmp_path / "looping.toml"
    config.write_text(keeper("http://127.0.0.1:9/v1", agent="support.agents:WordlessPlanningAgent"))
    key = {"A2A_SIGNING_KEY": json.dumps(ed25519_private_jwk("check-key"))}
    result = looping_cli("check", "--config", str(config), site=Path(__file__).parents[1], env=key)
    assert result.returncode == 1
    assert "WordlessPlanningAgent.round_policy()" in result.stderr
    assert "budget_spent" in result.stderr
    good = tmp_path / "good.toml"
    good.write_text(keeper("http://127.0.0.1:9/v1", agent="support.agents:PlanningAgent"))
    checked = looping_cli("check", "--config", str(good), site=Path(__file__).parents[1], env=key)
    assert checked.returncode == 0, checked.stderr


async def test_cancel_during_a_wave_stops_every_subagent_with_the_policys_words(
    gateway: FakeGateway, model_server: FakeModelServer, tmp_path: Path
) -> None:
    store = tmp_path / "looping.db"
    model_server.replies += [
        plan(
            {"id": "a", "type": "summarize-notes", "params": {"topic": "milk"}},
            {"id": "b", "type": "summarize-notes", "params": {"topic": "eggs"}},
        ),
        Reply.slow(3),  # both subagents wait for the model when the caller cancels
        Reply.slow(3),
    ]
    config = keeper(model_server.base_url, agent="support.agents:PlanningAgent")
    async with serving(gateway, store_url=f"sqlite:///{store}", extra=config) as agent:
        _, first = await gateway.send_turn(agent.endpoint, tenant="keeper", text="summarize")
        task_id = first["result"]["task"]["id"]
        for _ in range(500):
            if len(model_server.requests) == 3:
                break
            await asyncio.sleep(0.01)
        _, canceled = await gateway.call(
            agent.endpoint, "CancelTask", {"tenant": "keeper", "id": task_id}, tenant="keeper"
        )
        [push] = await gateway.wait_for_pushes(1)
        # The cancel answers (and pushes) first; the stopped turn writes its plan just after.
        for _ in range(500):
            with sqlite3.connect(store) as connection:
                (written,) = connection.execute("SELECT metadata FROM tasks").fetchone()
            if written is not None:
                break
            await asyncio.sleep(0.02)
    status = canceled["result"]["status"]
    assert status["state"] == "TASK_STATE_CANCELED"
    assert status["message"]["parts"] == [{"text": "Test canceled."}]
    assert push.json["task"]["status"]["state"] == "TASK_STATE_CANCELED"
    with sqlite3.connect(store) as connection:
        rows = connection.execute("SELECT subtask_id, state FROM subtasks ORDER BY seq").fetchall()
    assert rows == [("p1/a", "canceled"), ("p1/b", "canceled")]
    assert len(model_server.requests) == 3  # nothing asked the model after the cancel
    # The canceled task keeps its plan as it stood, and what was spent (it had none before).
    with sqlite3.connect(store) as connection:
        (stored,) = connection.execute("SELECT metadata FROM tasks").fetchone()
    metadata = json.loads(stored)
    assert [(s["id"], s["state"], s["wave"]) for s in metadata["looping.subtasks"]] == [
        ("p1/a", "canceled", 1), ("p1/b", "canceled", 1),
    ]  # fmt: skip
    assert metadata["looping.waves"][0]["subtasks"] == ["p1/a", "p1/b"]
    assert "looping.usage" in metadata
