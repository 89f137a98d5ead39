"""`RoundAgent` on its own: its `delegate` tool lists the subtask types, subagents get no
`delegate` unless their recipe asks and the depth limit allows, and a round policy needs every
word."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import pluggy
import pytest
from delegation_support import SubLog, Subtasks

from looping_core import hookspecs
from looping_core.agent import AgentContext, AgentLoadError, StreamEnd, TurnInput, TurnOutcome
from looping_core.content import TextBlock, TextChunk, ToolUseChunk, Usage, UserMessage
from looping_core.contract import (
    Identity,
    PluginInfo,
    SubtaskRecipe,
    SubtaskType,
    ToolContext,
)
from looping_core.delegation import RoundAgent, RoundPolicy
from looping_core.plugins import PluginHost
from looping_core.plugins._registry import Contribution, LoadedPlugin, PluginRegistry, Provenance
from looping_core.testing import ScriptedModel


@attrs.frozen
class Topic:
    topic: str


TYPES = {
    "deep": SubtaskType(
        "deep",
        "Looks deeper, may split.",
        Topic,
        lambda p: SubtaskRecipe(instructions="Deep plugin words.", may_delegate=True),
    ),
    "leaf": SubtaskType(
        "leaf", "Looks once.", Topic, lambda p: SubtaskRecipe(instructions="Leaf plugin words.")
    ),
}


def host(types: Mapping[str, SubtaskType] | None = None) -> PluginHost:
    source = Provenance("lpt", "lpt", "1")
    plugin = LoadedPlugin(
        source=source, obj=object(), info=PluginInfo(capability="Splits."), config=None, hooks=()
    )
    registry = PluginRegistry(
        plugins=(plugin,),
        subtask_types={key: Contribution(kind, source) for key, kind in (types or TYPES).items()},
    )
    manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    return PluginHost(registry, manager)


def policy(**numbers: Any) -> RoundPolicy:
    return RoundPolicy(
        round_contract="Contract words.",
        delegate_description="Delegate words.",
        budget_note="Note words.",
        plan_failed="Failed words.",
        budget_spent="Spent words.",
        canceled="Canceled words.",
        **numbers,
    )


class Splitter(RoundAgent):
    depth = 1

    def agent_soul(self, capabilities: Sequence[str]) -> str:
        return "Soul words."

    def round_policy(self) -> RoundPolicy:
        return policy(max_depth=self.depth)


def plan(call_id: str, *subtasks: tuple[str, str]) -> list[Any]:
    arguments = {"subtasks": [{"id": i, "type": k, "params": {"topic": i}} for i, k in subtasks]}
    return [
        ToolUseChunk(0, json.dumps(arguments), id=call_id, name="delegate"),
        StreamEnd(Usage(input_tokens=3, output_tokens=1), "tool_use"),
    ]


def says(text: str) -> list[Any]:
    return [TextChunk(text), StreamEnd(Usage(input_tokens=2, output_tokens=1), "end")]


def turn(session: SubLog, subtasks: Subtasks) -> TurnInput:
    return TurnInput(
        task_id="task-1",
        context_id="ctx",
        caller=Identity("t", "https://gw.example", "alice"),
        message=UserMessage([TextBlock("look into it")]),
        session=session,
        subtasks=subtasks,
        tool_context=ToolContext(tenant="t", instance_id="alice"),
    )


def tool_names(request: Any) -> list[str]:
    return [tool.name for tool in request.tools]


async def test_a_recipe_that_may_delegate_plans_once_more_within_the_depth() -> None:
    model = ScriptedModel(
        [
            plan("p1", ("a", "deep")),  # the agent plans
            plan("q1", ("x", "leaf")),  # subagent a (depth 1) plans
            says("x found"),  # subagent x (depth 2) answers
            says("a found"),
            says("All found."),
        ]
    )
    agent = type("Deep", (Splitter,), {"depth": 2})(
        AgentContext(tenant="t", plugins=host(), models=(model,))
    )
    subtasks = Subtasks()
    result = await agent.run(turn(SubLog("caller"), subtasks))
    assert result.outcome is TurnOutcome.COMPLETED
    assert result.reply == (TextBlock("All found."),)
    parent, a, x, *_ = model.requests
    assert "delegate" in tool_names(parent)
    assert tool_names(a) == ["delegate"]  # its recipe may delegate, and depth 2 is allowed
    assert tool_names(x) == []  # a leaf: no delegate
    assert a.system == "Deep plugin words."
    assert x.system == "Leaf plugin words."
    assert {k: r.state for k, r in subtasks.rows.items()} == {"p1/a": "done", "p1/a/q1/x": "done"}
    assert parent.system == "Soul words.\n\nContract words."


async def test_without_depth_no_subagent_gets_delegate() -> None:
    model = ScriptedModel([plan("p1", ("a", "deep")), says("a found"), says("Done.")])
    agent = Splitter(AgentContext(tenant="t", plugins=host(), models=(model,)))
    await agent.run(turn(SubLog("caller"), Subtasks()))
    assert tool_names(model.requests[1]) == []


async def test_the_delegate_tool_lists_every_type_with_its_params() -> None:
    model = ScriptedModel([says("No need.")])
    agent = Splitter(AgentContext(tenant="t", plugins=host(), models=(model,)))
    await agent.run(turn(SubLog("caller"), Subtasks()))
    [delegate] = [t for t in model.requests[0].tools if t.name == "delegate"]
    assert delegate.description == "Delegate words."
    items = delegate.input_schema["properties"]["subtasks"]["items"]
    assert items["properties"]["type"]["enum"] == ["deep", "leaf"]
    assert "deep: Looks deeper, may split." in items["properties"]["type"]["description"]
    params = [rule["then"]["properties"]["params"] for rule in items["allOf"]]
    assert all(p["required"] == ["topic"] and not p["additionalProperties"] for p in params)


def test_a_subtask_types_unusable_result_type_is_refused_naming_its_plugin() -> None:
    bad = attrs.evolve(TYPES["leaf"], result_type=list[str])
    with pytest.raises(AgentLoadError) as refused:
        Splitter(AgentContext(tenant="t", plugins=host({"leaf": bad}), models=(ScriptedModel([]),)))
    assert str(refused.value) == (
        "tenants.t: subtask type 'leaf' of plugin 'lpt' (lpt 1): result_type: an answer must "
        "be a JSON object: give an attrs class, a dataclass, a TypedDict or a JSON Schema whose "
        'type is "object"'
    )


def test_a_policy_without_every_word_is_refused_when_the_agent_is_made() -> None:
    class Wordless(Splitter):
        def round_policy(self) -> RoundPolicy:
            return RoundPolicy(  # type: ignore[call-arg]
                round_contract="x", delegate_description="x", budget_note="x", plan_failed="x"
            )

    class Blank(Splitter):
        def round_policy(self) -> RoundPolicy:
            return policy().__class__(
                round_contract=" ",
                delegate_description="x",
                budget_note="x",
                plan_failed="x",
                budget_spent="x",
                canceled="x",
            )

    for kind, needle in ((Wordless, "budget_spent"), (Blank, "round_contract")):
        with pytest.raises(AgentLoadError, match=needle):
            kind(AgentContext(tenant="t", plugins=host(), models=(ScriptedModel([]),)))
