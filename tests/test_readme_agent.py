"""The own-agent example (on the README's front page and in the own-agent tutorial, the same
block) is what it says: the class, the function and a tenant block make an agent that is served
and calls its typed tool, with the tutorial's test model."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from looping_core.a2a import generate_signing_key
from looping_core.agent import ModelRequest
from looping_core.content import TextBlock, ToolResultMessage
from looping_core.testing import AgentHarness, FunctionModel, ModelReply, TestModel, ToolCall

from support.ports import unused_port

ROOT = Path(__file__).parents[1]
SHOWN_IN = (ROOT / "README.md", ROOT / "docs" / "own-agent.md")


def _marked_block(page: Path, marker: str) -> str:
    found = re.search(rf"<!-- {marker} -->\n```python\n(.*?)\n```", page.read_text(), re.S)
    assert found is not None, f"{marker} in {page}"
    return found.group(1)


def test_the_front_page_shows_the_tutorials_agent() -> None:
    readme, tutorial = (_marked_block(page, "own-agent") for page in SHOWN_IN)
    assert readme == tutorial
    configs = (
        re.search(r"<!-- own-agent-config -->\n```toml\n(.*?)\n```", page.read_text(), re.S)
        for page in SHOWN_IN
    )
    readme_config, tutorial_config = (found.group(1) for found in configs if found is not None)
    assert readme_config == tutorial_config


@pytest.fixture
def my_agents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "my_agents.py").write_text(_marked_block(SHOWN_IN[1], "own-agent"))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_agents:Counter"
    sys.modules.pop("my_agents", None)


def _model(request: ModelRequest) -> ModelReply | str:
    last = request.messages[-1]
    if isinstance(last, ToolResultMessage):
        return f"It has {last.content[0].text} words."
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


def _readme_block(marker: str, language: str) -> str:
    found = re.search(
        rf"<!-- {marker} -->\n```{language}\n(.*?)\n```", SHOWN_IN[0].read_text(), re.S
    )
    assert found is not None, marker
    return found.group(1)


@pytest.mark.slow
def test_the_readme_agent_serves_from_a_fresh_folder_as_shown(tmp_path: Path) -> None:
    """The README's three blocks, and nothing else: its module and its config saved in a new
    folder, its commands run there (on free ports instead of the usual ones), with the venv's
    `looping` on the PATH. The config's module is found beside it, from any folder."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "my_agents.py").write_text(_readme_block("own-agent", "python"))
    port, gateway_port, model_port = unused_port(), unused_port(), unused_port()
    config = _readme_block("own-agent-config", "toml")
    for old, new in (("port = 8080", f"port = {port}"),
                     ("127.0.0.1:9000", f"127.0.0.1:{gateway_port}"),
                     ("127.0.0.1:11434", f"127.0.0.1:{model_port}")):  # fmt: skip
        assert old in config, old
        config = config.replace(old, new)
    (project / "looping.toml").write_text(config)
    commands = _readme_block("own-agent-commands", "sh")
    assert "looping model serve &" in commands
    commands = commands.replace(
        "looping model serve &", f"looping model serve --port {model_port} &"
    )
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    script = "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + commands
    ran = subprocess.run(
        ["bash", "-c", script], cwd=project, env=env, capture_output=True, text=True,
        check=False, timeout=180,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "\nTASK_STATE_COMPLETED  task " in ran.stdout, ran.stdout
    assert "count_words" in ran.stdout  # the local endpoint had the agent call its tool

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env["A2A_SIGNING_KEY"] = json.dumps(generate_signing_key("agent-key"))
    checked = subprocess.run(
        ["looping", "check", "--config", str(project / "looping.toml")],
        cwd=elsewhere, env=env, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Tenants: counter." in checked.stdout
