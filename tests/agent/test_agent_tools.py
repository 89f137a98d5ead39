"""An agent's own tools: typed functions given by `agent_tools(context)` beside the plugins'
tool families, built for the caller; clashes and strays found when the agent is made; the old
`agent_plugins()` still works, with a deprecation warning."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pluggy
import pytest

from looping_core.agent import (
    AgentContext,
    AgentLoadError,
    LoopingAgent,
    ModelRequest,
    TurnInput,
)
from looping_core.agent.internal import load_agent_class
from looping_core.content import TextBlock, ToolResultMessage, UserMessage
from looping_core.contract import Identity, PluginInfo, Tool, ToolCall, ToolContext, ToolFamily
from looping_core.plugins import PluginHost
from looping_core.plugins._registry import Contribution, LoadedPlugin, PluginRegistry, Provenance
from looping_core.testing import AgentHarness, FunctionModel, ModelReply, TestModel
from looping_core.testing import ToolCall as ScriptedCall
from looping_core.tools import tool

import typed_agents

SOURCE = Provenance("lpt-shapes", "lpt-shapes", "1.0")


async def _noop(arguments: Mapping[str, Any], call: ToolCall) -> str:
    return "family"


def _host(*names: str) -> PluginHost:
    tools = [Tool(name, "A family's tool.", {"type": "object"}, _noop) for name in names]
    plugin = LoadedPlugin(
        source=SOURCE, obj=object(), info=PluginInfo(capability="Shapes."), config=None, hooks=()
    )
    family = ToolFamily("shapes", "Shapes.", lambda context: tools)
    registry = PluginRegistry(
        plugins=(plugin,), tool_families={"shapes": Contribution(family, SOURCE)}
    )
    return PluginHost(registry, pluggy.PluginManager("looping"))


def _context(*family_tools: str) -> AgentContext:
    return AgentContext(tenant="t", plugins=_host(*family_tools), models=(TestModel(),))


async def test_a_served_agent_calls_its_own_typed_tools_built_for_the_caller() -> None:
    typed_agents.SEEN.clear()

    def react(request: ModelRequest) -> ModelReply | str:
        last = request.messages[-1]
        if isinstance(last, ToolResultMessage):
            return "Said: " + " | ".join(
                b.text for r in last.content for b in r.content if isinstance(b, TextBlock)
            )
        assert [spec.name for spec in request.tools] == ["shout", "whoami"]
        assert request.tools[0].input_schema["properties"]["text"]["description"] == (
            "What to shout"
        )
        asked = "".join(b.text for b in last.content if isinstance(b, TextBlock))  # type: ignore[union-attr]
        return ModelReply(
            tool_calls=(ScriptedCall("shout", {"text": asked, "times": 2}), ScriptedCall("whoami"))
        )

    async with AgentHarness("typed_agents:Shouter", model=FunctionModel(react)) as harness:
        task = await harness.send("hey", subject="alice")
        done = await harness.result(task)
        issuer = harness.gateway.origin
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    [artifact] = done["artifacts"]
    assert artifact["parts"] == [{"text": f"Said: HEY HEY | {issuer}#alice"}]
    assert [("agent", f"{issuer}#alice")] == typed_agents.SEEN


class _Own(LoopingAgent):
    def agent_soul(self, capabilities: Sequence[str]) -> str:
        return "Soul."


@tool
def square(side: float) -> float:
    """Area of a square."""
    return side * side


class Clashing(_Own):
    def agent_tools(self, context: ToolContext) -> Sequence[Tool]:
        return [square]


def test_a_tool_named_as_a_familys_tool_stops_the_agent_at_startup() -> None:
    with pytest.raises(AgentLoadError) as refused:
        Clashing(_context("square", "circle"))
    message = str(refused.value)
    assert "tenants.t: Clashing.agent_tools()" in message
    assert "tool 'square' is given by the agent's own tools and by tool family 'shapes'" in message
    assert "rename one (@tool(name=...))" in message
    Clashing(_context("circle"))  # no clash, no problem


def _side(side: float) -> float:
    return side


class TwoOfOneName(_Own):
    def agent_tools(self, context: ToolContext) -> Sequence[Tool]:
        return [square, tool(name="square")(_side)]


def test_two_own_tools_of_one_name_stop_the_agent() -> None:
    with pytest.raises(AgentLoadError, match="tool 'square' is given by the agent's own tools and"):
        TwoOfOneName(_context())


class Stray(_Own):
    def agent_tools(self, context: ToolContext) -> Sequence[Tool]:
        return [square, len]  # type: ignore[list-item]


def test_something_that_is_no_tool_stops_the_agent_naming_the_fix() -> None:
    with pytest.raises(
        AgentLoadError, match=r"must return Tools \(apply @tool .*\); got <built-in"
    ):
        Stray(_context())


class Broken(_Own):
    def agent_tools(self, context: ToolContext) -> Sequence[Tool]:
        raise KeyError("no such thing")


def test_agent_tools_that_raise_stop_the_agent() -> None:
    with pytest.raises(AgentLoadError, match=r"Broken.agent_tools\(\) failed: KeyError"):
        Broken(_context())


class PerCaller(_Own):
    """Its family's tool is made per caller, and only a turn's caller names the clash."""

    def agent_tools(self, context: ToolContext) -> Sequence[Tool]:
        return [tool(name=context.instance_id)(lambda: "x")]


async def test_a_clash_only_a_turn_shows_fails_that_turn() -> None:
    agent = PerCaller(_context("square"))
    turn = TurnInput(
        task_id="task",
        context_id="ctx",
        caller=Identity("t", "gw", "square"),
        message=UserMessage([TextBlock("hi")]),
        tool_context=ToolContext(tenant="t", instance_id="square"),
    )
    with pytest.raises(AgentLoadError, match="tool 'square' is given by the agent's own tools"):
        await agent.run(turn)


class OldStyle(_Own):
    def agent_plugins(self) -> Sequence[str]:
        return ["shapes"]


class OldStyleWrong(_Own):
    def agent_plugins(self) -> Sequence[str]:
        return ["weather"]


def test_the_old_agent_plugins_still_chooses_families_and_warns() -> None:
    with pytest.warns(
        DeprecationWarning,
        match=r"OldStyle.agent_plugins\(\) is deprecated.*"
        r"rename it agent_tool_families\(\)",
    ):
        agent = OldStyle(_context("circle"))
    turn = TurnInput(
        task_id="task",
        context_id="ctx",
        caller=Identity("t", "gw", "a"),
        message=UserMessage([TextBlock("hi")]),
    )
    assert [t.name for t in agent.turn_tools(turn)] == ["circle"]
    with (
        pytest.warns(DeprecationWarning, match="deprecated"),
        pytest.raises(AgentLoadError, match=r"OldStyleWrong.agent_plugins\(\) names tool families"),
    ):
        OldStyleWrong(_context("circle"))


def test_a_module_whose_tool_cannot_be_described_stops_the_server_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "lpt_bad_tools.py").write_text(
        textwrap.dedent(
            """
            import datetime
            from looping_core.agent import LoopingAgent
            from looping_core.tools import tool

            @tool
            def remind(at: datetime.datetime) -> str:
                return "ok"

            class Reminder(LoopingAgent):
                def agent_soul(self, capabilities):
                    return "Remind."
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(AgentLoadError) as refused:
        load_agent_class("t", "lpt_bad_tools:Reminder")
    assert str(refused.value) == (
        "tenants.t.agent: importing 'lpt_bad_tools' failed: tool lpt_bad_tools.remind, "
        "parameter 'at': datetime has no JSON Schema here; use str, int, float, bool, a "
        "Literal, an Enum, a list, a dict with str keys, an attrs class, a dataclass or a "
        "TypedDict (or Any)"
    )
