"""The own-agent example (on the README's front page and in the own-agent tutorial, the same
block) is what it says: the class, the function and a tenant block make an agent that is served
and calls its typed tool, with the tutorial's test model."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from looping_core.agent import ModelRequest
from looping_core.content import TextBlock, ToolResultMessage
from looping_core.testing import AgentHarness, FunctionModel, ModelReply, TestModel, ToolCall

ROOT = Path(__file__).parents[1]
SHOWN_IN = (ROOT / "README.md", ROOT / "docs" / "own-agent.md")


def _marked_block(page: Path, marker: str) -> str:
    found = re.search(rf"<!-- {marker} -->\n```python\n(.*?)\n```", page.read_text(), re.S)
    assert found is not None, f"{marker} in {page}"
    return found.group(1)


def test_the_front_page_shows_the_tutorials_agent() -> None:
    readme, tutorial = (_marked_block(page, "own-agent") for page in SHOWN_IN)
    assert readme == tutorial


@pytest.fixture
def my_agents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "my_agents.py").write_text(_marked_block(SHOWN_IN[1], "own-agent"))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_agents:Counter"
    sys.modules.pop("my_agents", None)


def _model(request: ModelRequest) -> ModelReply | str:
    last = request.messages[-1]
    if isinstance(last, ToolResultMessage):
        return f"It has {last.content[0].content[0].text} words."  # type: ignore[union-attr]
    asked = "".join(b.text for b in last.content if isinstance(b, TextBlock))
    return ModelReply(tool_calls=(ToolCall("count_words", {"text": asked}),))


async def test_the_readme_agent_calls_its_typed_tool(my_agents: str) -> None:
    async with AgentHarness(my_agents, model=FunctionModel(_model)) as agent:
        done = await agent.result(await agent.send("one two three four"))
    assert done["artifacts"][0]["parts"] == [{"text": "It has 4 words."}]
    async with AgentHarness(my_agents, model=TestModel()) as agent:
        wired = await agent.result(await agent.send("anything"))
    assert wired["status"]["state"] == "TASK_STATE_COMPLETED"


def test_the_readme_tool_is_still_the_function(my_agents: str) -> None:
    import my_agents as module  # noqa: PLC0415 - written by the fixture

    assert module.count_words("a b") == 2
    assert module.count_words.input_schema == {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "The text whose words to count"}},
        "required": ["text"],
        "additionalProperties": False,
    }
