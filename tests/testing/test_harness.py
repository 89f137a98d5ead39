"""The agent harness as an agent author uses it: a turn sent the way the gateway sends it, the
result from the verified push, a scripted model plugged in; `MemorySession` drives a loop with
no store; the pytest fixtures exist with or without pytest-asyncio."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from looping_core.agent import AgentContext, LoopingAgent, StreamEnd, TurnInput
from looping_core.config import Config
from looping_core.content import TextBlock, TextChunk, ToolUseChunk, Usage, UserMessage
from looping_core.contract import Identity
from looping_core.plugins import PluginHost
from looping_core.testing import AgentHarness, MemorySession, ScriptedModel, _harness

from support.ports import unused_port


def call(call_id: str, name: str, arguments: str) -> list[Any]:
    return [ToolUseChunk(0, arguments, id=call_id, name=name), StreamEnd(Usage(), "tool_use")]


def answer(text: str) -> list[Any]:
    return [TextChunk(text), StreamEnd(Usage(input_tokens=4, output_tokens=2), "end")]


async def test_a_turn_through_the_harness_comes_back_from_the_verified_push() -> None:
    async with AgentHarness("looping_plugins_example.agent:WordCountAgent") as harness:
        task = await harness.send("one two three")
        assert task["status"]["state"] == "TASK_STATE_SUBMITTED"  # as the gateway gets it
        done = await harness.result(task)
        got = await harness.call("GetTask", {"id": task["id"]})
        assert harness.config is not None
        store = Path(harness.config.store.url.removeprefix("sqlite:///"))
        assert store.exists()
    assert done["artifacts"][0]["parts"] == [{"text": "3"}]
    assert got["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert harness.gateway.pushes[0].claims is not None  # the push's signature was verified
    assert not store.parent.exists()  # the store it made for the run is gone with it


async def test_a_scripted_model_drives_a_looping_agent_and_its_plugins(
    agent_harness: Callable[..., Any],
) -> None:
    model = ScriptedModel(
        [
            call("c1", "add_note", '{"text": "milk"}'),
            answer("Noted."),
            call("c2", "list_notes", "{}"),
            answer("You have: milk"),
        ]
    )
    harness = await agent_harness(
        "looping_plugins_example.agent:NotesKeeper", model=model, plugins=["example-notes"]
    )
    first = await harness.send("remember milk")
    done = await harness.result(first)
    assert done["artifacts"][0]["parts"] == [{"text": "Noted."}]
    second = await harness.send("what do I have?", context_id=first["contextId"])
    again = await harness.result(second)
    assert again["artifacts"][0]["parts"] == [{"text": "You have: milk"}]
    listed = model.requests[3].messages[-1]
    assert '"milk"' in str(listed)  # the tool read what the first turn wrote


class Plain(LoopingAgent):
    def agent_soul(self, capabilities: Sequence[str]) -> str:
        return "Test soul."


async def test_a_memory_session_drives_a_loop_with_no_store() -> None:
    session = MemorySession()
    session.inbox.append(UserMessage([TextBlock("and eggs")]))
    model = ScriptedModel([answer("Noted both.")])
    host = PluginHost.load(Config(), environ={})
    agent = Plain(AgentContext(tenant="t", plugins=host, models=(model,)))
    turn = TurnInput(
        task_id="task-1",
        context_id="ctx",
        caller=Identity("t", "https://gw.example", "alice"),
        message=UserMessage([TextBlock("remember milk")]),
        session=session,
    )
    result = await agent.run(turn)
    assert result.reply == (TextBlock("Noted both."),)
    texts = [block.text for m in session.messages for block in m.content if hasattr(block, "text")]
    assert texts == ["remember milk", "and eggs", "Noted both."]
    assert model.requests[0].messages[-1] == UserMessage([TextBlock("and eggs")])


def test_without_pytest_asyncio_the_fixtures_say_what_to_install(tmp_path: Path) -> None:
    test = tmp_path / "test_needs_asyncio.py"
    test.write_text("def test_it(agent_harness):\n    pass\n")
    hidden = tmp_path / "pytest_asyncio"  # found first on the path, and fails to import
    hidden.mkdir()
    (hidden / "__init__.py").write_text("raise ImportError('hidden for this test')\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:asyncio",
         "-p", "no:aiohttp",
         str(test)],
        capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "needs pytest-asyncio: pip install pytest-asyncio" in result.stdout


async def test_the_grpc_port_is_never_the_http_port(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither port is bound while both are chosen, so the kernel may offer one twice: the
    harness then asks again instead of configuring both listeners on one port."""
    first, second = unused_port(), unused_port()
    offered = iter([first, first, second])
    monkeypatch.setattr(_harness, "unused_port", lambda: next(offered))
    agent = "looping_plugins_example.agent:WordCountAgent"
    async with AgentHarness(agent, grpc=True) as harness:
        assert (harness.port, harness.grpc_port) == (first, second)
        task = await harness.send("one two")
        assert (await harness.result(task))["artifacts"][0]["parts"] == [{"text": "2"}]
